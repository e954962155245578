"""A small flax MLP and a jaxloop-style Step over it, shared by the Step and partitioner tests."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre

BATCH = 16
STEPS = 3
_init = nn.initializers.lecun_normal()


class MLP(nn.Module):
    """4 features -> 16 -> 4 logits; kernels annotated with logical axis names."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(16, kernel_init=nn.with_logical_partitioning(_init, ("embed", "mlp")))(x)
        x = nn.relu(x)
        return nn.Dense(4, kernel_init=nn.with_logical_partitioning(_init, ("mlp", "classes")))(x)


class MLPStep(gyre.Step):
    """Cross-entropy train/eval step; records the hooks it runs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def begin(self, state, batch):
        self.calls.append("begin")
        return state, batch

    def run(self, state, batch):
        x, y = batch

        def loss_fn(params):
            logits = state.apply_fn({"params": params}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

        if self.train:
            (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            state = state.apply_gradients(grads=grads)
        else:
            loss, logits = loss_fn(state.params)
        accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
        return state, {"loss": loss, "accuracy": accuracy}

    def end(self, state, outputs):
        self.calls.append("end")
        return state, outputs


def batches(n=STEPS):
    rng = np.random.default_rng(0)
    return [
        (rng.normal(size=(BATCH, 4)).astype(np.float32), rng.integers(0, 4, BATCH).astype(np.int32))
        for _ in range(n)
    ]
