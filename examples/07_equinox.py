"""An equinox model with the managed API.

``eqx.partition`` splits the model into its floating arrays (the params the optimizer
updates) and the static rest, which the step closes over; ``managed.train_step``
differentiates the logged loss. (``gyre.create_flax_state`` also takes equinox models.)

    python examples/07_equinox.py

Writes no files.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from _digits_common import BATCH_SIZE

import gyre
import gyre.data
from gyre import managed

model = eqx.nn.MLP(64, 10, width_size=256, depth=2, key=jax.random.key(0))
params, static = eqx.partition(model, eqx.is_inexact_array)


def logits_of(params: Any, x: jax.Array) -> jax.Array:
    return jax.vmap(eqx.combine(params, static))(x)  # equinox models take one example


@managed.train_step
def train_step(state: managed.ManagedState, batch: Any) -> tuple[gyre.Logs, Any]:
    x, y = batch
    logits = logits_of(state.params, x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
    return gyre.logs().add_loss("loss", loss).add_metric("accuracy", accuracy), state


@managed.step
def test_step(state: managed.ManagedState, batch: Any) -> tuple[gyre.Logs, Any]:
    x, y = batch
    logits = logits_of(state.params, x)
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
    return gyre.logs().add_metric("accuracy", accuracy), state


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Trains the equinox MLP for ``steps`` steps; returns the test accuracy.

    Args:
        steps: training steps.
        workdir: unused (kept for a uniform signature across examples).
    """
    (x_train, y_train), test = gyre.data.digits()
    state = managed.ManagedState.create(params=params, tx=optax.adam(1e-3), strategy="jit")
    state, history, _ = gyre.loop(
        state,
        gyre.data.batches((x_train, y_train), BATCH_SIZE),
        {gyre.every(1): [train_step, gyre.keras_bar(total=steps)]},
        stop=steps,
    )
    logs, _ = test_step(state, test)  # the whole test set in one batch
    accuracy = float(logs.metrics.accuracy)
    print(f"test accuracy: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
