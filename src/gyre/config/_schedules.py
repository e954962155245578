"""Learning-rate schedules built from config sections.

A learning rate is a number (a constant) or a section whose ``class_name`` is registered in
:data:`~gyre.config.SCHEDULES`, under both its short and ``Schedule``-suffixed name
(``Cosine``, ``CosineSchedule``). Each is an ``optax.Schedule`` (pure ``jax.numpy``), exact at
the values its docstring names, holding its last value past its total.
"""

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import optax

from gyre.config._phased_schedules import ExponentialSchedule, WarmupCosineDecaySchedule
from gyre.config._registry import SCHEDULES
from gyre.config._sections import (
    at,
    call_section,
    class_name_of,
    flag,
    here,
    real,
    run_length,
    who,
    whole,
)
from gyre.config._simple_schedules import ConstantSchedule, CosineSchedule, LinearSchedule, close
from gyre.core._errors import describe, explain
from gyre.core._lr_schedule import phases, total_steps

#: What a config may write for a learning rate: a number or a schedule section.
ScheduleConfig = float | Mapping[str, Any]


def ConcatSchedule(  # noqa: N802
    *,
    schedules: Mapping[str, ScheduleConfig] | list[ScheduleConfig],
    boundaries: list[int] | None = None,
    init_value: float | None = None,
    end_value: float | None = None,
    steps: int | None = None,
    check_continuity: bool | None = None,
) -> optax.Schedule:
    """Schedules one after another, each called with the steps since it took over.

    ``schedules`` is either a mapping of names to sections, each with its ``steps`` (the
    kpoeppel fork's form; ``steps`` is their sum and ``check_continuity``, default true, refuses
    a jump at a boundary), or a list of schedules with ``boundaries``, the absolute steps at
    which ``schedules[i + 1]`` takes over.
    """
    named = isinstance(schedules, Mapping)
    if isinstance(schedules, str) or not isinstance(schedules, (Sequence, Mapping)) or not schedules:
        raise TypeError(explain(
            f"{here('schedules')} must be a non-empty mapping (or list) of schedules",
            expected="names to schedule sections with steps (or a list of numbers or sections, with boundaries)",
            received=describe(schedules),
            fix="write schedules: {warmup: {class_name: Linear, ..., steps: 100}, decay: {class_name: Cosine, ..., steps: 900}}"))
    check = flag("check_continuity", named if check_continuity is None else check_continuity)
    if named:
        names = [str(k) for k in schedules]
        built, lengths = _named_parts(schedules, boundaries)  # type: ignore[arg-type]
        total: int | None = sum(lengths)
    else:
        names = [f"schedules[{i}]" for i in range(len(schedules))]
        marks = _boundaries(boundaries, len(schedules))
        built = [build_schedule(s, where=here(f"schedules[{i}]")) for i, s in enumerate(schedules)]
        last = total_steps(built[-1])
        total = None if last is None else (marks[-1] if marks else 0) + last
        lengths = [b - a for a, b in zip([0, *marks], marks, strict=False)] + [last]  # type: ignore[list-item]
    if steps is not None:
        declared = whole("steps", steps, minimum=1)
        if total is not None and declared != total:
            raise ValueError(explain(
                f"{here('steps')} must be the sum of the schedules' steps",
                expected=f"steps: {total} ({' + '.join(f'{n}: {k}' for n, k in zip(names, lengths, strict=False))})",
                received=f"steps: {declared}",
                fix=f"write steps: {total}, or change the schedules' steps to add up to {declared}"))
        total = declared
    if check:
        _check_continuity(names, built, lengths, init_value, end_value)
    return phases(list(zip(lengths, built, strict=True)), None, total=total)


def _named_parts(schedules: Mapping[str, Any], boundaries: object) -> tuple[list[Any], list[int]]:
    if boundaries is not None:
        raise ValueError(explain(
            f"{here('boundaries')} does not go with named schedules",
            expected="each named schedule's own steps (it takes over where the one before it ends)",
            received=f"boundaries: {describe(boundaries)}",
            fix="drop boundaries, or write schedules as a list"))
    built, lengths = [], []
    with run_length(None):  # a part's length is never the run's
        for key, section in schedules.items():
            part = build_schedule(section, where=here(f"schedules.{key}"))
            n = total_steps(part)
            if n is None:
                raise ValueError(explain(
                    f"{here(f'schedules.{key}')} needs steps: each named schedule of a ConcatSchedule has a length",
                    expected="steps: <its number of steps> in the section", received=describe(section),
                    fix=f"add steps to schedules.{key}"))
            built.append(part)
            lengths.append(n)
    return built, lengths


def _boundaries(boundaries: object, count: int) -> list[int]:
    if isinstance(boundaries, (str, Mapping)) or not isinstance(boundaries, Sequence):
        raise TypeError(explain(
            f"{here('boundaries')} must be a list of ints (with a list of schedules)",
            expected="a list of steps", received=describe(boundaries),
            fix="write boundaries: [100, 500], or schedules as a mapping of names to sections with steps"))
    marks = [whole(f"boundaries[{i}]", b, minimum=1) for i, b in enumerate(boundaries)]
    if len(marks) != count - 1:
        raise ValueError(explain(
            f"{here('boundaries')} needs one boundary between each two schedules",
            expected=f"{count - 1} boundaries for {count} schedules",
            received=f"{len(marks)} boundaries: {marks}",
            fix="give the absolute step at which each schedule after the first starts"))
    if any(a <= b for b, a in zip(marks, marks[1:], strict=False)):
        raise ValueError(explain(
            f"{here('boundaries')} must be strictly increasing (they are cumulative: absolute steps)",
            expected="e.g. [100, 600] for 100 steps of the first schedule and 500 of the second",
            received=str(marks),
            fix="write each boundary as the step where its schedule starts, counted from 0"))
    return marks


def _check_continuity(
    names: list[str], built: list[Any], lengths: list[int | None], init: object, end: object
) -> None:
    def value(schedule: Any, step: int) -> float:
        return float(schedule(jnp.int32(step)))

    def jump(what: str, want: float, got: float, fix: str) -> ValueError:
        return ValueError(explain(
            f"{who('ConcatSchedule')} jumps {what} (check_continuity is on)",
            expected=f"{want!r}", received=f"{got!r}",
            fix=fix + ", or set check_continuity: false if the jump is meant"))

    if init is not None and not close(value(built[0], 0), real("init_value", init)):
        raise jump(f"at step 0: init_value is {init!r} but {names[0]} starts elsewhere",
                   real("init_value", init), value(built[0], 0), f"make init_value and {names[0]}'s start equal")
    at = 0
    for i in range(1, len(built)):
        at += lengths[i - 1]  # type: ignore[operator]
        left, right = value(built[i - 1], lengths[i - 1]), value(built[i], 0)  # type: ignore[arg-type]
        if not close(left, right):
            raise jump(f"at step {at}: {names[i - 1]} ends at {left!r}, {names[i]} starts at {right!r}",
                       left, right, f"start {names[i]} at {left!r} (its init_value)")
    if end is not None and lengths[-1] is not None:
        last = value(built[-1], lengths[-1])
        if not close(last, real("end_value", end)):
            raise jump(f"at its end: end_value is {end!r} but {names[-1]} ends at {last!r}",
                       real("end_value", end), last, f"make end_value and {names[-1]}'s end equal")


def build_schedule(
    value: object, *, where: str = "optimizer.learning_rate", run_steps: int | None = None
) -> optax.Schedule:
    """The schedule a config value describes: a number, a schedule section, or a built schedule.

    Args:
        value: the config value.
        where: its dotted path, for error messages.
        run_steps: the length of a schedule that leaves its ``steps`` out (``None``: the length
            :func:`~gyre.config.run_length` set, else such a schedule is an error).

    Example:
        >>> import jax.numpy as jnp
        >>> s = build_schedule({"class_name": "WarmupCosineDecaySchedule", "init_value": 0.0,
        ...                     "peak_value": 0.001, "warmup_steps": 200, "decay_steps": 1555,
        ...                     "steps": 1755, "decay_factor": 0.1})
        >>> [float(s(i)) for i in (0, 200, 1755)] == [0.0, float(jnp.float32(1e-3)), float(jnp.float32(1e-4))]
        True
    """
    if run_steps is not None:
        with run_length(whole("run_steps", run_steps, minimum=1)):
            return build_schedule(value, where=where)
    if isinstance(value, Mapping):
        name = class_name_of(value, where=where, registry=SCHEDULES)
        target = SCHEDULES.get(name, where=f"{where}.class_name")
        return call_section(target, name, value, where=where)
    if isinstance(value, (numbers.Real, str)) and not isinstance(value, bool):
        with at(where):
            return ConstantSchedule(value=real("", value))  # type: ignore[arg-type]
    if callable(value):
        return value  # type: ignore[return-value]
    raise TypeError(explain(
        f"{where} must be a number or a schedule section",
        expected=f"a float, or a mapping with class_name one of: {', '.join(SCHEDULES)}",
        received=describe(value),
        fix=f"write {where.rsplit('.', 1)[-1]}: 0.001, or a section such as {{class_name: Cosine, init_value: 0.001, decay_steps: 1000}}"))


__all__ = [
    "ConcatSchedule",
    "ConstantSchedule",
    "CosineSchedule",
    "ExponentialSchedule",
    "LinearSchedule",
    "ScheduleConfig",
    "WarmupCosineDecaySchedule",
    "build_schedule",
]
