"""A history's records as runs of scalar rows, the form in which writers receive them.

:func:`gyre.write_to` hands a writer a few hundred records at a time, read from the history's
numpy columns (``gyre.wandb_logger`` reads them the same way). :func:`scalar_runs` turns them into :class:`ScalarRun` objects: consecutive
records that hold the same scalar entries, as one array of numbers (a row per record). A
writer can write a run with whole-array operations (``TensorBoardWriter`` encodes its events
this way); the others take it row by row (:func:`rows`).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from gyre.core._columns import Block as Columns
from gyre.core._columns import numeric_dtype


class ScalarRun(NamedTuple):
    """Consecutive records holding the same scalar entries.

    Attributes:
        names: the entries' names, in the record's order: the bare name, or
            ``collection.name`` when an earlier collection of the record took the bare name.
        steps: each record's step (int64).
        dates: each record's wall-clock time (POSIX seconds, float64): its clock's ``date``,
            or the time the runs were built for a record whose clock has none (``date == 0``).
        values: the numbers, float64, a row per record and a column per name.
    """

    names: tuple[str, ...]
    steps: np.ndarray
    dates: np.ndarray
    values: np.ndarray


def is_number(value: Any) -> bool:
    """A real number: a Python one (``bool`` included), or a 0-d numeric array (numpy
    scalars and JAX arrays included, read by their ``shape`` and ``dtype`` only).

    Example:
        >>> import jax.numpy as jnp
        >>> is_number(2), is_number(jnp.bfloat16(0.5)), is_number(np.ones(2)), is_number("1")
        (True, True, False, False)
    """
    if isinstance(value, numbers.Real):
        return True
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    return shape == () and dtype is not None and numeric_dtype(dtype)


def _column(count: int, rows: np.ndarray, values: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """An entry as (present, numbers): which records hold a scalar number, and the numbers
    (NaN elsewhere); ``None`` when no record does (arrays, strings)."""
    present = np.zeros(count, bool)
    numbers = np.full(count, np.nan)
    if isinstance(values, np.ndarray) and numeric_dtype(values.dtype):
        if values.ndim != 1:
            return None  # an array per record
        present[rows] = True
        numbers[rows] = values
        return present, numbers
    found = [
        (int(r), float(v)) for r, v in zip(rows, values, strict=True) if is_number(v)
    ]
    if not found:
        return None
    where = [r for r, _ in found]
    present[where] = True
    numbers[where] = [x for _, x in found]
    return present, numbers


def _names(keys: list[tuple[str, str]]) -> tuple[str, ...]:
    taken: list[str] = []
    for collection, name in keys:
        taken.append(f"{collection}.{name}" if name in taken else name)
    return tuple(taken)


def scalar_runs(columns: Columns) -> list[ScalarRun]:
    """The scalar numbers of ``columns`` as runs of records that hold the same entries, in
    record order; records without a scalar number are left out.

    Example:
        >>> import gyre
        >>> h = gyre.history([{"losses": {"loss": 1.0}}, {"losses": {"loss": 0.5}},
        ...                   {"losses": {"loss": 0.25}, "stateful_metrics": {"loss": 2.0, "acc": 0.5}}])
        >>> [(r.names, r.steps.tolist(), r.values.tolist()) for r in scalar_runs(h.read(0))]
        [(('loss',), [0, 1], [[1.0], [0.5]]), (('loss', 'stateful_metrics.loss', 'acc'), [2], [[0.25, 2.0, 0.5]])]
    """
    count = columns.count
    if not count:
        return []
    keys, present, numbers = [], [], []
    for key, (rows, values) in columns.entries.items():
        found = _column(count, rows, values)
        if found is not None:
            keys.append(key)
            present.append(found[0])
            numbers.append(found[1])
    if not keys:
        return []
    held = np.stack(present, axis=1)
    table = np.stack(numbers, axis=1)
    steps = np.asarray(columns.clocks["steps"], np.int64)
    dates = np.asarray(columns.clocks["date"], np.float64)
    dates = np.where(dates > 0, dates, time.time())  # an undated clock (a ciclo history): now
    cuts = np.flatnonzero((held[1:] != held[:-1]).any(axis=1)) + 1
    out = []
    for start, stop in zip([0, *cuts.tolist()], [*cuts.tolist(), count], strict=True):
        which = np.flatnonzero(held[start])
        if not len(which):
            continue
        out.append(
            ScalarRun(
                _names([keys[k] for k in which]),
                steps[start:stop],
                dates[start:stop],
                table[start:stop][:, which],
            )
        )
    return out


def rows(run: ScalarRun) -> Iterator[tuple[int, dict[str, float]]]:
    """A run's records one by one, as ``(step, {name: number})``.

    Example:
        >>> run = ScalarRun(("loss",), np.array([3]), np.zeros(1), np.array([[0.5]]))
        >>> list(rows(run))
        [(3, {'loss': 0.5})]
    """
    names = run.names
    for step, values in zip(run.steps.tolist(), run.values.tolist(), strict=True):
        yield step, dict(zip(names, values, strict=True))


def thinned(
    runs: list[ScalarRun], every: int, seen: frozenset[str], *, keep_last: bool = False
) -> tuple[list[ScalarRun], frozenset[str]]:
    """The rows of ``runs`` to write when only every ``every``-th step is: those at steps that
    are multiples of ``every``, the first row that holds a name the previous written row did
    not (an evaluation's entries, a metric logged now and then), and with ``keep_last`` the
    last row (the loop's end). ``seen`` is the names of the previous written row; returns the
    rows and the names of the last one written.

    Example:
        >>> run = ScalarRun(("loss",), np.arange(5), np.zeros(5), np.arange(5.0)[:, None])
        >>> test = ScalarRun(("loss", "loss_test"), np.array([5]), np.zeros(1), np.ones((1, 2)))
        >>> after = ScalarRun(("loss",), np.arange(6, 9), np.zeros(3), np.zeros((3, 1)))
        >>> rows_left, seen = thinned([run, test, after], 3, frozenset(), keep_last=True)
        >>> [r.steps.tolist() for r in rows_left], sorted(seen)
        ([[0, 3], [5], [6, 8]], ['loss'])
    """
    out = []
    for i, run in enumerate(runs):
        keep = run.steps % every == 0
        if not seen.issuperset(run.names):
            keep[0] = True
        if keep_last and i == len(runs) - 1:
            keep[-1] = True
        if keep.any():
            out.append(ScalarRun(run.names, run.steps[keep], run.dates[keep], run.values[keep]))
            seen = frozenset(run.names)
    return out, seen
