"""Learning-rate schedules built from config sections: :func:`build_schedule` and the
schedules that hold other schedules (``ConcatSchedule``).

A config writes a learning rate as a number (a constant) or as a section whose ``class_name``
is registered in :data:`~gyre.config.SCHEDULES`; the section's other keys are the keyword
parameters of the registered function. Every schedule here is registered twice: with and
without the ``Schedule`` suffix (``Cosine`` and ``CosineSchedule``), because jax_trainer's
configs write the long names and the issue the short ones. Each returns an ``optax.Schedule``:
``step -> float32 learning rate``, pure ``jax.numpy`` (jit-able, no host reads).

A schedule with a total holds its last value past the total. The values named in each
docstring are exact (``jnp.where`` picks them, no rounding of a formula); between them the
formula is float32 arithmetic.

The one-formula schedules live in :mod:`gyre.config._simple_schedules`, the phased ones in
:mod:`gyre.config._phased_schedules`, the section helpers in :mod:`gyre.config._sections`;
this module builds any of them from a config value.
"""

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import optax

from gyre.config._phased_schedules import ExponentialSchedule, WarmupCosineDecaySchedule
from gyre.config._registry import SCHEDULES
from gyre.config._sections import at, call_section, class_name_of, here, real, whole
from gyre.config._simple_schedules import (
    ConstantSchedule,
    CosineSchedule,
    LinearSchedule,
    _register,
)
from gyre.core._errors import describe, explain

#: What a config may write for a learning rate: a number or a schedule section.
ScheduleConfig = float | Mapping[str, Any]


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
        >>> import jax.numpy as jnp
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
