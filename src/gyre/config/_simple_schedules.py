"""Schedules of one formula: constant, linear and cosine decay.

Each takes jax_trainer's keys (``init_value``, ``end_value``, ``steps``, ``decay_factor``)
beside optax's, and carries ``total_steps`` (``None`` when it has no length).
"""

import math
from typing import Any

import jax.numpy as jnp
import optax

from gyre.config._sections import length, real, who, whole
from gyre.core._errors import explain
from gyre.core._lr_schedule import phases

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

