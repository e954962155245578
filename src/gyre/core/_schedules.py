"""Schedules: predicates on the clock that say when a callback runs.

A schedule is any callable ``elapsed -> bool``; the classes here add the algebra
(``&``, ``|``, ``~``) and keep their state, if any, in :meth:`Schedule.state_dict`.
The loop calls each schedule once per step, with the clock of completed work, so on
step index ``i`` a schedule sees ``elapsed.steps == i``.

When each one fires:

==================================  =======================================================
``every(n)`` / ``every(steps=n)``   step indices 0, n, 2n, ... (``elapsed.steps % n == 0``)
``every(epochs=n)``                 first step of epochs 0, n, 2n, ... (``step_in_epoch == 0``)
``every(samples=n)``                first step starting at or past each multiple of n samples
``every(time=t)``                   first step starting at or past each multiple of t seconds
``after(period)``                   every step once ``elapsed >= period``
``after(period).every(...)``        the inner schedule, on the clock counted from the step
                                    where the period was reached (``after(steps=50).every(100)``
                                    fires at steps 50, 150, 250, ...)
``after(period).then(s)`` / ``>>``  ``s``, on that same relative clock
``piecewise(initial, {p: s})``      ``initial`` until ``p`` is reached, then ``s`` (relative)
``always()`` / ``never()``          every step / no step
``a & b``, ``a | b``, ``~a``        both / either / not; every operand is evaluated every
                                    step (no short-circuit), so stateful ones stay in step
==================================  =======================================================
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from gyre.core._clock import Elapsed, Period
from gyre.core._errors import as_integer, describe, explain

ScheduleLike = Callable[[Elapsed], bool]


class Schedule:
    """Base class: a predicate on the clock with ``&``, ``|``, ``~`` and a state dict.

    Subclasses implement ``__call__(elapsed) -> bool``. Stateful ones also override
    :meth:`state_dict` / :meth:`load_state_dict` so a checkpoint can carry their state.

    Example:
        >>> s = every(2) & ~every(4)
        >>> [s(Elapsed(steps=i)) for i in range(5)]
        [False, False, True, False, False]
    """

    def __call__(self, elapsed: Elapsed) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def __and__(self, other: ScheduleLike) -> Schedule:
        return _And(self, as_schedule(other))

    def __rand__(self, other: ScheduleLike) -> Schedule:
        return _And(as_schedule(other), self)

    def __or__(self, other: ScheduleLike) -> Schedule:
        return _Or(self, as_schedule(other))

    def __ror__(self, other: ScheduleLike) -> Schedule:
        return _Or(as_schedule(other), self)

    def __invert__(self) -> Schedule:
        return _Not(self)

    #: True when the schedule fires on every step whatever the clock; loops then skip the
    #: call. Only stateless schedules may set it.
    fires_always: bool = False

    def reads(self) -> frozenset[str] | None:
        """The clock counters the schedule reads (``"steps"``, ``"epochs"``, ...), or ``None``
        when it cannot tell (a plain function). Loops use it to refuse epoch-based schedules
        over data of unknown epoch length, and to explain how fused chunks are cut.

        Example:
            >>> sorted(every(epochs=1).reads()), (every(2) | every(time=1.0)).reads() >= {"time"}
            (['epochs', 'step_in_epoch'], True)
        """
        return None

    def state_dict(self) -> dict[str, Any]:
        """The schedule's state (empty for stateless schedules)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""

    # Schedules are dictionary keys in a task table: identity, not value, tells them apart,
    # so ``{every(1): [a], every(1): [b]}`` keeps both entries.
    __hash__ = object.__hash__


class _Function(Schedule):
    def __init__(self, fn: ScheduleLike) -> None:
        self.fn = fn

    def __call__(self, elapsed: Elapsed) -> bool:
        return bool(self.fn(elapsed))

    def __repr__(self) -> str:
        return f"schedule({getattr(self.fn, '__name__', self.fn)!r})"


def as_schedule(fn: ScheduleLike) -> Schedule:
    """Makes any callable ``elapsed -> bool`` a :class:`Schedule` (with the algebra).

    Example:
        >>> odd = as_schedule(lambda e: e.steps % 2 == 1)
        >>> (odd | every(4))(Elapsed(steps=4))
        True
    """
    if isinstance(fn, Schedule):
        return fn
    if not callable(fn):
        raise TypeError(
            explain(
                "a schedule must be callable",
                expected="a callable elapsed -> bool, e.g. gyre.every(10)",
                received=describe(fn),
                fix="use gyre.every(...), gyre.after(...), or a function of the clock",
            )
        )
    return _Function(fn)


class _And(Schedule):
    def __init__(self, *parts: Schedule) -> None:
        self.parts = parts

    def __call__(self, elapsed: Elapsed) -> bool:
        results = [part(elapsed) for part in self.parts]
        return all(results)

    def reads(self) -> frozenset[str] | None:
        return _union(part.reads() for part in self.parts)

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [p.state_dict() for p in self.parts]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for part, sub in zip(self.parts, state.get("parts", []), strict=False):
            part.load_state_dict(sub)

    def __repr__(self) -> str:
        return "(" + " & ".join(map(repr, self.parts)) + ")"


class _Or(_And):
    def __call__(self, elapsed: Elapsed) -> bool:
        results = [part(elapsed) for part in self.parts]
        return any(results)

    def __repr__(self) -> str:
        return "(" + " | ".join(map(repr, self.parts)) + ")"


class _Not(_And):
    def __call__(self, elapsed: Elapsed) -> bool:
        return not self.parts[0](elapsed)

    def __repr__(self) -> str:
        return f"~{self.parts[0]!r}"


def _union(parts: Any) -> frozenset[str] | None:
    out: frozenset[str] = frozenset()
    for part in parts:
        if part is None:
            return None
        out |= part
    return out


class _Always(Schedule):
    fires_always = True

    def reads(self) -> frozenset[str]:
        return frozenset()

    def __call__(self, elapsed: Elapsed) -> bool:
        return True

    def __repr__(self) -> str:
        return "always()"


class _Never(Schedule):
    def reads(self) -> frozenset[str]:
        return frozenset()

    def __call__(self, elapsed: Elapsed) -> bool:
        return False

    def __repr__(self) -> str:
        return "never()"


def always() -> Schedule:
    """Fires on every step.

    Example:
        >>> always()(Elapsed(steps=7))
        True
    """
    return _Always()


def never() -> Schedule:
    """Never fires (a placeholder that switches a task off).

    Example:
        >>> never()(Elapsed())
        False
    """
    return _Never()


def _one_quantity(fname: str, **given: Any) -> tuple[str, float]:
    chosen = [(k, v) for k, v in given.items() if v is not None]
    if len(chosen) != 1:
        shown = ", ".join(f"{k}={v!r}" for k, v in chosen) or "nothing"
        raise ValueError(
            explain(
                f"{fname}() takes exactly one of steps, samples, epochs, time",
                expected="one quantity, e.g. every(10) or every(epochs=1)",
                received=shown,
                fix="to fire on either of two, combine schedules: every(steps=10) | every(time=60)",
            )
        )
    name, value = chosen[0]
    if name == "time":
        number = None if isinstance(value, bool) or not isinstance(value, numbers.Real) else float(value)
        ok = number is not None and math.isfinite(number) and number > 0
        want = "a number of seconds > 0"
    else:
        number = as_integer(value)  # numpy and 0-d integers are whole numbers too
        ok = number is not None and number >= 1
        want = "a whole number >= 1"
    if not ok:
        raise ValueError(
            explain(
                f"{fname}({name}=...) must be {want}",
                expected=want,
                received=describe(value),
                fix=f"e.g. {fname}({name}={60.0 if name == 'time' else 1})",
            )
        )
    return name, number


class Every(Schedule):
    """Fires periodically; see :func:`every`."""

    def __init__(self, unit: str, amount: float) -> None:
        self.unit = unit
        self.amount = amount
        self._last: int | None = None  # the last bucket fired, for samples and time
        self.fires_always = unit == "steps" and amount == 1

    def __call__(self, elapsed: Elapsed) -> bool:
        if self.unit == "steps":
            return elapsed.steps % self.amount == 0
        if self.unit == "epochs":
            return elapsed.step_in_epoch == 0 and elapsed.epochs % self.amount == 0
        value = elapsed.samples if self.unit == "samples" else elapsed.time
        bucket = math.floor(value / self.amount)
        if self._last is None or bucket > self._last:
            self._last = bucket
            return True
        return False

    def reads(self) -> frozenset[str]:
        return frozenset(("epochs", "step_in_epoch") if self.unit == "epochs" else (self.unit,))

    def state_dict(self) -> dict[str, Any]:
        return {} if self._last is None else {"last": self._last}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._last = state.get("last")

    def __repr__(self) -> str:
        return f"every({self.unit}={self.amount!r})"


def every(
    steps: int | None = None,
    *,
    samples: int | None = None,
    epochs: int | None = None,
    time: float | None = None,
) -> Schedule:
    """Fires periodically, counted in exactly one of steps, samples, epochs or seconds.

    * ``every(n)``: step indices 0, n, 2n, ... (stateless).
    * ``every(epochs=n)``: the first step of epochs 0, n, 2n, ... (stateless).
    * ``every(samples=n)`` / ``every(time=t)``: the first step that starts at or past each
      multiple of n samples / t seconds, including the very first step (stateful: it
      remembers the last multiple it fired on, in :meth:`Schedule.state_dict`).

    Example:
        >>> s = every(3)
        >>> [i for i in range(10) if s(Elapsed(steps=i))]
        [0, 3, 6, 9]
        >>> s = every(samples=100)
        >>> [i for i in range(6) if s(Elapsed(steps=i, samples=48 * i))]
        [0, 3, 5]
    """
    unit, amount = _one_quantity("every", steps=steps, samples=samples, epochs=epochs, time=time)
    return Every(unit, amount)


class Piecewise(Schedule):
    """Switches between schedules at points on the clock; see :func:`piecewise`."""

    def __init__(self, initial: ScheduleLike, pieces: Mapping[Period, ScheduleLike]) -> None:
        if not isinstance(pieces, Mapping):
            raise TypeError(
                explain(
                    "piecewise() takes a dict from periods to schedules",
                    expected="{gyre.at(steps=1000): gyre.every(100), ...}",
                    received=describe(pieces),
                    fix="pass the pieces as a dict",
                )
            )
        for period in pieces:
            if not isinstance(period, Period):
                raise TypeError(
                    explain(
                        "piecewise() keys must be periods",
                        expected="gyre.at(steps=..., ...) as each key",
                        received=describe(period),
                        fix="write the key as gyre.at(steps=1000)",
                    )
                )
        self.initial = as_schedule(initial)
        self.periods = list(pieces)
        _check_order(self.periods)
        self.schedules = [as_schedule(s) for s in pieces.values()]
        self._origins: list[Elapsed | None] = [None] * len(self.periods)

    def __call__(self, elapsed: Elapsed) -> bool:
        active = -1
        for i, period in enumerate(self.periods):
            if self._origins[i] is None and elapsed.reached(period):
                self._origins[i] = elapsed
            if self._origins[i] is not None:
                active = i
        if active < 0:
            return self.initial(elapsed)
        origin = self._origins[active]
        return self.schedules[active](elapsed.since(origin))  # type: ignore[arg-type]

    def then(self, schedule: ScheduleLike) -> Piecewise:
        """After the last switch point, run ``schedule`` (on the clock counted from there).

        Example:
            >>> s = after(steps=5).then(every(2))
            >>> [i for i in range(10) if s(Elapsed(steps=i))]
            [5, 7, 9]
        """
        if len(self.periods) != 1 or not isinstance(self.schedules[0], _Always):
            raise TypeError(
                explain(
                    ".then() and >> apply to a bare after(...)",
                    expected="after(steps=...).then(schedule)",
                    received=repr(self),
                    fix="use piecewise(initial, {period: schedule, ...}) for several pieces",
                )
            )
        return Piecewise(self.initial, {self.periods[0]: schedule})

    __rshift__ = then

    def every(
        self,
        steps: int | None = None,
        *,
        samples: int | None = None,
        epochs: int | None = None,
        time: float | None = None,
    ) -> Piecewise:
        """``after(p).every(n)``: from the point where ``p`` is reached, every ``n``.

        Example:
            >>> s = after(steps=50).every(100)
            >>> [i for i in range(300) if s(Elapsed(steps=i))]
            [50, 150, 250]
        """
        return self.then(every(steps, samples=samples, epochs=epochs, time=time))

    def reads(self) -> frozenset[str] | None:
        periods = frozenset(name for p in self.periods for name, _ in p.items())
        inner = _union([self.initial.reads(), *(s.reads() for s in self.schedules)])
        return None if inner is None else periods | inner

    def state_dict(self) -> dict[str, Any]:
        return {
            "origins": [None if o is None else o.to_dict() for o in self._origins],
            "initial": self.initial.state_dict(),
            "pieces": [s.state_dict() for s in self.schedules],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        origins = state.get("origins", [None] * len(self.periods))
        self._origins = [None if o is None else Elapsed.from_dict(o) for o in origins]
        self.initial.load_state_dict(state.get("initial", {}))
        for sched, sub in zip(self.schedules, state.get("pieces", []), strict=False):
            sched.load_state_dict(sub)

    def __repr__(self) -> str:
        pieces = ", ".join(f"{p!r}: {s!r}" for p, s in zip(self.periods, self.schedules, strict=True))
        return f"piecewise({self.initial!r}, {{{pieces}}})"


def _check_order(periods: list[Period]) -> None:
    """Refuses a piece listed after one it does not follow: the active piece is the last
    reached in the listed order, so a piece at or past the next one's point never runs.
    Pieces that share no quantity (``at(epochs=2)`` then ``at(steps=500)``) cannot be ordered
    here and are taken as listed."""
    for first, second in zip(periods, periods[1:], strict=False):
        for name in Period.__slots__:
            a, b = getattr(first, name), getattr(second, name)
            if a is not None and b is not None and b <= a:
                raise ValueError(
                    explain(
                        "piecewise() pieces must be listed in increasing order of their points",
                        expected=f"each piece's {name} greater than the one before it",
                        received=f"{first!r} then {second!r} (the piece at {first!r} would never run)",
                        fix="sort the pieces by their point, and merge two pieces at the same point",
                    )
                )


def piecewise(initial: ScheduleLike, pieces: Mapping[Period, ScheduleLike]) -> Piecewise:
    """``initial`` until the first period is reached, then that period's schedule, and so on.

    Pieces are taken in the order given, which must be increasing (pieces out of order, or two
    at the same point, are an error: the earlier one would never run). Once reached, a
    period stays reached; the active piece is the last reached one. Each piece sees the clock
    counted from the step where its period was reached (see :meth:`Elapsed.since`).

    Example:
        >>> s = piecewise(every(1), {Period(steps=4): every(3)})
        >>> [i for i in range(12) if s(Elapsed(steps=i))]
        [0, 1, 2, 3, 4, 7, 10]
    """
    return Piecewise(initial, pieces)


def after(
    steps: int | None = None,
    *,
    samples: int | None = None,
    epochs: int | None = None,
    time: float | None = None,
) -> Piecewise:
    """Fires on every step once any of the given quantities is reached.

    Refine it with ``.every(...)``, ``.then(schedule)`` or ``>> schedule``; the refinement sees
    the clock counted from the step where the period was reached.

    Example:
        >>> s = after(steps=3)
        >>> [i for i in range(6) if s(Elapsed(steps=i))]
        [3, 4, 5]
        >>> s = after(epochs=1) >> every(epochs=2)
        >>> s(Elapsed(steps=10, epochs=1)), s(Elapsed(steps=20, epochs=2))
        (True, False)
    """
    return Piecewise(never(), {Period(steps, samples, epochs, time): always()})
