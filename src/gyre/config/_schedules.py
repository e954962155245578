"""Learning-rate schedules built from config sections, and the section-calling helpers that
the transform and optimizer builders share.

A config writes a learning rate as a number (a constant) or as a section whose ``class_name``
is registered in :data:`~gyre.config.SCHEDULES`; the section's other keys are the keyword
parameters of the registered function. Every schedule here is registered twice: with and
without the ``Schedule`` suffix (``Cosine`` and ``CosineSchedule``), because jax_trainer's
configs write the long names and the issue the short ones. Each returns an ``optax.Schedule``:
``step -> float32 learning rate``, pure ``jax.numpy`` (jit-able, no host reads).

A schedule with a total holds its last value past the total. The values named in each
docstring are exact (``jnp.where`` picks them, no rounding of a formula); between them the
formula is float32 arithmetic.
"""

import contextlib
import inspect
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import jax.numpy as jnp
import optax

from gyre.config._registry import SCHEDULES, Registry
from gyre.core._errors import as_integer, describe, explain, suggest

#: What a config may write for a learning rate: a number or a schedule section.
ScheduleConfig = float | Mapping[str, Any]

_WHERE: ContextVar[str] = ContextVar("gyre_config_where", default="")
_F32 = jnp.float32


# -- sections: shared by the schedule, transform and optimizer builders ------------------------


def here(key: str = "") -> str:
    """The dotted config path being built (``optimizer.learning_rate``), plus ``key``."""
    base = _WHERE.get()
    return f"{base}.{key}" if base and key else (base or key)


@contextlib.contextmanager
def at(where: str) -> Iterator[None]:
    """Within the block, :func:`here` names ``where`` (the section being built)."""
    token = _WHERE.set(where)
    try:
        yield
    finally:
        _WHERE.reset(token)


def class_name_of(section: object, *, where: str, registry: Registry, also: str = "") -> str:
    """The ``class_name`` of a section; a non-mapping or a missing name is a clear error."""
    known = ", ".join(sorted(registry)) + also
    if not isinstance(section, Mapping):
        raise TypeError(
            explain(
                f"{where} must be a section (a mapping with class_name)",
                expected=f"a mapping with class_name one of: {known}",
                received=describe(section),
                fix=f"write e.g. {where}: {{class_name: {next(iter(registry), 'Name')}, ...}}",
            )
        )
    name = section.get("class_name")
    if not isinstance(name, str):
        raise ValueError(
            explain(
                f"{where} has no class_name (a string)",
                expected=f"class_name: one of {known}",
                received=describe(name) if "class_name" in section else f"keys {sorted(section)}",
                fix=f"add class_name to {where}",
            )
        )
    return name


def call_section(
    target: Callable[..., Any], name: str, section: Mapping[str, Any], *, where: str
) -> Any:
    """Calls ``target`` with the section's keys (all but ``class_name``) after checking them
    against its signature: an unknown key or a missing required one is an error that lists
    the parameters, with their types and defaults. Errors raised while building name
    ``where`` through :func:`here`."""
    kwargs = {k: v for k, v in section.items() if k != "class_name"}
    check_keys(target, name, kwargs, where=where)
    with at(where):
        return target(**kwargs)


def check_keys(
    target: Callable[..., Any], name: str, kwargs: Mapping[str, Any], *, where: str
) -> None:
    """Raises when ``kwargs`` has a key ``target`` does not take, or lacks a required one."""
    params = _parameters(target)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        known = None
    else:
        known = {
            k: p for k, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        }
    listing = ", ".join(
        _describe_parameter(p)
        for p in params.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )
    for key in kwargs:
        if known is not None and key not in known:
            raise ValueError(
                explain(
                    f"unknown key {key!r} at {where} ({name})." + suggest(str(key), known),
                    expected=f"the keys of {name}: {listing}",
                    received=f"{key}: {describe(kwargs[key])}",
                    fix=f"remove {key!r} or spell it as one of the keys above",
                )
            )
    missing = [
        k
        for k, p in params.items()
        if p.default is p.empty
        and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        and k not in kwargs
    ]
    if missing:
        raise ValueError(
            explain(
                f"missing required key{'s' if len(missing) > 1 else ''} {', '.join(missing)} at {where} ({name})",
                expected=f"the keys of {name}: {listing}",
                received=f"keys {sorted(kwargs)}",
                fix=f"add {', '.join(f'{k}: ...' for k in missing)} to {where}",
            )
        )


def _parameters(target: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: take any key
        return {"kwargs": inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)}


def _describe_parameter(p: inspect.Parameter) -> str:
    ann = "" if p.annotation is p.empty else _type_name(p.annotation)
    ann = "" if len(ann) > 60 else ann  # optax's own Union annotations: the name says enough
    default = "required" if p.default is p.empty else f"default {p.default!r}"
    return f"{p.name} ({ann + ', ' if ann else ''}{default})"


def _type_name(annotation: object) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__name__
    text = repr(annotation)
    for prefix in ("collections.abc.", "typing.", "optax._src.base.", "gyre.config._transforms."):
        text = text.replace(prefix, "")
    return text


def who(name: str) -> str:
    """``where (name)`` while a section is being built, else ``name`` (for messages)."""
    return f"{here()} ({name})" if here() else name


# -- values -----------------------------------------------------------------------------------


def real(
    key: str, value: object, *, minimum: float | None = None, above: float | None = None
) -> float:
    """``value`` as a finite Python float (a numeric string such as ``"1e-3"`` counts, as
    PyYAML reads it), at least ``minimum`` / more than ``above``; else a clear error."""
    number: float | None = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    ok = number is not None and math.isfinite(number)
    ok = ok and (minimum is None or number >= minimum) and (above is None or number > above)  # type: ignore[operator]
    if not ok:
        bound = (
            f" >= {minimum}" if minimum is not None else f" > {above}" if above is not None else ""
        )
        raise ValueError(
            explain(
                f"{here(key)} must be a finite number{bound}",
                expected=f"a float{bound}",
                received=describe(value),
                fix=f"write {key or here().rsplit('.', 1)[-1]}: <a number{bound}>",
            )
        )
    return number  # type: ignore[return-value]


def whole(key: str, value: object, *, minimum: int) -> int:
    """``value`` as a Python int of at least ``minimum`` (booleans and 2.5 are errors)."""
    number = as_integer(value)
    if number is None or number < minimum:
        raise ValueError(
            explain(
                f"{here(key)} must be a whole number >= {minimum}",
                expected=f"an int >= {minimum}",
                received=describe(value),
                fix=f"write {key}: <an int >= {minimum}>",
            )
        )
    return number


def flag(key: str, value: object) -> bool:
    """``value`` when it is a bool; else a clear error (``"false"`` is not a bool)."""
    if not isinstance(value, bool):
        raise TypeError(
            explain(
                f"{here(key)} must be true or false",
                expected="a bool",
                received=describe(value),
                fix=f"write {key}: true or {key}: false",
            )
        )
    return value


# -- the schedules ----------------------------------------------------------------------------


def _register(function: Callable[..., optax.Schedule]) -> Callable[..., optax.Schedule]:
    SCHEDULES.register(function)
    SCHEDULES.register(function.__name__.removesuffix("Schedule"))(function)
    return function


@_register
def ConstantSchedule(*, value: float) -> optax.Schedule:  # noqa: N802 (config class names)
    """The same learning rate at every step (a plain number in a config means this).

    Example:
        >>> float(ConstantSchedule(value=0.5)(10**6))
        0.5
    """
    v = real("value", value)

    def schedule(count: Any) -> Any:
        return jnp.full(jnp.shape(count), v, _F32)

    return schedule


@_register
def LinearSchedule(*, init_value: float, end_value: float, steps: int) -> optax.Schedule:  # noqa: N802
    """From ``init_value`` at step 0 linearly to ``end_value`` at step ``steps`` (exact at
    both), then ``end_value``.

    Example:
        >>> s = LinearSchedule(init_value=1.0, end_value=0.0, steps=4)
        >>> [float(s(i)) for i in (0, 1, 4, 9)]
        [1.0, 0.75, 0.0, 0.0]
    """
    a, b, n = (
        real("init_value", init_value),
        real("end_value", end_value),
        whole("steps", steps, minimum=1),
    )

    def schedule(count: Any) -> Any:
        c = jnp.asarray(count)
        return jnp.where(c >= n, _F32(b), a + (b - a) * (jnp.minimum(c, n).astype(_F32) / n))

    return schedule


@_register
def CosineSchedule(
    *, init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> optax.Schedule:  # noqa: N802
    """Cosine decay from ``init_value`` at step 0 to ``alpha * init_value`` at step
    ``decay_steps`` (exact at both), then constant: ``end + (init - end) * c ** exponent``
    with ``c = (1 + cos(pi * step / decay_steps)) / 2`` (optax's ``cosine_decay_schedule``).

    Example:
        >>> s = CosineSchedule(init_value=1.0, decay_steps=4, alpha=0.5)
        >>> [round(float(s(i)), 6) for i in (0, 2, 4, 5)]
        [1.0, 0.75, 0.5, 0.5]
    """
    init, n = real("init_value", init_value), whole("decay_steps", decay_steps, minimum=1)
    end, power = init * real("alpha", alpha), real("exponent", exponent, above=0.0)

    def schedule(count: Any) -> Any:
        c = jnp.asarray(count)
        cosine = 0.5 * (1.0 + jnp.cos(jnp.pi * (jnp.minimum(c, n).astype(_F32) / n)))
        return jnp.where(c >= n, _F32(end), init - (init - end) * (1.0 - cosine**power))

    return schedule


@_register
def ExponentialSchedule(  # noqa: N802
    *,
    init_value: float,
    decay_rate: float | None = None,
    transition_steps: int = 1,
    warmup_steps: int = 0,
    cooldown_steps: int = 0,
    steps: int | None = None,
    end_factor: float | None = None,
    staircase: bool = False,
) -> optax.Schedule:
    """Linear warmup, exponential decay, linear cooldown (jax_trainer's ``exponential_decay``,
    with its discontinuity at the cooldown fixed).

    Phases, for step ``s`` (``total = steps``):

    * warmup, ``s < warmup_steps``: ``init_value * s / warmup_steps`` (from 0; at
      ``s = warmup_steps`` exactly ``init_value``);
    * decay: ``init_value * decay_rate ** (t / transition_steps)``, ``t = s - warmup_steps``
      (``floor`` of the exponent with ``staircase``). Give ``end_factor`` instead of
      ``decay_rate`` to reach exactly ``init_value * end_factor`` at the decay's end,
      ``total - cooldown_steps`` (then ``steps`` is required; ``transition_steps`` and
      ``staircase`` are not used);
    * cooldown, the last ``cooldown_steps`` before ``total``: linear from the decayed value at
      ``total - cooldown_steps`` down to exactly 0 at ``total``.

    With ``steps`` the value holds past ``total``; without it (``decay_rate`` and no cooldown)
    the decay goes on. ``warmup_steps + cooldown_steps > steps`` is an error.

    Example:
        >>> s = ExponentialSchedule(init_value=1.0, end_factor=0.25, warmup_steps=2,
        ...                         cooldown_steps=4, steps=12)
        >>> [float(s(i)) for i in (0, 1, 2, 8, 10, 12, 20)]
        [0.0, 0.5, 1.0, 0.25, 0.125, 0.0, 0.0]
    """
    init = real("init_value", init_value)
    warmup, cooldown = (
        whole("warmup_steps", warmup_steps, minimum=0),
        whole("cooldown_steps", cooldown_steps, minimum=0),
    )
    period, stairs = (
        whole("transition_steps", transition_steps, minimum=1),
        flag("staircase", staircase),
    )
    total = None if steps is None else whole("steps", steps, minimum=1)
    if (decay_rate is None) == (end_factor is None):
        raise ValueError(
            explain(
                f"{who('ExponentialSchedule')} needs exactly one of decay_rate and end_factor",
                expected="decay_rate: the factor per transition_steps, or end_factor: the fraction of init_value reached at the decay's end",
                received=f"decay_rate={decay_rate!r}, end_factor={end_factor!r}",
                fix="keep one of them",
            )
        )
    if total is None and (cooldown or end_factor is not None):
        raise ValueError(
            explain(
                f"{here('steps')} is required with cooldown_steps or end_factor",
                expected="steps: the schedule's total number of steps",
                received=f"cooldown_steps={cooldown}, end_factor={end_factor!r}, no steps",
                fix="add steps: <total training steps>",
            )
        )
    if total is not None and warmup + cooldown > total:
        raise _phases_exceed(
            "warmup_steps + cooldown_steps", warmup + cooldown, total, "ExponentialSchedule"
        )
    decay_end = None if total is None else total - cooldown
    if end_factor is not None:
        base = real("end_factor", end_factor, above=0.0)
        if stairs or period != 1:
            raise ValueError(
                explain(
                    f"{who('ExponentialSchedule')}: end_factor sets the whole decay: staircase and transition_steps do not apply",
                    expected="staircase: false and transition_steps: 1 with end_factor",
                    received=f"staircase={stairs}, transition_steps={period}",
                    fix="drop staircase/transition_steps, or give decay_rate instead of end_factor",
                )
            )
        period = decay_end - warmup  # type: ignore[operator]
        if period < 1:
            raise _phases_exceed(
                "warmup_steps + cooldown_steps (the decay needs >= 1 step)",
                warmup + cooldown + 1,
                total,
                "ExponentialSchedule",
            )  # type: ignore[arg-type]
        end = init * base
    else:
        base = real("decay_rate", decay_rate, above=0.0)
        exponent = None if decay_end is None else (decay_end - warmup) / period
        end = (
            None
            if exponent is None
            else init * base ** (math.floor(exponent) if stairs else exponent)
        )

    def schedule(count: Any) -> Any:
        c = jnp.asarray(count)
        if total is not None:
            c = jnp.minimum(c, total)
        e = jnp.maximum(c - warmup, 0).astype(_F32) / period
        value = init * jnp.power(_F32(base), jnp.floor(e) if stairs else e)
        if warmup:
            value = jnp.where(c < warmup, init * (c.astype(_F32) / warmup), value)
        if end is not None:
            value = jnp.where(c >= decay_end, _F32(end), value)
        if cooldown:
            value = jnp.where(c > decay_end, end * ((total - c).astype(_F32) / cooldown), value)
        return value

    return schedule


@_register
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
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then cosine
    decay to ``end_value`` over ``decay_steps``: exactly ``peak_value`` at ``warmup_steps``
    and exactly ``end_value`` at ``steps = warmup_steps + decay_steps``, then constant.

    ``decay_steps`` is the length of the decay alone (jax_trainer's meaning; optax's
    ``decay_steps`` counts the warmup too, which ended jax_trainer's schedules early). Give
    ``steps``, ``decay_steps`` or both (then they must agree). The end value is
    ``end_value``, or ``peak_value * decay_factor`` (both: they must agree; neither:
    ``decay_factor`` 0.1, jax_trainer's default).

    Example:
        >>> s = WarmupCosineDecaySchedule(init_value=0.0, peak_value=1.0, warmup_steps=4,
        ...                               decay_steps=4, decay_factor=0.5)
        >>> [round(float(s(i)), 6) for i in (0, 3, 4, 6, 8, 100)]
        [0.0, 0.75, 1.0, 0.75, 0.5, 0.5]
    """
    init, peak = real("init_value", init_value), real("peak_value", peak_value)
    warmup, power = (
        whole("warmup_steps", warmup_steps, minimum=0),
        real("exponent", exponent, above=0.0),
    )
    if decay_steps is None and steps is None:
        raise ValueError(
            explain(
                f"{who('WarmupCosineDecaySchedule')} needs steps or decay_steps",
                expected="steps (the total) and/or decay_steps (the decay after the warmup)",
                received="neither",
                fix="add steps: <total steps>",
            )
        )
    decay = None if decay_steps is None else whole("decay_steps", decay_steps, minimum=1)
    total = None if steps is None else whole("steps", steps, minimum=1)
    if decay is None:
        if warmup >= total:  # type: ignore[operator]
            raise _phases_exceed(
                "warmup_steps (the decay needs >= 1 step)",
                warmup + 1,
                total,
                "WarmupCosineDecaySchedule",
            )  # type: ignore[arg-type]
        decay = total - warmup  # type: ignore[operator]
    elif total is None:
        total = warmup + decay
    elif warmup + decay != total:
        if warmup + decay > total:
            raise _phases_exceed(
                "warmup_steps + decay_steps", warmup + decay, total, "WarmupCosineDecaySchedule"
            )
        raise ValueError(
            explain(
                f"{here('steps')} must equal warmup_steps + decay_steps (the end value is reached at steps)",
                expected=f"steps: {warmup + decay}",
                received=f"steps: {total}, warmup_steps: {warmup}, decay_steps: {decay}",
                fix=f"write steps: {warmup + decay}, or decay_steps: {total - warmup}, or drop one of them",
            )
        )
    end = _end_value(peak, decay_factor, end_value)

    def schedule(count: Any) -> Any:
        c = jnp.asarray(count)
        t = jnp.clip(c - warmup, 0, decay).astype(_F32) / decay
        cosine = 0.5 * (1.0 + jnp.cos(jnp.pi * t))
        value = peak - (peak - end) * (1.0 - cosine**power)
        if warmup:
            value = jnp.where(c < warmup, init + (peak - init) * (c.astype(_F32) / warmup), value)
        return jnp.where(c >= total, _F32(end), value)

    return schedule


def _end_value(peak: float, decay_factor: float | None, end_value: float | None) -> float:
    factor = None if decay_factor is None else real("decay_factor", decay_factor)
    end = None if end_value is None else real("end_value", end_value)
    if (
        factor is not None
        and end is not None
        and not math.isclose(end, peak * factor, rel_tol=1e-9, abs_tol=1e-15)
    ):
        raise ValueError(
            explain(
                f"{who('WarmupCosineDecaySchedule')}: end_value and decay_factor disagree",
                expected=f"end_value = peak_value * decay_factor = {peak * factor!r}",
                received=f"end_value: {end!r}, decay_factor: {factor!r}",
                fix="keep only one of them",
            )
        )
    if end is not None:
        return end
    return peak * (0.1 if factor is None else factor)


@_register
def ConcatSchedule(*, schedules: list[ScheduleConfig], boundaries: list[int]) -> optax.Schedule:  # noqa: N802
    """Schedules one after another (``optax.join_schedules``): ``schedules[i + 1]`` takes over
    at the absolute step ``boundaries[i]`` (cumulative, strictly increasing) and is called
    with the steps since its boundary. Each entry is a number or a schedule section.

    Example:
        >>> s = ConcatSchedule(
        ...     schedules=[{"class_name": "Linear", "init_value": 0.0, "end_value": 1.0, "steps": 4},
        ...                1.0, {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": 2}],
        ...     boundaries=[4, 6])
        >>> [float(s(i)) for i in (0, 2, 4, 5, 6, 7, 8, 50)]
        [0.0, 0.5, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0]
    """
    if (
        isinstance(schedules, (str, Mapping))
        or not isinstance(schedules, Sequence)
        or not schedules
    ):
        raise TypeError(
            explain(
                f"{here('schedules')} must be a non-empty list of schedules",
                expected="a list of numbers or schedule sections",
                received=describe(schedules),
                fix="write schedules: [{class_name: Linear, ...}, {class_name: Cosine, ...}]",
            )
        )
    if isinstance(boundaries, (str, Mapping)) or not isinstance(boundaries, Sequence):
        raise TypeError(
            explain(
                f"{here('boundaries')} must be a list of ints",
                expected="a list of steps",
                received=describe(boundaries),
                fix="write boundaries: [100, 500]",
            )
        )
    marks = [whole(f"boundaries[{i}]", b, minimum=1) for i, b in enumerate(boundaries)]
    if len(marks) != len(schedules) - 1:
        raise ValueError(
            explain(
                f"{here('boundaries')} needs one boundary between each two schedules",
                expected=f"{len(schedules) - 1} boundaries for {len(schedules)} schedules",
                received=f"{len(marks)} boundaries: {marks}",
                fix="give the absolute step at which each schedule after the first starts",
            )
        )
    if any(a <= b for b, a in zip(marks, marks[1:], strict=False)):
        raise ValueError(
            explain(
                f"{here('boundaries')} must be strictly increasing (they are cumulative: absolute steps)",
                expected="e.g. [100, 600] for 100 steps of the first schedule and 500 of the second",
                received=str(marks),
                fix="write each boundary as the step where its schedule starts, counted from 0",
            )
        )
    built = [build_schedule(s, where=here(f"schedules[{i}]")) for i, s in enumerate(schedules)]
    return optax.join_schedules(built, marks)


def build_schedule(value: object, *, where: str = "optimizer.learning_rate") -> optax.Schedule:
    """The schedule a config value describes: a number is a constant; a mapping with
    ``class_name`` is the registered schedule built from its other keys (nested sections, as
    in ``ConcatSchedule``, recursively); an already built schedule (a callable) is returned
    as it is. Anything else is an error naming ``where``.

    Args:
        value: the config value.
        where: its dotted path, for error messages.

    Returns:
        An ``optax.Schedule`` (step -> learning rate).

    Example:
        >>> s = build_schedule({"class_name": "WarmupCosineDecaySchedule", "init_value": 0.0,
        ...                     "peak_value": 0.001, "warmup_steps": 200, "decay_steps": 1555,
        ...                     "steps": 1755, "decay_factor": 0.1})
        >>> [float(s(i)) for i in (0, 200, 1755)] == [0.0, float(jnp.float32(1e-3)), float(jnp.float32(1e-4))]
        True
        >>> float(build_schedule(0.25)(7))
        0.25
    """
    if isinstance(value, Mapping):
        name = class_name_of(value, where=where, registry=SCHEDULES)
        target = SCHEDULES.get(name, where=f"{where}.class_name")
        return call_section(target, name, value, where=where)
    if isinstance(value, (numbers.Real, str)) and not isinstance(value, bool):
        with at(where):
            return ConstantSchedule(value=real("", value))  # type: ignore[arg-type]
    if callable(value):
        return value  # type: ignore[return-value]
    raise TypeError(
        explain(
            f"{where} must be a number or a schedule section",
            expected=f"a float, or a mapping with class_name one of: {', '.join(SCHEDULES)}",
            received=describe(value),
            fix=f"write {where.rsplit('.', 1)[-1]}: 0.001, or a section such as {{class_name: Cosine, init_value: 0.001, decay_steps: 1000}}",
        )
    )


def _phases_exceed(what: str, used: int, total: int, name: str = "schedule") -> ValueError:
    return ValueError(
        explain(
            f"{who(name)}: the schedule's phases exceed its total: {what} = {used} > steps = {total}",
            expected=f"{what} <= steps",
            received=f"{what} = {used}, steps = {total}",
            fix="raise steps, or shorten the phases",
        )
    )


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
