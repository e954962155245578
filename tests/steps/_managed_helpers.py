"""Shared by the managed API's tests: a small linear regression, its states and batches."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre
from gyre import managed


def init_params():
    return {"w": jax.random.normal(jax.random.PRNGKey(1), (5, 3)) * 0.5, "b": jnp.zeros(3)}


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 5)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32)


def mse(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"][None] - y) ** 2)


def regression(**options):
    @managed.train_step(**options)
    def train_step(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)).add_metric("n", x.shape[0]), state

    return train_step


def fresh(tx=None, **kwargs):
    return managed.ManagedState.create(params=init_params(), tx=tx or optax.sgd(0.1), **kwargs)


def nan_batch(n=8):
    x, y = batch_of(n)
    return np.full_like(x, np.nan), y
