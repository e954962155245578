"""Records on the host, stored by column: what :class:`~gyre.History` keeps once values moved.

A :class:`Block` holds the records of one batched transfer: their clocks as numpy columns, and
their logs grouped by structure (which entries a record holds), one host column per entry.
Nothing in a block is a per-record Python object, so a long history neither grows the heap
the garbage collector walks nor costs a collection per few hundred steps; :class:`Record`
objects are built only when someone asks for them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from gyre.core._clock import _FIELDS as CLOCK_FIELDS
from gyre.core._clock import Elapsed
from gyre.core._errors import ExplainedKeyError, explain
from gyre.core._host import to_python
from gyre.core._logs import Logs, Shape, unflatten_logs

_clock_fields = attrgetter(*CLOCK_FIELDS)

#: Where a key is found in one structure: ("clock", field) or ("entry", column), or None.
Place = tuple[str, int] | None


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
        """``"metrics" in record``: a collection of the record, or ``"elapsed"`` (as a
        ciclo record, a dict, answers).

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


def place(shape: Shape, key: str) -> Place:
    """Where ``key`` is found in records of structure ``shape`` (see ``History.collect``).

    Example:
        >>> place((("losses", ("loss",)), ("metrics", ("acc",))), "acc")
        ('entry', 1)
        >>> place((("metrics", ("acc",)),), "steps"), place((), "nope")
        (('clock', 0), None)
    """
    if key.startswith("elapsed."):
        name = key[len("elapsed.") :]
        return ("clock", CLOCK_FIELDS.index(name)) if name in CLOCK_FIELDS else None
    width = sum(len(names) for _, names in shape)
    found, index = unflatten_logs(shape, range(width)).lookup(key)
    if found:
        return ("entry", index)
    if key in CLOCK_FIELDS:
        return ("clock", CLOCK_FIELDS.index(key))
    return None


class Group(NamedTuple):
    """The records of a block that share one structure: their positions and host columns."""

    shape: Shape
    rows: np.ndarray  # positions in the block, increasing
    columns: list[Any]  # one per entry: a numpy array (a row per record) or a list

    @classmethod
    def of(cls, shape: Shape, rows: Sequence[int], columns: list[Any]) -> Group:
        """A group from its rows as a list. Example: ``Group.of((), [0, 1], [])``."""
        return cls(shape, np.asarray(rows, dtype=np.int64), columns)


class Block(NamedTuple):
    """Records moved to the host together (see the module docstring).

    Example:
        >>> b = Block.build([Elapsed(steps=0), Elapsed(steps=1)], [None, 8],
        ...                 [Group((("losses", ("loss",)),), np.arange(2), [np.array([2., 1.])])])
        >>> [(r.elapsed.steps, float(r.logs.losses.loss), r.batch_size) for r in b.records()]
        [(0, 2.0, None), (1, 1.0, 8)]
    """

    size: int
    clocks: list[Any]  # one packed column per Elapsed field
    batch_sizes: Any  # packed column (a list when some are None)
    groups: list[Group]

    @classmethod
    def build(cls, clocks: Sequence[Elapsed], batch_sizes: list[int | None], groups: list[Group]) -> Block:
        """A block from the clocks of its records, their batch sizes and their groups."""
        fields = zip(*map(_clock_fields, clocks), strict=True) if clocks else [[]] * len(CLOCK_FIELDS)
        return cls(len(clocks), [pack(list(f)) for f in fields], pack(batch_sizes), groups)

    def records(self) -> Iterator[Record]:
        """The records, in order (built now; nothing is kept). Example: see :class:`Block`."""
        logs: list[Any] = [None] * self.size
        for shape, rows, columns in self.groups:
            for k, i in enumerate(rows.tolist()):
                logs[i] = unflatten_logs(shape, [column[k] for column in columns])
        clocks = zip(*map(as_list, self.clocks), strict=True)
        sizes = as_list(self.batch_sizes)
        for clock, lg, size in zip(clocks, logs, sizes, strict=True):
            yield Record(Elapsed(*clock), lg, size)

    def record(self, i: int) -> Record:
        """Record ``i`` of the block.

        Example:
            >>> b = Block.build([Elapsed(steps=4)], [None], [Group.of((("metrics", ("m",)),), [0], [[7]])])
            >>> b.record(0).elapsed.steps, b.record(0).logs.metrics.m
            (4, 7)
        """
        for shape, rows, columns in self.groups:
            k = int(np.searchsorted(rows, i))
            if k < len(rows) and rows[k] == i:
                logs = unflatten_logs(shape, [column[k] for column in columns])
                break
        else:  # pragma: no cover - every row belongs to one group
            raise IndexError(i)
        clock = Elapsed(*(as_list(c[i : i + 1])[0] for c in self.clocks))
        return Record(clock, logs, as_list(self.batch_sizes[i : i + 1])[0])

    def collect(self, keys: Sequence[str]) -> list[list[Any]]:
        """The values of ``keys`` (one list per key) of the records that have all of them, in
        record order (see :meth:`gyre.History.collect` for how keys are found).

        Example:
            >>> b = Block.build([Elapsed(steps=0), Elapsed(steps=1)], [None, None],
            ...                 [Group.of((("metrics", ("m",)),), [1], [np.array([0.5])]),
            ...                  Group.of((), [0], [])])
            >>> b.collect(["steps", "m"]), b.collect(["steps"])
            ([[1], [0.5]], [[0, 1]])
        """
        found: list[tuple[np.ndarray, list[list[Any]]]] = []
        clocks: list[list[Any]] | None = None
        for shape, rows, columns in self.groups:
            places = [place(shape, key) for key in keys]
            if None in places:
                continue
            values = []
            for kind, index in places:  # type: ignore[misc]
                if kind == "clock":
                    if clocks is None:
                        clocks = [as_list(c) for c in self.clocks]
                    everything = clocks[index]
                    values.append([everything[i] for i in rows.tolist()])
                else:
                    values.append(_python_values(columns[index]))
            found.append((rows, values))
        if not found:
            return [[] for _ in keys]
        if len(found) == 1:
            return found[0][1]
        order = np.argsort(np.concatenate([rows for rows, _ in found]), kind="stable").tolist()
        merged = []
        for j in range(len(keys)):
            joined = [v for _, values in found for v in values[j]]
            merged.append([joined[i] for i in order])
        return merged


def _python_values(column: Any) -> list[Any]:
    """A host column's values as :func:`~gyre.core._host.to_python` gives them."""
    if isinstance(column, np.ndarray) and column.ndim == 1:
        return column.tolist()
    return [to_python(v) for v in column]
