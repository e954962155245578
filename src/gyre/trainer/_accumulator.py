"""The metric accumulator a compiled step carries: one monoid of :mod:`gyre.core.metrics` per
non-CONCAT metric, of fixed shapes, packed in one flat device vector per dtype.

MEAN weighs each step's value (a mean, not jax_trainer's sum) by its ``count``, else the
batch size; the other modes weigh steps alike, and a ``count`` of 0 leaves a step out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gyre.core._errors import explain
from gyre.core.metrics import Last, Max, Mean, Metric, Min, Std, Sum
from gyre.trainer._metric_names import _missing
from gyre.trainer._modes import LogMetricMode, MetricSpec

#: the monoid of each mode but CONCAT
MONOIDS: dict[LogMetricMode, type[Metric]] = {
    LogMetricMode.MEAN: Mean,
    LogMetricMode.SUM: Sum,
    LogMetricMode.SINGLE: Last,
    LogMetricMode.MAX: Max,
    LogMetricMode.MIN: Min,
    LogMetricMode.STD: Std,
}

Values = Mapping[str, tuple[Any, Any]]


def _weight(monoid: type[Metric], count: Any, default_count: Any) -> jax.Array:
    """A step's weight: MEAN's ``count`` (or ``default_count``); else 1, or 0 if ``count`` is 0."""
    if monoid is Mean:
        return jnp.asarray(default_count if count is None else count, jnp.float32)
    if count is None:
        return jnp.ones((), jnp.float32)
    return jnp.where(jnp.asarray(count) > 0, 1.0, 0.0).astype(jnp.float32)


def _merge_step(acc: Metric, value: jax.Array, weight: jax.Array) -> Metric:
    return acc.merge(type(acc).from_value(value, weight))

# -- the packed layout: metrics of one mode, shape and dtype are stacked in one monoid and
# updated by one vmapped merge; all leaves travel in one flat vector per dtype (fewer buffers
# and kernels per call). The layout is static; unpacking is slicing.


@dataclass(frozen=True)
class _Group:
    """Metrics of one mode, shape and dtype, stacked in one monoid of packed leaves."""

    monoid: type[Metric]
    keys: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    treedef: Any
    leaves: tuple[tuple[str, int, tuple[int, ...]], ...]


class _Layout:
    """The groups and metric order of an accumulator; hashed once, compared by identity first."""

    __slots__ = ("groups", "keys", "_hash")

    def __init__(self, groups: tuple[_Group, ...], keys: tuple[str, ...]) -> None:
        self.groups, self.keys = groups, keys
        self._hash = hash((groups, keys))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, _Layout) and self._hash == other._hash
            and (self.groups, self.keys) == (other.groups, other.keys)
        )

    def __repr__(self) -> str:
        return f"_Layout({list(self.keys)})"


def _layout(specs: Mapping[str, MetricSpec], values: Values) -> tuple[_Layout, dict[str, int]]:
    """The layout of the non-CONCAT metrics of ``specs``, and each buffer's size."""
    members: dict[tuple[type[Metric], tuple[int, ...], str], list[str]] = {}
    for key, spec in specs.items():
        if spec.mode is LogMetricMode.CONCAT:
            continue
        if key not in values:
            raise _missing(key, "value")
        shaped = jax.eval_shape(jnp.asarray, values[key][0])
        members.setdefault((MONOIDS[spec.mode], shaped.shape, np.dtype(shaped.dtype).name), []).append(key)
    sizes: dict[str, int] = {}
    groups = []
    for (monoid, shape, dtype), keys in members.items():
        value = jax.ShapeDtypeStruct((len(keys), *shape), dtype)
        weight = jax.ShapeDtypeStruct((len(keys),), jnp.float32)
        tree = jax.eval_shape(jax.vmap(monoid.from_value), value, weight)
        leaves, treedef = jax.tree.flatten(tree)
        placed = []
        for leaf in leaves:
            name = np.dtype(leaf.dtype).name
            placed.append((name, sizes.get(name, 0), tuple(leaf.shape)))
            sizes[name] = sizes.get(name, 0) + math.prod(leaf.shape)
        groups.append(_Group(monoid, tuple(keys), shape, dtype, treedef, tuple(placed)))
    order = tuple(k for k, s in specs.items() if s.mode is not LogMetricMode.CONCAT)
    return _Layout(tuple(groups), order), sizes


def _pack(monoids: list[Metric], layout: _Layout) -> dict[str, jax.Array]:
    parts: dict[str, list[jax.Array]] = {}
    for group, monoid in zip(layout.groups, monoids, strict=True):
        for (dtype, _, _), leaf in zip(group.leaves, jax.tree.leaves(monoid), strict=True):
            parts.setdefault(dtype, []).append(jnp.ravel(leaf).astype(dtype))
    return {dtype: jnp.concatenate(p) if len(p) > 1 else p[0] for dtype, p in parts.items()}


def _unpack(buffers: Mapping[str, jax.Array], layout: _Layout) -> list[Metric]:
    out = []
    for group in layout.groups:
        leaves = [
            buffers[dtype][offset : offset + math.prod(shape)].reshape(shape)
            for dtype, offset, shape in group.leaves
        ]
        out.append(jax.tree.unflatten(group.treedef, leaves))
    return out


@functools.partial(jax.jit, static_argnums=1)
def _compute(buffers: dict[str, jax.Array], layout: _Layout) -> list[jax.Array]:
    found = {}
    for group, monoid in zip(layout.groups, _unpack(buffers, layout), strict=True):
        results = jax.vmap(type(monoid).compute)(monoid)
        found.update((key, results[i]) for i, key in enumerate(group.keys))
    return [found[key] for key in layout.keys]  # a list keeps the specs' order


class MetricAccumulator(struct.PyTreeNode):
    """The monoids of the non-CONCAT metrics, packed: a compiled step's carry.

    Example:
        >>> import jax.numpy as jnp
        >>> specs = {"loss": MetricSpec("loss")}
        >>> acc = MetricAccumulator.init(specs, {"loss": (jnp.float32(0.0), None)})
        >>> acc = acc.update(specs, {"loss": (jnp.float32(1.0), None)}, default_count=4)
        >>> acc = acc.update(specs, {"loss": (jnp.float32(4.0), None)}, default_count=2)
        >>> acc.compute()["loss"].tolist(), acc.reset().compute()["loss"].tolist()
        (2.0, 0.0)
    """

    buffers: dict[str, jax.Array]
    layout: _Layout = struct.field(pytree_node=False)

    @classmethod
    def init(cls, specs: Mapping[str, MetricSpec], values: Values) -> MetricAccumulator:
        """An empty accumulator shaped like one step's ``values`` (``(value, count)`` pairs; only
        shapes are read).

        Example:
            >>> import jax.numpy as jnp
            >>> acc = MetricAccumulator.init({"per_class": MetricSpec("per_class", "sum")},
            ...                              {"per_class": (jnp.zeros(3, jnp.int32), None)})
            >>> acc.compute()["per_class"]
            Array([0, 0, 0], dtype=int32)
        """
        layout, sizes = _layout(specs, values)
        return cls(buffers={d: jnp.zeros((n,), d) for d, n in sizes.items()}, layout=layout)

    @property
    def metrics(self) -> dict[str, Metric]:
        """The monoid of each metric (``acc.metrics["loss"].count`` is the weight seen)."""
        found = {}
        for group, monoid in zip(self.layout.groups, _unpack(self.buffers, self.layout), strict=True):
            for i, key in enumerate(group.keys):
                found[key] = jax.tree.map(lambda leaf, i=i: leaf[i], monoid)
        return {key: found[key] for key in self.layout.keys}

    def update(
        self, specs: Mapping[str, MetricSpec], values: Values, default_count: Any
    ) -> MetricAccumulator:
        """The accumulator with one more step merged in (jittable).

        Args:
            specs: the metrics' specs (keys the accumulator lacks are ignored).
            values: ``(value, count)`` per metric.
            default_count: MEAN's weight when a metric gives no ``count``: the batch size.

        Raises:
            KeyError: a metric of the accumulator has no value or no spec.
            ValueError: a metric changed its mode or its shape since ``init``.

        Example:
            >>> import jax.numpy as jnp
            >>> specs = {"low": MetricSpec("low", "min")}
            >>> acc = MetricAccumulator.init(specs, {"low": (1.0, None)})
            >>> for v in (3.0, 2.0, 5.0):
            ...     acc = acc.update(specs, {"low": (v, None)}, default_count=8)
            >>> acc.compute()["low"].tolist()
            2.0
        """
        merged = []
        for group, monoid in zip(self.layout.groups, _unpack(self.buffers, self.layout), strict=True):
            stacked, weights = [], []
            for key in group.keys:
                value, count = self._step_value(key, group, specs, values)
                stacked.append(value)
                weights.append(_weight(group.monoid, count, default_count))
            merged.append(jax.vmap(_merge_step)(monoid, jnp.stack(stacked), jnp.stack(weights)))
        return self.replace(buffers=_pack(merged, self.layout))

    @staticmethod
    def _step_value(
        key: str, group: _Group, specs: Mapping[str, MetricSpec], values: Values
    ) -> tuple[jax.Array, Any]:
        """A metric's value (in its group's dtype) and count, checked against the layout."""
        spec = specs.get(key)
        if spec is None:
            raise _missing(key, "spec")
        if key not in values:
            raise _missing(key, "value")
        if MONOIDS.get(spec.mode) is not group.monoid:
            raise ValueError(explain(
                f"metric {key!r} changed its mode",
                expected=f"the mode it had when the accumulator was made "
                f"({group.monoid.__name__})",
                received=f"mode {spec.mode.name}", fix="give a metric one mode in every step of a phase"))
        value, count = values[key]
        if np.shape(value) != group.shape:
            raise ValueError(explain(
                f"metric {key!r} changed its shape",
                expected=f"values of shape {group.shape}, as at init", received=f"a value of shape {np.shape(value)}",
                fix="log values of one shape (pad a short batch, or reduce the value "
                "to a number first)"))
        return jnp.asarray(value).astype(group.dtype), count

    def merge(self, other: MetricAccumulator) -> MetricAccumulator:
        """Both accumulators' steps (a window folded into the epoch); same metrics only."""
        if self.layout != other.layout:
            raise ValueError(explain(
                "only accumulators of the same metrics merge",
                expected=f"the metrics {list(self.layout.keys)}, of the same shapes",
                received=f"the metrics {list(other.layout.keys)}",
                fix="merge accumulators made by init from the same specs and values"))
        mine, theirs = _unpack(self.buffers, self.layout), _unpack(other.buffers, other.layout)
        merged = [jax.vmap(type(a).merge)(a, b) for a, b in zip(mine, theirs, strict=True)]
        return self.replace(buffers=_pack(merged, self.layout))

    def compute(self) -> dict[str, jax.Array]:
        """Every metric reduced, as device values, in the specs' order."""
        return dict(zip(self.layout.keys, _compute(self.buffers, self.layout), strict=True))

    def reset(self) -> MetricAccumulator:
        """An empty accumulator of the same metrics, shapes and dtypes."""
        return self.replace(buffers={d: jnp.zeros_like(b) for d, b in self.buffers.items()})
