"""What progress bars show, read without ever waiting for the device.

A bar reads the records of the loop's history (:meth:`gyre.History.read`) as they become
readable: records already moved to the host, and newer ones whose values are computed. It therefore sees every step, fused chunks included, whatever its
place in the task table, and never stalls the loop. Outside a loop (a bar called by hand,
``bar(elapsed, logs)``), the bar keeps a small history of its own.

As Keras shows them, losses and metrics are running means over the current epoch (over the
whole run when the loop has no epochs); stateful metrics, and entries not logged in the
current epoch (an evaluation's ``accuracy_test``), show their last value. ``values="last"``
shows every entry's last value instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gyre.core._clock import Elapsed
from gyre.core._columns import Block, numbers, numeric_dtype
from gyre.core._errors import describe, explain
from gyre.core._history import History
from gyre.core._logs import Logs

DISPLAYED = ("losses", "metrics", "stateful_metrics")
MODES = ("mean", "last")


def check_mode(values: Any, owner: str) -> str:
    """A bar's ``values=`` option: ``"mean"`` or ``"last"``.

    Example:
        >>> check_mode("last", "keras_bar")
        'last'
    """
    if values in MODES:
        return values
    raise ValueError(
        explain(
            f"{owner}(values=...) must be 'mean' or 'last'",
            expected="values='mean' (running means over the epoch, as Keras) or values='last'",
            received=describe(values),
            fix=f"{owner}(values='mean')",
        )
    )


class RunningValues:
    """Running means over the current epoch (or last values) of the scalar entries of the
    records absorbed.

    Example:
        >>> import numpy as np
        >>> from gyre.core._columns import Block
        >>> running = RunningValues("mean")
        >>> cols = Block(2, {"epochs": np.array([0, 0])},
        ...                {("losses", "loss"): (np.array([0, 1]), np.array([1.0, 3.0]))})
        >>> running.absorb(cols); running.shown()
        {'loss': 2.0}
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.epoch: int | None = None
        self.sums: dict[tuple[str, str], float] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.last: dict[tuple[str, str], float] = {}

    def absorb(self, columns: Block) -> None:
        """Adds records read from a history."""
        if not columns.count:
            return
        epochs = np.asarray(columns.clocks["epochs"])
        latest = int(epochs[-1])
        if latest != self.epoch:
            self.epoch, self.sums, self.counts = latest, {}, {}
        for key, (rows, values) in columns.entries.items():
            values = _numbers(values)
            if key[0] not in DISPLAYED or values is None:
                continue
            # rows come grouped by record structure, not in record order: the newest row
            self.last[key] = float(values[int(np.argmax(rows))])
            if self.mode == "mean" and key[0] != "stateful_metrics":
                current = values[epochs[rows] == latest]
                if current.size:
                    self.sums[key] = self.sums.get(key, 0.0) + float(current.sum(dtype=np.float64))
                    self.counts[key] = self.counts.get(key, 0) + int(current.size)

    def shown(self) -> dict[str, float]:
        """``name: value`` per entry (``collection.name`` where two collections share a name)."""
        owners: dict[str, int] = {}
        for _, name in self.last:
            owners[name] = owners.get(name, 0) + 1
        out = {}
        for key, last in self.last.items():
            count = self.counts.get(key, 0)
            value = self.sums[key] / count if count else last
            out[key[1] if owners[key[1]] == 1 else f"{key[0]}.{key[1]}"] = value
        return out


def _numbers(values: Any) -> np.ndarray | None:
    """An entry's values as a numpy column of scalar numbers, or ``None`` when they are not."""
    values = numbers(values)
    ok = isinstance(values, np.ndarray) and values.ndim == 1 and numeric_dtype(values.dtype)
    return values if ok else None


class BarValues:
    """The values a bar shows: read from the loop's history (see the module docs).

    Example:
        >>> import gyre
        >>> shown = BarValues("mean")
        >>> for step, loss in enumerate([1.0, 2.0, 6.0]):  # by hand: no loop, its own history
        ...     shown.see(gyre.Elapsed(steps=step), gyre.logs().add_loss("loss", loss), None)
        >>> shown.read(wait=True)
        {'loss': 3.0}
    """

    def __init__(self, mode: str) -> None:
        self.running = RunningValues(mode)
        self._history: History | None = None
        self._position = 0
        self._own: History | None = None

    def see(self, elapsed: Elapsed, logs: Logs, loop: Any) -> None:
        """Called by the bar at each of its calls: follows the loop's history (a new loop, a
        new history), or records the step in its own when called by hand."""
        if loop is not None:
            history = loop.history
            if history is not self._history:
                self._history, self._position = history, len(history)
            return
        if self._own is None:
            self._own = self._history = History()
            self._position = 0
        self._own.commit(elapsed, logs)

    def read(self, *, wait: bool = False) -> dict[str, float]:
        """The values to show now (``wait``: every record so far, waiting for the device;
        only when the loop is over)."""
        if self._history is not None:
            block = self._history.read(self._position, wait=wait)
            self._position += block.count
            self.running.absorb(block)
        return self.running.shown()

    def reset(self) -> None:
        """Forgets the history followed (a bar used again starts from the next records)."""
        self._history = self._own = None
        self.running = RunningValues(self.running.mode)
