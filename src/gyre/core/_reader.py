"""Reading a history as it grows, without ever waiting for the device: :class:`HistoryReader`.

A reader keeps a position in a :class:`~gyre.History` and hands out the records after it, as
columns, in order, as soon as their values are on the host or computed on the device: records
that already moved to the host are read from their numpy columns; newer ones, still on the
device, are read only when every value is ready, in one explicit transfer. Progress bars read
their running means this way, so they see every step (fused chunks included) and never stall
the loop. :func:`loop_start` says where a running loop's records begin, for a reader created
after the loop's first step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from gyre.core._clock import _FIELDS as CLOCK_FIELDS
from gyre.core._host import fetch, is_ready

Key = tuple[str, str]


class Columns(NamedTuple):
    """Records read together: their clock counters and, per entry, the positions (among
    these records) of the records that hold it and their values (a numpy array for numbers)."""

    count: int
    clocks: dict[str, np.ndarray]
    entries: dict[Key, tuple[np.ndarray, Any]]


_STEPS = CLOCK_FIELDS.index("steps")


def _steps_backwards(history: Any) -> Iterator[int]:
    """The ``steps`` counter of every record of ``history``, newest first (device rows, those
    in transit, then the host blocks: nothing moves, nothing waits)."""
    for clock in reversed(history._clocks):
        yield clock.steps
    for moving in reversed(history._transit):
        for clock in reversed(moving.clocks):
            yield clock.steps
    for block in reversed(history._blocks):
        column = block.clocks[_STEPS]
        for i in range(block.size - 1, -1, -1):
            yield int(column[i])


def loop_start(history: Any, first_step: int, end_step: int) -> int:
    """The index in ``history`` of the first record of a running loop whose steps are
    ``first_step`` to ``end_step - 1`` (its records so far: the step in progress is not
    committed yet).

    A loop commits at most one record per step, with increasing step counters; the records
    before it (a resumed checkpoint's, a previous loop's) have smaller counters, or are
    followed by a counter that does not increase (a loop that started its clock again). A
    reader created on a loop's later step starts here, so the steps before it are read too.

    Args:
        history: the loop's history.
        first_step: the loop's first step (its initial clock's ``steps``).
        end_step: the step after the last one the loop may have committed.

    Example:
        >>> import gyre
        >>> h = gyre.history([{"metrics": {"a": 1.0}, "elapsed": {"steps": s}} for s in (0, 1, 2)])
        >>> for s in (3, 4):  # a loop resumed at step 3, now running its step 5
        ...     h.commit(gyre.Elapsed(steps=s), gyre.logs().add_metric("a", 2.0))
        >>> loop_start(h, 3, 5), len(h)
        (3, 5)
    """
    own, newer = 0, end_step
    for steps in _steps_backwards(history):
        if not first_step <= steps < newer:
            break
        own, newer = own + 1, steps
    return len(history) - own


def _empty() -> Columns:
    return Columns(0, {f: np.zeros(0) for f in CLOCK_FIELDS}, {})


class _Parts:
    """Pieces of columns gathered from blocks and device rows, joined at the end."""

    def __init__(self) -> None:
        self.count = 0
        self.clocks: dict[str, list[Any]] = {f: [] for f in CLOCK_FIELDS}
        self.entries: dict[Key, tuple[list[np.ndarray], list[Any]]] = {}

    def add_clocks(self, columns: list[Any]) -> None:
        for field, column in zip(CLOCK_FIELDS, columns, strict=True):
            self.clocks[field].append(np.asarray(column))

    def add_entry(self, key: Key, rows: np.ndarray, values: Any) -> None:
        if isinstance(values, list) and values and all(np.ndim(v) == 0 and np.isreal(v) for v in values):
            values = np.asarray(values)  # numbers kept as a list on the host (Python floats)
        where, found = self.entries.setdefault(key, ([], []))
        where.append(rows + self.count)
        found.append(values)

    def join(self) -> Columns:
        clocks = {f: np.concatenate(parts) if parts else np.zeros(0) for f, parts in self.clocks.items()}
        entries = {}
        for key, (where, found) in self.entries.items():
            numeric = all(isinstance(v, np.ndarray) and v.ndim >= 1 for v in found)
            values = np.concatenate(found) if numeric else [x for v in found for x in v]
            entries[key] = (np.concatenate(where), values)
        return Columns(self.count, clocks, entries)


def _names(shape: Any) -> list[Key]:
    return [(collection, name) for collection, names in shape for name in names]


class HistoryReader:
    """Hands out a history's records after a position, as they become readable.

    Args:
        history: the history to read.
        start: the index of the first record to read (default: the history's current length:
            only what comes next).
        limit: records read from the device per call at most (the rest comes next time, or
            once the history has moved it to the host itself).

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

    def __init__(self, history: Any, start: int | None = None, *, limit: int = 512) -> None:
        self.history = history
        self.position = len(history) if start is None else start
        self.limit = limit

    def read(self, *, wait: bool = False) -> Columns:
        """The records after the position that can be read now (all of them if ``wait``:
        then the device is waited for); advances the position past them."""
        h = self.history
        if wait:
            h.flush()
        else:
            h._land(wait=False)
        parts = _Parts()
        self._read_blocks(parts)
        if not h._transit:  # the device rows follow the host blocks directly
            self._read_device(parts)
        self.position += parts.count
        return parts.join() if parts.count else _empty()

    def _read_blocks(self, parts: _Parts) -> None:
        h = self.history
        for start, block in zip(h._starts, h._blocks, strict=True):
            first = self.position + parts.count - start
            if first >= block.size:
                continue
            parts.add_clocks([c[first:] for c in block.clocks])
            for group in block.groups:
                keep = group.rows >= first
                if not keep.any():
                    continue
                rows = group.rows[keep] - first
                for key, column in zip(_names(group.shape), group.columns, strict=True):
                    values = column[keep] if isinstance(column, np.ndarray) else [v for v, k in zip(column, keep, strict=True) if k]
                    parts.add_entry(key, rows, values)
            parts.count += block.size - first

    def _read_device(self, parts: _Parts) -> None:
        h = self.history
        first = self.position + parts.count - h._host_count - h._transit_rows
        cut = min(h._rows, first + self.limit)
        for group in h._grouped().values():
            for k, row in enumerate(group.rows):
                if row >= cut:
                    break
                if row >= first and not is_ready(group.values[k]):
                    cut = row
                    break
        for row, count, _, _, leaves in h._stacked:
            if row < cut and row + count > first and not is_ready(leaves):
                cut = max(row, first)
        if cut <= first:
            return
        self._take_device(parts, first, cut)

    def _take_device(self, parts: _Parts, first: int, cut: int) -> None:
        h = self.history
        wanted: list[tuple[Key, np.ndarray, Any]] = []
        for shape, group in h._grouped().items():
            rows = np.asarray(group.rows, np.int64)
            keep = (rows >= first) & (rows < cut)
            if keep.any():
                index = np.flatnonzero(keep)
                for key, column in zip(_names(shape), group.columns, strict=True):
                    wanted.append((key, rows[keep] - first, [column[i] for i in index]))
        for row, count, start, shape, leaves in h._stacked:
            lo, hi = max(row, first), min(row + count, cut)
            if lo < hi:
                for key, leaf in zip(_names(shape), leaves, strict=True):
                    wanted.append((key, np.arange(lo, hi) - first, (leaf, start + lo - row, start + hi - row)))
        host = fetch([w[2] if isinstance(w[2], list) else w[2][0] for w in wanted])
        for (key, rows, spec), values in zip(wanted, host, strict=True):
            if not isinstance(spec, list):
                values = values[spec[1] : spec[2]]
            parts.add_entry(key, rows, values)
        parts.add_clocks([[getattr(c, f) for c in h._clocks[first:cut]] for f in CLOCK_FIELDS])
        parts.count += cut - first
