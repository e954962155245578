"""The kpoeppel jax_trainer fork's metric dicts: :func:`update_metrics` folds a step's metrics
into ``<name>_step`` / ``<name>_epoch`` entries of running sums, :func:`get_metrics` reduces
and resets them. Unlike the fork, a MEAN with a ``count`` is a mean, a reset MAX / MIN starts
empty, and STD is exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax.core import FrozenDict, freeze, unfreeze

from gyre.core._errors import describe, explain
from gyre.core.metrics import Mean, Metric, Std, Sum
from gyre.trainer._metrics import FREQ_MODES, MONOIDS, PHASE_MODES
from gyre.trainer._modes import LogFreq, LogMetricMode, LogMode, MetricSpec, parse_metrics

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
        if mode is LogMetricMode.STD:
            entry["value2"] = entry.get("value2", 0.0) + value * value
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
        m2 = jnp.maximum(jnp.asarray(entry.get("value2", 0.0), jnp.float32) - count * mean * mean, 0.0)
        return Std(count=count, shift=jnp.zeros_like(mean), mean=mean, m2=m2)
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
                field: jnp.zeros_like(entries[key][field]) for field in ("value", "count", "value2")
                if field in entries[key]
            }}
    return freeze(entries), host
