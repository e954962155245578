"""Losses and metrics for :func:`~gyre.create_flax_state`: callables, metric objects, CLU.

Three kinds are accepted:

* a **callable** ``(preds, labels) -> value`` or ``(preds, labels, sample_weight) -> value``;
  a per-example value (any shape with the batch first) is averaged, weighted by
  ``sample_weight`` when the batch has one and the callable does not take it;
* a **metric object** accumulated over an epoch: a pytree with ``reset()``,
  ``update(preds=, labels=, sample_weight=, **losses) -> metric`` and ``compute()``, such as
  :class:`Accuracy` and :class:`Mean` here (or such a class, built with no arguments);
* a **CLU metric**: a ``clu.metrics.Metric`` class or instance, fed through
  ``from_model_output(logits=preds, labels=labels, mask=..., **losses)`` and ``merge``.

Metric objects live in the state (``state.metric_states``); the state's ``reset_step`` empties
them, which the named loops call at the start of every epoch and evaluation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from gyre.core.errors import describe, explain


class Accuracy(struct.PyTreeNode):
    """Running accuracy of ``argmax(preds)`` against integer (or one-hot) labels, weighted by
    ``sample_weight``.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Accuracy().update(preds=jnp.array([[0.0, 1.0], [1.0, 0.0]]), labels=jnp.array([1, 1]))
        >>> m = m.update(preds=jnp.array([[0.0, 1.0]]), labels=jnp.array([1]))
        >>> round(float(m.compute()), 4)
        0.6667
    """

    correct: jax.Array = struct.field(default_factory=lambda: jnp.zeros((), jnp.float32))
    total: jax.Array = struct.field(default_factory=lambda: jnp.zeros((), jnp.float32))

    def reset(self) -> Accuracy:
        """An empty accuracy."""
        return Accuracy()

    def update(self, *, preds: Any, labels: Any, sample_weight: Any = None, **_: Any) -> Accuracy:
        """This accuracy with one batch added."""
        labels = jnp.asarray(labels)
        if labels.ndim == jnp.ndim(preds):
            labels = jnp.argmax(labels, axis=-1)
        hits = (jnp.argmax(preds, axis=-1) == labels).astype(jnp.float32)
        weight = jnp.ones_like(hits) if sample_weight is None else jnp.asarray(sample_weight, jnp.float32)
        return Accuracy(correct=self.correct + jnp.sum(hits * weight), total=self.total + jnp.sum(weight))

    def compute(self) -> jax.Array:
        """Correct over total (0 before any update)."""
        return self.correct / jnp.maximum(self.total, 1e-12)


class Mean(struct.PyTreeNode):
    """Running mean of a logged loss (``Mean("loss")``), weighted by batch size.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Mean("loss").update(preds=jnp.zeros((2, 1)), labels=None, loss=1.0)
        >>> float(m.update(preds=jnp.zeros((6, 1)), labels=None, loss=3.0).compute())
        2.5
    """

    name: str = struct.field(pytree_node=False, default="loss")
    total: jax.Array = struct.field(default_factory=lambda: jnp.zeros((), jnp.float32))
    count: jax.Array = struct.field(default_factory=lambda: jnp.zeros((), jnp.float32))

    def reset(self) -> Mean:
        """An empty mean of the same value."""
        return Mean(self.name)

    def update(self, *, preds: Any, labels: Any = None, sample_weight: Any = None, **values: Any) -> Mean:
        """This mean with the batch's value of ``name`` added."""
        if self.name not in values:
            raise KeyError(
                explain(
                    f"Mean({self.name!r}) found no value {self.name!r}",
                    expected=f"a loss named {self.name!r}",
                    received=f"values {sorted(values)}",
                    fix="name a loss of losses= in Mean(...)",
                )
            )
        n = jnp.float32(jax.tree_util.tree_leaves(preds)[0].shape[0])
        value = jnp.asarray(values[self.name], jnp.float32)
        return self.replace(total=self.total + value * n, count=self.count + n)

    def compute(self) -> jax.Array:
        """The mean so far (0 before any update)."""
        return self.total / jnp.maximum(self.count, 1e-12)


# -- classification ----------------------------------------------------------------------------


def _is_gyre_metric(obj: Any) -> bool:
    return all(callable(getattr(obj, m, None)) for m in ("reset", "update", "compute"))


def _is_clu_metric(obj: Any) -> bool:
    return all(callable(getattr(obj, m, None)) for m in ("from_model_output", "merge", "compute"))


def _require_clu() -> Any:
    try:
        import clu.metrics
    except ImportError as err:
        raise ImportError(
            explain(
                "CLU metrics need the clu package, which is not installed",
                expected="clu installed, for clu.metrics.Metric classes",
                received="ImportError: " + str(err),
                fix="pip install clu  (or pass a callable (preds, labels) -> value, or "
                "gyre.frameworks.Accuracy())",
            )
        ) from err
    return clu.metrics


def metric_state(name: str, spec: Any) -> Any:
    """The initial accumulated state of a metric given as an object or class, or ``None``
    when ``spec`` is a plain callable.

    Example:
        >>> metric_state("acc", Accuracy).total.tolist(), metric_state("f", lambda p, y: p)
        (0.0, None)
    """
    if isinstance(spec, type):
        if _is_gyre_metric(spec):
            return spec()
        clu_metrics = _require_clu()
        if issubclass(spec, clu_metrics.Metric):
            return spec.empty()
        raise TypeError(_bad_metric(name, spec))
    if _is_gyre_metric(spec) or _is_clu_metric(spec):
        return spec
    if callable(spec):
        return None
    raise TypeError(_bad_metric(name, spec))


def _bad_metric(name: str, spec: Any) -> str:
    return explain(
        f"metric {name!r} is neither a callable nor a metric object",
        expected="a callable (preds, labels) -> value, gyre.frameworks.Accuracy(), or a "
        "clu.metrics.Metric class",
        received=describe(spec),
        fix="e.g. metrics={'accuracy': gyre.frameworks.Accuracy()} or "
        "metrics={'accuracy': lambda preds, labels: preds.argmax(-1) == labels}",
    )


def reset(metric: Any) -> Any:
    """An emptied metric state (``reset()`` or CLU's ``empty()``).

    Example:
        >>> import jax.numpy as jnp
        >>> reset(Accuracy(correct=jnp.float32(3), total=jnp.float32(4))).total.tolist()
        0.0
    """
    if _is_gyre_metric(metric):
        return metric.reset()
    return type(metric).empty()


def update(metric: Any, preds: Any, labels: Any, sample_weight: Any, values: Mapping[str, Any]) -> Any:
    """The metric state with one batch added.

    Example:
        >>> import jax.numpy as jnp
        >>> update(Accuracy(), jnp.eye(2), jnp.array([0, 0]), None, {}).compute().tolist()
        0.5
    """
    if _is_gyre_metric(metric):
        return metric.update(preds=preds, labels=labels, sample_weight=sample_weight, **values)
    mask = None if sample_weight is None else jnp.asarray(sample_weight) > 0
    batch = type(metric).from_model_output(logits=preds, labels=labels, mask=mask, **values)
    return metric.merge(batch)


# -- callables ---------------------------------------------------------------------------------


def takes_sample_weight(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes the sample weights: a parameter named ``sample_weight``, or a
    third positional parameter without a default (optax's ``axis=-1`` is not one).

    Example:
        >>> takes_sample_weight(lambda p, y, axis=-1: p), takes_sample_weight(lambda p, y, w: p)
        (False, True)
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.name == "sample_weight" for p in params):
        return True
    P = inspect.Parameter
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 and positional[2].default is P.empty


def weighted_mean(value: Any, sample_weight: Any = None) -> jax.Array:
    """A scalar from a callable's result: scalars as they are, per-example values averaged,
    weighted by ``sample_weight`` (batch dimension first) when given.

    Example:
        >>> import jax.numpy as jnp
        >>> float(weighted_mean(jnp.array([1.0, 3.0]), jnp.array([1.0, 0.0])))
        1.0
    """
    value = jnp.asarray(value)
    if value.dtype == jnp.bool_ or jnp.issubdtype(value.dtype, jnp.integer):
        value = value.astype(jnp.float32)
    if value.ndim == 0:
        return value
    if sample_weight is None:
        return jnp.mean(value)
    w = jnp.asarray(sample_weight, value.dtype)
    w = jnp.broadcast_to(w.reshape(w.shape + (1,) * (value.ndim - w.ndim)), value.shape)
    return jnp.sum(value * w) / jnp.maximum(jnp.sum(w), jnp.finfo(value.dtype).tiny)


def call_metric(fn: Callable[..., Any], preds: Any, labels: Any, sample_weight: Any) -> jax.Array:
    """``fn``'s scalar value for one batch (see :func:`weighted_mean`).

    Example:
        >>> import jax.numpy as jnp
        >>> float(call_metric(lambda p, y: (p - y) ** 2, jnp.ones(2), jnp.zeros(2), None))
        1.0
    """
    if sample_weight is not None and takes_sample_weight(fn):
        return weighted_mean(fn(preds, labels, sample_weight))
    return weighted_mean(fn(preds, labels), sample_weight)
