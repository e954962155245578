"""Metric objects for :func:`~gyre.create_flax_state` and the managed API, on
:mod:`gyre.core.metrics`, and the protocols gyre accepts by duck typing: update-style
(``reset``/``update(**keywords)``/``compute``, jax_metrics') and CLU-style
(``empty``/``from_model_output``/``merge``/``compute``), as objects or classes. Each gets the
:data:`~gyre.frameworks.KEYWORDS` it declares; a ``compute()`` dict logs one entry per key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from gyre.core import metrics as core
from gyre.core._errors import describe, explain
from gyre.frameworks import _calling as calling


def _batch_weight(preds: Any, sample_weight: Any) -> jax.Array:
    """A batch's weight: the sum of its sample weights, else its size (1 without preds)."""
    if sample_weight is not None:
        return jnp.sum(jnp.asarray(sample_weight, jnp.float32))
    leaves = jax.tree_util.tree_leaves(preds)
    if leaves and jnp.ndim(leaves[0]) > 0:
        return jnp.float32(jnp.shape(leaves[0])[0])
    return jnp.float32(1.0)


class _BatchUpdates:
    def batch_updates(self, **keywords: Any) -> Any:
        """``reset().update(...)`` (jax_metrics' name)."""
        return self.reset().update(**keywords)  # type: ignore[attr-defined]


class Accuracy(_BatchUpdates, struct.PyTreeNode):
    """Running accuracy of ``argmax(preds)`` (or ``logits=``) against integer or one-hot ``labels=``
    / ``target=``.

    Weighted by ``sample_weight``; per-position labels count every position.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Accuracy().update(preds=jnp.array([[0.0, 1.0], [1.0, 0.0]]), labels=jnp.array([1, 1]))
        >>> m = m.update(preds=jnp.array([[0.0, 1.0]]), target=jnp.array([1]))
        >>> round(float(m.compute()), 4), float(m.correct), float(m.total)
        (0.6667, 2.0, 3.0)
    """

    hits: core.Mean = struct.field(default_factory=core.Mean.empty)

    @property
    def correct(self) -> jax.Array:
        """The (weighted) number of correct predictions so far."""
        return self.hits.total

    @property
    def total(self) -> jax.Array:
        """The (weighted) number of predictions so far."""
        return self.hits.count

    @classmethod
    def empty(cls) -> Accuracy:
        """An empty accuracy (CLU's name for ``Accuracy()``)."""
        return cls()

    def reset(self) -> Accuracy:
        """An empty accuracy."""
        return Accuracy()

    def update(
        self,
        *,
        preds: Any = None,
        labels: Any = None,
        target: Any = None,
        logits: Any = None,
        sample_weight: Any = None,
        **_: Any,
    ) -> Accuracy:
        """This accuracy with one batch added."""
        preds = logits if preds is None else preds
        labels = target if labels is None else labels
        if preds is None or labels is None:
            raise TypeError(explain(
                "Accuracy.update needs predictions and labels",
                expected="update(preds=..., labels=...) (or logits=, target=)",
                received=f"preds={describe(preds)}, labels={describe(labels)}",
                fix="give the batch labels: a batch (x, y) in create_flax_state"))
        preds, labels = jnp.asarray(preds), jnp.asarray(labels)
        if labels.ndim == preds.ndim and preds.ndim >= 2:  # one-hot
            labels = jnp.argmax(labels, axis=-1)
        hits = (jnp.argmax(preds, axis=-1) == labels).astype(jnp.float32)
        counts = None
        if sample_weight is not None:
            w = jnp.asarray(sample_weight, jnp.float32)
            counts = jnp.broadcast_to(w.reshape(w.shape + (1,) * (hits.ndim - w.ndim)), hits.shape).reshape(-1)
        return Accuracy(hits=self.hits.merge(core.Mean.from_stacked(hits.reshape(-1), counts)))

    def merge(self, other: Accuracy) -> Accuracy:
        """Both accuracies' predictions together."""
        return Accuracy(hits=self.hits.merge(other.hits))

    def compute(self) -> jax.Array:
        """Correct over total (0 before any update)."""
        return self.hits.compute()


class Mean(_BatchUpdates, struct.PyTreeNode):
    """Running mean of a logged value (default ``"loss"``), weighted by the batch's sample weight,
    else its size.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Mean("loss").update(preds=jnp.zeros((2, 1)), labels=None, loss=1.0)
        >>> float(m.update(preds=jnp.zeros((6, 1)), labels=None, loss=3.0).compute())
        2.5
    """

    name: str = struct.field(pytree_node=False, default="loss")
    mean: core.Mean = struct.field(default_factory=core.Mean.empty)

    @property
    def total(self) -> jax.Array:
        """The weighted sum so far."""
        return self.mean.total

    @property
    def count(self) -> jax.Array:
        """The total weight so far."""
        return self.mean.count

    def from_argument(self, name: str) -> Mean:
        """``Mean(name)``, in jax_metrics' spelling."""
        return Mean(name)

    def reset(self) -> Mean:
        """An empty mean of the same value."""
        return Mean(self.name)

    def update(self, *, preds: Any = None, labels: Any = None, sample_weight: Any = None, **values: Any) -> Mean:
        """This mean with the batch's value of ``name`` added."""
        if self.name not in values:
            raise TypeError(explain(
                f"Mean({self.name!r}) found no value {self.name!r}",
                expected=f"a loss (or keyword) named {self.name!r}", received=f"values {sorted(values)}",
                fix="name a loss of losses= in Mean(...)"))
        value = calling.weighted_mean(values[self.name], sample_weight)
        count = _batch_weight(preds, sample_weight)
        return self.replace(mean=self.mean.merge(core.Mean.from_value(value, count)))

    def merge(self, other: Mean) -> Mean:
        """Both means' batches together."""
        return self.replace(mean=self.mean.merge(other.mean))

    def compute(self) -> jax.Array:
        """The mean so far (0 before any update)."""
        return self.mean.compute()


class Metrics(_BatchUpdates, struct.PyTreeNode):
    """Several update-style metrics updated together (jax_metrics' ``Metrics``); ``compute`` gives
    ``{name: value}``.

    Example:
        >>> import jax.numpy as jnp
        >>> ms = Metrics({"accuracy": Accuracy(), "loss": Mean().from_argument("loss")})
        >>> ms = ms.update(preds=jnp.eye(2), target=jnp.array([0, 0]), loss=jnp.float32(0.5))
        >>> {k: float(v) for k, v in ms.compute().items()}
        {'accuracy': 0.5, 'loss': 0.5}
    """

    metrics: dict[str, Any]

    def reset(self) -> Metrics:
        """Every metric emptied."""
        return Metrics({name: reset(m) for name, m in self.metrics.items()})

    def update(self, **keywords: Any) -> Metrics:
        """Every metric with one batch added."""
        return Metrics({name: update(m, keywords) for name, m in self.metrics.items()})

    def merge(self, other: Metrics) -> Metrics:
        """Each metric merged with its namesake."""
        return Metrics({name: m.merge(other.metrics[name]) for name, m in self.metrics.items()})

    def compute(self) -> dict[str, Any]:
        """``{name: value}`` (a metric computing a dict adds its entries)."""
        out: dict[str, Any] = {}
        for name, metric in self.metrics.items():
            spread(out, name, metric.compute())
        return out


# -- the protocols -----------------------------------------------------------------------------


def _has(obj: Any, *methods: str) -> bool:
    return all(callable(getattr(obj, m, None)) for m in methods)


def kind_of(obj: Any) -> str | None:
    """``"update"``, ``"clu"`` or ``None``: the protocol of an object or a class.

    Example:
        >>> kind_of(Accuracy()), kind_of(Accuracy), kind_of(lambda p, y: p)
        ('update', 'update', None)
    """
    if _has(obj, "reset", "update", "compute"):
        return "update"
    if _has(obj, "empty", "merge", "compute") and (
        _has(obj, "from_model_output") or _has(obj, "single_from_model_output")
    ):
        return "clu"
    return None


def _method_of(metric: Any) -> Any:
    if kind_of(metric) == "update":
        return metric.update
    cls = type(metric)
    return cls.single_from_model_output if _has(cls, "single_from_model_output") else cls.from_model_output


def metric_state(name: str, spec: Any, extra: frozenset[str] = frozenset()) -> Any:
    """The initial state of a metric object or class, or ``None`` for a plain callable; refuses what
    gyre cannot call.

    Example:
        >>> metric_state("acc", Accuracy).total.tolist(), metric_state("f", lambda p, y: p)
        (0.0, None)
    """
    kind = kind_of(spec)
    if kind is None:
        if callable(spec) and not isinstance(spec, type):
            return None
        raise TypeError(explain(
            f"metric {name!r} is neither a callable nor a metric object",
            expected="a callable (preds, labels) -> value, a metric object with reset/update/compute "
            "(gyre.frameworks.Accuracy()) or empty/from_model_output/merge/compute (clu.metrics)",
            received=describe(spec), fix="e.g. metrics={'accuracy': gyre.frameworks.Accuracy()} or "
            "metrics={'accuracy': lambda preds, labels: preds.argmax(-1) == labels}"))
    if isinstance(spec, type):
        try:
            spec = spec() if kind == "update" else spec.empty()
        except TypeError as err:
            raise TypeError(explain(
                f"metric {name!r} is a class gyre cannot build without arguments",
                expected=f"{spec.__name__}() to work, or an instance", received=f"TypeError: {err}",
                fix=f"pass an instance: metrics={{{name!r}: {spec.__name__}(...)}}")) from err
    method = _method_of(spec)
    known = frozenset(calling.KEYWORDS) | extra
    if calling.plan(method, known, positional=False) is None:
        via = f" (its {getattr(method, '__name__', 'update')} method)"
        raise calling.refuse("metric", name, method, known, via=via)
    return spec


def reset(metric: Any) -> Any:
    """An emptied metric state (``reset()`` or CLU's ``empty()``).

    Example:
        >>> import jax.numpy as jnp
        >>> reset(Accuracy().update(preds=jnp.eye(2), labels=jnp.array([0, 1]))).total.tolist()
        0.0
    """
    if kind_of(metric) == "update":
        return metric.reset()
    return type(metric).empty()


def update(metric: Any, keywords: Mapping[str, Any]) -> Any:
    """The metric state with one batch added, given the batch's keywords.

    Example:
        >>> import jax.numpy as jnp
        >>> update(Accuracy(), {"preds": jnp.eye(2), "target": jnp.array([0, 0])}).compute().tolist()
        0.5
    """
    method = _method_of(metric)
    found = calling.plan(method, frozenset(keywords), positional=False)
    if found is None:
        raise calling.refuse("metric", type(metric).__name__, method, frozenset(keywords))
    values = calling.call_keywords(keywords, found)
    if kind_of(metric) == "update":
        return metric.update(**values)
    return metric.merge(method(**values))


def spread(out: dict[str, Any], name: str, value: Any) -> None:
    """Puts ``value`` in ``out`` under ``name``, or its entries when it is a dict.

    Example:
        >>> d = {}; spread(d, "m", {"a": 1}); spread(d, "b", 2); d
        {'a': 1, 'b': 2}
    """
    if isinstance(value, Mapping):
        for key, v in value.items():
            out[str(key)] = v
    else:
        out[name] = value
