"""``gyre.train_loop``: named schedules, an evaluation each epoch, self-registering callbacks.

The train and test steps go under the named schedules ``on_train_step`` and
``on_test_step``; the test set is a function called at each evaluation; the progress bar
registers itself on ``on_train_batch_end`` and the checkpoint on ``on_epoch_end``.

    python examples/02_train_loop.py

Writes its checkpoints to ``runs/02_train_loop/<timestamp>/checkpoints/`` (``runs/`` is
gitignored; ``make clean`` removes it), or under ``main(workdir=...)``.
"""

from __future__ import annotations

import os

from _digits_common import BATCH_SIZE, create_state, make_workdir, test_step, train_step

import gyre
import gyre.data


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Trains the MLP for ``steps`` steps; returns the last epoch's test accuracy.

    Args:
        steps: training steps (an evaluation runs at the end of every epoch).
        workdir: where ``checkpoints/`` goes (default: a new ``runs/<example>/<timestamp>/``).
    """
    workdir = make_workdir(workdir, "02_train_loop")
    (x_train, y_train), (x_test, y_test) = gyre.data.digits()

    state, history, elapsed = gyre.train_loop(
        create_state(seed=0),
        gyre.data.batches((x_train, y_train), BATCH_SIZE),  # knows its epoch: 22 steps
        {
            gyre.on_train_step: [train_step],
            gyre.on_test_step: [test_step],
        },
        test_dataset=lambda: gyre.data.batches(
            (x_test, y_test), BATCH_SIZE, shuffle=False, epochs=1, drop_remainder=False
        ),
        callbacks=[
            gyre.keras_bar(total=steps),  # on_train_batch_end
            gyre.checkpoint(os.path.join(workdir, "checkpoints")),  # on_epoch_end
        ],
        stop=steps,
    )
    accuracy = history.collect("accuracy_test")[-1]
    print(f"{elapsed.epochs} epochs, test accuracy after the last one: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
