"""``wandb_logger``: every step's scalar entries sent to a Weights & Biases run (any object with ``log``)."""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from gyre.core._checks import real
from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain
from gyre.core._history import Block, History
from gyre.core._host import numeric_dtype
from gyre.core._logs import Logs
from gyre.engine._tasks import ChunkSafe, LoopElement
from gyre.parallel.distributed import is_main_process


def is_number(value: Any) -> bool:
    """A Python real (``bool`` too) or a 0-d numeric array, by ``shape`` and ``dtype`` only."""
    if isinstance(value, numbers.Real):
        return True
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    return shape == () and dtype is not None and numeric_dtype(dtype)


def _column(count: int, rows: np.ndarray, values: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """An entry as (which records hold a number, the numbers with NaN elsewhere), or ``None``."""
    present, found = np.zeros(count, bool), np.full(count, np.nan)
    if isinstance(values, np.ndarray) and numeric_dtype(values.dtype):
        if values.ndim != 1:
            return None  # an array per record
        present[rows], found[rows] = True, values
        return present, found
    pairs = [(int(r), float(v)) for r, v in zip(rows, values, strict=True) if is_number(v)]
    if not pairs:
        return None
    where = [r for r, _ in pairs]
    present[where], found[where] = True, [x for _, x in pairs]
    return present, found


def scalar_runs(
    block: Block, keep: np.ndarray | None = None
) -> Iterator[tuple[int, tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]]:
    """The scalar numbers of ``block``'s rows in ``keep``, as runs of records holding the same
    entries: ``(first row, names, steps, dates, values)``."""
    keys, present, found = [], [], []
    for key, (rows, values) in block.entries.items():
        column = _column(block.count, rows, values)
        if column is not None:
            keys.append(key)
            present.append(column[0] if keep is None else column[0] & keep)
            found.append(column[1])
    if not keys:
        return
    held, table = np.stack(present, axis=1), np.stack(found, axis=1)
    steps = np.asarray(block.clocks["steps"], np.int64)
    dates = np.asarray(block.clocks["date"], np.float64)
    dates = np.where(dates > 0, dates, time.time())  # an undated clock (a ciclo history): now
    cuts = (np.flatnonzero((held[1:] != held[:-1]).any(axis=1)) + 1).tolist()
    for start, stop in zip([0, *cuts], [*cuts, block.count], strict=True):
        which = np.flatnonzero(held[start])
        if len(which):
            names: list[str] = []
            for collection, name in (keys[k] for k in which):
                names.append(f"{collection}.{name}" if name in names else name)
            yield start, tuple(names), steps[start:stop], dates[start:stop], table[start:stop][:, which]


def scalar_rows(block: Block, keep: np.ndarray | None = None) -> Iterator[tuple[int, dict[str, float]]]:
    """The records of :func:`scalar_runs` one by one, as ``(step, {name: number})``."""
    for _, names, steps, _, values in scalar_runs(block, keep):
        for step, row in zip(steps.tolist(), values.tolist(), strict=True):
            yield step, dict(zip(names, row, strict=True))


class FollowsHistory:
    """A position in the calling loop's history (by hand, its own); subclasses define ``_send``."""

    _silent: bool | None = None  # decided at the first call: only process 0 sends
    _reads_history = True  # in a loop, it ignores its logs argument (gyre.engine._tasks.reads_history)
    _history: History | None = None
    _position = 0
    _own: History | None = None

    def _send(self, *, wait: bool) -> None:  # pragma: no cover
        raise NotImplementedError

    def _read(self, *, wait: bool, fresh: bool = True) -> Block:
        """The records of the history followed after the last read (:meth:`History.read`)."""
        if self._history is None:
            return Block(0, {"steps": np.zeros(0, np.int64)}, {}, [])
        block = self._history.read(self._position, wait=wait, fresh=fresh)
        self._position += block.count
        return block

    def _skipped(self) -> bool:
        """True on processes other than 0, which send nothing (asked once, at the first call)."""
        if self._silent is None:
            self._silent = not is_main_process()
        return self._silent

    def _follow(self, elapsed: Elapsed, logs: Logs, loop: Any) -> None:
        """Follows ``loop``'s history, or (``loop`` is ``None``) commits ``logs`` to its own."""
        if loop is not None:
            if loop.history is not self._history:  # a new loop: follow its history from its start
                if self._history is not None:
                    self._send(wait=True)
                start = _start_of(loop)
                self._history, self._own = loop.history, None
                self._position = len(loop.history) if start is None else start
            return
        if self._own is None:
            if self._history is not None:
                self._send(wait=True)
            self._own = self._history = History()
            self._position = 0
        self._own.commit(elapsed, logs)


def _start_of(loop: Any) -> int | None:
    """Where ``loop``'s records begin in its history (``None`` when it does not say): its records
    have increasing step counters within the steps it consumed, read from the end."""
    data = getattr(loop, "data", None)
    if data is None:
        return None
    newer = int(loop.completed.steps)  # the step in progress, if any, counted
    first, own = newer - int(data.consumed), 0
    parts = [np.asarray(block.clocks["steps"]) for _, block in loop.history.segments()]
    for step in np.concatenate(parts)[::-1].tolist() if parts else []:
        if not first <= step < newer:
            break
        own, newer = own + 1, step
    return len(loop.history) - own


class WandbLogger(FollowsHistory, ChunkSafe, LoopElement):
    """The callback :func:`wandb_logger` returns.

    Attributes:
        run: the run it logs to.
        interval: seconds between two sends.
        sent: how many records it has sent.

    Example:
        >>> import gyre, types
        >>> logger = gyre.wandb_logger(types.SimpleNamespace(log=lambda data, step: None), interval=5)
        >>> isinstance(logger, gyre.callbacks.WandbLogger), logger.interval, logger.sent
        (True, 5.0, 0)
    """

    def __init__(self, run: Any, *, interval: float) -> None:
        if not callable(getattr(run, "log", None)):
            raise TypeError(explain(
                "wandb_logger needs a W&B run",
                expected="the run wandb.init() returns (any object with log(data, step=...))",
                received=describe(run), fix="run = wandb.init(project=...); gyre.wandb_logger(run)"))
        self.interval = real(interval, "interval", minimum=0, expected="interval=1.0 (0 sends at every call)",
                             problem="wandb_logger's interval must be a number of seconds >= 0",
                             fix="pass interval as a number, e.g. interval=1.0")
        self.run = run
        self.sent = 0
        self._last = -math.inf

    def __call__(self, elapsed: Elapsed, logs: Logs, loop: Any = None) -> None:
        if self._skipped():
            return
        self._follow(elapsed, logs, loop)
        now = time.perf_counter()
        if now - self._last >= self.interval:
            self._last = now
            self._send(wait=False)

    on_train_batch_end = __call__

    def flush(self) -> None:
        """Sends every record not sent yet, waiting for the device (call it after a hand-made loop).

        Example:
            >>> import gyre
            >>> class Run:
            ...     def log(self, data, step):
            ...         print(step, data)
            >>> logger = gyre.wandb_logger(Run(), interval=60)
            >>> logger(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 0.5)); logger.flush()
            0 {'loss': 0.5}
        """
        self._send(wait=True)

    on_loop_end = flush
    on_train_end = flush
    _on_loop_failed = flush  # a failed loop's records are sent too (gyre.engine._engine._send_recorded)

    def _send(self, *, wait: bool) -> None:
        block = self._read(wait=wait)
        for step, data in scalar_rows(block):
            self.run.log(data, step=step)
        self.sent += block.count

    def __repr__(self) -> str:
        return f"gyre.wandb_logger({self.run!r})"


def wandb_logger(run: Any, *, interval: float = 1.0) -> WandbLogger:
    """A callback that logs every step's scalar entries to a Weights & Biases run.

    Each record goes out as ``run.log({name: value}, step=elapsed.steps)``, as ciclo sends it, by
    bare names (``collection.name`` when two collections share one); arrays are left out. It
    follows the loop's history, never waiting for the device, and sends the rest at the loop's end.

    Args:
        run: the run ``wandb.init()`` returns, or any object with ``log(data, step=...)``.
        interval: seconds between two sends.

    Example:
        >>> import gyre
        >>> class Run:  # stands in for wandb.init()
        ...     def log(self, data, step):
        ...         print(step, data)
        >>> step = lambda elapsed: gyre.logs().add_loss("loss", 1.0 / 2 ** elapsed.steps)
        >>> _ = gyre.loop(None, range(3), {gyre.every(1): step, **gyre.wandb_logger(Run())})
        0 {'loss': 1.0}
        1 {'loss': 0.5}
        2 {'loss': 0.25}
    """
    return WandbLogger(run, interval=interval)
