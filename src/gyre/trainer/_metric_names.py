"""The names metrics are logged under, routed by phase and frequency: ``train/<key>_step``,
``train/<key>_epoch``, ``val/<key>``, ``test/<key>``. A key holding ``/`` is not prefixed (in
training it still gets the suffix); ``<phase>/time`` is reserved for the phase's seconds.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from gyre.core._errors import ExplainedKeyError, describe, explain
from gyre.core._host import numeric_dtype
from gyre.trainer._modes import LogFreq, LogMetricMode, LogMode, MetricSpec

PHASES = ("train", "val", "test")
FREQS = ("step", "epoch")
_PHASE_MODES = {
    "train": {LogMode.TRAIN, LogMode.ANY},
    "val": {LogMode.VAL, LogMode.EVAL, LogMode.ANY},
    "test": {LogMode.TEST, LogMode.EVAL, LogMode.ANY},
}
_FREQ_MODES = {"step": {LogFreq.STEP, LogFreq.ANY}, "epoch": {LogFreq.EPOCH, LogFreq.ANY}}


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
        if spec.log_mode not in _PHASE_MODES[phase]:
            continue
        if phase == "train" and spec.log_freq not in _FREQ_MODES[freq]:
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
    if isinstance(value, numbers.Real):
        return True
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(value, "shape", None) != ():
        return False
    return numeric_dtype(dtype)


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
