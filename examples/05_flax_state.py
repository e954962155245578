"""``gyre.create_flax_state``: a model, an optimizer, losses and metrics; no step to write.

The state's ``train_step``, ``test_step`` and ``reset_step`` register themselves in
``gyre.train_loop``, which evaluates on the test set at the end of every epoch.

    python examples/05_flax_state.py

Writes its checkpoints to ``runs/05_flax_state/<timestamp>/checkpoints/`` (``runs/`` is
gitignored; ``make clean`` removes it), or under ``main(workdir=...)``.
"""

from __future__ import annotations

import os

import jax.numpy as jnp
import optax
from _digits_common import BATCH_SIZE, MLP, make_workdir

import gyre
import gyre.data
from gyre.frameworks import Accuracy


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Trains the MLP for ``steps`` steps; returns the last epoch's test accuracy.

    Args:
        steps: training steps (an evaluation runs at the end of every epoch).
        workdir: where ``checkpoints/`` goes (default: a new ``runs/<example>/<timestamp>/``).
    """
    workdir = make_workdir(workdir, "05_flax_state")
    (x_train, y_train), (x_test, y_test) = gyre.data.digits()
    state = gyre.create_flax_state(
        MLP(),
        inputs=jnp.zeros((1, 64)),
        tx=optax.adamw(1e-3),
        losses={"loss": optax.softmax_cross_entropy_with_integer_labels},  # any (preds, labels) -> value
        metrics={"accuracy": Accuracy()},  # accumulated over each epoch and evaluation
        strategy="jit",
    )
    state, history, elapsed = gyre.train_loop(
        state,  # its steps register themselves
        gyre.data.batches((x_train, y_train), BATCH_SIZE),
        test_dataset=lambda: gyre.data.batches(
            (x_test, y_test), BATCH_SIZE, shuffle=False, epochs=1, drop_remainder=False
        ),
        callbacks=[
            gyre.keras_bar(total=steps),
            gyre.checkpoint(os.path.join(workdir, "checkpoints"), keep_best=1, monitor="accuracy_test", mode="max"),
        ],
        stop=steps,
    )
    accuracy = float(history.collect("accuracy_test")[-1])
    print(f"{elapsed.epochs} epochs, test accuracy after the last one: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
