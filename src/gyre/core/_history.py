"""``History``: a run's per-step records, kept by column in :class:`Block` objects.

Records arrive stacked (a row per step) or one step at a time (gathered into a block every
``flush_every`` commits). A block's copy to the host starts when it is committed and lands at
a later read, once computed; ``collect`` and the exports read the host blocks.
"""

from __future__ import annotations

import difflib
import os
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from numbers import Integral
from operator import attrgetter
from typing import Any, NamedTuple, overload

import numpy as np

from gyre.core._checks import instance, require
from gyre.core._clock import CLOCK_FIELDS, Elapsed, epochs_after
from gyre.core._errors import ExplainedKeyError, closest, describe, explain, suggest
from gyre.core._host import fetch, is_ready, stacked, start_copy, to_python
from gyre.core._logs import Logs, flatten_logs, put, resolution_order

__all__ = ["Block", "History", "Record", "history"]

Key = tuple[str, str]
_clock_fields = attrgetter(*CLOCK_FIELDS)
_STACK_FROM = 8  # per-step values of one entry stacked on the device before their copy from this many on
MISSING = object()  # where a record has no value for a key (lookup)


class Record(NamedTuple):
    """One committed step: its clock, its logs and its batch size (or None).

    It also reads like ciclo's record: ``record["metrics"]["acc"]``, ``record["elapsed"]["steps"]``.

    Example:
        >>> r = Record(Elapsed(steps=3), Logs().add_metric("acc", 0.5))
        >>> r["metrics"]["acc"], r["elapsed"]["steps"], r.keys(), "losses" in r, r.get("losses", {})
        (0.5, 3, ['elapsed', 'metrics'], False, {})
    """

    elapsed: Elapsed
    logs: Logs
    batch_size: int | None = None

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if not isinstance(key, str):
            return tuple.__getitem__(self, key)
        if key == "elapsed":
            return self.elapsed.to_dict()
        if key in self.logs:
            return self.logs[key]
        raise ExplainedKeyError(
            explain(f"this record has no collection {key!r}", expected=f"one of {self.keys()}", received=repr(key),
                    fix="index a collection, then an entry: record['metrics']['accuracy']")
        )

    def keys(self) -> list[str]:
        """``"elapsed"`` and the record's collections (example: see :class:`Record`)."""
        return ["elapsed", *self.logs]

    def __contains__(self, key: object) -> bool:
        return key == "elapsed" or key in self.logs

    def get(self, key: str, default: Any = None) -> Any:
        """``record[key]``, or ``default`` when the record has no such collection (example: see
        :class:`Record`)."""
        return self[key] if key in self else default


def _as_list(column: Any) -> list[Any]:
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


def lookup(block: Block, key: str) -> list[Any]:
    """The value of ``key`` in each record of a host block (``MISSING`` where it has none),
    found as :meth:`History.collect` finds keys."""
    out: list[Any] = [MISSING] * block.count
    if key.startswith("elapsed."):
        field = key[len("elapsed.") :]
        return _as_list(block.clocks[field]) if field in CLOCK_FIELDS else out
    collection, dot, name = key.partition(".")
    keys = [(collection, name)] if dot and (collection, name) in block.entries else []
    keys += [(c, key) for c in resolution_order({c: None for c, n in block.entries if n == key})]
    for found in keys:
        rows, values = block.entries[found]
        python = values.tolist() if isinstance(values, np.ndarray) and values.ndim == 1 else map(to_python, values)
        for i, value in zip(rows.tolist(), python, strict=True):
            if out[i] is MISSING:
                out[i] = value
    if key in CLOCK_FIELDS:
        clock = _as_list(block.clocks[key])
        out = [clock[i] if v is MISSING else v for i, v in enumerate(out)]
    return out


class Block(NamedTuple):
    """Consecutive records of a history, by column, as :meth:`History.read` hands them out.

    Example:
        >>> b = Block(2, {"steps": np.array([0, 1])}, {("losses", "loss"): (np.array([1]), np.array([2.0]))})
        >>> b.count, b.collect(["steps", "loss"]), b.take(1, 2).entries[("losses", "loss")][0].tolist()
        (2, [[1], [2.0]], [0])
    """

    count: int
    clocks: dict[str, Any]  # one column per clock counter
    entries: dict[Key, tuple[np.ndarray, Any]]  # rows holding the entry (increasing), values
    sizes: Sequence[int | None] = ()  # each record's batch size
    #: the entries of the records whose order differs from the entries' order, in theirs
    orders: dict[int, tuple[Key, ...]] | None = None

    def take(self, start: int, stop: int) -> Block:
        """Records ``start`` to ``stop - 1`` of a host block (example: see :class:`Block`)."""
        if start <= 0 and stop >= self.count:
            return self
        entries = {}
        for key, (rows, values) in self.entries.items():
            lo, hi = np.searchsorted(rows, [start, stop]).tolist()
            if lo < hi:
                entries[key] = (rows[lo:hi] - start, values[lo:hi])
        clocks = {f: c[start:stop] for f, c in self.clocks.items()}
        orders = {i - start: keys for i, keys in (self.orders or {}).items() if start <= i < stop}
        return Block(stop - start, clocks, entries, list(self.sizes[start:stop]), orders or None)

    def records(self) -> Iterator[Record]:
        """The records, in order (built now; nothing is kept).

        Example:
            >>> h = History(); h.commit(Elapsed(steps=4), Logs().add_metric("m", 7))
            >>> [(r.elapsed.steps, r.logs.metrics.m) for r in h.read(0).records()]
            [(4, 7)]
        """
        logs = [Logs() for _ in range(self.count)]
        for (collection, name), (rows, values) in self.entries.items():
            for k, i in enumerate(rows.tolist()):
                put(logs[i], collection, name, values[k])
        for i, keys in (self.orders or {}).items():
            old, logs[i] = logs[i], Logs()
            for collection, name in keys:
                put(logs[i], collection, name, old[collection][name])
        clocks = zip(*[_as_list(self.clocks[f]) for f in CLOCK_FIELDS], strict=True)
        for clock, lg, size in zip(clocks, logs, self.sizes, strict=True):
            yield Record(Elapsed(*clock), lg, size)

    def collect(self, keys: Sequence[str]) -> list[list[Any]]:
        """The values of ``keys`` (one list per key) of the records that have all of them, in
        record order (as :meth:`History.collect`; example: see :class:`Block`)."""
        columns = [lookup(self, key) for key in keys]
        keep = [i for i in range(self.count) if all(c[i] is not MISSING for c in columns)]
        return [[c[i] for i in keep] for c in columns]


def join(blocks: Sequence[Block]) -> Block:
    """One block of consecutive host blocks."""
    if len(blocks) == 1:
        return blocks[0]
    entries: dict[Key, tuple[list[np.ndarray], list[Any]]] = {}
    orders: dict[int, tuple[Key, ...]] = {}
    offset = 0
    for block in blocks:
        for key, (rows, values) in block.entries.items():
            where, found = entries.setdefault(key, ([], []))
            where.append(rows + offset)
            found.append(values)
        orders.update((i + offset, keys) for i, keys in (block.orders or {}).items())
        offset += block.count
    return Block(
        offset,
        {f: np.concatenate([np.asarray(b.clocks[f]) for b in blocks]) for f in blocks[0].clocks},
        {key: (np.concatenate(where), _concat(found)) for key, (where, found) in entries.items()},
        [s for b in blocks for s in b.sizes],
        orders or None,
    )


def _concat(parts: list[Any]) -> Any:
    """Columns one after the other: one numpy array when every part is one of the same row shape."""
    if all(isinstance(p, np.ndarray) for p in parts) and len({p.shape[1:] for p in parts}) == 1:
        return np.concatenate(parts)
    return [v for p in parts for v in p]


def _clock_columns(clocks: Sequence[Elapsed]) -> dict[str, Any]:
    fields = zip(*map(_clock_fields, clocks), strict=True)
    return {f: np.asarray(column) for f, column in zip(CLOCK_FIELDS, fields, strict=True)}


def block_clocks(first: Elapsed, sizes: Sequence[int | None], epoch_steps: int | None) -> dict[str, Any]:
    """The clock columns of ``len(sizes)`` steps from ``first``, each next one as
    :meth:`Elapsed._after` gives it (``sizes[i]`` more samples, epochs of ``epoch_steps``)."""
    n = len(sizes)
    i = np.arange(n)
    try:
        counts = np.fromiter(sizes, np.int64, n)
    except TypeError:  # a record without a batch size counts none
        counts = np.fromiter((s or 0 for s in sizes), np.int64, n)
    epochs, in_epoch = epochs_after(first.epochs, first.step_in_epoch, i, epoch_steps)
    return {
        "steps": first.steps + i, "samples": first.samples + np.cumsum(counts) - counts, "epochs": np.full(n, epochs),
        "step_in_epoch": in_epoch, "time": np.full(n, first.time), "date": np.full(n, first.date),
    }


def _add_rows(entries: dict[Key, tuple[Any, Any]], between: Mapping[int, Logs]) -> dict[int, tuple[Key, ...]] | None:
    """Adds the logs of some rows (``between``) to a block's stacked ``entries`` as sparse
    entries; returns the orders of the rows whose entries come in another order."""
    found: dict[Key, tuple[list[int], list[Any]]] = {}
    for row in sorted(between):
        for collection, values in between[row].items():
            for name, value in values.items():
                if (collection, name) in entries:
                    raise ValueError(explain(
                        f"logs between a block's steps repeat the step's entry {collection}.{name}",
                        expected="names the step does not log", received=f"{collection}.{name} in both",
                        fix="rename the value the task between the steps logs"))
                rows, found_values = found.setdefault((collection, name), ([], []))
                rows.append(row)
                found_values.append(value)
    ranks = {key: i for i, key in enumerate([*entries, *found])}
    stacked_keys = list(entries)
    entries.update((key, (np.asarray(rows, np.int64), values)) for key, (rows, values) in found.items())
    orders = {}
    for row in between:
        keys = [(c, n) for c, values in between[row].items() for n in values]
        if [ranks[k] for k in keys] != sorted(ranks[k] for k in keys):
            orders[row] = (*stacked_keys, *keys)
    return orders or None


def _ready_rows(block: Block) -> int:
    """How many leading records of a block are computed (a stacked column: all or none)."""
    count, whole = block.count, True
    for rows, values in block.entries.values():
        if not isinstance(values, list):
            whole = whole and isinstance(values, np.ndarray)
            if not is_ready(values):
                return 0
            continue
        for j, value in enumerate(values):
            ready = getattr(value, "is_ready", None)
            if ready is not None and not ready():
                count = min(count, int(rows[j]))
                break
    return count if whole or count == block.count else 0


def _cut(values: Any, lo: int, n: int) -> Any:
    """A column cut to its records' rows (a stacked one may hold more rows)."""
    return values if isinstance(values, list) or (not lo and values.shape[0] == n) else values[lo : lo + n]


def _host_column(values: Any, lo: int, n: int) -> Any:
    """A fetched column cut to its rows; a list of arrays of one shape and dtype stacked."""
    if isinstance(values, np.ndarray):
        return _cut(values, lo, n)
    first = values[0] if values else None
    if isinstance(first, np.ndarray) and all(
        isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values
    ):
        return np.stack(values)
    return values


class History:
    """Per-step records of a run: ``commit`` on the step path, ``collect`` afterwards.

    Keys for :meth:`collect`: a clock counter (``"steps"``, ``"time"``, also ``"elapsed.steps"``),
    a qualified entry (``"metrics.loss"``) or a bare entry name, which resolves per record to the
    first collection holding it (``losses``, ``metrics``, ``stateful_metrics``, ``outputs``, then
    custom ones by name), else to a clock counter. Records missing a key are skipped.

    Args:
        flush_every: per-step commits gathered into one block (one transfer).
        lag: newest per-step commits left out of that block.

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
                explain("History needs flush_every >= 1 and lag >= 0", expected="e.g. History(flush_every=256, lag=16)",
                        received=f"flush_every={flush_every!r}, lag={lag!r}", fix="pass positive numbers")
            )
        self._parts: list[tuple[Block, int]] = []  # (block, its first row in stacked values)
        self._starts: list[int] = []  # each part's first record
        self._landed = 0  # the parts on the host (the first ones)
        self._count = 0  # records in the parts
        self._last_read: tuple[tuple[int, int], Block] | None = None  # readers often ask the same
        self._open: list[tuple[Elapsed, Logs, int | None]] = []  # per-step commits not in a part
        self._flush_every, self._lag = flush_every, lag
        #: called after records land on the host (the running loop's NaN check reads them then)
        self.on_land: Callable[[], None] | None = None
        #: why the last loop that wrote this history stopped early (``"preempted"``, a
        #: callback's reason), or ``None`` when it ran to its stop or the data's end
        self.stop_reason: str | None = None

    # -- writing -----------------------------------------------------------------------------
    def commit(self, elapsed: Elapsed, logs: Logs, *, batch_size: int | None = None) -> None:
        """Appends the values of one step's logs (``logs`` itself is not kept); never waits."""
        self.commit_owned(elapsed, Logs().merge(logs), batch_size)

    def commit_owned(self, elapsed: Elapsed, logs: Logs, batch_size: int | None) -> None:
        """:meth:`commit` for a caller that hands ``logs`` over and never changes it afterwards."""
        if type(elapsed) is not Elapsed:
            _not_a_clock(elapsed)
        self._open.append((elapsed, logs, batch_size))
        if len(self._open) >= self._flush_every + self._lag:
            self._seal(len(self._open) - self._lag)
            self._land(wait=False)

    def commit_stacked(
        self, clocks: Sequence[Elapsed], logs: Logs, *, batch_sizes: Sequence[int | None] | None = None, start: int = 0
    ) -> None:
        """Appends ``len(clocks)`` steps whose logs come stacked: step ``i`` gets row ``start + i``.

        Example:
            >>> h = History()
            >>> h.commit_stacked([Elapsed(steps=i) for i in range(3)], Logs().add_loss("loss", np.array([3.0, 2.0, 1.0])))
            >>> h.collect("steps", "loss")
            ([0, 1, 2], [3.0, 2.0, 1.0])
        """
        rows = len(clocks)
        sizes = [None] * rows if batch_sizes is None else list(batch_sizes)
        if len(sizes) != rows:
            raise ValueError(
                explain("commit_stacked needs one batch size per clock", expected=f"{rows} batch sizes",
                        received=f"{len(sizes)}", fix="pass batch_sizes=[...] of the same length as clocks, or leave it out")
            )
        if rows:
            self._stacked_part(_clock_columns(clocks), logs, sizes, start)

    def commit_block(
        self, first: Elapsed, sizes: Sequence[int | None], logs: Logs, *, epoch_steps: int | None, start: int = 0,
        between: Mapping[int, Logs] | None = None,
    ) -> None:
        """Appends ``len(sizes)`` stacked steps, the first at clock ``first``, then one step each;
        ``between`` adds more logs to some of them (by row, names the stacked logs do not hold).

        Example:
            >>> h = History()
            >>> h.commit_block(Elapsed(steps=4), [2, 2], Logs().add_loss("loss", np.ones(8)), epoch_steps=None)
            >>> h.collect("steps", "samples")
            ([4, 5], [0, 2])
        """
        if type(first) is not Elapsed:
            _not_a_clock(first)
        if len(sizes):
            self._stacked_part(block_clocks(first, sizes, epoch_steps), logs, list(sizes), start, between)

    def _stacked_part(
        self, clocks: dict[str, Any], logs: Logs, sizes: list[int | None], start: int, between: Mapping[int, Logs] | None = None
    ) -> None:
        n = len(sizes)
        leaves, shape = flatten_logs(logs if type(logs) is Logs else Logs().merge(logs))
        keys = [(collection, name) for collection, names in shape for name in names]
        for (collection, name), value in zip(keys, leaves, strict=True):
            found = getattr(value, "shape", ())
            if not found or found[0] < start + n:
                raise ValueError(explain(
                    f"stacked logs entry {collection}.{name} has no row for every step",
                    expected=f"arrays with a leading axis of at least {start + n} (one row per step)",
                    received=f"shape {tuple(found)}",
                    fix="commit per-step logs with History.commit, or stack them along axis 0"))
        self._seal()
        start_copy(leaves)
        rows = np.arange(n)
        entries: dict[Key, tuple[Any, Any]] = {key: (rows, leaf) for key, leaf in zip(keys, leaves, strict=True)}
        orders = _add_rows(entries, between) if between else None
        self._append(Block(n, clocks, entries, sizes, orders), start)

    def _seal(self, n: int | None = None) -> None:
        """Gathers the first ``n`` per-step commits (all by default) into a block; the values
        of an entry that are device arrays of one shape are stacked on the device first."""
        records = self._open[:n]
        if not records:
            return
        del self._open[:n]
        found: dict[Key, tuple[int, list[int], list[Any]]] = {}  # rank of first appearance, rows, values
        orders = {}
        for i, (_, logs, _) in enumerate(records):
            keys = []
            for collection, values in logs.items():
                for name, value in values.items():
                    keys.append(key := (collection, name))
                    entry = found.get(key)
                    if entry is None:
                        entry = found[key] = (len(found), [], [])
                    entry[1].append(i)
                    entry[2].append(value)
            ranks = [found[k][0] for k in keys]
            if ranks != sorted(ranks):  # a record's own order, kept for it alone
                orders[i] = tuple(keys)
        entries = {}
        for key, (_, rows, values) in found.items():
            device = stacked(values) if len(values) >= _STACK_FROM else None
            entries[key] = (np.asarray(rows, np.int64), values if device is None else device)
        start_copy([values for _, values in entries.values() if not isinstance(values, list)])
        clocks = _clock_columns([r[0] for r in records])
        self._append(Block(len(records), clocks, entries, [r[2] for r in records], orders or None), 0)

    def _append(self, block: Block, lo: int) -> None:
        self._parts.append((block, lo))
        self._starts.append(self._count)
        self._count += block.count

    def _land(self, *, wait: bool) -> None:
        """Turns the parts whose values are computed (all of them if ``wait``) into host
        blocks, oldest first, in one transfer."""
        first = stop = self._landed
        while stop < len(self._parts):
            block, lo = self._parts[stop]
            k = block.count if wait else _ready_rows(block)
            if k < block.count:
                if k:  # a block of per-step values: its computed records land
                    self._parts[stop : stop + 1] = [(block.take(0, k), 0), (block.take(k, block.count), 0)]
                    self._starts.insert(stop + 1, self._starts[stop] + k)
                    stop += 1
                break
            stop += 1
        if stop == first:
            return
        moving = self._parts[first:stop]
        host = fetch([[values for _, values in block.entries.values()] for block, _ in moving])
        for j, ((block, lo), columns) in enumerate(zip(moving, host, strict=True)):
            entries = {
                key: (rows, _host_column(values, lo, len(rows)))
                for (key, (rows, _)), values in zip(block.entries.items(), columns, strict=True)
            }
            self._parts[first + j] = (block._replace(entries=entries), 0)
        self._landed = stop
        if self.on_land is not None:
            self.on_land()

    def flush(self) -> None:
        """Moves every record to the host, waiting for the device."""
        self._seal()
        self._land(wait=True)

    # -- reading -----------------------------------------------------------------------------
    def read(self, since: int = 0, *, wait: bool = False, fresh: bool = True) -> Block:
        """The records from ``since`` on that are on the host, as one block (``wait``: all).

        ``fresh=False`` leaves the latest per-step commits to the history's own batching.

        Example:
            >>> h = History()
            >>> for i in range(3):
            ...     h.commit(Elapsed(steps=i), Logs().add_metric("m", i))
            >>> block = h.read(1)
            >>> block.count, block.clocks["steps"].tolist(), block.entries[("metrics", "m")][1]
            (2, [1, 2], [1, 2])
        """
        if fresh or wait:
            self._seal()
        self._land(wait=wait)
        end = self._count if self._landed == len(self._parts) else self._starts[self._landed]
        if since >= end:
            return Block(0, {f: np.zeros(0) for f in CLOCK_FIELDS}, {}, [])
        if self._last_read is not None and self._last_read[0] == (since, end):
            return self._last_read[1]  # landed parts never change: the same records
        b = max(bisect_right(self._starts, since) - 1, 0)
        parts = zip(self._parts[b : self._landed], self._starts[b : self._landed], strict=True)
        block = join([block.take(max(since - start, 0), block.count) for (block, _), start in parts])
        self._last_read = ((since, end), block)
        return block

    def segments(self) -> list[tuple[int, Block]]:
        """Every record as ``(first index, block)``, not waiting: device values where not landed."""
        self._seal()
        return list(self._views())

    def _views(self) -> Iterator[tuple[int, Block]]:
        for (block, lo), start in zip(self._parts, self._starts, strict=True):
            yield start, block._replace(entries={k: (r, _cut(v, lo, len(r))) for k, (r, v) in block.entries.items()})

    def batch_sizes(self) -> list[int | None]:
        """The batch size of every record (``None`` where the loop did not record one).

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs(), batch_size=8); h.batch_sizes()
            [8]
        """
        return [s for block, _ in self._parts for s in block.sizes] + [size for *_, size in self._open]

    def latest(self) -> Logs:
        """The newest value of every entry ever logged (device values as they are).

        Example:
            >>> h = History()
            >>> h.commit(Elapsed(), Logs().add_metric("a", 1).add_metric("b", 2))
            >>> h.commit(Elapsed(steps=1), Logs().add_metric("a", 3))
            >>> dict(h.latest().metrics) == {"a": 3, "b": 2}
            True
        """
        newest: dict[Key, tuple[int, Any]] = {}
        for start, block in self._views():
            for key, (rows, values) in block.entries.items():
                if len(rows):
                    value = values[len(rows) - 1]
                    newest[key] = (start + int(rows[-1]), to_python(value) if isinstance(values, np.ndarray) else value)
        for i, (_, logs, _) in enumerate(self._open, self._count):
            for collection, name, value in logs.entries():
                newest[(collection, name)] = (i, value)
        out = Logs()
        for (collection, name), (_, value) in sorted(newest.items(), key=lambda kv: kv[1][0]):
            out.add_entry(collection, name, value)
        return out

    def __len__(self) -> int:
        return self._count + len(self._open)

    def _host_parts(self) -> list[tuple[Block, int]]:
        self.flush()
        return self._parts

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return list(self)[index]
        if not isinstance(index, Integral) or isinstance(index, bool):
            raise TypeError(f"history indices are integers or slices, not {describe(index)}")
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"history index {index} out of range: the history has {n} records")
        return next(self.records(i, i + 1))

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        """Records ``start`` to ``stop - 1`` (flushes first), reading only the blocks holding them.

        Example:
            >>> h = History()
            >>> for i in range(5):
            ...     h.commit(Elapsed(steps=i), Logs().add_metric("m", i))
            >>> [r.elapsed.steps for r in h.records(2, 4)]
            [2, 3]
        """
        parts = self._host_parts()
        stop = self._count if stop is None else min(stop, self._count)
        b = max(bisect_right(self._starts, start) - 1, 0)
        for (block, _), first in zip(parts[b:], self._starts[b:], strict=True):
            if first >= stop:
                break
            yield from block.take(max(start - first, 0), min(stop - first, block.count)).records()

    def extend(self, other: History | Block) -> None:
        """Appends every record of ``other``, a history or a block of host columns."""
        self._seal()
        for block, _ in other._host_parts() if isinstance(other, History) else [(other, 0)]:
            self._append(block, 0)

    # -- views and exports -------------------------------------------------------------------

    def collect(self, *keys: str) -> list[Any] | tuple[list[Any], ...]:
        """Values of ``keys`` from every record that has all of them (keys: see :class:`History`).

        One key gives a list, several a tuple of lists; scalars as Python numbers, arrays as numpy.

        Example:
            >>> from gyre import History
            >>> h = History()
            >>> h.commit(Elapsed(steps=0), Logs().add_metric("acc", 0.5))
            >>> h.commit(Elapsed(steps=1), Logs().add_loss("loss", 2.0))
            >>> h.collect("acc"), h.collect("steps", "loss")
            ([0.5], ([1], [2.0]))
        """
        if not keys:
            raise ValueError(
                explain("collect() needs at least one key", expected="names like 'loss', 'metrics.accuracy' or 'steps'",
                        received="no keys", fix="e.g. history.collect('steps', 'loss')")
            )
        for key in keys:
            instance(key, "history keys", str, kind="strings", expected="'loss', 'metrics.accuracy' or 'steps'",
                     fix="pass the key's name as a string")
        columns: list[list[Any]] = [[] for _ in keys]
        for block, _ in self._host_parts():
            for column, values in zip(columns, block.collect(keys), strict=True):
                column.extend(values)
        if not columns[0] and len(self):
            self._check_keys(keys)
        return columns[0] if len(keys) == 1 else tuple(columns)

    def _check_keys(self, keys: Sequence[str]) -> None:
        """Raises a KeyError for a key that no record holds (a typo would otherwise give [])."""
        for key in keys:
            if any(v is not MISSING for block, _ in self._host_parts() for v in lookup(block, key)):
                continue
            names = self.names()
            known = [f"{c}.{n}" for c, ns in names.items() for n in ns] + [n for ns in names.values() for n in ns]
            close = difflib.get_close_matches(key, known, n=len(known), cutoff=0.0)
            raise ExplainedKeyError(explain(
                f"no record of this history has the key {key!r}",
                expected="a logged name, 'collection.name', or a clock counter (" + ", ".join(CLOCK_FIELDS) + ")",
                received=f"{key!r}; the logged names, closest first: {close[:12]}",
                fix=f"use one of the logged names{', e.g. ' + repr(close[0]) if close else ''}"))

    def names(self) -> dict[str, list[str]]:
        """Every entry name seen, by collection, in order of first appearance.

        Example:
            >>> from gyre import History
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.names()
            {'metrics': ['a']}
        """
        seen: dict[str, dict[str, None]] = {}
        for block, _ in self._host_parts():
            for collection, name in block.entries:
                seen.setdefault(collection, {}).setdefault(name, None)
        return {c: list(v) for c, v in seen.items()}

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per record: the clock counters, then every entry by its bare name, or as
        ``collection.name`` when another collection uses the name.

        Example:
            >>> from gyre import History
            >>> h = History(); h.commit(Elapsed(steps=3), Logs().add_metric("a", 1))
            >>> h.to_records()[0]["steps"], h.to_records()[0]["a"]
            (3, 1)
        """
        owners = Counter(chain.from_iterable(self.names().values()))
        rows = []
        for record in self:
            row: dict[str, Any] = record.elapsed.to_dict()
            for collection, name, value in record.logs.entries():
                row[name if owners[name] == 1 and name not in row else f"{collection}.{name}"] = to_python(value)
            rows.append(row)
        return rows

    def to_csv(self, path: str) -> None:
        """Writes :meth:`to_records` as CSV (scalar entries only), creating the file's folder.

        Example:
            >>> import tempfile, os
            >>> from gyre import History
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1))
            >>> tmp = tempfile.TemporaryDirectory(); p = os.path.join(tmp.name, "h.csv"); h.to_csv(p)
            >>> open(p).read().splitlines()[0]
            'steps,samples,epochs,step_in_epoch,time,date,a'
            >>> tmp.cleanup()
        """
        import csv

        rows = [{k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))} for row in self.to_records()]
        columns = dict.fromkeys(chain.from_iterable(rows))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows(rows)

    def plot(self, path: str | None = None, keys: Sequence[str | Sequence[str]] | None = None, *, x: str = "steps") -> Any:
        """Plots entries against the clock counter ``x`` with matplotlib; returns the figure.

        ``keys``: one panel per key or per nested group (``[["loss", "loss_test"], ["acc"]]``); by
        default every scalar entry, ``name_<suffix>`` on ``name``'s panel. Saved to ``path`` (which
        needs an extension; its folder is created) without pyplot, leaving the backend alone;
        ``path=None`` makes a pyplot figure for ``plt.show()``. A key no record holds raises.

        Example:
            >>> import tempfile, os
            >>> from gyre import History
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
        # a figure to save is made without pyplot: the user's backend and figures are left alone
        if path is None:
            make = require("matplotlib.pyplot", "History.plot", extra="plot").figure
        else:
            make = require("matplotlib.figure", "History.plot", extra="plot").Figure
        fig = make(figsize=(5 * max(len(groups), 1), 3.6))
        axes = list(fig.subplots(1, max(len(groups), 1), squeeze=False)[0])
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
        return fig


def _not_a_clock(elapsed: Any) -> None:
    raise TypeError(explain(
        "History.commit needs the step's clock",
        expected="a gyre.Elapsed (what the loop passes as elapsed)", received=describe(elapsed),
        fix="commit(elapsed, logs): pass the callback's elapsed, or gyre.Elapsed(steps=i)"))


def history(logs_list: Iterable[Any] | None = None, *, flush_every: int = 256, lag: int = 16) -> History:
    """A new :class:`History`: empty, or holding the records of ``logs_list``.

    ``logs_list`` holds ciclo's records (a dict per step of collections, the clock under
    ``"elapsed"`` as an :class:`~gyre.Elapsed` or a dict; without one, ``steps`` is the
    record's index) or gyre's own.

    Example:
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
            raise TypeError(explain(
                f"record {index} of the list given to history() is not a dict of collections",
                expected='{"metrics": {"loss": 0.5}, "elapsed": {"steps": 3}} (ciclo\'s records)',
                received=describe(record), fix="give one dict per step, each collection a dict of entries"))
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


def _extensionless(history: History, path: str) -> Exception:
    """The error for ``plot(path)`` whose path has no extension (matplotlib would add
    ``.png``): a KeyError when it reads like a series' name (``plot("loss")``)."""
    names = [n for ns in history.names().values() for n in ns]
    near = path if path in names else closest(path, names)
    if near is None:
        return ValueError(
            explain(f"History.plot: the file {path!r} has no extension", received=repr(path),
                    expected="a file name ending in the format, e.g. 'curves.png', '.pdf' or '.svg'",
                    fix=f"history.plot({path + '.png'!r})")
        )
    return ExplainedKeyError(explain(
        "History.plot(path, keys): the first argument is the file to write, "
        + (f"and {path!r} is the name of a series" if near == path else
        f"and no series is named {path!r}." + suggest(path, names)),
        expected="a file name with an extension first, the series to draw in keys=",
        received=f"plot({path!r}), which would write {path + '.png'!r}",
        fix=f"history.plot('curves.png', keys=[{near!r}])"))


def _plot_groups(history: History, keys: Sequence[str | Sequence[str]] | None) -> list[list[str]]:
    if keys is not None:
        return [[k] if isinstance(k, str) else list(k) for k in keys]
    by_collection = {c: ns for c, ns in history.names().items() if c != "outputs"}
    owners = Counter(chain.from_iterable(by_collection.values()))
    groups: dict[str, list[str]] = {}
    for collection in resolution_order(by_collection):  # a name of several collections: once per collection
        for name in by_collection[collection]:
            name = name if owners[name] == 1 else f"{collection}.{name}"
            groups.setdefault(next((b for b in groups if name.startswith(b + "_")), name), []).append(name)
    return list(groups.values())

