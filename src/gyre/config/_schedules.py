"""Learning-rate schedules built from config sections.

A learning rate is a number (a constant) or a section whose ``class_name`` is registered in
:data:`~gyre.config.SCHEDULES`, under both its short and ``Schedule``-suffixed name
(``Cosine``, ``CosineSchedule``). Each is an ``optax.Schedule`` (pure ``jax.numpy``), exact at
the values its docstring names (each phase's end too), holding its last value past its total,
and carries ``total_steps`` (``None`` when it has no length). They take jax_trainer's keys
(``init_value``, ``end_value``, ``steps``, ``decay_factor``) beside optax's.
"""

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import optax

from gyre.config._components import (
    RunLengthUnknown,
    at,
    call_section,
    class_name_of,
    flag,
    here,
    length,
    real,
    run_length,
    run_steps,
    who,
    whole,
)
from gyre.config._registry import SCHEDULES
from gyre.core._errors import describe, explain
from gyre.core._lr_schedule import phases, total_steps

_F32 = jnp.float32


def ramp(a: float, b: float, n: int) -> Any:
    """The piece from ``a`` to ``b`` over ``n`` steps, exact at both ends (unlike optax's
    ``linear_schedule``)."""
    return lambda t: a + (b - a) * (t.astype(_F32) / n)


def cosine(init: float, end: float, n: int, power: float) -> Any:
    """The cosine piece from ``init`` to ``end`` over ``n`` steps, exact at both ends (unlike
    optax's)."""
    def piece(t: Any) -> Any:
        c = 0.5 * (1.0 + jnp.cos(jnp.pi * (t.astype(_F32) / n)))
        return init - (init - end) * (1.0 - c**power)

    return piece


def close(a: float, b: float) -> bool:
    """Whether two config values are the same number (numpy's ``allclose`` tolerances, the fork's)."""
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-8)


def disagree(name: str, what: str, given: str, fix: str) -> ValueError:
    """The error of two keys of one schedule that say different things."""
    return ValueError(
        explain(f"{who(name)}: {what}", expected=what.split(": ", 1)[-1], received=given, fix=fix)
    )


def one_of(name: str, a_key: str, a: object, b_key: str, b: object) -> object:
    """The value of two keys that are two names of one setting (either, or both if equal)."""
    if a is not None and b is not None and a != b:
        raise disagree(
            name, f"{a_key} and {b_key} are two names of one setting: they must agree",
            f"{a_key}: {a!r}, {b_key}: {b!r}", "keep only one of them",
        )
    return a if a is not None else b


def decayed_end(
    name: str, base: float, factor: float | None, end: float | None, default: float,
    factor_key: str = "decay_factor",
) -> float:
    """The end value ``base * factor``: ``factor``, or ``end`` (both must agree), or the ``default``
    factor."""
    if factor is not None and end is not None and not close(end, base * factor):
        raise disagree(
            name, f"end_value and {factor_key} disagree: end_value = {base!r} * {factor_key} = {base * factor!r}",
            f"end_value: {end!r}, {factor_key}: {factor!r}", "keep only one of them",
        )
    if end is not None:
        return end
    return base * (default if factor is None else factor)


def ConstantSchedule(  # noqa: N802 (config class names)
    *,
    value: float | None = None,
    init_value: float | None = None,
    end_value: float | None = None,
    steps: int | None = None,
) -> optax.Schedule:
    """The same learning rate at every step: ``value``, or ``init_value`` (jax_trainer's key).

    ``steps`` is its length inside a ``ConcatSchedule``.
    """
    name = "ConstantSchedule"
    given = one_of(name, "value", value, "init_value", init_value)
    if given is None:
        raise ValueError(explain(
            f"{who(name)} needs its value",
            expected="value: <the learning rate> (or init_value, jax_trainer's key)",
            received="neither value nor init_value", fix="write value: 0.001"))
    v = real("value" if value is not None else "init_value", given)
    if end_value is not None and not close(real("end_value", end_value), v):
        raise disagree(name, f"end_value of a constant must equal its value: {v!r}",
                       f"end_value: {end_value!r}", "drop end_value, or use a LinearSchedule to change the rate")
    return phases([], v, total=None if steps is None else whole("steps", steps, minimum=0))


def LinearSchedule(  # noqa: N802
    *, init_value: float, end_value: float, steps: int | None = None
) -> optax.Schedule:
    """From ``init_value`` at step 0 linearly to ``end_value`` at ``steps`` (left out: the run's),
    then ``end_value``.
    """
    a, b = real("init_value", init_value), real("end_value", end_value)
    n = length("steps", steps, name="LinearSchedule")
    return phases([(n, ramp(a, b, n))], b, total=n)


def CosineSchedule(  # noqa: N802
    *,
    init_value: float,
    decay_steps: int | None = None,
    alpha: float | None = None,
    exponent: float = 1.0,
    steps: int | None = None,
    decay_factor: float | None = None,
    end_value: float | None = None,
) -> optax.Schedule:
    """Cosine decay from ``init_value`` to ``alpha * init_value`` at ``decay_steps``, then constant
    (optax's formula).

    jax_trainer's ``steps``, ``decay_factor`` and ``end_value`` name ``decay_steps``, ``alpha`` and
    ``init_value * alpha``. The factor left out is 0.1 with ``steps``, else 0.0.
    """
    name = "CosineSchedule"
    init = real("init_value", init_value)
    n = length("steps" if decay_steps is None else "decay_steps", one_of(name, "decay_steps", decay_steps, "steps", steps),
               name=name, keys="steps or decay_steps")
    factor = one_of(name, "alpha", alpha, "decay_factor", decay_factor)
    factor = None if factor is None else real("alpha" if alpha is not None else "decay_factor", factor)
    end_given = None if end_value is None else real("end_value", end_value)
    end = decayed_end(name, init, factor, end_given, 0.1 if steps is not None else 0.0)
    return phases([(n, cosine(init, end, n, real("exponent", exponent, above=0.0)))], end, total=n)


def ExponentialSchedule(  # noqa: N802
    *,
    init_value: float,
    decay_rate: float | None = None,
    transition_steps: int | None = None,
    warmup_steps: int = 0,
    cooldown_steps: int = 0,
    steps: int | None = None,
    end_factor: float | None = None,
    end_value: float | None = None,
    staircase: bool = False,
) -> optax.Schedule:
    """Linear warmup, exponential decay, linear cooldown to 0 (the kpoeppel fork's keys and maths).

    Warmup rises from 0 to ``init_value`` over ``warmup_steps``; the decay multiplies by
    ``decay_rate`` every ``transition_steps`` (default: the whole decay with ``steps``, else 1
    step; ``staircase`` floors the exponent), or reaches exactly ``init_value * end_factor``
    (or ``end_value``) at its end; the cooldown is the last ``cooldown_steps`` before ``steps``.
    With ``steps`` the value holds past it; ``end_factor``, ``end_value`` and ``cooldown_steps`` need
    it (left out: the run's). ``warmup_steps + cooldown_steps > steps`` is an error.
    """
    name = "ExponentialSchedule"
    init = real("init_value", init_value)
    warmup = whole("warmup_steps", warmup_steps, minimum=0)
    cooldown = whole("cooldown_steps", cooldown_steps, minimum=0)
    period = None if transition_steps is None else whole("transition_steps", transition_steps, minimum=1)
    stairs = flag("staircase", staircase)
    neither = decay_rate is None and end_factor is None and end_value is None
    if (decay_rate is not None and end_factor is not None) or (neither and steps is None):
        raise ValueError(explain(
            f"{who(name)} needs exactly one of decay_rate and end_factor (or end_value)",
            expected="decay_rate: the factor per period (with steps and no transition_steps: reached at steps), "
            "or end_factor: the fraction of init_value reached at the decay's end",
            received=f"decay_rate={decay_rate!r}, end_factor={end_factor!r}, end_value={end_value!r}",
            fix="keep one of them (with steps, decay_rate left out is 0.1)"))
    decay_rate = 0.1 if neither else decay_rate  # the fork's default: the rate reached at steps
    from_run = steps is None and bool(cooldown or decay_rate is None)
    if from_run:  # a length is needed: left out, it is the run's (as every schedule's)
        steps = run_steps()
        if steps is None:
            raise RunLengthUnknown(explain(
                f"{here('steps')} is required with cooldown_steps or end_factor",
                expected="steps: the schedule's total number of steps (left out, the run's: epochs x "
                "batches per epoch, known when the trainer or gyre fit builds the optimizer)",
                received=f"cooldown_steps={cooldown}, end_factor={end_factor!r}, end_value={end_value!r}, no steps",
                fix="add steps: <total training steps>"))
    total = None if steps is None else whole("steps", steps, minimum=1)
    if total is not None:
        fits("warmup_steps + cooldown_steps", warmup + cooldown, total, name, from_run=from_run)
    if decay_rate is None and (stairs or period not in (None, 1)):
        raise ValueError(explain(
            f"{who(name)}: end_factor sets the whole decay: staircase and transition_steps do not apply",
            expected="staircase: false and no transition_steps with end_factor",
            received=f"staircase={stairs}, transition_steps={period}",
            fix="drop staircase/transition_steps, or give decay_rate instead of end_factor"))
    if total is not None and (decay_rate is None or period is None):  # the period is the whole decay
        fits("warmup_steps + cooldown_steps (the decay needs >= 1 step)", warmup + cooldown + 1, total, name)
        period = total - cooldown - warmup
    given_end = None if end_value is None else real("end_value", end_value)
    if decay_rate is None:  # end_factor or end_value: the decay reaches it exactly
        base = None if end_factor is None else real("end_factor", end_factor, above=0.0)
        if given_end is not None:
            if (given_end / init if init else 0.0) <= 0.0:
                raise ValueError(explain(
                    f"{here('end_value')} must be a fraction of init_value (same sign, not 0)",
                    expected="end_value = init_value * end_factor with end_factor > 0 (an exponential decay never reaches 0)",
                    received=f"end_value: {given_end!r}, init_value: {init!r}",
                    fix="write end_factor: 0.1, and cooldown_steps to end at 0"))
            decayed_end(name, init, base, given_end, 0.0, factor_key="end_factor")  # they agree
            base = given_end / init if base is None else base
        end = init * base  # type: ignore[operator]
    else:
        base = real("decay_rate", decay_rate, above=0.0)
        exponent = None if total is None else (total - cooldown - warmup) / period  # type: ignore[operator]
        end = None if exponent is None else init * base ** (math.floor(exponent) if stairs else exponent)
        if given_end is not None and (end is None or not close(given_end, end)):
            raise disagree(
                name, f"end_value and decay_rate disagree: the decay ends at {end!r}",
                f"end_value: {given_end!r}, decay_rate: {base!r}, steps: {total}",
                "keep only one of them (end_value alone reaches it exactly)",
            )
    pieces = [(warmup, ramp(0.0, init, warmup))] if warmup else []
    decaying = optax.exponential_decay(init, period or 1, base, staircase=stairs)
    pieces.append((None if total is None else total - cooldown - warmup, lambda t: decaying(t.astype(_F32))))  # float32, as ever
    if total is None:  # the decay goes on
        return phases(pieces, None)
    if cooldown:  # from exactly the decay's end, linearly to 0 at total
        pieces.append((cooldown, lambda t: jnp.where(t == 0, _F32(end), end * ((cooldown - t).astype(_F32) / cooldown))))
    return phases(pieces, 0.0 if cooldown else end, total=total)


def fits(what: str, used: int, total: int, name: str, *, from_run: bool = False) -> None:
    """Refuses phases (``what``: ``used`` steps) longer than the schedule's ``total``."""
    if used <= total:
        return
    run = " (the run's length: epochs x batches per epoch)" if from_run else ""
    raise ValueError(explain(
        f"{who(name)}: the schedule's phases exceed its total: {what} = {used} > steps = {total}{run}",
        expected=f"{what} <= steps", received=f"{what} = {used}, steps = {total}",
        fix="train longer (trainer.train_epochs, or smaller batches), or shorten the phases"
        if from_run else "raise steps, or shorten the phases"))


def WarmupCosineDecaySchedule(  # noqa: N802
    *,
    peak_value: float,
    init_value: float = 0.0,
    warmup_steps: int = 0,
    decay_steps: int | None = None,
    steps: int | None = None,
    decay_factor: float | None = None,
    end_value: float | None = None,
    exponent: float = 1.0,
) -> optax.Schedule:
    """Linear warmup to ``peak_value`` over ``warmup_steps``, then cosine decay to the end value
    over ``decay_steps``.

    ``decay_steps`` excludes the warmup (jax_trainer's meaning, not optax's); give ``steps``,
    ``decay_steps`` or both (they must agree). The end value is ``end_value`` or ``peak_value *
    decay_factor`` (default ``decay_factor`` 0.1).
    """
    name = "WarmupCosineDecaySchedule"
    init, peak = real("init_value", init_value), real("peak_value", peak_value)
    warmup, power = whole("warmup_steps", warmup_steps, minimum=0), real("exponent", exponent, above=0.0)
    if decay_steps is None:
        total = length("steps", steps, name=name, keys="steps or decay_steps")
        fits("warmup_steps (the decay needs >= 1 step)", warmup + 1, total, name, from_run=steps is None)
        decay = total - warmup
    else:
        decay = whole("decay_steps", decay_steps, minimum=1)
        total = warmup + decay if steps is None else whole("steps", steps, minimum=1)
        fits("warmup_steps + decay_steps", warmup + decay, total, name)
        if warmup + decay != total:
            raise ValueError(explain(
                f"{here('steps')} must equal warmup_steps + decay_steps (the end value is reached at steps)",
                expected=f"steps: {warmup + decay}",
                received=f"steps: {total}, warmup_steps: {warmup}, decay_steps: {decay}",
                fix=f"write steps: {warmup + decay}, or decay_steps: {total - warmup}, or drop one of them"))
    factor = None if decay_factor is None else real("decay_factor", decay_factor)
    end = decayed_end(name, peak, factor, None if end_value is None else real("end_value", end_value), 0.1)
    pieces = [(warmup, ramp(init, peak, warmup))] if warmup else []
    decaying = cosine(peak, end, decay, power)  # held at peak_value before step 0, as before
    return phases([*pieces, (decay, lambda t: decaying(jnp.maximum(t, 0)))], end, total=total)


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
    which ``schedules[i + 1]`` takes over (one that leaves its length out lasts up to the next
    boundary, the last one up to ``steps``, else the run's end).
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
        built = _listed_parts(schedules, marks, None if steps is None else whole("steps", steps, minimum=1))
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


def _listed_parts(schedules: Sequence[Any], marks: list[int], steps: int | None) -> list[Any]:
    """The schedules of a list, each that leaves its length out lasting its part: up to the next
    boundary, the last one to ``steps`` (the ConcatSchedule's), else to the run's end."""
    start, end = (marks[-1] if marks else 0), (run_steps() if steps is None else steps)
    spans = [b - a for a, b in zip([0, *marks], marks, strict=False)] + [None if end is None else max(end - start, 1)]
    built = []
    for i, (section, span) in enumerate(zip(schedules, spans, strict=True)):
        with run_length(span):
            built.append(build_schedule(section, where=here(f"schedules[{i}]")))
    return built


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
