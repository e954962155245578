"""The trainer's metric modes on device: the names metrics are logged under (``train/<key>_step``,
``train/<key>_epoch``, ``val/<key>``, ``test/<key>``; a key holding ``/`` is not prefixed, and
``<phase>/time`` is reserved for the phase's seconds), the accumulator a compiled step carries
(one monoid of :mod:`gyre.core.metrics` per non-CONCAT metric, packed in one flat device vector
per dtype; MEAN weighs each step by its ``count``, else the batch size, the other modes weigh
steps alike, and a ``count`` of 0 leaves a step out), and the host-side collector of the CONCAT
values, which grow with the steps.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gyre.core._errors import ExplainedKeyError, describe, explain
from gyre.core.metrics import Last, Max, Mean, Metric, Min, Std, Sum
from gyre.trainer._modes import LogFreq, LogMetricMode, LogMode, MetricSpec, is_numeric

PHASES = ("train", "val", "test")
FREQS = ("step", "epoch")
#: the log_mode values each phase logs, and the log_freq values each frequency logs
PHASE_MODES = {
    "train": {LogMode.TRAIN, LogMode.ANY},
    "val": {LogMode.VAL, LogMode.EVAL, LogMode.ANY},
    "test": {LogMode.TEST, LogMode.EVAL, LogMode.ANY},
}
FREQ_MODES = {"step": {LogFreq.STEP, LogFreq.ANY}, "epoch": {LogFreq.EPOCH, LogFreq.ANY}}


def _missing(key: str, what: str) -> ExplainedKeyError:
    return ExplainedKeyError(explain(
        f"metric {key!r} has no {what}",
        expected=f"a {what} for every metric of the accumulator", received=f"none for {key!r}",
        fix="return the same metrics at every step of a phase (a metric that only some "
        "steps have: give it 'count': 0 on the others)"))


# -- names and routing ---------------------------------------------------------------------------


def _phase_freq(phase: Any, freq: Any) -> None:
    if phase not in PHASES or freq not in FREQS:
        raise ValueError(explain(
            f"unknown phase {phase!r} or frequency {freq!r}",
            expected=f"phase in {PHASES} and freq in {FREQS}",
            received=f"phase={describe(phase)}, freq={describe(freq)}", fix="e.g. metric_names(specs, 'val', 'epoch')"))
    if phase != "train" and freq == "step":
        raise ValueError(explain(
            f"{phase} metrics are logged once per evaluation, not per step",
            expected="freq='epoch' for the phases 'val' and 'test'", received=f"phase={phase!r}, freq='step'",
            fix=f"metric_names(specs, {phase!r}, 'epoch')"))


def logged_name(key: str, phase: str, freq: str = "epoch") -> str:
    """The name a metric is logged under."""
    _phase_freq(phase, freq)
    base = key if "/" in key else f"{phase}/{key}"
    return f"{base}_{freq}" if phase == "train" else base


def time_name(phase: str) -> str:
    """``<phase>/time``: the seconds an epoch or evaluation took."""
    _phase_freq(phase, "epoch")
    return f"{phase}/time"


def metric_names(
    specs: Mapping[str, MetricSpec], phase: str, freq: str = "epoch"
) -> dict[str, str]:
    """``{key: logged name}`` of the metrics logged in ``phase`` at ``freq`` (names must differ)."""
    _phase_freq(phase, freq)
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    reserved = time_name(phase)
    for key, spec in specs.items():
        if spec.log_mode not in PHASE_MODES[phase]:
            continue
        if phase == "train" and spec.log_freq not in FREQ_MODES[freq]:
            continue
        name = logged_name(key, phase, freq)
        if name == reserved or name in owner:
            other = "the epoch's duration" if name == reserved else f"metric {owner[name]!r}"
            raise ValueError(explain(
                f"metric {key!r} would be logged as {name!r}, the name of {other}",
                expected="one name per metric in a phase", received=f"{key!r} -> {name!r}",
                fix=f"rename metric {key!r}, or give it a log_mode that keeps it out of "
                f"the {phase} phase"))
        owner[name] = key
        names[key] = name
    return names


def select_specs(
    specs: Mapping[str, MetricSpec], phase: str, freq: str = "epoch"
) -> dict[str, MetricSpec]:
    """The specs of the metrics logged in ``phase`` at ``freq``."""
    return {key: specs[key] for key in metric_names(specs, phase, freq)}


def name_metrics(
    computed: Mapping[str, Any], specs: Mapping[str, MetricSpec], phase: str, freq: str = "epoch"
) -> dict[str, Any]:
    """The computed values of the metrics logged in ``phase`` at ``freq``, by logged name."""
    out = {}
    for key, name in metric_names(specs, phase, freq).items():
        if key not in computed:
            raise _missing(key, "computed value")
        out[name] = computed[key]
    return out


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is one number or a 0-d numeric array (reads no value)."""
    return isinstance(value, numbers.Real) or (getattr(value, "shape", None) == () and is_numeric(value))


def scalars_for_writers(
    metrics: Mapping[str, Any], specs: Mapping[str, MetricSpec]
) -> dict[str, Any]:
    """The scalar, non-CONCAT entries of ``metrics``: what writers and the metric files take."""
    concat = {
        logged_name(key, phase, freq)
        for key, spec in specs.items()
        if spec.mode is LogMetricMode.CONCAT
        for phase in PHASES
        for freq in FREQS
        if phase == "train" or freq == "epoch"
    }
    return {name: v for name, v in metrics.items() if name not in concat and is_scalar(v)}


def add_time(metrics: Mapping[str, Any], phase: str, seconds: float) -> dict[str, Any]:
    """``metrics`` with ``<phase>/time``, the phase's seconds."""
    name = time_name(phase)
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(explain(
            f"{name} must be a host number of seconds",
            expected="a float such as time.perf_counter() - start", received=describe(seconds),
            fix="measure the time on the host with time.perf_counter()"))
    if name in metrics:
        raise ValueError(explain(
            f"{name!r} is already a metric",
            expected=f"no metric named {name!r} (it is the phase's duration)",
            received=f"the metrics {', '.join(map(repr, metrics))}", fix="rename that metric"))
    return {**metrics, name: float(seconds)}


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
        return self is other or (
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
            step = jax.vmap(group.monoid.from_value)(jnp.stack(stacked), jnp.stack(weights))
            merged.append(jax.vmap(group.monoid.merge)(monoid, step))
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


class ConcatCollector:
    """Keeps CONCAT metrics' per-step device arrays; :meth:`compute` concatenates them."""

    def __init__(self, specs: Mapping[str, MetricSpec]) -> None:
        self.keys = tuple(k for k, s in specs.items() if s.mode is LogMetricMode.CONCAT)
        self._parts: dict[str, list[tuple[Any, bool]]] = {k: [] for k in self.keys}

    @staticmethod
    def select(specs: Mapping[str, MetricSpec], values: Values) -> dict[str, Any]:
        """The CONCAT metrics' values, for a compiled step to return (jittable)."""
        return {k: values[k][0] for k, s in specs.items() if s.mode is LogMetricMode.CONCAT}

    def _add(self, values: Mapping[str, Any], stacked: bool) -> None:
        for key in self.keys:
            if key not in values:
                raise _missing(key, "value")
            value = values[key]
            if isinstance(value, tuple):
                value = value[0]
            self._parts[key].append((value, stacked))

    def add(self, values: Mapping[str, Any]) -> None:
        """Keeps one step's CONCAT values (arrays, or ``(value, count)`` pairs)."""
        self._add(values, stacked=False)

    def add_stacked(self, values: Mapping[str, Any]) -> None:
        """Keeps the CONCAT values of several fused steps (leading axis: the steps)."""
        self._add(values, stacked=True)

    def compute(self) -> dict[str, jax.Array]:
        """Every CONCAT metric's rows so far, one device array each (of one shape)."""
        out = {}
        for key, parts in self._parts.items():
            rows = [_rows(v, stacked) for v, stacked in parts]
            if not rows:
                out[key] = jnp.zeros((0,), jnp.float32)
                continue
            shapes = {tuple(np.shape(r)[1:]) for r in rows}
            if len(shapes) > 1:
                raise ValueError(explain(
                    f"CONCAT metric {key!r} has rows of different shapes",
                    expected="values of one shape after the first axis", received=f"rows of shapes {sorted(shapes)}",
                    fix="log values of one shape per metric (pad or reduce them first)"))
            out[key] = rows[0] if len(rows) == 1 else jnp.concatenate(rows)
        return out

    def reset(self) -> None:
        """Forgets every value (at the start of an epoch or a window)."""
        self._parts = {k: [] for k in self.keys}


def _rows(value: Any, stacked: bool) -> jax.Array:
    value = jnp.asarray(value)
    if not stacked:
        return jnp.atleast_1d(value)
    if value.ndim <= 1:
        return value
    return value.reshape((value.shape[0] * value.shape[1],) + value.shape[2:])
