"""``inner_loop``: run a whole loop (an evaluation) as one callback of an outer loop, its history
reduced on the device to one suffixed value per entry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._checks import instance
from gyre.core._errors import describe, explain, flag, keywords_checked
from gyre.core._history import History, history
from gyre.core._logs import Logs
from gyre.core.metrics import get_reduction
from gyre.engine._tasks import LoopElement

Reduction = str | Callable[[list[Any]], Any]
Aggregation = Reduction | Mapping[str, Reduction]

REDUCTIONS = ("last", "first", "mean", "sum", "min", "max", "std", "concat")

#: (record indices, column): a column is a stacked array (a row per record) or a list.
Piece = tuple[np.ndarray, Any]


def check_aggregation(aggregation: Aggregation) -> None:
    """Raises a clear error for an aggregation that :func:`aggregate` would not understand."""
    for reduction in aggregation.values() if isinstance(aggregation, Mapping) else (aggregation,):
        if not (callable(reduction) or reduction in REDUCTIONS):
            raise ValueError(explain(
                f"unknown aggregation {reduction!r}",
                expected=f"one of {list(REDUCTIONS)}, a callable list -> value, or a dict {{collection: aggregation}}",
                received=describe(reduction),
                fix="e.g. aggregation='mean' or aggregation={'metrics': 'mean', 'stateful_metrics': 'last'}"))


def _values(pieces: Sequence[Piece]) -> list[Any]:
    """Every record's value, in record order."""
    rows = np.concatenate([r for r, _ in pieces])
    values = [column[k] for _, column in pieces for k in range(len(column))]
    return [values[i] for i in np.argsort(rows, kind="stable")]


def _pick(pieces: Sequence[Piece], last: bool) -> Any:
    rows, column = max(pieces, key=lambda p: p[0][-1]) if last else min(pieces, key=lambda p: p[0][0])
    return column[-1 if last else 0]


def _stacked(parts: list[Any]) -> Any:
    """The records' columns as one array, a row per record (inside the compiled reduction)."""
    arrays = [jnp.stack(c) if isinstance(c, list) else jnp.asarray(c) for c in parts]
    return jnp.concatenate(arrays) if len(arrays) > 1 else arrays[0]


@functools.cache
def _compiled_reduction(reduction: str) -> Callable[[list[Any], Any], Any]:
    """``reduction`` over stacked columns as one compiled call (once per reduction and row count)."""
    metric = get_reduction(reduction)
    return jax.jit(lambda parts, counts: metric.from_stacked(_stacked(parts), counts).compute())


def _row_shapes(pieces: Sequence[Piece]) -> set[tuple[int, ...]]:
    """The shapes of the entry's values, one per record (read from shapes, not values)."""
    shapes: set[tuple[int, ...]] = set()
    for _, column in pieces:
        if isinstance(column, list):
            shapes.update(tuple(np.shape(v)) for v in column)
        else:
            shapes.add(tuple(np.shape(column))[1:])
    return shapes


def _reduced(reduction: str, pieces: Sequence[Piece], weights: np.ndarray | None, name: str) -> Any:
    """The entry's records stacked on the device and reduced, in one compiled call."""
    shapes = _row_shapes(pieces)
    if len(shapes) > 1:
        raise ValueError(explain(
            f"entry {name} cannot be reduced: its values have different shapes",
            expected="values of one shape across the inner loop's steps (a mean, a sum...)",
            received=f"values of shapes {sorted(shapes)}",
            fix="aggregate it with 'last', 'first' or 'concat', or pad the short last batch"))
    rows = np.concatenate([r for r, _ in pieces])
    counts = None if weights is None or reduction != "mean" else weights[rows]
    return _compiled_reduction(reduction)([c for _, c in pieces], counts)


def reduce(reduction: Reduction, pieces: Sequence[Piece], weights: np.ndarray | None, name: str = "") -> Any:
    """One entry's records reduced to one value, on the device."""
    if reduction in ("last", "first"):
        return _pick(pieces, reduction == "last")
    if callable(reduction):
        return reduction(_values(pieces))
    if reduction == "concat":
        return jnp.concatenate([jnp.asarray(v) for v in _values(pieces)])
    return _reduced(reduction, pieces, weights, name)


def aggregate(history: History, aggregation: Aggregation = "last") -> Logs:
    """Reduces every entry of a history to one value, per collection, on the device.

    ``"mean"`` is weighted by each record's batch size. A dict gives one aggregation per
    collection; collections it does not name use ``"last"``.

    Example:
        >>> from gyre.core._clock import Elapsed
        >>> h = History()
        >>> h.commit(Elapsed(), Logs().add_metric("acc", 1.0), batch_size=3)
        >>> h.commit(Elapsed(steps=1), Logs().add_metric("acc", 0.0), batch_size=1)
        >>> float(aggregate(h, "mean").metrics.acc), aggregate(h, "last").metrics.acc
        (0.75, 0.0)
    """
    check_aggregation(aggregation)
    sizes = history.batch_sizes()
    weights = None if not sizes or None in sizes else np.asarray(sizes, np.float32)
    pieces: dict[tuple[str, str], list[Piece]] = {}
    for start, block in history.segments():
        for key, (rows, column) in block.entries.items():
            pieces.setdefault(key, []).append((start + rows, column))
    out = Logs()
    for (collection, name), found in sorted(pieces.items(), key=lambda kv: min(r[0] for r, _ in kv[1])):
        reduction = aggregation.get(collection, "last") if isinstance(aggregation, Mapping) else aggregation
        out.add_entry(collection, name, reduce(reduction, found, weights, f"{collection}.{name}"))
    return out


def suffixed(logs: Logs, name: str | None) -> Logs:
    """Every entry renamed ``<entry>_<name>`` (unchanged when ``name`` is None or empty)."""
    if not name:
        return logs
    out = Logs()
    for collection, entry, value in logs.entries():
        out.add_entry(collection, f"{entry}_{name}", value)
    return out


class InnerLoop(LoopElement):
    """A callback that runs ``fn(state)`` (a whole loop) and logs its aggregated results.

    Args:
        name: suffix for the entry names (``accuracy`` becomes ``accuracy_<name>``); ``None``
            keeps the names; ciclo's ``inner_loop(fn)`` works too. An empty name, or a name the
            outer step already logged, is refused.
        fn: ``state -> (state, history, elapsed)``, typically a :func:`gyre.test_loop` call.
        aggregation: ``"last"``, ``"first"``, ``"mean"`` (batch-size weighted), ``"sum"``,
            ``"min"``, ``"max"``, ``"std"``, ``"concat"`` (along the first axis), a callable
            ``list -> value``, or a dict ``{collection: aggregation}``.
        output_state: pass the inner loop's final state on (default: the outer state is kept).

    Example:
        >>> import gyre
        >>> def evaluate(state):
        ...     step = lambda state, batch: gyre.logs().add_metric("acc", batch)
        ...     return gyre.loop(state, [1.0, 0.0, 1.0, 1.0], {gyre.every(1): step})
        >>> logs, _ = gyre.inner_loop("test", evaluate, aggregation="mean")(None)
        >>> float(logs.metrics.acc_test)
        0.75
    """

    @keywords_checked
    def __init__(
        self,
        name: str | None | Callable[[Any], tuple[Any, History, Any]],
        fn: Callable[[Any], tuple[Any, History, Any]] | None = None,
        *,
        aggregation: Aggregation = "last",
        output_state: bool = False,
    ) -> None:
        if fn is None and callable(name) and not isinstance(name, str):
            name, fn = None, name
        if name == "":
            raise ValueError(explain(
                "inner_loop's name must not be empty (train_loop's test_name is this name)",
                expected="a suffix such as 'test' (accuracy becomes accuracy_test), or None to "
                "keep the names in an outer loop that logs none of them",
                received="''", fix="inner_loop('test', fn), or train_loop(..., test_name='test')"))
        instance(name, "inner_loop's name", str, none=True, kind="a string", expected="inner_loop('test', fn)",
                 fix="pass the suffix as the first argument")
        instance(fn, "inner_loop's function", Callable, problem="inner_loop needs a function state -> (state, history, "
                 "elapsed)", expected="e.g. lambda state: gyre.test_loop(state, test_data)",
                 fix="wrap the inner loop in a function of the state")
        check_aggregation(aggregation)
        self.name, self.fn, self.aggregation = name, fn, aggregation
        self.output_state = flag(output_state, "output_state", "inner_loop")

    def __call__(self, state: Any, logs: Logs | None = None) -> tuple[Logs, Any]:
        result = self.fn(state)
        records = result[1] if isinstance(result, Sequence) and len(result) == 3 else None
        if isinstance(records, list):  # ciclo's History is a list of log dicts
            records = history(records)
        if not isinstance(records, History):
            raise TypeError(explain(
                f"the function of inner_loop({self.name!r}) must return what a loop returns",
                expected="(state, history, elapsed), e.g. lambda state: gyre.test_loop(state, data); "
                "the history may also be a list of ciclo's records ({collection: {entry: value}})",
                received=describe(result), fix="return the result of gyre.loop / gyre.test_loop from the function"))
        out = suffixed(aggregate(records, self.aggregation), self.name)
        if logs:
            self._check_clash(out, logs)
        return out, (result[0] if self.output_state else None)

    def _check_clash(self, out: Logs, logs: Logs) -> None:
        """Refuses entries whose names the outer step already logged (the two series would mix)."""
        taken = {name: collection for collection, name, _ in logs.entries()}
        clash = [f"{c}.{n} (the step's {taken[n]}.{n})" for c, n, _ in out.entries() if n in taken]
        if clash:
            raise ValueError(explain(
                f"inner_loop({self.name!r}) logs {clash[0]}: a name the outer step already "
                "logged, so the two series would mix in the history",
                expected="evaluation entries whose names no other callback of the step logs",
                received=", ".join(clash),
                fix="rename the outer step's entry, or give the evaluation another suffix: "
                "train_loop(..., test_name='val'), gyre.inner_loop('val', ...)"))

    def __repr__(self) -> str:
        return f"inner_loop({self.name!r})"


inner_loop = InnerLoop  # ciclo's name: one class, two spellings
