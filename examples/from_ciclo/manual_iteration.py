"""ciclo's README, "Manual Iteration": the loop's pieces used by hand in a plain ``for`` loop.

``ciclo.elapse`` yields the clock with each batch; a schedule is a predicate on the clock; the
checkpoint, the Keras bar and the history are called directly. The state and the train step
are ``loop_language.py``'s.

What changed from the seed: ``import gyre as ciclo``; the data (scikit-learn's digits as 8x8x1
images, ``_from_ciclo.py``); ``logdir/model`` is under this run's folder; the history is plotted
to ``history.png`` at the end (not in the seed).

    python examples/from_ciclo/manual_iteration.py

Writes ``model/`` (checkpoints) and ``history.png`` to
``runs/from_ciclo/manual_iteration/<timestamp>/``, or under ``main(workdir=...)``.
"""

from __future__ import annotations

from _from_ciclo import make_workdir, train_dataset
from loop_language import create_state, train_step

import gyre as ciclo  # ciclo: import ciclo


def main(total_steps: int = 100, workdir: str | None = None):
    """Runs the seed's hand loop; returns ``(state, history)``.

    Args:
        total_steps: steps to run (the seed's ``total_steps``).
        workdir: where ``model/`` and ``history.png`` go (default: a new run folder).
    """
    logdir = make_workdir(workdir, "manual_iteration")
    train_dataset_ = train_dataset(batch_size=32)
    state = create_state()

    call_checkpoint = ciclo.every(steps=1000)  # Schedule
    checkpoint = ciclo.checkpoint(f"{logdir}/model")  # Callback
    keras_bar = ciclo.keras_bar(total=total_steps)  # Callback
    history = ciclo.history()  # History
    # (Elapsed, Batch)
    for elapsed, batch in ciclo.elapse(train_dataset_, stop=total_steps):
        logs = ciclo.logs()  # Logs
        # update logs and state
        logs.updates, state = train_step(state, batch)
        # periodically checkpoint state
        if call_checkpoint(elapsed):
            checkpoint(elapsed, state)  # serialize state

        keras_bar(elapsed, logs)  # update progress bar
        history.commit(elapsed, logs)  # commit logs to history

    checkpoint.wait_until_finished()  # not in the seed: the save is on disk before it is read
    history.plot(f"{logdir}/history.png", ["loss", "accuracy"])  # not in the seed
    return state, history


if __name__ == "__main__":
    main()
