"""``History``: the per-step records of a run, moved to the host in batches.

``commit`` keeps device values as they are (it never waits for the device). Every
``flush_every`` commits, the records older than the newest ``lag`` are sent to the host in
one explicit transfer, read once it has arrived: the host never pays one transfer per step
and never waits for the device. ``collect``, ``to_records`` and ``plot`` flush everything
and wait: they are the moments a user asks for numbers.
"""

from __future__ import annotations

import difflib
import os
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from numbers import Integral
from typing import Any, NamedTuple, overload

import numpy as np

from gyre.core._clock import _FIELDS as CLOCK_FIELDS
from gyre.core._clock import Elapsed
from gyre.core._columns import Block, Group, Record, as_list, place
from gyre.core._errors import ExplainedKeyError, closest, describe, explain, suggest
from gyre.core._host import ColumnFetch, fetch, is_ready, start_copy, start_fetch, to_python
from gyre.core._logs import Logs, Shape, flatten_logs, resolution_order
from gyre.core._reader import HistoryReader

__all__ = ["History", "Record", "history"]

_chain = chain.from_iterable


#: Batches sent before the step path lands the arrived ones: landing costs the device more
#: than its share of host time (it competes with the queued steps), so it is done seldom.
_LAND_AFTER = 8


class _Pending:
    """Records of one structure still on the device: their rows, and their values row by row
    (one append per step; :attr:`columns` transposes them when they are read or sent)."""

    __slots__ = ("shape", "rows", "values", "width")

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.rows: list[int] = []
        self.values: list[list[Any]] = []
        self.width = sum(len(names) for _, names in shape)

    @property
    def columns(self) -> list[list[Any]]:
        """One list per entry, a value per row."""
        if not self.values:
            return [[] for _ in range(self.width)]
        return [list(column) for column in zip(*self.values, strict=True)]


def _rows_of(group: _Pending, k: int) -> _Pending:
    """The first ``k`` rows of a pending group."""
    head = _Pending(group.shape)
    head.rows, head.values = group.rows[:k], group.values[:k]
    return head


def _names(shape: Shape) -> list[tuple[str, str]]:
    return [(collection, name) for collection, names in shape for name in names]


class Segment(NamedTuple):
    """Records of one structure wherever they are (host, in transit, device), for reading
    without waiting: their indices in the history, and one column per entry, each a stacked
    array (a row per record) or a list of per-record values."""

    rows: np.ndarray
    shape: Shape
    columns: list[Any]


def _stacked_segment(offset: int, row: int, count: int, start: int, shape: Shape, leaves: list[Any]) -> Segment:
    columns = [x if start == 0 and x.shape[0] == count else x[start : start + count] for x in leaves]
    return Segment(np.arange(offset + row, offset + row + count), shape, columns)


class _Transit(NamedTuple):
    """Records sent to the host whose values may not have arrived yet."""

    clocks: list[Elapsed]
    sizes: list[int | None]
    moving: list[tuple[Shape, list[int], int]]  # structure, rows, entries, in column order
    columns: ColumnFetch
    stacked: list[tuple[int, int, int, Shape, list[Any]]]  # row, count, start, structure, leaves

    def ready(self) -> bool:
        return self.columns.ready() and all(is_ready(leaves) for *_, leaves in self.stacked)

    def segments(self, offset: int) -> list[Segment]:
        """The records as segments (device values as they are: nothing waits)."""
        columns = self.columns.device_columns()
        out, taken = [], 0
        for shape, rows, width in self.moving:
            out.append(Segment(offset + np.asarray(rows, np.int64), shape, columns[taken : taken + width]))
            taken += width
        out.extend(_stacked_segment(offset, *entry) for entry in self.stacked)
        return out

    def land(self) -> Block:
        host = self.columns.result()
        groups, taken = [], 0
        for shape, rows, width in self.moving:
            groups.append(Group.of(shape, rows, host[taken : taken + width]))
            taken += width
        if self.stacked:
            values = fetch([leaves for *_, leaves in self.stacked])
            for (row, count, start, shape, _), leaves in zip(self.stacked, values, strict=True):
                rows = list(range(row, row + count))
                groups.append(Group.of(shape, rows, [v[start : start + count] for v in leaves]))
        return Block.build(self.clocks, self.sizes, groups)


class History:
    """Per-step records of a run: ``commit`` on the step path, ``collect`` afterwards.

    Keys for :meth:`collect`: a clock counter (``"steps"``, ``"samples"``, ``"epochs"``,
    ``"step_in_epoch"``, ``"time"``, ``"date"``, also as ``"elapsed.steps"``), a qualified
    entry (``"metrics.loss"``) or a bare entry name (``"loss"``). A bare name resolves to the
    first collection that holds it in *that record*, in the order ``losses``, ``metrics``,
    ``stateful_metrics``, ``outputs``, then custom collections by name; if no collection
    holds it, a clock counter of that name is used. Records missing a key are skipped.

    Records are kept by column, on the device until a batched transfer and in numpy arrays
    after it, never as one Python object per step: a history of a million steps costs the
    garbage collector nothing. :class:`Record` objects are built when read.

    Args:
        flush_every: commits between two batched host transfers.
        lag: newest records left on the device at a batched transfer.

    Example:
        >>> h = History()
        >>> for i in range(3):
        ...     h.commit(Elapsed(steps=i), Logs().add_loss("loss", 1.0 / (i + 1)))
        >>> h.collect("steps", "loss")
        ([0, 1, 2], [1.0, 0.5, 0.3333333333333333])
    """

    def __init__(self, *, flush_every: int = 256, lag: int = 16) -> None:
        if flush_every < 1 or lag < 0:
            raise ValueError(
                explain(
                    "History needs flush_every >= 1 and lag >= 0",
                    expected="e.g. History(flush_every=256, lag=16)",
                    received=f"flush_every={flush_every!r}, lag={lag!r}",
                    fix="pass positive numbers",
                )
            )
        self._blocks: list[Block] = []  # on the host
        self._starts: list[int] = []  # index of each block's first record
        self._host_count = 0
        # sent to the host, not arrived yet
        self._transit: list[_Transit] = []
        self._transit_rows = 0
        # still on the device: rows 0.._rows-1 of the next block
        self._rows = 0
        self._clocks: list[Elapsed] = []
        self._sizes: list[int | None] = []
        self._groups: dict[Shape, _Pending] = {}
        self._fresh: list[Logs] = []  # the newest device records, not yet in _groups
        self._stacked: list[tuple[int, int, int, Shape, list[Any]]] = []  # row, count, start, ...
        self._lag = lag
        self._flush_at = flush_every + lag
        #: called after records land on the host (the running loop's NaN check reads them then)
        self.on_land: Callable[[], None] | None = None
        #: why the last loop that wrote this history stopped early (``"preempted"``, a
        #: callback's reason), or ``None`` when it ran to its stop or the data's end
        self.stop_reason: str | None = None

    # -- the step path ---------------------------------------------------------------------
    def commit(self, elapsed: Elapsed, logs: Logs, *, batch_size: int | None = None) -> None:
        """Appends one step's logs (device values are kept; nothing waits).

        Only the values are kept, not ``logs`` itself: changing it afterwards changes nothing.
        """
        # merge copies each collection: sorting by structure waits for a read
        self.commit_owned(elapsed, Logs().merge(logs), batch_size)

    def commit_owned(self, elapsed: Elapsed, logs: Logs, batch_size: int | None) -> None:
        """:meth:`commit` for a caller that hands ``logs`` over: it must not change it
        afterwards (a loop's engine, whose logs of a step are made for that step).

        The step path of every loop: the record's structure and values are read later, a
        block of records at a time (:meth:`_grouped`), where a per-step read would cost the
        step several microseconds of cold-cache Python.
        """
        if type(elapsed) is not Elapsed:
            _not_a_clock(elapsed)
        self._fresh.append(logs)
        self._clocks.append(elapsed)
        self._sizes.append(batch_size)
        self._rows += 1
        if self._rows >= self._flush_at:
            self.flush(lag=self._lag, wait=False)

    def _grouped(self) -> dict[Shape, _Pending]:
        """The device records by structure, the records committed since the last call
        sorted in (every reader of :attr:`_groups` calls this first)."""
        fresh = self._fresh
        if fresh:
            groups = self._groups
            row = self._rows - len(fresh)
            for logs in fresh:
                # (built by C-level iterators: a comprehension is one more frame per record)
                shape = tuple(zip(logs, map(tuple, logs.values()), strict=True))
                group = groups.get(shape)
                if group is None:
                    group = groups[shape] = _Pending(shape)
                group.rows.append(row)
                group.values.append([*_chain(map(dict.values, logs.values()))])
                row += 1
            fresh.clear()
        return self._groups

    def commit_stacked(
        self,
        clocks: Sequence[Elapsed],
        logs: Logs,
        *,
        batch_sizes: Sequence[int | None] | None = None,
        start: int = 0,
    ) -> None:
        """Appends ``len(clocks)`` steps whose logs come stacked, one row per step.

        Every value of ``logs`` has a leading axis (what a fused step returns: see
        :func:`gyre.fuse`); step ``i`` gets row ``start + i``. Nothing is sliced on the device:
        the rows are split on the host when the values are moved there.

        Args:
            clocks: the clock of each step.
            logs: the stacked logs.
            batch_sizes: samples of each step (default: unknown).
            start: the row of the first step.

        Example:
            >>> import numpy as np
            >>> h = History()
            >>> h.commit_stacked([Elapsed(steps=i) for i in range(3)],
            ...                  Logs().add_loss("loss", np.array([3.0, 2.0, 1.0])))
            >>> h.collect("steps", "loss")
            ([0, 1, 2], [3.0, 2.0, 1.0])
        """
        rows = len(clocks)
        if rows == 0:
            return
        if type(logs) is not Logs:
            logs = Logs().merge(logs)
        for collection, name, value in logs.entries():
            shape = getattr(value, "shape", ())
            if not shape or shape[0] < start + rows:
                raise ValueError(
                    explain(
                        f"stacked logs entry {collection}.{name} has no row for every step",
                        expected=f"arrays with a leading axis of at least {start + rows} "
                        "(one row per step)",
                        received=f"shape {tuple(shape)}",
                        fix="commit per-step logs with History.commit, or stack them along axis 0",
                    )
                )
        sizes = [None] * rows if batch_sizes is None else list(batch_sizes)
        if len(sizes) != rows:
            raise ValueError(
                explain(
                    "commit_stacked needs one batch size per clock",
                    expected=f"{rows} batch sizes",
                    received=f"{len(sizes)}",
                    fix="pass batch_sizes=[...] of the same length as clocks, or leave it out",
                )
            )
        leaves, shape = flatten_logs(logs)
        self._grouped()  # the per-step records before these keep their rows
        self._stacked.append((self._rows, rows, start, shape, leaves))
        self._clocks.extend(clocks)
        self._sizes.extend(sizes)
        self._rows += rows
        if self._rows >= self._flush_at:
            self.flush(lag=self._lag, wait=False)

    def flush(self, *, lag: int = 0, wait: bool = True) -> None:
        """Sends all records but the newest ``lag`` to the host, one transfer for all.

        Each entry's values move as one column (stacked on the device when they can be); the
        records become :class:`Record` objects only when read. Stacked commits
        (:meth:`commit_stacked`) move whole: a block of them is kept back rather than split.

        Args:
            lag: newest records to leave on the device.
            wait: wait for the values to arrive. The step path passes ``False``: the
                transfer is queued behind the work already on the device, and the records
                land at a later flush, once their values are there, so the host never waits
                for the device and the device never runs dry.

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.flush()
        """
        cut = self._rows - lag
        for row, count, *_ in self._stacked:
            if row < cut < row + count:
                cut = row
        if cut > 0:
            self._send(cut)
        if wait or len(self._transit) >= _LAND_AFTER:
            self._land(wait=wait)

    def send(self) -> None:
        """Starts moving the records older than the lag to the host, without waiting (what
        the step path does every ``flush_every`` commits); they land at a later read.

        Example:
            >>> h = History(lag=0); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.send()
            >>> h.collect("a")
            [1]
        """
        self.flush(lag=self._lag, wait=False)

    def _send(self, cut: int) -> None:
        """Starts moving the pending rows before ``cut`` to the host."""
        moving: list[tuple[Shape, list[int], int]] = []
        columns: list[list[Any]] = []
        kept: dict[Shape, _Pending] = {}
        for shape, group in self._grouped().items():
            k = bisect_left(group.rows, cut)
            if k:
                moving.append((shape, group.rows[:k], group.width))
                columns.extend(_rows_of(group, k).columns)
            if k < len(group.rows):
                left = kept[shape] = _Pending(shape)
                left.rows = [r - cut for r in group.rows[k:]]
                left.values = group.values[k:]
        self._groups = kept
        stacked = [s for s in self._stacked if s[0] < cut]
        self._stacked = [(r - cut, *rest) for r, *rest in self._stacked if r >= cut]
        start_copy([leaves for *_, leaves in stacked])
        self._transit.append(
            _Transit(self._clocks[:cut], self._sizes[:cut], moving, start_fetch(columns), stacked)
        )
        self._transit_rows += cut
        del self._clocks[:cut], self._sizes[:cut]
        self._rows -= cut

    def _land(self, *, wait: bool) -> None:
        """Turns the sent records whose values arrived (all of them if ``wait``) into blocks,
        oldest first."""
        landed = self._host_count
        while self._transit and (wait or self._transit[0].ready()):
            moved = self._transit.pop(0)
            block = moved.land()
            self._transit_rows -= block.size
            self._starts.append(self._host_count)
            self._blocks.append(block)
            self._host_count += block.size
        if self._host_count != landed and self.on_land is not None:
            self.on_land()

    def _host_blocks(self) -> list[Block]:
        """Every record on the host (flushes first)."""
        self.flush()
        return self._blocks

    # -- reading without waiting -------------------------------------------------------------
    def reader(self, start: int | None = None, *, limit: int = 512) -> HistoryReader:
        """A :class:`~gyre.core._reader.HistoryReader`: the records after ``start`` (default:
        from the next one committed), handed out as soon as they can be read without waiting.

        Example:
            >>> h = History(); r = h.reader(); h.commit(Elapsed(), Logs().add_metric("a", 1.0))
            >>> r.read().count
            1
        """
        return HistoryReader(self, start, limit=limit)

    def segments(self) -> list[Segment]:
        """Every record, grouped by structure, wherever its values are: host columns for the
        records that arrived, device values for the others. Nothing waits for the device and
        nothing moves: reductions over a history (an evaluation's means) run on the device.

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1.0))
            >>> [(seg.rows.tolist(), seg.shape) for seg in h.segments()]
            [([0], (('metrics', ('a',)),))]
        """
        out = []
        for start, block in zip(self._starts, self._blocks, strict=True):
            out.extend(Segment(start + g.rows, g.shape, g.columns) for g in block.groups)
        offset = self._host_count
        for moving in self._transit:
            out.extend(moving.segments(offset))
            offset += len(moving.clocks)
        for shape, group in self._grouped().items():
            out.append(Segment(offset + np.asarray(group.rows, np.int64), shape, group.columns))
        out.extend(_stacked_segment(offset, *entry) for entry in self._stacked)
        return out

    def batch_sizes(self) -> list[int | None]:
        """The batch size of every record (``None`` where the loop did not record one).

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs(), batch_size=8); h.batch_sizes()
            [8]
        """
        sizes: list[int | None] = []
        for block in self._blocks:
            sizes.extend(as_list(block.batch_sizes))
        for moving in self._transit:
            sizes.extend(moving.sizes)
        return sizes + self._sizes

    def latest(self) -> Logs:
        """The newest value of every entry ever logged (device values as they are).

        Example:
            >>> h = History()
            >>> h.commit(Elapsed(), Logs().add_metric("a", 1).add_metric("b", 2))
            >>> h.commit(Elapsed(steps=1), Logs().add_metric("a", 3))
            >>> dict(h.latest().metrics) == {"a": 3, "b": 2}
            True
        """
        newest: dict[tuple[str, str], tuple[int, Any, int]] = {}
        for segment in self.segments():
            last = int(segment.rows[-1])
            for (collection, name), column in zip(_names(segment.shape), segment.columns, strict=True):
                if newest.get((collection, name), (-1,))[0] < last:
                    newest[(collection, name)] = (last, column, len(segment.rows) - 1)
        out = Logs()
        for (collection, name), (_, column, k) in sorted(newest.items(), key=lambda kv: kv[1][0]):
            out.add_entry(collection, name, to_python(column[k]) if isinstance(column, np.ndarray) else column[k])
        return out

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._host_count + self._transit_rows + self._rows

    def __iter__(self) -> Iterator[Record]:
        for block in self._host_blocks():
            yield from block.records()

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return list(self)[index]
        if not isinstance(index, Integral) or isinstance(index, bool):
            raise TypeError(f"history indices are integers or slices, not {describe(index)}")
        blocks = self._host_blocks()
        n = self._host_count
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"history index {index} out of range: the history has {n} records")
        b = bisect_right(self._starts, i) - 1
        return blocks[b].record(i - self._starts[b])

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        """Records ``start`` to ``stop - 1`` (flushes first), reading only the blocks that hold
        them: what a checkpoint appends to its history files costs the new records only.

        Example:
            >>> h = History()
            >>> for i in range(5):
            ...     h.commit(Elapsed(steps=i), Logs().add_metric("m", i))
            >>> [r.elapsed.steps for r in h.records(2, 4)]
            [2, 3]
        """
        for block, first, last in self.host_slices(start, stop):
            for i, record in enumerate(block.records()):
                if first <= i < last:
                    yield record

    def host_slices(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[Block, int, int]]:
        """Where records ``start`` to ``stop - 1`` are on the host (flushes first): each host
        block that holds some of them, with the first and end positions of those in it, in
        order. For readers that work column by column (a checkpoint's history files).

        Example:
            >>> h = History(flush_every=2, lag=0)
            >>> for i in range(5):
            ...     h.commit(Elapsed(steps=i), Logs().add_metric("m", i))
            >>> [(block.size, first, last) for block, first, last in h.host_slices(1, 4)]
            [(2, 1, 2), (2, 0, 2)]
        """
        blocks = self._host_blocks()
        stop = self._host_count if stop is None else min(stop, self._host_count)
        b = max(bisect_right(self._starts, start) - 1, 0)
        while b < len(blocks) and self._starts[b] < stop:
            first = self._starts[b]
            yield blocks[b], max(start - first, 0), min(stop - first, blocks[b].size)
            b += 1

    def extend(self, other: History) -> None:
        """Appends every record of ``other`` (used when a run is continued).

        Example:
            >>> a, b = History(), History()
            >>> b.commit(Elapsed(), Logs()); a.extend(b); len(a)
            1
        """
        for record in other:
            self.commit(record.elapsed, record.logs, batch_size=record.batch_size)

    def collect(self, *keys: str) -> list[Any] | tuple[list[Any], ...]:
        """Values of ``keys`` from every record that has all of them.

        One key gives a list; several give a tuple of lists of equal length. Scalars come back
        as Python numbers, arrays as numpy arrays.

        Example:
            >>> h = History()
            >>> h.commit(Elapsed(steps=0), Logs().add_metric("acc", 0.5))
            >>> h.commit(Elapsed(steps=1), Logs().add_loss("loss", 2.0))
            >>> h.collect("acc"), h.collect("steps", "loss")
            ([0.5], ([1], [2.0]))
        """
        if not keys:
            raise ValueError(
                explain(
                    "collect() needs at least one key",
                    expected="names like 'loss', 'metrics.accuracy' or 'steps'",
                    received="no keys",
                    fix="e.g. history.collect('steps', 'loss')",
                )
            )
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(
                    explain(
                        "history keys are strings",
                        expected="'loss', 'metrics.accuracy' or 'steps'",
                        received=describe(key),
                        fix="pass the key's name as a string",
                    )
                )
        columns: list[list[Any]] = [[] for _ in keys]
        for block in self._host_blocks():
            for column, values in zip(columns, block.collect(keys), strict=True):
                column.extend(values)
        if not columns[0] and len(self):
            self._check_keys(keys)
        return columns[0] if len(keys) == 1 else tuple(columns)

    def _check_keys(self, keys: Sequence[str]) -> None:
        """Raises a KeyError for a key that no record holds (a typo would otherwise give [])."""
        shapes = {g.shape for block in self._blocks for g in block.groups}
        for key in keys:
            if any(place(shape, key) is not None for shape in shapes):
                continue
            names = self.names()
            known = [f"{c}.{n}" for c, ns in names.items() for n in ns] + [n for ns in names.values() for n in ns]
            close = difflib.get_close_matches(key, known, n=len(known), cutoff=0.0)
            raise ExplainedKeyError(
                explain(
                    f"no record of this history has the key {key!r}",
                    expected="a logged name, 'collection.name', or a clock counter ("
                    + ", ".join(CLOCK_FIELDS) + ")",
                    received=f"{key!r}; the logged names, closest first: {close[:12]}",
                    fix=f"use one of the logged names{', e.g. ' + repr(close[0]) if close else ''}",
                )
            )

    def names(self) -> dict[str, list[str]]:
        """Every entry name seen, by collection, in order of first appearance.

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.names()
            {'metrics': ['a']}
        """
        seen: dict[str, dict[str, None]] = {}
        for block in self._host_blocks():
            for group in sorted(block.groups, key=lambda g: int(g.rows[0])):
                for collection, names in group.shape:
                    bucket = seen.setdefault(collection, {})
                    for name in names:
                        bucket.setdefault(name, None)
        return {c: list(v) for c, v in seen.items()}

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per record: the clock counters, then every entry.

        An entry is named by its bare name when no other collection in the history uses that
        name, else ``collection.name``.

        Example:
            >>> h = History(); h.commit(Elapsed(steps=3), Logs().add_metric("a", 1))
            >>> h.to_records()[0]["steps"], h.to_records()[0]["a"]
            (3, 1)
        """
        owners: dict[str, int] = {}
        for names in self.names().values():
            for name in names:
                owners[name] = owners.get(name, 0) + 1
        rows = []
        for record in self:
            row: dict[str, Any] = record.elapsed.to_dict()
            for collection, name, value in record.logs.entries():
                column = name if owners[name] == 1 and name not in row else f"{collection}.{name}"
                row[column] = to_python(value)
            rows.append(row)
        return rows

    def to_csv(self, path: str) -> None:
        """Writes :meth:`to_records` as CSV (scalar entries only; arrays are left out), creating
        the file's folder if missing.

        Example:
            >>> import tempfile, os
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1))
            >>> tmp = tempfile.TemporaryDirectory(); p = os.path.join(tmp.name, "h.csv"); h.to_csv(p)
            >>> open(p).read().splitlines()[0]
            'steps,samples,epochs,step_in_epoch,time,date,a'
            >>> tmp.cleanup()
        """
        import csv

        rows = [
            {k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))}
            for row in self.to_records()
        ]
        columns: dict[str, None] = {}
        for row in rows:
            for key in row:
                columns.setdefault(key, None)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows(rows)

    def plot(
        self,
        path: str | None = None,
        keys: Sequence[str | Sequence[str]] | None = None,
        *,
        x: str = "steps",
    ) -> Any:
        """Plots entries against ``x`` with matplotlib, one panel per key or group of keys.

        Args:
            path: where to save the figure (PNG by extension; its folder is created if
                missing); ``None`` keeps it open.
            keys: names to plot; a nested sequence puts several curves on one panel, e.g.
                ``[["loss", "loss_test"], ["accuracy", "accuracy_test"]]``. By default every
                scalar entry, with ``name_<suffix>`` drawn on the panel of ``name``.
            x: the clock counter on the horizontal axis.

        Returns:
            The matplotlib figure.

        Raises:
            KeyError: a key no record holds, or a ``path`` without an extension that reads
                like a series' name (``plot("loss")``: the series go in ``keys``).
            ValueError: another ``path`` without an extension.

        Example:
            >>> import tempfile, os
            >>> h = History()
            >>> for i in range(3): h.commit(Elapsed(steps=i), Logs().add_loss("loss", 1.0 / (i + 1)))
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     fig = h.plot(os.path.join(tmp, "curves.png"))
        """
        if path is not None and not os.path.splitext(path)[1]:
            raise _extensionless(self, os.fspath(path))
        groups = _plot_groups(self, keys)
        if keys is not None and len(self):
            self._check_keys([x, *chain.from_iterable(groups)])
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise ImportError(
                "History.plot needs matplotlib: pip install 'gyre[plot]'"
            ) from err
        fig, axes = plt.subplots(1, max(len(groups), 1), figsize=(5 * max(len(groups), 1), 3.6))
        axes = [axes] if len(groups) <= 1 else list(axes)
        for ax, group in zip(axes, groups, strict=False):
            for key in group:
                xs, ys = self.collect(x, key)
                if ys and getattr(ys[0], "ndim", 0) == 0:
                    ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=key)
            ax.set_xlabel(x)
            ax.set_title(group[0])
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        if path is not None:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fig.savefig(path, dpi=100)
            plt.close(fig)
        return fig


def _not_a_clock(elapsed: Any) -> None:
    raise TypeError(
        explain(
            "History.commit needs the step's clock",
            expected="a gyre.Elapsed (what the loop passes as elapsed)",
            received=describe(elapsed),
            fix="commit(elapsed, logs): pass the callback's elapsed, or gyre.Elapsed(steps=i)",
        )
    )


def _extensionless(history: History, path: str) -> Exception:
    """The error for ``plot(path)`` whose path has no extension (matplotlib would add
    ``.png``): a KeyError when it reads like a series' name (``plot("loss")``)."""
    names = [n for ns in history.names().values() for n in ns]
    near = path if path in names else closest(path, names)
    if near is None:
        return ValueError(
            explain(
                f"History.plot: the file {path!r} has no extension",
                expected="a file name ending in the format, e.g. 'curves.png', '.pdf' or '.svg'",
                received=repr(path),
                fix=f"history.plot({path + '.png'!r})",
            )
        )
    return ExplainedKeyError(
        explain(
            "History.plot(path, keys): the first argument is the file to write, "
            + (f"and {path!r} is the name of a series" if near == path else
               f"and no series is named {path!r}." + suggest(path, names)),
            expected="a file name with an extension first, the series to draw in keys=",
            received=f"plot({path!r}), which would write {path + '.png'!r}",
            fix=f"history.plot('curves.png', keys=[{near!r}])",
        )
    )


def _plot_groups(
    history: History, keys: Sequence[str | Sequence[str]] | None
) -> list[list[str]]:
    if keys is not None:
        return [[k] if isinstance(k, str) else list(k) for k in keys]
    by_collection = {c: ns for c, ns in history.names().items() if c != "outputs"}
    owners: dict[str, int] = {}
    for found in by_collection.values():
        for name in found:
            owners[name] = owners.get(name, 0) + 1
    names: list[str] = []  # a name of several collections is drawn once per collection
    for collection in resolution_order(by_collection):
        for name in by_collection[collection]:
            names.append(name if owners[name] == 1 else f"{collection}.{name}")
    groups: dict[str, list[str]] = {}
    for name in names:
        base = next((b for b in groups if name.startswith(b + "_")), name)
        groups.setdefault(base, []).append(name)
    return list(groups.values())


def history(
    logs_list: Iterable[Any] | None = None, *, flush_every: int = 256, lag: int = 16
) -> History:
    """A new :class:`History`: empty, or holding the records of ``logs_list``.

    Args:
        logs_list: records as ciclo keeps them (its ``History`` is a list of them): one dict per
            step of collections of entries, ``{"metrics": {"loss": 0.5}}``, the step's clock
            under ``"elapsed"`` (an :class:`~gyre.Elapsed` or a dict of its counters; other
            keys such as ciclo's ``date_start`` are ignored; a record without one gets
            ``steps`` = its index). gyre's own records (iterating a history) are accepted too.
        flush_every, lag: see :class:`History`.

    Example:
        >>> len(history())
        0
        >>> h = history([{"metrics": {"a": 1.0}, "elapsed": {"steps": 4}}, {"metrics": {"a": 3.0}}])
        >>> h.collect("steps", "a")
        ([4, 1], [1.0, 3.0])
    """
    out = History(flush_every=flush_every, lag=lag)
    for index, record in enumerate([] if logs_list is None else logs_list):
        if isinstance(record, Record):
            out.commit(record.elapsed, record.logs, batch_size=record.batch_size)
            continue
        if not isinstance(record, Mapping) or not all(
            isinstance(v, Mapping) or (k == "elapsed" and isinstance(v, Elapsed)) for k, v in record.items()
        ):
            raise TypeError(
                explain(
                    f"record {index} of the list given to history() is not a dict of collections",
                    expected='{"metrics": {"loss": 0.5}, "elapsed": {"steps": 3}} (ciclo\'s records)',
                    received=describe(record),
                    fix="give one dict per step, each collection a dict of entries",
                )
            )
        clock = record.get("elapsed")
        if clock is None:
            clock = Elapsed(steps=index)
        elif not isinstance(clock, Elapsed):
            clock = Elapsed.from_dict({k: v for k, v in clock.items() if k in CLOCK_FIELDS})
        logs = Logs()
        for collection, entries in record.items():
            if collection != "elapsed":
                for name, value in entries.items():
                    logs.add_entry(collection, name, value)
        out.commit(clock, logs)
    return out
