"""Schedules of several phases, exact at each phase's end."""

import math

import jax.numpy as jnp
import optax

from gyre.config._sections import flag, here, length, real, who, whole
from gyre.config._simple_schedules import _F32, close, cosine, decayed_end, disagree, ramp
from gyre.core._errors import explain
from gyre.core._lr_schedule import phases


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
    With ``steps`` the value holds past it. ``warmup_steps + cooldown_steps > steps`` is an error.
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
    if steps is None and (cooldown or decay_rate is None):
        raise ValueError(explain(
            f"{here('steps')} is required with cooldown_steps or end_factor",
            expected="steps: the schedule's total number of steps",
            received=f"cooldown_steps={cooldown}, end_factor={end_factor!r}, end_value={end_value!r}, no steps",
            fix="add steps: <total training steps>"))
    total = None if steps is None else whole("steps", steps, minimum=1)
    if total is not None:
        fits("warmup_steps + cooldown_steps", warmup + cooldown, total, name)
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
