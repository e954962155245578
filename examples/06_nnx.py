"""A flax nnx model through ``gyre.create_flax_state``.

The model is kept as ``graphdef`` + state and rebuilt with ``nnx.merge`` inside one plain
``jax.jit`` step (no ``nnx.jit``); its dropout keys are drawn from ``fold_in(rng, step)``
and its batch statistics are updated in training and used in evaluation.

    python examples/06_nnx.py

Writes no files.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from _digits_common import BATCH_SIZE
from flax import nnx

import gyre
import gyre.data
from gyre.frameworks import Accuracy


class MLP(nnx.Module):
    """64 pixels -> 256 (batch norm, relu, dropout) -> 10 logits."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(64, 256, rngs=rngs)
        self.norm = nnx.BatchNorm(256, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)
        self.out = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.dropout(nnx.relu(self.norm(self.hidden(x)))))


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Trains the nnx MLP for ``steps`` steps; returns the last epoch's test accuracy.

    Args:
        steps: training steps (an evaluation runs at the end of every epoch).
        workdir: unused (kept for a uniform signature across examples).
    """
    (x_train, y_train), (x_test, y_test) = gyre.data.digits()
    state = gyre.create_flax_state(
        MLP(nnx.Rngs(0)),
        inputs=jnp.zeros((1, 64)),
        tx=optax.adam(1e-3),
        losses={"loss": optax.softmax_cross_entropy_with_integer_labels},
        metrics={"accuracy": Accuracy()},
    )
    state, history, elapsed = gyre.train_loop(
        state,
        gyre.data.batches((x_train, y_train), BATCH_SIZE),
        test_dataset=lambda: gyre.data.batches(
            (x_test, y_test), BATCH_SIZE, shuffle=False, epochs=1, drop_remainder=False
        ),
        callbacks=[gyre.keras_bar(total=steps)],
        stop=steps,
    )
    accuracy = float(history.collect("accuracy_test")[-1])
    print(f"{elapsed.epochs} epochs, test accuracy after the last one: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
