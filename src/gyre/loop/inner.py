"""``inner_loop``: run a whole loop (an evaluation) as one callback of an outer loop.

The inner loop's history is reduced to one value per entry (``aggregation``), the names are
suffixed with ``_<name>`` (``accuracy`` becomes ``accuracy_test``) and the result is merged
into the outer step's logs. Reductions run on the device: nothing is read back here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax.numpy as jnp

from gyre.core.errors import describe, explain
from gyre.core.history import History
from gyre.core.logs import Logs

Reduction = str | Callable[[list[Any]], Any]
Aggregation = Reduction | Mapping[str, Reduction]

REDUCTIONS = ("last", "first", "mean", "sum", "min", "max")


def _check_reduction(reduction: Any) -> None:
    if callable(reduction) or reduction in REDUCTIONS:
        return
    raise ValueError(
        explain(
            f"unknown aggregation {reduction!r}",
            expected=f"one of {list(REDUCTIONS)}, a callable list -> value, or a dict "
            "{collection: aggregation}",
            received=describe(reduction),
            fix="e.g. aggregation='mean' or aggregation={'metrics': 'mean', 'stateful_metrics': 'last'}",
        )
    )


def check_aggregation(aggregation: Aggregation) -> None:
    """Raises a clear error for an aggregation that :func:`aggregate` would not understand.

    Example:
        >>> check_aggregation({"metrics": "mean"})
    """
    if isinstance(aggregation, Mapping):
        for reduction in aggregation.values():
            _check_reduction(reduction)
    else:
        _check_reduction(aggregation)


def _reduce(reduction: Reduction, values: list[Any], weights: list[int] | None) -> Any:
    if reduction == "last":
        return values[-1]
    if reduction == "first":
        return values[0]
    if callable(reduction):
        return reduction(values)
    stacked = jnp.stack([jnp.asarray(v) for v in values])
    if reduction == "mean":
        if weights is None:
            return jnp.mean(stacked, axis=0)
        w = jnp.asarray(weights, dtype=jnp.float32).reshape((-1,) + (1,) * (stacked.ndim - 1))
        return jnp.sum(stacked * w, axis=0) / jnp.sum(w)
    if reduction == "sum":
        return jnp.sum(stacked, axis=0)
    if reduction == "min":
        return jnp.min(stacked, axis=0)
    return jnp.max(stacked, axis=0)


def aggregate(history: History, aggregation: Aggregation = "last") -> Logs:
    """Reduces every entry of a history to one value, per collection.

    ``"mean"`` is weighted by the batch size of each record when the loop recorded it, so the
    mean of a per-batch accuracy over a test set with a short last batch is the accuracy of
    the whole set. A dict gives one aggregation per collection; collections it does not name
    use ``"last"``.

    Example:
        >>> from gyre.core.clock import Elapsed
        >>> h = History()
        >>> h.commit(Elapsed(), Logs().add_metric("acc", 1.0), batch_size=3)
        >>> h.commit(Elapsed(steps=1), Logs().add_metric("acc", 0.0), batch_size=1)
        >>> float(aggregate(h, "mean").metrics.acc), aggregate(h, "last").metrics.acc
        (0.75, 0.0)
    """
    check_aggregation(aggregation)
    values: dict[tuple[str, str], list[Any]] = {}
    weights: dict[tuple[str, str], list[int] | None] = {}
    for record in history:
        for collection, name, value in record.logs.entries():
            key = (collection, name)
            values.setdefault(key, []).append(value)
            w = weights.setdefault(key, [])
            if w is not None:
                if record.batch_size is None:
                    weights[key] = None
                else:
                    w.append(record.batch_size)
    out = Logs()
    for (collection, name), vals in values.items():
        if isinstance(aggregation, Mapping):
            reduction = aggregation.get(collection, "last")
        else:
            reduction = aggregation
        out.add_entry(collection, name, _reduce(reduction, vals, weights[(collection, name)]))
    return out


def suffixed(logs: Logs, name: str | None) -> Logs:
    """Every entry renamed ``<entry>_<name>`` (unchanged when ``name`` is None or empty).

    Example:
        >>> suffixed(Logs().add_metric("acc", 1), "test")
        Logs(metrics={'acc_test': 1})
    """
    if not name:
        return logs
    out = Logs()
    for collection, entry, value in logs.entries():
        out.add_entry(collection, f"{entry}_{name}", value)
    return out


class InnerLoop:
    """The callback :func:`inner_loop` returns."""

    def __init__(
        self,
        name: str | None,
        fn: Callable[[Any], tuple[Any, History, Any]],
        aggregation: Aggregation,
        output_state: bool,
    ) -> None:
        self.name = name
        self.fn = fn
        self.aggregation = aggregation
        self.output_state = output_state

    def __call__(self, state: Any) -> tuple[Logs, Any]:
        result = self.fn(state)
        if not (isinstance(result, Sequence) and len(result) == 3 and isinstance(result[1], History)):
            raise TypeError(
                explain(
                    f"the function of inner_loop({self.name!r}) must return what a loop returns",
                    expected="(state, history, elapsed), e.g. lambda state: gyre.test_loop(state, data)",
                    received=describe(result),
                    fix="return the result of gyre.loop / gyre.test_loop from the function",
                )
            )
        inner_state, inner_history, _ = result
        logs = suffixed(aggregate(inner_history, self.aggregation), self.name)
        return logs, (inner_state if self.output_state else None)


def inner_loop(
    name: str | None,
    fn: Callable[[Any], tuple[Any, History, Any]],
    *,
    aggregation: Aggregation = "last",
    output_state: bool = False,
) -> InnerLoop:
    """A callback that runs ``fn(state)`` (a whole loop) and logs its aggregated results.

    Args:
        name: suffix for the entry names (``accuracy`` becomes ``accuracy_<name>``); ``None``
            keeps the names.
        fn: ``state -> (state, history, elapsed)``, typically a call of :func:`gyre.test_loop`.
        aggregation: how each entry of the inner history becomes one value: ``"last"``,
            ``"first"``, ``"mean"`` (batch-size weighted), ``"sum"``, ``"min"``, ``"max"``, a
            callable ``list -> value``, or a dict ``{collection: aggregation}``.
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
    if name is not None and not isinstance(name, str):
        raise TypeError(
            explain(
                "inner_loop's name must be a string or None",
                expected="inner_loop('test', fn)",
                received=describe(name),
                fix="pass the suffix as the first argument",
            )
        )
    if not callable(fn):
        raise TypeError(
            explain(
                "inner_loop needs a function state -> (state, history, elapsed)",
                expected="e.g. lambda state: gyre.test_loop(state, test_data)",
                received=describe(fn),
                fix="wrap the inner loop in a function of the state",
            )
        )
    check_aggregation(aggregation)
    return InnerLoop(name, fn, aggregation, output_state)
