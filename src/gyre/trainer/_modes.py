"""jax_trainer's metric options (reduction, frequency, phases) and :func:`parse_metrics`, which
reads a loss function's metrics dict: names to values or to ``{"value": v, "mode": ...,
"log_freq": ..., "log_mode": ..., "count": ...}`` (defaults MEAN, ANY, ANY, no count); enum
names are accepted in any case.
"""

from __future__ import annotations

import enum
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gyre.core._checks import instance, scalar
from gyre.core._errors import describe, explain, suggest
from gyre.core._host import numeric_dtype


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
