"""jax_trainer's metric options and how they are logged.

:func:`parse_metrics` reads a loss function's metrics dict: names to values or to ``{"value": v,
"mode": ..., "log_freq": ..., "log_mode": ..., "count": ...}`` (defaults MEAN, ANY, ANY, no count;
enum names in any case). The names metrics are logged under: ``train/<key>_step``,
``train/<key>_epoch``, ``val/<key>``, ``test/<key>`` (a key holding ``/`` is not prefixed, and
``<phase>/time`` is reserved for the phase's seconds). :class:`MetricAccumulator` is what a
compiled step carries: one monoid of :mod:`gyre.core.metrics` per non-CONCAT metric, packed in one
flat device vector per dtype; MEAN weighs each step by its ``count``, else the batch size, the
other modes weigh steps alike, and a ``count`` of 0 leaves a step out. :class:`ConcatCollector`
keeps the CONCAT values on the host. :func:`update_metrics` / :func:`get_metrics` are the kpoeppel
fork's metric dicts (``<name>_step`` / ``<name>_epoch`` entries of running sums); unlike the fork,
a MEAN with a ``count`` is a mean, a reset MAX / MIN starts empty, and STD is exact.
"""

from __future__ import annotations

import enum
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
from flax.core import FrozenDict, freeze, unfreeze

from gyre.core._checks import instance, scalar
from gyre.core._errors import ExplainedKeyError, describe, explain, suggest
from gyre.core._host import numeric_dtype
from gyre.core.metrics import Last, Max, Mean, Metric, Min, Std, Sum


class _NamedEnum(enum.StrEnum):
    """A str enum whose members are also found by their name in any case (``"Max"``)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            return cls.__members__.get(value.upper())
        return None


class LogMetricMode(_NamedEnum):
    """How a metric's per-step values are reduced over an epoch (or a window of steps).

    ``MEAN`` is weighted by the batch size or the metric's ``count``; ``SINGLE`` keeps the
    last value; ``STD`` is the population deviation; ``CONCAT`` values go to callbacks only.

    Example:
        >>> LogMetricMode("max") is LogMetricMode.MAX is LogMetricMode("MAX")
        True
    """

    MEAN = "mean"
    SUM = "sum"
    SINGLE = "single"
    MAX = "max"
    MIN = "min"
    STD = "std"
    CONCAT = "concat"


class LogFreq(_NamedEnum):
    """When a training metric is logged: every ``log_steps_every`` steps, at each epoch's end, or
    both.

    Example:
        >>> LogFreq("epoch")
        <LogFreq.EPOCH: 'epoch'>
    """

    STEP = "step"
    EPOCH = "epoch"
    ANY = "any"


class LogMode(_NamedEnum):
    """In which phases a metric is logged (``EVAL``: validation and test).

    Example:
        >>> [m.value for m in LogMode]
        ['train', 'val', 'test', 'eval', 'any']
    """

    TRAIN = "train"
    VAL = "val"
    TEST = "test"
    EVAL = "eval"
    ANY = "any"


#: the keys of a metric's options dict
OPTIONS = ("value", "mode", "log_freq", "log_mode", "count")
_ENUMS: dict[str, type[_NamedEnum]] = {"mode": LogMetricMode, "log_freq": LogFreq, "log_mode": LogMode}


def _member(enum_cls: type[_NamedEnum], value: Any, *, problem: str, fix_example: str) -> Any:
    """``value`` as a member of ``enum_cls`` (a member, or its name in any case)."""
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        try:
            return enum_cls(value)
        except ValueError:
            pass
    names = [m.value for m in enum_cls]
    hint = suggest(value.lower(), names) if isinstance(value, str) else ""
    raise ValueError(explain(
        problem + hint,
        expected=f"a {enum_cls.__name__} or one of the names {', '.join(map(repr, names))}", received=describe(value),
        fix=fix_example))


@dataclass(frozen=True)
class MetricSpec:
    """A metric's key, reduction, frequency and phases (hashable; strings become the enums).

    Example:
        >>> spec = MetricSpec("acc", "max", log_mode="val")
        >>> spec.mode, spec.log_freq, spec.log_mode
        (<LogMetricMode.MAX: 'max'>, <LogFreq.ANY: 'any'>, <LogMode.VAL: 'val'>)
        >>> hash(spec) == hash(MetricSpec("acc", LogMetricMode.MAX, LogFreq.ANY, LogMode.VAL))
        True
    """

    name: str
    mode: LogMetricMode = LogMetricMode.MEAN
    log_freq: LogFreq = LogFreq.ANY
    log_mode: LogMode = LogMode.ANY

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(explain(
                "a metric's name must be a non-empty str",
                expected="a name such as 'loss' or 'val/top5'", received=describe(self.name),
                fix="name the metric with a str key in the metrics dict"))
        for option, enum_cls in _ENUMS.items():
            value = _member(
                enum_cls, getattr(self, option),
                problem=f"metric {self.name!r}: unknown {option} {getattr(self, option)!r}.",
                fix_example=f"e.g. {option}={enum_cls.__name__}.{next(iter(enum_cls)).name}",
            )
            object.__setattr__(self, option, value)


def is_numeric(value: Any) -> bool:
    """A number or a numeric array (a tracer too): its dtype, never its contents."""
    if isinstance(value, numbers.Real):  # bool, int, float, numpy real scalars
        return True
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "shape"):
        return False
    return numeric_dtype(dtype)


def _bad_value(where: str, key: str, value: Any, what: str = "value") -> TypeError:
    return TypeError(explain(
        f"{where}: the {what} of metric {key!r} is not a number",
        expected="a number or a 0-d numeric array"
        if what == "count" else "a number or an array of numbers (bool, int or float)",
        received=describe(value),
        fix=f"return a number or an array for {key!r}, e.g. {{{key!r}: jnp.mean(x)}}"
        if what == "value" else "pass the number of examples, e.g. 'count': batch_size"))


def _options(where: str, key: str, entry: Mapping[Any, Any]) -> dict[str, Any]:
    """The options dict of one metric, checked (keys only; values are checked by the caller)."""
    for option in entry:
        if option in OPTIONS:
            continue
        fix = "remove it" if not isinstance(option, str) else f"remove {option!r}"
        if option == "value2":
            fix = "remove 'value2': gyre's STD is exact from the values alone"
        raise ValueError(explain(
            f"{where}: metric {key!r} has an unknown option {option!r}."
            + (suggest(option, OPTIONS) if isinstance(option, str) else ""),
            expected=f"options among {', '.join(map(repr, OPTIONS))}",
            received=f"the options {', '.join(map(repr, entry))}", fix=fix))
    if "value" not in entry:
        raise ValueError(explain(
            f"{where}: metric {key!r} is an options dict without a 'value'",
            expected="{'value': v, 'mode': ..., 'log_freq': ..., 'log_mode': ..., 'count': ...}"
            " (every key but 'value' optional)",
            received=f"the options {', '.join(map(repr, entry)) or '(none)'}",
            fix=f"add the metric's value: {{{key!r}: {{'value': v, ...}}}}"))
    return dict(entry)


def parse_metrics(
    out: Mapping[str, Any], *, where: str
) -> tuple[dict[str, MetricSpec], dict[str, tuple[Any, Any | None]]]:
    """``(specs, values)`` of a metrics dict, checked at trace time (types, dtypes, shapes only);
    ``where`` names the dict's source."""
    instance(out, "metrics", Mapping, problem=f"{where}: the metrics must be a dict",
             expected="a dict from names to values or options dicts, e.g. {'acc': acc}", fix="return the metrics as a dict")
    specs: dict[str, MetricSpec] = {}
    values: dict[str, tuple[Any, Any | None]] = {}
    for key, entry in out.items():
        if not isinstance(key, str) or not key:
            raise TypeError(explain(
                f"{where}: a metric's name must be a non-empty str",
                expected="str keys such as 'acc' or 'val/top5'", received=describe(key),
                fix="name every metric with a str"))
        options = _options(where, key, entry) if isinstance(entry, Mapping) else {"value": entry}
        value, count = options["value"], options.get("count")
        if not is_numeric(value):
            raise _bad_value(where, key, value)
        if count is not None:
            if not is_numeric(count):
                raise _bad_value(where, key, count, "count")
            scalar(count, "count", problem=f"{where}: the count of metric {key!r} must be one number",
                   expected="a number or a 0-d array: how many examples the value stands for",
                   fix="pass the step's total weight, e.g. 'count': mask.sum()")
        chosen = {}
        for option, enum_cls in _ENUMS.items():
            if option in options:
                chosen[option] = _member(
                    enum_cls, options[option],
                    problem=f"{where}: metric {key!r} has an unknown {option} {options[option]!r}.",
                    fix_example=f"e.g. {{{key!r}: {{'value': v, {option!r}: "
                    f"{enum_cls.__name__}.{next(iter(enum_cls)).name}}}}}",
                )
        specs[key] = MetricSpec(key, **chosen)
        values[key] = (value, count)
    return specs, values


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
        self._parts: dict[str, list[Any]] = {k: [] for k in self.keys}

    @staticmethod
    def select(specs: Mapping[str, MetricSpec], values: Values) -> dict[str, Any]:
        """The CONCAT metrics' values, for a compiled step to return (jittable)."""
        return {k: values[k][0] for k, s in specs.items() if s.mode is LogMetricMode.CONCAT}

    def add(self, values: Mapping[str, Any]) -> None:
        """Keeps one step's CONCAT values (arrays, or ``(value, count)`` pairs)."""
        for key in self.keys:
            if key not in values:
                raise _missing(key, "value")
            value = values[key]
            self._parts[key].append(value[0] if isinstance(value, tuple) else value)

    def compute(self) -> dict[str, jax.Array]:
        """Every CONCAT metric's rows so far, one device array each (of one shape)."""
        out = {}
        for key, parts in self._parts.items():
            rows = [jnp.atleast_1d(jnp.asarray(v)) for v in parts]
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


_KEYS = ("value", "count", "mode")


def _kept(spec: MetricSpec, train: bool) -> list[LogFreq]:
    """The frequencies of the entries a metric feeds in this phase (evaluation: ``epoch``)."""
    if not train:
        return [] if spec.log_mode is LogMode.TRAIN else [LogFreq.EPOCH]
    return [freq for freq in (LogFreq.STEP, LogFreq.EPOCH)
            if spec.log_mode in PHASE_MODES["train"] and spec.log_freq in FREQ_MODES[freq.value]]


def _fold(
    entry: dict[str, Any] | None, spec: MetricSpec, freq: LogFreq, value: Any, count: Any, batch_size: Any
) -> dict[str, Any]:
    """``entry`` (of frequency ``freq``) with one step's ``value`` added under ``spec.mode``."""
    mode = spec.mode
    if mode is LogMetricMode.CONCAT:
        raise ValueError(explain(
            f"update_metrics: metric {spec.name!r} has mode CONCAT",
            expected="MEAN, SUM, SINGLE, MAX, MIN or STD (the fork's modes)", received="LogMetricMode.CONCAT",
            fix="log it through a TrainerModule, which keeps CONCAT metrics for callbacks"))
    fresh = entry is None
    entry = {"value": 0.0, "count": 0} if fresh else dict(entry)
    if mode is LogMetricMode.MEAN:
        weight = batch_size if count is None else count
        entry["value"], entry["count"] = entry["value"] + value * weight, entry["count"] + weight
    else:
        if mode in (LogMetricMode.SUM, LogMetricMode.STD):
            entry["value"] = entry["value"] + value
        elif mode is LogMetricMode.SINGLE or fresh:
            entry["value"] = value
        else:
            pick = jnp.maximum if mode is LogMetricMode.MAX else jnp.minimum
            entry["value"] = jnp.where(jnp.asarray(entry["count"]) > 0, pick(entry["value"], value), value)
        if mode is LogMetricMode.STD:  # squares about the window's first value: no float32 cancellation
            shift = value if fresh else jnp.where(jnp.asarray(entry["count"]) > 0, entry.get("shift", 0.0), value)
            delta = value - shift
            entry["shift"] = shift
            entry["delta"] = entry.get("delta", 0.0) + delta
            entry["value2"] = entry.get("value2", 0.0) + delta * delta
        entry["count"] = entry["count"] + 1
    entry.update(mode=mode, log_freq=freq, log_mode=spec.log_mode)
    return entry


def update_metrics(
    global_metrics: Mapping[str, Any] | None, step_metrics: Mapping[str, Any], train: bool, batch_size: Any
) -> FrozenDict:
    """Folds one step's metrics (values or options dicts) into the running entries (jittable).

    Args:
        global_metrics: the entries so far (``None``: none yet).
        train: a training step (``_step`` and ``_epoch`` entries) or an evaluation one (``_epoch``).
        batch_size: MEAN's weight when a metric gives no ``count``.

    Example:
        >>> m = update_metrics(None, {"loss": 0.5}, train=True, batch_size=4)
        >>> m = update_metrics(m, {"loss": 1.0}, train=True, batch_size=4)
        >>> m["loss_epoch"]["value"], m["loss_epoch"]["count"]
        (6.0, 8)
    """
    specs, values = parse_metrics(step_metrics, where="update_metrics: step_metrics")
    entries = {} if global_metrics is None else dict(unfreeze(global_metrics))
    for name, spec in specs.items():
        value, count = values[name]
        for freq in _kept(spec, bool(train)):
            key = f"{name}_{freq.value}"
            entries[key] = _fold(entries.get(key), spec, freq, value, count, batch_size)
    return freeze(entries)


def _monoid(key: str, entry: Any) -> Metric:
    """The gyre monoid holding an entry's running sums (on the host)."""
    if not isinstance(entry, Mapping) or any(k not in entry for k in _KEYS):
        raise ValueError(explain(
            f"get_metrics: entry {key!r} is not a metric entry",
            expected="a dict with 'value', 'count' and 'mode' (as update_metrics makes them)",
            received=describe(entry), fix="build the entries with update_metrics"))
    mode = MetricSpec(key, entry["mode"]).mode
    value, count = jnp.asarray(entry["value"], jnp.float32), jnp.asarray(entry["count"], jnp.float32)
    if mode is LogMetricMode.MEAN:
        return Mean(total=value, count=count)
    if mode is LogMetricMode.SUM:
        return Sum(value=value, count=count)
    if mode is LogMetricMode.STD:
        mean = value / jnp.maximum(count, 1.0)
        if "delta" in entry:  # value2: the squares about shift, delta: the sum of the values less shift
            delta = jnp.asarray(entry["delta"], jnp.float32)
            m2 = jnp.asarray(entry["value2"], jnp.float32) - delta * delta / jnp.maximum(count, 1.0)
        else:  # an entry made elsewhere: value2 is the plain sum of squares
            m2 = jnp.asarray(entry.get("value2", 0.0), jnp.float32) - count * mean * mean
        return Std(count=count, shift=jnp.zeros_like(mean), mean=mean, m2=jnp.maximum(m2, 0.0))
    return MONOIDS[mode](value=jnp.asarray(entry["value"]), count=count)


def get_metrics(
    global_metrics: Mapping[str, Any], log_freq: LogFreq = LogFreq.ANY, reset_metrics: bool = True
) -> tuple[FrozenDict, dict[str, Any]]:
    """``(entries, host)``: the ``log_freq`` entries reduced on the host by metric name, and reset
    if ``reset_metrics``.

    Example:
        >>> m = update_metrics(None, {"acc": {"value": 0.5, "mode": "max"}}, True, 8)
        >>> m, host = get_metrics(m, LogFreq.EPOCH)
        >>> float(host["acc"]), m["acc_epoch"]["count"].tolist()
        (0.5, 0)
    """
    freq = LogFreq(log_freq)
    entries = dict(unfreeze(global_metrics)) if isinstance(global_metrics, FrozenDict) else dict(global_metrics)
    chosen = [k for k, e in entries.items()
              if freq is LogFreq.ANY or LogFreq(e.get("log_freq", LogFreq.ANY)) is freq]
    host_entries = jax.device_get({k: entries[k] for k in chosen})  # one transfer
    host = {k.rsplit("_", 1)[0]: np.asarray(_monoid(k, host_entries[k]).compute())[()] for k in chosen}
    if reset_metrics:
        for key in chosen:
            entries[key] = {**entries[key], **{
                field: jnp.zeros_like(entries[key][field]) for field in ("value", "count", "value2", "delta")
                if field in entries[key]
            }}
    return freeze(entries), host
