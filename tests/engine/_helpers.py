"""What the engine's tests share: a tiny softmax regression, a jitted adding step, and
comparisons of states and histories."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre


def record(seen):
    def callback(elapsed):
        seen.append(elapsed.steps)

    return callback


CLOCK = ("steps", "samples", "epochs", "step_in_epoch")


def make_problem(n_batches=10, batch=8, features=4, classes=3):
    """A tiny softmax regression with adam, a jitted donating step, and its batches."""
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(features, classes))
    xs = [rng.normal(size=(batch, features)).astype(np.float32) for _ in range(n_batches)]
    batches = [(x, np.argmax(x @ true_w, axis=-1).astype(np.int32)) for x in xs]
    tx = optax.adam(0.05)

    def init():
        params = {"w": jnp.zeros((features, classes)), "b": jnp.zeros(classes)}
        return params, tx.init(params)

    def loss_of(params, x, y):
        logits = x @ params["w"] + params["b"][None, :]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def train_step(state, batch):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_of)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return gyre.logs().add_loss("loss", loss), (optax.apply_updates(params, updates), opt_state)

    def test_step(state, batch):
        return gyre.logs().add_metric("score", loss_of(state[0], *batch))

    return batches, init, jax.jit(train_step, donate_argnums=0), jax.jit(test_step)


def assert_same_tree(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def assert_same_history(a, b, *keys):
    for key in (*CLOCK, *keys):
        assert a.collect("steps", key) == b.collect("steps", key), key


@jax.jit
def add_step(state, batch):
    state = state + batch
    return gyre.logs().add_metric("total", state), state
