"""What progress bars show, read from the loop's history without waiting: as Keras, running means over
the epoch, the last value for stateful metrics and entries not logged this epoch."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from gyre.callbacks._wandb_logger import FollowsHistory
from gyre.core._checks import choice
from gyre.core._history import Block
from gyre.core._host import numeric_dtype

DISPLAYED = ("losses", "metrics", "stateful_metrics")


def check_mode(values: Any, owner: str) -> str:
    """A bar's ``values=`` option: ``"mean"`` or ``"last"``."""
    return choice(values, f"{owner}(values=...)", ("mean", "last"), fix=f"{owner}(values='mean').",
                  expected="values='mean' (running means over the epoch, as Keras) or values='last'")


class RunningValues:
    """Running means over the current epoch (or last values) of the absorbed scalar entries."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.epoch: int | None = None
        self.sums: dict[tuple[str, str], float] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.last: dict[tuple[str, str], float] = {}

    def absorb(self, block: Block) -> None:
        """Adds records read from a history."""
        if not block.count:
            return
        epochs = np.asarray(block.clocks["epochs"])
        latest = int(epochs[-1])
        if latest != self.epoch:
            self.epoch, self.sums, self.counts = latest, {}, {}
        for key, (rows, values) in block.entries.items():
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
        owners = Counter(name for _, name in self.last)
        out = {}
        for key, last in self.last.items():
            count = self.counts.get(key, 0)
            out[key[1] if owners[key[1]] == 1 else f"{key[0]}.{key[1]}"] = self.sums[key] / count if count else last
        return out


def _numbers(values: Any) -> np.ndarray | None:
    """An entry's values as a numpy column of scalar numbers, or ``None`` when they are not."""
    if isinstance(values, list) and values and all(np.ndim(v) == 0 and np.isreal(v) for v in values):
        try:
            values = np.asarray(values)
        except (TypeError, ValueError):
            return None
    ok = isinstance(values, np.ndarray) and values.ndim == 1 and numeric_dtype(values.dtype)
    return values if ok else None


class BarValues(RunningValues, FollowsHistory):
    """The values a bar shows: read from the loop's history (see the module docs)."""

    see = FollowsHistory._follow

    def _send(self, *, wait: bool) -> None:
        self.absorb(self._read(wait=wait))

    def read(self, *, wait: bool = False) -> dict[str, float]:
        """The values to show now (``wait``: every record so far, at the loop's end)."""
        self._send(wait=wait)
        return self.shown()

    def reset(self) -> None:
        """Forgets the history followed and the values seen."""
        self._history = self._own = None
        RunningValues.__init__(self, self.mode)
