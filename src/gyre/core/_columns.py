"""Records kept by column: :class:`Block`, the one shape in which a history holds and hands out
its records, and the :class:`Record` view built from it when someone asks for one.

A block holds consecutive records: one column per clock counter, their batch sizes, and one
column per entry (the rows of the records that hold it, and their values: a numpy array with
a row per record, or a list). Nothing in a block is a per-record Python object, so a long
history neither grows the heap the garbage collector walks nor costs a collection per few
hundred steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from gyre.core._clock import _FIELDS as CLOCK_FIELDS
from gyre.core._clock import Elapsed
from gyre.core._errors import ExplainedKeyError, explain
from gyre.core._host import to_python
from gyre.core._logs import COLLECTIONS, Collection, Logs

Key = tuple[str, str]
MISSING = object()  #: where a record has no value for a key (Block.lookup)


class Record(NamedTuple):
    """One committed step: the clock at the step, its logs, and its batch size (or None).

    A record also reads like ciclo's (a dict of collections plus ``"elapsed"``):
    ``record["metrics"]["accuracy_test"]``, ``record["elapsed"]["steps"]``.

    Example:
        >>> r = Record(Elapsed(steps=3), Logs().add_metric("acc", 0.5))
        >>> r["metrics"]["acc"], r["elapsed"]["steps"], r.keys()
        (0.5, 3, ['elapsed', 'metrics'])
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
            explain(
                f"this record has no collection {key!r}",
                expected=f"one of {self.keys()}",
                received=repr(key),
                fix="index a collection, then an entry: record['metrics']['accuracy']",
            )
        )

    def keys(self) -> list[str]:
        """``"elapsed"`` and the record's collections."""
        return ["elapsed", *self.logs]

    def __contains__(self, key: object) -> bool:
        """``"metrics" in record``: a collection of the record, or ``"elapsed"``.

        Example:
            >>> r = Record(Elapsed(), Logs().add_metric("acc", 0.5))
            >>> "metrics" in r, "elapsed" in r, "losses" in r
            (True, True, False)
        """
        return key == "elapsed" or key in self.logs

    def get(self, key: str, default: Any = None) -> Any:
        """``record[key]``, or ``default`` when the record has no such collection.

        Example:
            >>> Record(Elapsed(), Logs()).get("metrics", {})
            {}
        """
        return self[key] if key in self else default


def numeric_dtype(dtype: Any) -> bool:
    """Whether values of ``dtype`` are real numbers: bools, integers and floats, the low
    precision ones included (bfloat16, the float8 kinds, int4: numpy sees most of them as
    kind ``'V'``). Complex numbers, strings, objects and PRNG keys are not.

    Example:
        >>> numeric_dtype(jnp.bfloat16), numeric_dtype(np.float16), numeric_dtype(np.complex64)
        (True, True, False)
    """
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # an extended dtype (a PRNG key)
        return False
    return dtype.kind in "biuf" or (dtype.kind == "V" and bool(jnp.issubdtype(dtype, jnp.number)))


def pack(values: list[Any]) -> Any:
    """A list of numbers as a numpy column (a list when the values are not all numbers).

    Example:
        >>> pack([1, 2, 3]).dtype.kind, pack([1, None])
        ('i', [1, None])
    """
    if not values:
        return values
    try:
        column = np.asarray(values)
    except (TypeError, ValueError):
        return values
    return column if column.ndim == 1 and numeric_dtype(column.dtype) else values


def as_list(column: Any) -> list[Any]:
    """A packed column as a list of Python values (numbers stay exact).

    Example:
        >>> as_list(pack([1, 2])), as_list([None])
        ([1, 2], [None])
    """
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


def python_values(column: Any) -> list[Any]:
    """A host column's values as Python numbers (arrays per row stay numpy arrays).

    Example:
        >>> python_values(np.array([1.5, 2.0])), python_values([np.float32(1.0), "a"])
        ([1.5, 2.0], [1.0, 'a'])
    """
    if isinstance(column, np.ndarray) and column.ndim == 1:
        return column.tolist()
    return [to_python(v) for v in column]


def numbers(values: Any) -> Any:
    """A column of scalar numbers as a numpy array (Python numbers come as a list); any
    other column as it is.

    Example:
        >>> numbers([1.5, 2.0]).tolist(), numbers(["a"])
        ([1.5, 2.0], ['a'])
    """
    if isinstance(values, list) and values and all(np.ndim(v) == 0 and np.isreal(v) for v in values):
        try:
            column = np.asarray(values)
        except (TypeError, ValueError):
            return values
        return column if numeric_dtype(column.dtype) else values
    return values


def _order(key: Key) -> tuple[int, str]:
    """Where a collection comes when a bare name is looked up (see ``resolution_order``)."""
    collection = key[0]
    return (COLLECTIONS.index(collection), "") if collection in COLLECTIONS else (len(COLLECTIONS), collection)


class Block(NamedTuple):
    """Consecutive records of a history, by column (see the module docstring).

    Example:
        >>> b = Block(2, {"steps": np.array([0, 1])}, {("losses", "loss"): (np.array([1]), np.array([2.0]))})
        >>> b.count, b.collect(["steps", "loss"])
        (2, [[1], [2.0]])
    """

    count: int
    clocks: dict[str, Any]  # one column per clock counter
    entries: dict[Key, tuple[np.ndarray, Any]]  # rows holding the entry (increasing), values
    sizes: Sequence[int | None] = ()  # each record's batch size
    #: the entries of the records whose order differs from the entries' order, in theirs
    orders: dict[int, tuple[Key, ...]] | None = None

    def take(self, start: int, stop: int) -> Block:
        """Records ``start`` to ``stop - 1`` of a host block.

        Example:
            >>> b = Block(3, {"steps": np.arange(3)}, {("m", "a"): (np.array([0, 2]), [5, 6])}, [1, 2, 3])
            >>> part = b.take(1, 3); part.count, part.entries[("m", "a")][0].tolist(), part.sizes
            (2, [1], [2, 3])
        """
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
            >>> b = Block(1, {f: np.zeros(1, int) for f in ("steps", "samples", "epochs",
            ...     "step_in_epoch", "time", "date")}, {("metrics", "m"): (np.array([0]), [7])}, [None])
            >>> [(r.elapsed.steps, r.logs.metrics.m) for r in b.records()]
            [(0, 7)]
        """
        logs = [Logs() for _ in range(self.count)]
        for (collection, name), (rows, values) in self.entries.items():
            for k, i in enumerate(rows.tolist()):
                found = logs[i].get(collection)
                if found is None:
                    found = logs[i][collection] = Collection()
                found[name] = values[k]
        for i, keys in (self.orders or {}).items():
            logs[i] = _reordered(logs[i], keys)
        clocks = zip(*[as_list(self.clocks[f]) for f in CLOCK_FIELDS], strict=True)
        for clock, lg, size in zip(clocks, logs, self.sizes, strict=True):
            yield Record(Elapsed(*clock), lg, size)

    def lookup(self, key: str) -> list[Any]:
        """The value of ``key`` in each record (a missing sentinel where it has none), found
        as :meth:`gyre.History.collect` finds keys: a bare name in the first collection that
        holds it in that record, else a clock counter of that name."""
        out: list[Any] = [MISSING] * self.count
        if key.startswith("elapsed."):
            field = key[len("elapsed.") :]
            return as_list(self.clocks[field]) if field in CLOCK_FIELDS else out
        collection, dot, name = key.partition(".")
        keys = [(collection, name)] if dot and (collection, name) in self.entries else []
        keys += sorted((k for k in self.entries if k[1] == key), key=_order)
        for found in keys:
            rows, values = self.entries[found]
            for i, value in zip(rows.tolist(), python_values(values), strict=True):
                if out[i] is MISSING:
                    out[i] = value
        if key in CLOCK_FIELDS:
            clock = as_list(self.clocks[key])
            out = [clock[i] if v is MISSING else v for i, v in enumerate(out)]
        return out

    def collect(self, keys: Sequence[str]) -> list[list[Any]]:
        """The values of ``keys`` (one list per key) of the records that have all of them, in
        record order (see :meth:`gyre.History.collect` for how keys are found). Example: see
        :class:`Block`."""
        columns = [self.lookup(key) for key in keys]
        keep = [i for i in range(self.count) if all(c[i] is not MISSING for c in columns)]
        return [[c[i] for i in keep] for c in columns]


def _reordered(logs: Logs, keys: Sequence[Key]) -> Logs:
    out = Logs()
    for collection, name in keys:
        found = out.get(collection)
        if found is None:
            found = out[collection] = Collection()
        found[name] = logs[collection][name]
    return out


def join(blocks: Sequence[Block]) -> Block:
    """One block of consecutive host blocks.

    Example:
        >>> a = Block(1, {"steps": np.array([0])}, {("m", "x"): (np.array([0]), np.array([1.0]))}, [2])
        >>> b = join([a, a]); b.count, b.entries[("m", "x")][0].tolist(), b.clocks["steps"].tolist()
        (2, [0, 1], [0, 0])
    """
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
    fields = blocks[0].clocks if blocks else {f: () for f in CLOCK_FIELDS}
    return Block(
        offset,
        {f: np.concatenate([np.asarray(b.clocks[f]) for b in blocks]) for f in fields},
        {key: (np.concatenate(where), _concat(found)) for key, (where, found) in entries.items()},
        [s for b in blocks for s in b.sizes],
        orders or None,
    )


def _concat(parts: list[Any]) -> Any:
    """Columns one after the other: a numpy array when every part is one (of the same
    trailing shape), else a list."""
    if all(isinstance(p, np.ndarray) for p in parts) and len({p.shape[1:] for p in parts}) == 1:
        return np.concatenate(parts)
    return [v for p in parts for v in p]
