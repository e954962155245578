"""Manual iteration: the loop's pieces used by hand in a plain ``for`` loop.

``gyre.elapse`` yields the clock with each batch; a schedule is a predicate on the clock;
the checkpoint, the progress bar and the history are called directly.

    python examples/03_manual_iteration.py

Writes its checkpoints to ``runs/03_manual_iteration/<timestamp>/checkpoints/`` (``runs/`` is
gitignored; ``make clean`` removes it), or under ``main(workdir=...)``.
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
    workdir = make_workdir(workdir, "03_manual_iteration")
    (x_train, y_train), test = gyre.data.digits()
    train_dataset = gyre.data.batches((x_train, y_train), BATCH_SIZE)
    state = create_state(seed=0)

    call_checkpoint = gyre.every(steps=max(steps // 10, 1))  # schedule
    checkpoint = gyre.checkpoint(os.path.join(workdir, "checkpoints"))  # callback
    keras_bar = gyre.keras_bar(total=steps)  # callback
    history = gyre.history()

    for elapsed, batch in gyre.elapse(train_dataset, stop=steps):
        logs = gyre.logs()
        logs.updates, state = train_step(state, batch)  # merge the step's logs in
        if call_checkpoint(elapsed):
            checkpoint(elapsed, state)
        keras_bar(elapsed, logs)
        history.commit(elapsed, logs)

    checkpoint.wait_until_finished()
    losses = history.collect("loss")
    accuracy = test_accuracy(state, test)
    print(f"loss: {losses[0]:.4f} -> {losses[-1]:.4f}; test accuracy: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
