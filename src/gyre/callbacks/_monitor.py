"""The one improvement monitor of every early stopping and best-model ranking."""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

import numpy as np

from gyre.core._checks import real
from gyre.core._errors import ExplainedKeyError, describe, explain, suggest
from gyre.core._host import fetch, to_python
from gyre.core._logs import Logs


def check_name(monitor: Any, problem: str, example: str, fix: str, *, optional: bool = False) -> Any:
    """``monitor`` when it names a logged value (or is None when ``optional``), else a TypeError saying ``problem``."""
    if (isinstance(monitor, str) and monitor) or (optional and monitor is None):
        return monitor
    raise TypeError(explain(problem, expected=f"a logged name, e.g. {example}", received=describe(monitor), fix=fix))


def find(logs: Logs | None, monitor: str, *, owner: str, step: int, fix: str) -> Any:
    """The value logged as ``monitor`` (``"name"`` or ``"collection.name"``), else an error listing the logged entries."""
    found, value = (False, None) if logs is None else logs.lookup(monitor)
    if found:
        return value
    available = [] if logs is None else sorted({f"{c}.{n}" for c, n, _ in logs.entries()})
    raise ExplainedKeyError(explain(
        f"{owner} monitors {monitor!r}, which was not logged at step {step}",
        expected=f"an entry named {monitor!r} in the logs when {owner} runs",
        received=f"entries {available}" if logs is not None else "no logs (logs=None)", fix=fix))


def as_number(value: Any, monitor: str, *, owner: str, step: int) -> float:
    """A monitored value read as one float (a scalar or one-value array); the shape is checked before any transfer."""
    shape = tuple(np.shape(value))  # read from the array's metadata: no transfer
    dtype = getattr(value, "dtype", None)
    if math.prod(shape) != 1:
        kind = f"an array of shape {shape}" + (f" ({dtype})" if dtype is not None else "")
        raise ValueError(explain(
            f"{owner} monitors {monitor!r}, which is not a single number at step {step}",
            expected=f"a scalar logged as {monitor!r} (a loss or a metric averaged over the batch)",
            received=kind, fix=f"log one number under {monitor!r}, e.g. logs.add_metric(name, "
            "values.mean()), or monitor another entry"))
    host = to_python(np.reshape(fetch(value), ()))
    if isinstance(host, bool) or not isinstance(host, (int, float)):
        raise TypeError(explain(
            f"{owner} monitors {monitor!r}, which is not a number at step {step}",
            expected="an int or float value (a loss or a metric)", received=describe(value),
            fix=f"log a number under {monitor!r}, or monitor another entry"))
    return float(host)


# Words of a monitored name (or, to maximise, its start) that imply its mode.
MAX_WORDS = ("acc", "accuracy", "auc", "f1", "precision", "recall", "iou", "score", "r2")
MIN_WORDS = ("loss", "error", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl", "ce")


def monitor_mode(owner: str, monitor: str | None, mode: Any, *, strict: bool = True, auto: bool = True) -> str:
    """``mode`` checked once for ``owner``; ``"auto"`` (when allowed) is ``"max"`` when a word of the
    name's last part is one of :data:`MAX_WORDS`, else ``"min"``; when ``strict``, a mode against the name is an error."""
    choices = ("min", "max", "auto") if auto else ("min", "max")
    if not isinstance(mode, str) or mode not in choices:
        named = f": unknown mode {mode!r}.{suggest(mode, choices)}" if isinstance(mode, str) else ""
        raise ValueError(explain(
            f"{owner}'s mode must be {', '.join(map(repr, choices[:-1]))} or {choices[-1]!r}{named}",
            expected="'min' (lower is better: a loss) or 'max' (higher is better: an accuracy)"
            + (", or 'auto' (from the monitored name)" if auto else "") + "; any other mode is not known",
            received=describe(mode), fix="pass mode='min' for a loss or mode='max' for an accuracy"
            + (" (or leave mode out: it is taken from the name)" if auto else "")))
    base = re.split(r"[./]", monitor or "")[-1].lower()  # after a collection's "metrics." or a prefix's "val/"
    words = base.split("_")
    implied = ("max" if any(w in words or base.startswith(w) for w in MAX_WORDS)
               else "min" if any(w in words for w in MIN_WORDS) else None)
    if mode == "auto":
        return implied or "min"
    if strict and implied is not None and mode != implied:
        kept, better = ("lowest", "higher") if mode == "min" else ("highest", "lower")
        raise ValueError(explain(
            f"{owner}: mode {mode!r} on {monitor!r} keeps the {kept} value, but its name says mode "
            f"{implied!r} ({better} is better)",
            expected=f"mode: {implied} for {monitor} (or leave mode out: it is taken from the name)",
            received=f"mode: {mode}", fix=f"set mode: {implied}; if {kept.replace('est', 'er')} really is better for "
            "this metric, log it under a name that says so"))
    return mode


def check_min_delta(owner: str, min_delta: Any) -> float:
    """``min_delta`` as a float >= 0, else an error naming ``owner``."""
    return real(min_delta, "min_delta", minimum=0, problem=f"{owner}'s min_delta must be a number >= 0",
                expected="min_delta=0.001 (how much better a value must be to count)",
                fix="pass a non-negative float, e.g. min_delta=0.001 (0 counts any improvement; the "
                "direction comes from mode)")


def check_baseline(owner: str, baseline: Any) -> float | None:
    """``baseline`` as a float (a 0-d array read once), or ``None``; else an error naming ``owner``."""
    if baseline is None:
        return None
    plain = isinstance(baseline, numbers.Real) and not isinstance(baseline, (bool, np.bool_))
    zero_d = getattr(baseline, "shape", None) == () and getattr(getattr(baseline, "dtype", None), "kind", "") in ("i", "u", "f")
    if (plain or zero_d) and not math.isnan(float(baseline)):
        return float(baseline)
    raise ValueError(explain(
        f"{owner}'s baseline must be a number or None",
        expected="the value to beat, e.g. baseline=0.5 for a loss (mode='min') or "
        "baseline=0.9 for an accuracy (mode='max'); None for no baseline",
        received=describe(baseline), fix="pass the monitored value's threshold as a float, e.g. baseline=0.5"))


def score(mode: str, value: Any) -> float:
    """``value`` ranked, higher is better (``-value`` in ``"min"`` mode); a non-number or NaN ranks last (``-inf``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        return -math.inf
    return float(value) if mode == "max" else -float(value)


class Improvement:
    """Strictly beyond ``best`` by ``min_delta`` (times ``|best|`` when relative); NaN never improves."""

    def __init__(
        self, mode: str, *, min_delta: float = 0.0, relative: bool = False, patience: Any = None,
        baseline: float | None = None,
    ) -> None:
        self.mode, self.min_delta, self.relative = mode, min_delta, relative
        self.patience, self.baseline = patience, baseline
        self.best: float | None = baseline
        self.wait = 0

    def update(self, value: float) -> bool:
        """Records ``value`` (a new ``best`` and ``wait`` back to 0, or one more in ``wait``); whether it improved."""
        margin = self.min_delta * abs(self.best) if self.relative and self.best is not None else self.min_delta
        if not math.isnan(value) and (
            self.best is None or (value < self.best - margin if self.mode == "min" else value > self.best + margin)
        ):
            self.best, self.wait = value, 0
            return True
        self.wait += 1
        return False

    @property
    def exhausted(self) -> bool:
        """Whether ``wait`` reached a whole-number ``patience``."""
        return isinstance(self.patience, int) and self.wait >= self.patience
