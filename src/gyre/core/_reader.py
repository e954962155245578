"""Reading a history as it grows: :class:`HistoryReader`, a position in a history and
:meth:`gyre.History.read` from it; :func:`loop_start` says where a running loop's records
begin, for a reader created after the loop's first step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gyre.core._columns import Block, numbers

#: What a read hands out (the name it had when it was its own shape).
Columns = Block


class HistoryReader:
    """Hands out a history's records after a position, as they become readable
    (:meth:`gyre.History.read`), moving the position past them.

    Args:
        history: the history to read.
        start: the index of the first record to read (default: the history's current length:
            only what comes next).

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> h = gyre.history()
        >>> reader = h.reader()
        >>> h.commit(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", jnp.float32(2.0)))
        >>> cols = reader.read()
        >>> cols.count, cols.clocks["steps"].tolist(), cols.entries[("losses", "loss")][1].tolist()
        (1, [0], [2.0])
        >>> reader.read().count  # nothing new
        0
    """

    def __init__(self, history: Any, start: int | None = None) -> None:
        self.history = history
        self.position = len(history) if start is None else start

    def read(self, *, wait: bool = False) -> Block:
        """The records after the position that can be read now (all of them if ``wait``),
        scalar numbers as numpy columns."""
        block = self.history.read(self.position, wait=wait)
        self.position += block.count
        return block._replace(entries={k: (rows, numbers(v)) for k, (rows, v) in block.entries.items()})


def loop_start(history: Any, first_step: int, end_step: int) -> int:
    """The index in ``history`` of the first record of a running loop whose steps are
    ``first_step`` to ``end_step - 1`` (its records so far: the step in progress is not
    committed yet).

    A loop commits at most one record per step, with increasing step counters; the records
    before it (a resumed checkpoint's, a previous loop's) have smaller counters, or are
    followed by a counter that does not increase (a loop that started its clock again).

    Example:
        >>> import gyre
        >>> h = gyre.history([{"metrics": {"a": 1.0}, "elapsed": {"steps": s}} for s in (0, 1, 2)])
        >>> for s in (3, 4):  # a loop resumed at step 3, now running its step 5
        ...     h.commit(gyre.Elapsed(steps=s), gyre.logs().add_metric("a", 2.0))
        >>> loop_start(h, 3, 5), len(h)
        (3, 5)
    """
    parts = [np.asarray(block.clocks["steps"]) for _, block in history.segments()]
    steps = np.concatenate(parts)[::-1] if parts else np.zeros(0, np.int64)
    own, newer = 0, end_step
    for step in steps.tolist():
        if not first_step <= step < newer:
            break
        own, newer = own + 1, step
    return len(history) - own
