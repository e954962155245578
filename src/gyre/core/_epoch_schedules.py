"""The schedules of :func:`gyre.fit` and :meth:`TrainerModule.train_model`, written so that
the loop can solve them in advance (:meth:`next_step`): a table of these runs in blocks of
steps (:mod:`gyre.engine._blocks`) instead of asking a Python predicate at every step.
"""

from __future__ import annotations

from typing import Any

from gyre.core._clock import Elapsed
from gyre.core._schedules import Schedule, every


class EpochEnds(Schedule):
    """Fires on the last step of every ``every``-th epoch (epochs counted from 1) and of epoch
    ``last``; with ``others=True``, on the last step of every other epoch instead.

    Args:
        epoch_steps: the steps of an epoch.
        label: the schedule's name (its ``repr``, in the loop's messages).
        every: epochs between two firings.
        last: the last epoch of the run, where it also fires (``None``: no such epoch).
        others: fire at the epoch ends that the rest of the arguments leave out.
    """

    def __init__(self, epoch_steps: int, label: str, *, every: int = 1, last: int | None = None, others: bool = False) -> None:
        self.epoch_steps, self.label = epoch_steps, label
        self.every, self.last, self.others = every, last, others

    def _epoch_fires(self, epoch: int) -> bool:
        """Whether it fires at the end of the (0-based) ``epoch``."""
        chosen = (epoch + 1) % self.every == 0 or epoch + 1 == self.last
        return chosen != self.others

    def __call__(self, elapsed: Elapsed) -> bool:
        return elapsed.step_in_epoch == self.epoch_steps - 1 and self._epoch_fires(elapsed.epochs)

    def reads(self) -> frozenset[str]:
        return frozenset(("epochs", "step_in_epoch"))

    def _next_step(self, after: Elapsed, epoch_steps: int | None) -> int | None:
        """The first step ``>= after.steps`` where it fires (``None``: never), by its own epoch length."""
        length, position, epoch = self.epoch_steps, after.step_in_epoch, after.epochs
        end = after.steps + length - 1 - position
        if position >= length:  # (an epoch length changed on resume) the epoch rolls at once
            end, epoch = after.steps + length, epoch + 1
        for _ in range(self.every + 2):  # the pattern repeats every `every` epochs past `last`
            if self._epoch_fires(epoch):
                return end
            end, epoch = end + length, epoch + 1
        return None

    def __repr__(self) -> str:
        return self.label


def periodic(seconds: float) -> Schedule:
    """Fires at the first step once ``seconds`` have passed, then once every ``seconds``
    (at the first step starting at or past each multiple): a checkpoint on a clock. An
    ``every(time=...)`` that skips the first step, so the loop ends its blocks at its deadline.
    """
    schedule = every(time=seconds)
    schedule.load_state_dict({"last": 0})
    return schedule


__all__: list[Any] = []
