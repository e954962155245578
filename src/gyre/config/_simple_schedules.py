"""The schedules of one formula: constant, linear and cosine decay, registered in
:data:`~gyre.config.SCHEDULES` under both names (``Cosine`` and ``CosineSchedule``); see
:mod:`gyre.config._schedules`.
"""

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import optax

from gyre.config._registry import SCHEDULES
from gyre.config._sections import real, whole

_F32 = jnp.float32


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
