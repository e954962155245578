"""``lr_schedule``: Jax Fit's learning-rate schedule, linear warmup then cosine decay to 0."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import optax

from gyre.core._errors import as_integer, describe, explain


def _count(value: Any, name: str, minimum: int, example: str) -> int:
    """``value`` as an int of at least ``minimum``: a ``TypeError`` for a non-whole number
    (``100.0``, ``"10"``), a ``ValueError`` for one too small."""
    number = as_integer(value)
    what = "steps" if name == "steps_per_epoch" else "epochs"
    if number is None:
        raise TypeError(explain(
            f"lr_schedule: {name}= must be a whole number of {what}",
            expected=f"an int >= {minimum} (numpy ints are fine), e.g. {name}={example}",
            received=describe(value), fix=f"pass an int: {name}=int(...)"))
    if number < minimum:
        raise ValueError(explain(
            f"lr_schedule: {name}={number} is {'negative' if minimum == 0 else 'not positive'}",
            expected=f"an int >= {minimum}, e.g. {name}={example}", received=describe(value),
            fix=f"pass at least {minimum} {what}"))
    return number


def lr_schedule(
    base_lr: float,
    steps_per_epoch: int,
    epochs: int = 100,
    warmup_epochs: int = 5,
) -> optax.Schedule:
    """Linear warmup from 0 to ``base_lr``, then cosine decay reaching 0 exactly at the last step.

    With ``T = epochs * steps_per_epoch`` updates numbered ``0 .. T - 1`` (optax's count),
    ``W = warmup_epochs * steps_per_epoch`` and ``D = T - 1 - W``: the rate is ``base_lr * s / W``
    for ``s <= W``, then ``base_lr * (1 + cos(pi * (s - W) / D)) / 2``, and 0 outside
    ``[0, T - 1]``. Step 0, ``W``, the middle ``W + D / 2`` (when a step) and ``T - 1`` are exact
    (0, ``base_lr``, ``base_lr / 2``, 0), bit for bit, eager or jitted; optax's
    ``warmup_cosine_decay_schedule(decay_steps=T)`` would still be above 0 at ``T - 1``.
    ``step`` may be a traced integer; values are in JAX's default float dtype.

    Args:
        base_lr: the peak learning rate, a positive finite number.
        steps_per_epoch: optimizer steps per epoch, e.g. ``len(train_ds)``.
        epochs: the run's length in epochs.
        warmup_epochs: epochs of linear warmup, ``0 <= warmup_epochs < epochs`` (0: none).

    Returns:
        An ``optax.Schedule``, ``step -> learning rate``.

    Raises:
        ValueError: a non-positive or non-finite ``base_lr``, a count below its minimum,
            ``warmup_epochs >= epochs``, or a warmup that leaves the decay no step.
        TypeError: a count that is not a whole number, or a ``base_lr`` that is not a number.

    Example:
        >>> import gyre
        >>> lr = gyre.lr_schedule(base_lr=0.1, steps_per_epoch=5, epochs=4, warmup_epochs=1)
        >>> [round(float(lr(s)), 6) for s in (0, 2, 5, 12, 19)]  # start, warmup, peak, middle, last
        [0.0, 0.04, 0.1, 0.05, 0.0]
    """
    peak = _check_base_lr(base_lr)
    per_epoch = _count(steps_per_epoch, "steps_per_epoch", 1, "len(train_ds)")
    n_epochs = _count(epochs, "epochs", 1, "100")
    warmup = _count(warmup_epochs, "warmup_epochs", 0, "5")
    if warmup >= n_epochs:
        raise ValueError(explain(
            f"lr_schedule: warmup_epochs={warmup} leaves no epoch for the decay",
            expected=f"0 <= warmup_epochs < epochs (epochs={n_epochs})",
            received=f"warmup_epochs={warmup}, epochs={n_epochs}",
            fix=f"pass warmup_epochs between 0 and {n_epochs - 1}, or more epochs"))
    total = n_epochs * per_epoch
    warm = warmup * per_epoch
    decay = total - 1 - warm
    if decay < 1:
        raise ValueError(explain(
            f"lr_schedule: the warmup ends at the last step ({warm}), so the rate cannot be "
            "base_lr there and reach 0 there",
            expected="at least one step between the end of the warmup and the last step "
            "(epochs * steps_per_epoch - 1)",
            received=f"steps_per_epoch={per_epoch}, epochs={n_epochs}, warmup_epochs={warmup}",
            fix="use fewer warmup epochs, more epochs, or more steps per epoch"))
    middle = warm + decay / 2

    def falling(t: Any) -> Any:
        # gyre's cosine (optax's rounds differently), as 1 - sin(pi * u): exactly 0 at the middle, and
        # XLA may turn x / c into x * (1 / c), so the peak at t = 0 is selected, not computed.
        u = jnp.clip((jnp.asarray(t + warm, dtype=float) - middle) / decay, -0.5, 0.5)
        return jnp.where(t == 0, peak, 0.5 * peak * (1.0 - jnp.sin(math.pi * u)))

    rising = lambda s: peak * (jnp.maximum(jnp.asarray(s, dtype=float), 0.0) / max(warm, 1))  # noqa: E731 (0 before step 0)
    schedule = phases([(warm, rising), (decay, falling)], 0.0, dtype=float)
    schedule.__name__ = schedule.__qualname__ = (
        f"lr_schedule(base_lr={peak!r}, steps_per_epoch={per_epoch}, epochs={n_epochs}, warmup_epochs={warmup})"
    )
    return schedule


def total_steps(schedule: object) -> int | None:
    """The length a schedule records (``None`` for one without, or built elsewhere)."""
    return getattr(schedule, "total_steps", None)


def phases(
    pieces: Sequence[tuple[int | None, Callable[[Any], Any]]], end: float | None, *,
    total: int | None = None, dtype: Any = jnp.float32,
) -> optax.Schedule:
    """The schedule of ``pieces`` ``(steps, fn)`` one after another (``optax.join_schedules``:
    each ``fn`` gets the steps since its start), then ``end`` (``None``: the last piece goes
    on); it records ``total`` as ``total_steps``. Every schedule of gyre is built here."""
    fns = [fn for _, fn in pieces]
    if end is not None:
        fns.append(lambda c: jnp.full(jnp.shape(c), end, dtype))
    joined = optax.join_schedules(fns, list(itertools.accumulate(n for n, _ in pieces[: len(fns) - 1])))

    def schedule(count: Any) -> Any:
        return joined(jnp.asarray(count))

    schedule.total_steps = total  # type: ignore[attr-defined]
    return schedule


def _check_base_lr(base_lr: Any) -> float:
    kind = getattr(getattr(base_lr, "dtype", None), "kind", None)
    number = isinstance(base_lr, numbers.Real) or (kind in ("i", "u", "f") and getattr(base_lr, "shape", None) == ())
    if isinstance(base_lr, bool) or not number:
        raise TypeError(explain(
            "lr_schedule: base_lr= must be a number",
            expected="a positive float, e.g. base_lr=1e-3", received=describe(base_lr),
            fix="pass the peak learning rate as a float: base_lr=1e-3"))
    value = float(base_lr)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(explain(
            "lr_schedule: base_lr= must be positive and finite",
            expected="a float > 0, e.g. base_lr=1e-3", received=describe(base_lr),
            fix="pass the peak learning rate: base_lr=1e-3"))
    return value
