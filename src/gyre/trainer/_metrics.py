"""Metric modes on device: the accumulator a compiled step carries, the host-side collector of
CONCAT values, and the names metrics are logged under.

**Accumulating.** :class:`MetricAccumulator` holds one monoid of :mod:`gyre.core.metrics`
per metric (MEAN -> ``Mean``, SUM -> ``Sum``, SINGLE -> ``Last``, MAX -> ``Max``, MIN ->
``Min``, STD -> ``Std``), with fixed shapes and dtypes, so a compiled step takes it and returns
it without ever compiling again. It is built for the step's speed: the metrics of one mode and
shape are stacked and updated by one vectorised merge, and everything travels packed in one
flat vector per dtype (usually a single buffer). ``init`` builds it empty from one step's
values (or their shapes); ``update`` merges one step in (inside ``jit``); ``compute`` reduces
it (device values, nothing read on the host); ``reset`` empties it; ``merge`` adds another's
steps. One class serves the epoch accumulator and the ``log_steps_every`` window alike.

**Counts.** MEAN weighs each step's value by the metric's ``count`` when it gives one, else
by ``default_count`` (the batch size): the value is a mean over ``count`` examples (jax_trainer
read a value with an explicit count as a *sum* over ``count`` examples; here pass the mean).
The other modes weigh every step alike; a ``count`` of 0 leaves the step out.

**CONCAT** values grow with the steps, so they cannot live in a carried fixed-shape state:
the step returns them (:meth:`ConcatCollector.select`) and a :class:`ConcatCollector` keeps the
device arrays on the host side, concatenated once at the end of the epoch.

**Names.** :func:`metric_names` routes metrics by phase and frequency and names them:

* training: ``train/<key>_step`` (every ``log_steps_every`` steps, ``LogFreq.STEP`` or
  ``ANY``) and ``train/<key>_epoch`` (``LogFreq.EPOCH`` or ``ANY``), for ``LogMode.TRAIN`` and
  ``ANY`` metrics;
* validation: ``val/<key>`` for ``VAL``, ``EVAL`` and ``ANY``; test: ``test/<key>`` for
  ``TEST``, ``EVAL`` and ``ANY``. Evaluation logs once per run whatever the ``log_freq``.
* a key holding ``/`` is taken as a full name and never prefixed: in training it still gets
  the ``_step`` / ``_epoch`` suffix (the two series stay apart), in evaluation it is kept as
  given (so give such a metric ``log_mode`` VAL or TEST, or its validation and test values
  share one name);
* ``<phase>/time`` (:func:`add_time`) is the seconds the epoch or evaluation took; no metric
  may take that name.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from gyre.trainer._modes import parse_metrics
    >>> out = {"loss": jnp.float32(2.0), "worst": {"value": jnp.float32(-3.0), "mode": "max"}}
    >>> specs, values = parse_metrics(out, where="a loss")
    >>> acc = MetricAccumulator.init(specs, values)
    >>> update = jax.jit(lambda acc, values: acc.update(specs, values, 4))
    >>> acc = update(acc, values)
    >>> acc = update(acc, {"loss": (jnp.float32(1.0), None), "worst": (jnp.float32(-5.0), None)})
    >>> named = name_metrics(acc.compute(), specs, "train", "epoch")
    >>> {k: v.tolist() for k, v in named.items()}
    {'train/loss_epoch': 1.5, 'train/worst_epoch': -3.0}
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
from gyre.trainer._modes import LogFreq, LogMetricMode, LogMode, MetricSpec

#: the monoid of each mode but CONCAT
MONOIDS: dict[LogMetricMode, type[Metric]] = {
    LogMetricMode.MEAN: Mean,
    LogMetricMode.SUM: Sum,
    LogMetricMode.SINGLE: Last,
    LogMetricMode.MAX: Max,
    LogMetricMode.MIN: Min,
    LogMetricMode.STD: Std,
}
PHASES = ("train", "val", "test")
FREQS = ("step", "epoch")
_PHASE_MODES = {
    "train": {LogMode.TRAIN, LogMode.ANY},
    "val": {LogMode.VAL, LogMode.EVAL, LogMode.ANY},
    "test": {LogMode.TEST, LogMode.EVAL, LogMode.ANY},
}
_FREQ_MODES = {"step": {LogFreq.STEP, LogFreq.ANY}, "epoch": {LogFreq.EPOCH, LogFreq.ANY}}

Values = Mapping[str, tuple[Any, Any]]


def _weight(monoid: type[Metric], count: Any, default_count: Any) -> jax.Array:
    """A step's weight as a float32 scalar: MEAN's ``count`` (else ``default_count``, the batch
    size); for the other modes 1, or 0 when ``count`` is 0 (presence only)."""
    if monoid is Mean:
        return jnp.asarray(default_count if count is None else count, jnp.float32)
    if count is None:
        return jnp.ones((), jnp.float32)
    return jnp.where(jnp.asarray(count) > 0, 1.0, 0.0).astype(jnp.float32)


def _merge_step(acc: Metric, value: jax.Array, weight: jax.Array) -> Metric:
    return acc.merge(type(acc).from_value(value, weight))


def _missing(key: str, what: str) -> ExplainedKeyError:
    return ExplainedKeyError(
        explain(
            f"metric {key!r} has no {what}",
            expected=f"a {what} for every metric of the accumulator",
            received=f"none for {key!r}",
            fix="return the same metrics at every step of a phase (a metric that only some "
            "steps have: give it 'count': 0 on the others)",
        )
    )


# -- the packed layout ---------------------------------------------------------------------------
#
# Speed, per compiled call: every buffer a call takes and returns costs (about a microsecond
# each on CPU), and so does every separate kernel. So the metrics of one mode, shape and dtype
# form a group whose monoid holds them stacked (leading axis: the group's metrics), updated by
# one vmapped merge: a few kernels per group, whatever the number of metrics. And all the
# groups' leaves travel packed, one flat vector per dtype. The layout, static and hashable,
# says where everything lives; unpacking is slicing, free inside XLA.


@dataclass(frozen=True)
class _Group:
    """Metrics of one mode, value shape and value dtype, stacked in one monoid whose leaves
    live at ``(buffer dtype, offset, shape)`` in the packed buffers."""

    monoid: type[Metric]
    keys: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    treedef: Any
    leaves: tuple[tuple[str, int, tuple[int, ...]], ...]


class _Layout:
    """The groups of an accumulator and its metrics' order: static, compared at every
    compiled call, so its hash is computed once and it compares by identity first."""

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
    """The monoids of the (non-CONCAT) metrics, packed: a compiled step's carry, of fixed
    shapes and dtypes, usually one buffer in all (see the module).

    Attributes:
        buffers: the packed leaves, one flat vector per dtype.
        layout: where each metric's monoid lives (static: part of the compiled program's key).

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
        """An empty accumulator for the non-CONCAT metrics of ``specs``, shaped like one step's
        ``values`` (``(value, count)`` pairs as :func:`parse_metrics` gives them; the values
        may be arrays, tracers or ``jax.ShapeDtypeStruct``: only their shapes are used).

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
        """The monoid of each metric (``acc.metrics["loss"].count`` is the weight seen).

        Example:
            >>> acc = MetricAccumulator.init({"n": MetricSpec("n", "sum")}, {"n": (0, None)})
            >>> type(acc.metrics["n"]).__name__
            'Sum'
        """
        found = {}
        for group, monoid in zip(self.layout.groups, _unpack(self.buffers, self.layout), strict=True):
            for i, key in enumerate(group.keys):
                found[key] = jax.tree.map(lambda leaf, i=i: leaf[i], monoid)
        return {key: found[key] for key in self.layout.keys}

    def update(
        self, specs: Mapping[str, MetricSpec], values: Values, default_count: Any
    ) -> MetricAccumulator:
        """The accumulator with one more step merged in (jittable; shapes and dtypes kept).

        Args:
            specs: the metrics' specs (keys the accumulator lacks are ignored, so a window
                accumulator of a few metrics takes the whole dict).
            values: ``(value, count)`` per metric, as :func:`parse_metrics` gives them.
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
            raise ValueError(
                explain(
                    f"metric {key!r} changed its mode",
                    expected=f"the mode it had when the accumulator was made "
                    f"({group.monoid.__name__})",
                    received=f"mode {spec.mode.name}",
                    fix="give a metric one mode in every step of a phase",
                )
            )
        value, count = values[key]
        if np.shape(value) != group.shape:
            raise ValueError(
                explain(
                    f"metric {key!r} changed its shape",
                    expected=f"values of shape {group.shape}, as at init",
                    received=f"a value of shape {np.shape(value)}",
                    fix="log values of one shape (pad a short batch, or reduce the value "
                    "to a number first)",
                )
            )
        return jnp.asarray(value).astype(group.dtype), count

    def merge(self, other: MetricAccumulator) -> MetricAccumulator:
        """Both accumulators' steps (e.g. a window folded into the epoch); same metrics.

        Example:
            >>> specs = {"n": MetricSpec("n", "sum")}
            >>> a = MetricAccumulator.init(specs, {"n": (0, None)}).update(specs, {"n": (2, None)}, 1)
            >>> a.merge(a).compute()["n"].tolist()
            4
        """
        if self.layout != other.layout:
            raise ValueError(
                explain(
                    "only accumulators of the same metrics merge",
                    expected=f"the metrics {list(self.layout.keys)}, of the same shapes",
                    received=f"the metrics {list(other.layout.keys)}",
                    fix="merge accumulators made by init from the same specs and values",
                )
            )
        mine, theirs = _unpack(self.buffers, self.layout), _unpack(other.buffers, other.layout)
        merged = [jax.vmap(type(a).merge)(a, b) for a, b in zip(mine, theirs, strict=True)]
        return self.replace(buffers=_pack(merged, self.layout))

    def compute(self) -> dict[str, jax.Array]:
        """Every metric reduced, as device values (nothing is read on the host), in the
        specs' order; one compiled program per layout when called outside ``jit``.

        Example:
            >>> MetricAccumulator.init({}, {}).compute()
            {}
        """
        return dict(zip(self.layout.keys, _compute(self.buffers, self.layout), strict=True))

    def reset(self) -> MetricAccumulator:
        """An empty accumulator of the same metrics, shapes and dtypes.

        Example:
            >>> specs = {"s": MetricSpec("s", "std")}
            >>> acc = MetricAccumulator.init(specs, {"s": (0.0, None)})
            >>> acc.update(specs, {"s": (3.0, None)}, 1).reset().metrics["s"].count.tolist()
            0.0
        """
        return self.replace(buffers={d: jnp.zeros_like(b) for d, b in self.buffers.items()})


class ConcatCollector:
    """Gathers the CONCAT metrics' per-step device arrays on the host side (a list per metric:
    no transfer, no wait) and concatenates them along the first axis in :meth:`compute`.

    A step's value of shape ``(b, ...)`` adds ``b`` rows, a scalar adds one;
    :meth:`add_stacked` takes the values of ``steps_per_call`` fused steps at once.

    Args:
        specs: the metrics' specs; the CONCAT ones are collected.

    Example:
        >>> import jax.numpy as jnp
        >>> specs = {"pred": MetricSpec("pred", "concat"), "loss": MetricSpec("loss")}
        >>> collector = ConcatCollector(specs)
        >>> collector.add({"pred": jnp.array([1, 2])})
        >>> collector.add({"pred": (jnp.array([3]), None)})   # a (value, count) pair works too
        >>> collector.compute()["pred"].tolist()
        [1, 2, 3]
    """

    def __init__(self, specs: Mapping[str, MetricSpec]) -> None:
        self.keys = tuple(k for k, s in specs.items() if s.mode is LogMetricMode.CONCAT)
        self._parts: dict[str, list[tuple[Any, bool]]] = {k: [] for k in self.keys}

    @staticmethod
    def select(specs: Mapping[str, MetricSpec], values: Values) -> dict[str, Any]:
        """The CONCAT metrics' values, for a compiled step to return (jittable).

        Example:
            >>> ConcatCollector.select({"p": MetricSpec("p", "concat")}, {"p": (7, None)})
            {'p': 7}
        """
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
        """Keeps one step's CONCAT values (arrays, or ``(value, count)`` pairs); other
        metrics' values are ignored.

        Example:
            >>> collector = ConcatCollector({"p": MetricSpec("p", "concat")})
            >>> collector.add({"p": 1.0, "loss": 0.5})
            >>> collector.compute()["p"].tolist()
            [1.0]
        """
        self._add(values, stacked=False)

    def add_stacked(self, values: Mapping[str, Any]) -> None:
        """Keeps the CONCAT values of several fused steps (leading axis: the steps).

        Example:
            >>> import jax.numpy as jnp
            >>> collector = ConcatCollector({"p": MetricSpec("p", "concat")})
            >>> collector.add_stacked({"p": jnp.array([[1, 2], [3, 4]])})   # 2 steps of 2 rows
            >>> collector.compute()["p"].tolist()
            [1, 2, 3, 4]
        """
        self._add(values, stacked=True)

    def compute(self) -> dict[str, jax.Array]:
        """Every CONCAT metric's rows so far, one device array each (a zero-length float32
        array for a metric with no step). Reads no value.

        Raises:
            ValueError: a metric's rows have different shapes.

        Example:
            >>> ConcatCollector({"p": MetricSpec("p", "concat")}).compute()["p"].shape
            (0,)
        """
        out = {}
        for key, parts in self._parts.items():
            rows = [_rows(v, stacked) for v, stacked in parts]
            if not rows:
                out[key] = jnp.zeros((0,), jnp.float32)
                continue
            shapes = {tuple(np.shape(r)[1:]) for r in rows}
            if len(shapes) > 1:
                raise ValueError(
                    explain(
                        f"CONCAT metric {key!r} has rows of different shapes",
                        expected="values of one shape after the first axis",
                        received=f"rows of shapes {sorted(shapes)}",
                        fix="log values of one shape per metric (pad or reduce them first)",
                    )
                )
            out[key] = rows[0] if len(rows) == 1 else jnp.concatenate(rows)
        return out

    def reset(self) -> None:
        """Forgets every value (at the start of an epoch or a window).

        Example:
            >>> collector = ConcatCollector({"p": MetricSpec("p", "concat")})
            >>> collector.add({"p": 1.0}); collector.reset()
            >>> collector.compute()["p"].tolist()
            []
        """
        self._parts = {k: [] for k in self.keys}


def _rows(value: Any, stacked: bool) -> jax.Array:
    value = jnp.asarray(value)
    if not stacked:
        return jnp.atleast_1d(value)
    if value.ndim <= 1:
        return value
    return value.reshape((value.shape[0] * value.shape[1],) + value.shape[2:])


# -- names and routing ---------------------------------------------------------------------------


def _phase_freq(phase: Any, freq: Any) -> None:
    if phase not in PHASES or freq not in FREQS:
        raise ValueError(
            explain(
                f"unknown phase {phase!r} or frequency {freq!r}",
                expected=f"phase in {PHASES} and freq in {FREQS}",
                received=f"phase={describe(phase)}, freq={describe(freq)}",
                fix="e.g. metric_names(specs, 'val', 'epoch')",
            )
        )
    if phase != "train" and freq == "step":
        raise ValueError(
            explain(
                f"{phase} metrics are logged once per evaluation, not per step",
                expected="freq='epoch' for the phases 'val' and 'test'",
                received=f"phase={phase!r}, freq='step'",
                fix=f"metric_names(specs, {phase!r}, 'epoch')",
            )
        )


def logged_name(key: str, phase: str, freq: str = "epoch") -> str:
    """The name a metric is logged under (see the module for the rules).

    Example:
        >>> logged_name("acc", "train", "step"), logged_name("acc", "test")
        ('train/acc_step', 'test/acc')
        >>> logged_name("custom/acc", "train", "epoch"), logged_name("custom/acc", "val")
        ('custom/acc_epoch', 'custom/acc')
    """
    _phase_freq(phase, freq)
    base = key if "/" in key else f"{phase}/{key}"
    return f"{base}_{freq}" if phase == "train" else base


def time_name(phase: str) -> str:
    """``<phase>/time``: the seconds an epoch or evaluation took.

    Example:
        >>> time_name("val")
        'val/time'
    """
    _phase_freq(phase, "epoch")
    return f"{phase}/time"


def metric_names(
    specs: Mapping[str, MetricSpec], phase: str, freq: str = "epoch"
) -> dict[str, str]:
    """The metrics logged in ``phase`` at ``freq``, by key: ``{key: logged name}``.

    ``LogMode`` picks the phases (TRAIN, VAL, TEST, EVAL = val and test, ANY); in training,
    ``LogFreq`` picks ``"step"`` (STEP, ANY) or ``"epoch"`` (EPOCH, ANY).

    Raises:
        ValueError: an unknown phase or frequency, ``"step"`` for an evaluation phase, two
            metrics with one name, or a metric named ``<phase>/time``.

    Example:
        >>> specs = {"loss": MetricSpec("loss"), "v": MetricSpec("v", log_mode="val"),
        ...          "t": MetricSpec("t", log_mode="test"), "s": MetricSpec("s", log_freq="step")}
        >>> metric_names(specs, "train", "step")
        {'loss': 'train/loss_step', 's': 'train/s_step'}
        >>> metric_names(specs, "val"), metric_names(specs, "test")
        ({'loss': 'val/loss', 'v': 'val/v', 's': 'val/s'}, {'loss': 'test/loss', 't': 'test/t', 's': 'test/s'})
    """
    _phase_freq(phase, freq)
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    reserved = time_name(phase)
    for key, spec in specs.items():
        if spec.log_mode not in _PHASE_MODES[phase]:
            continue
        if phase == "train" and spec.log_freq not in _FREQ_MODES[freq]:
            continue
        name = logged_name(key, phase, freq)
        if name == reserved or name in owner:
            other = "the epoch's duration" if name == reserved else f"metric {owner[name]!r}"
            raise ValueError(
                explain(
                    f"metric {key!r} would be logged as {name!r}, the name of {other}",
                    expected="one name per metric in a phase",
                    received=f"{key!r} -> {name!r}",
                    fix=f"rename metric {key!r}, or give it a log_mode that keeps it out of "
                    f"the {phase} phase",
                )
            )
        owner[name] = key
        names[key] = name
    return names


def select_specs(
    specs: Mapping[str, MetricSpec], phase: str, freq: str = "epoch"
) -> dict[str, MetricSpec]:
    """The specs of the metrics logged in ``phase`` at ``freq`` (to make a smaller
    accumulator, e.g. the window accumulator of the STEP metrics).

    Example:
        >>> specs = {"a": MetricSpec("a", log_freq="epoch"), "b": MetricSpec("b")}
        >>> list(select_specs(specs, "train", "step"))
        ['b']
    """
    return {key: specs[key] for key in metric_names(specs, phase, freq)}


def name_metrics(
    computed: Mapping[str, Any], specs: Mapping[str, MetricSpec], phase: str, freq: str = "epoch"
) -> dict[str, Any]:
    """The computed values (accumulator and collector, by key) of the metrics logged in
    ``phase`` at ``freq``, under their logged names; values are passed through untouched.

    Raises:
        KeyError: a metric routed to this phase has no computed value.

    Example:
        >>> name_metrics({"acc": 0.5, "v": 1.0}, {"acc": MetricSpec("acc"),
        ...              "v": MetricSpec("v", log_mode="val")}, "test")
        {'test/acc': 0.5}
    """
    out = {}
    for key, name in metric_names(specs, phase, freq).items():
        if key not in computed:
            raise _missing(key, "computed value")
        out[name] = computed[key]
    return out


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is one number (a Python or numpy number, or a 0-d numeric array):
    what writers and the metric files take. Reads no value.

    Example:
        >>> import jax.numpy as jnp
        >>> is_scalar(1.5), is_scalar(jnp.ones(())), is_scalar(jnp.ones(2))
        (True, True, False)
    """
    if isinstance(value, numbers.Real):
        return True
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(value, "shape", None) != ():
        return False
    try:
        return np.dtype(dtype).kind in "biuf"
    except TypeError:
        return False


def scalars_for_writers(
    metrics: Mapping[str, Any], specs: Mapping[str, MetricSpec]
) -> dict[str, Any]:
    """The entries of ``metrics`` (by logged name) that writers and the metric files take:
    numbers and 0-d arrays, never a CONCAT metric nor an array (callbacks get everything).
    Reads no value.

    Example:
        >>> import jax.numpy as jnp
        >>> specs = {"p": MetricSpec("p", "concat"), "c": MetricSpec("c", "sum")}
        >>> metrics = {"val/p": jnp.ones(3), "val/c": jnp.ones(()), "val/time": 1.5,
        ...            "val/per_class": jnp.ones(2)}
        >>> list(scalars_for_writers(metrics, specs))
        ['val/c', 'val/time']
    """
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
    """``metrics`` with ``<phase>/time``: the seconds the epoch or evaluation took, a host
    number measured by the trainer.

    Example:
        >>> add_time({"train/loss_epoch": 0.5}, "train", 12.5)
        {'train/loss_epoch': 0.5, 'train/time': 12.5}
    """
    name = time_name(phase)
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(
            explain(
                f"{name} must be a host number of seconds",
                expected="a float such as time.perf_counter() - start",
                received=describe(seconds),
                fix="measure the time on the host with time.perf_counter()",
            )
        )
    if name in metrics:
        raise ValueError(
            explain(
                f"{name!r} is already a metric",
                expected=f"no metric named {name!r} (it is the phase's duration)",
                received=f"the metrics {', '.join(map(repr, metrics))}",
                fix="rename that metric",
            )
        )
    return {**metrics, name: float(seconds)}
