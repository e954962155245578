"""The loop language: a task table from schedules to callbacks, run by ``gyre.loop``.

Every step runs the train step; every tenth of the run a checkpoint is saved; the progress
bar comes last so it shows what the step logged.

    python examples/01_loop.py

Writes its checkpoints to ``runs/01_loop/<timestamp>/checkpoints/`` (``runs/`` is gitignored;
``make clean`` removes it), or under ``main(workdir=...)``.
"""

from __future__ import annotations

import os

from _digits_common import BATCH_SIZE, create_state, make_workdir, test_accuracy, train_step

import gyre
import gyre.data


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Trains the MLP for ``steps`` steps; returns the test accuracy.

    Args:
        steps: training steps.
        workdir: where ``checkpoints/`` goes (default: a new ``runs/<example>/<timestamp>/``).
    """
    workdir = make_workdir(workdir, "01_loop")
    (x_train, y_train), test = gyre.data.digits()
    checkpoint = gyre.checkpoint(os.path.join(workdir, "checkpoints"))

    state, history, elapsed = gyre.loop(
        create_state(seed=0),
        gyre.data.batches((x_train, y_train), BATCH_SIZE),  # reshuffled each epoch, forever
        {
            gyre.every(1): [train_step],
            gyre.every(steps=max(steps // 10, 1)): [checkpoint],
            gyre.every(1): [gyre.keras_bar(total=steps)],
        },
        stop=steps,
        on_end=checkpoint.on_train_end,  # wait for the last asynchronous save
    )
    accuracy = test_accuracy(state, test)
    print(f"checkpoints: {checkpoint.directory} (latest step {checkpoint.latest_step()})")
    print(f"test accuracy: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
