"""What checkpoint and early stopping share: finding the monitored entry in the logs and
reading it as one number, with errors that name the entry."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from gyre.core._errors import ExplainedKeyError, describe, explain
from gyre.core._host import fetch, to_python
from gyre.core._logs import Logs

# Words that name a value to maximise, as a word of the monitored name ("accuracy_test",
# "val_f1") or its start ("acc1"); words of a name to minimise (a loss, an error).
MAX_WORDS = ("acc", "accuracy", "auc", "f1", "precision", "recall", "iou", "score", "r2")
MIN_WORDS = ("loss", "error", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl", "ce")


def implied_mode(monitor: str) -> str | None:
    """The mode a monitored name implies: ``"max"`` (a word of :data:`MAX_WORDS`), ``"min"``
    (a word of :data:`MIN_WORDS`) or ``None``. Only the last part of the name counts (after a
    collection's ``"metrics."`` or a prefix's ``"val/"``).

    Example:
        >>> implied_mode("val/acc"), implied_mode("metrics.loss_test"), implied_mode("foo")
        ('max', 'min', None)
    """
    base = re.split(r"[./]", monitor)[-1].lower()
    words = base.split("_")
    if any(word in words or base.startswith(word) for word in MAX_WORDS):
        return "max"
    return "min" if any(word in words for word in MIN_WORDS) else None


def auto_mode(monitor: str) -> str:
    """``"max"`` when the monitored name says higher is better (:func:`implied_mode`), else
    ``"min"``: the one rule of gyre's early stopping, the trainer's monitors and jaxloop's stop
    handler. A name that implies nothing (``"foo"``) is minimised.

    Example:
        >>> auto_mode("accuracy_test"), auto_mode("metrics.val_f1"), auto_mode("eval/accuracy"), auto_mode("foo")
        ('max', 'max', 'max', 'min')
    """
    return implied_mode(monitor) or "min"


def find(logs: Logs | None, monitor: str, *, owner: str, step: int, fix: str) -> Any:
    """The value logged as ``monitor`` (``"name"`` or ``"collection.name"``), else an
    :class:`~gyre.core._errors.ExplainedKeyError` listing the logged entries.

    Example:
        >>> from gyre.core._logs import Logs
        >>> find(Logs().add_loss("loss", 0.5), "loss", owner="early_stopping", step=0, fix="")
        0.5
    """
    found, value = (False, None) if logs is None else logs.lookup(monitor)
    if found:
        return value
    available = [] if logs is None else sorted({f"{c}.{n}" for c, n, _ in logs.entries()})
    raise ExplainedKeyError(
        explain(
            f"{owner} monitors {monitor!r}, which was not logged at step {step}",
            expected=f"an entry named {monitor!r} in the logs when {owner} runs",
            received=f"entries {available}" if logs is not None else "no logs (logs=None)",
            fix=fix,
        )
    )


def as_number(value: Any, monitor: str, *, owner: str, step: int) -> float:
    """Reads a monitored value as one float; its shape is checked before any transfer.

    A single number is a scalar, or any array holding one value (shape ``(1,)``).

    Example:
        >>> import jax.numpy as jnp
        >>> as_number(jnp.float32(0.25), "loss", owner="early_stopping", step=3)
        0.25
        >>> as_number(jnp.ones(3), "loss", owner="early_stopping", step=3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: early_stopping monitors 'loss', which is not a single number at step 3...
    """
    shape = tuple(np.shape(value))  # read from the array's metadata: no transfer
    dtype = getattr(value, "dtype", None)
    if math.prod(shape) != 1:
        kind = f"an array of shape {shape}" + (f" ({dtype})" if dtype is not None else "")
        raise ValueError(
            explain(
                f"{owner} monitors {monitor!r}, which is not a single number at step {step}",
                expected=f"a scalar logged as {monitor!r} (a loss or a metric averaged over "
                "the batch)",
                received=kind,
                fix=f"log one number under {monitor!r}, e.g. logs.add_metric(name, "
                "values.mean()), or monitor another entry",
            )
        )
    host = to_python(np.reshape(fetch(value), ()))
    if isinstance(host, bool) or not isinstance(host, (int, float)):
        raise TypeError(
            explain(
                f"{owner} monitors {monitor!r}, which is not a number at step {step}",
                expected="an int or float value (a loss or a metric)",
                received=describe(value),
                fix=f"log a number under {monitor!r}, or monitor another entry",
            )
        )
    return float(host)


def monitor_mode(owner: str, monitor: str, mode: str) -> str:
    """The mode of a callback that keeps the best ``monitor`` (a logged name such as
    ``"val/acc"``): ``"auto"`` takes the one its name implies (``"max"`` for an accuracy,
    ``"min"`` for a loss or an error, and ``"min"`` for a name that implies neither); a given
    mode against the name (``"min"`` on ``"val/acc"``: the worst model kept) is an error.

    Example:
        >>> monitor_mode("ModelCheckpoint", "val/acc", "auto"), monitor_mode("ModelCheckpoint", "val/foo", "max")
        ('max', 'max')
        >>> monitor_mode("ModelCheckpoint", "val/acc", "min")
        Traceback (most recent call last):
        ValueError: ModelCheckpoint: mode 'min' on 'val/acc' keeps the lowest value, but its name says mode 'max' (higher is better)
        ...
    """
    implied = implied_mode(monitor)
    if mode == "auto":
        return implied or "min"
    if implied is not None and mode != implied:
        kept, better = ("lowest", "higher") if mode == "min" else ("highest", "lower")
        raise ValueError(
            explain(
                f"{owner}: mode {mode!r} on {monitor!r} keeps the {kept} value, but its name says mode "
                f"{implied!r} ({better} is better)",
                expected=f"mode: {implied} for {monitor} (or leave mode out: it is taken from the name)",
                received=f"mode: {mode}",
                fix=f"set mode: {implied}; if {kept.replace('est', 'er')} really is better for this "
                "metric, log it under a name that says so",
            )
        )
    return mode
