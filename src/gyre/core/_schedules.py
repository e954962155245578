"""Schedules: predicates on the clock that say when a callback runs.

A schedule is any callable ``elapsed -> bool``; the classes here add the algebra (``&``, ``|``,
``~``), their state (:meth:`Schedule.state_dict`) and :meth:`Schedule.next_step`, which lets a
loop skip the calls in between. On step index ``i`` a schedule sees ``elapsed.steps == i``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from gyre.core._checks import instance, real, whole
from gyre.core._clock import Elapsed, Period
from gyre.core._errors import explain, keywords_checked

ScheduleLike = Callable[[Elapsed], bool]


class _Unsolved:
    """The type of :data:`UNSOLVED` (one instance, kept by copies and pickles)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSOLVED"

    def __reduce__(self) -> str:
        return "UNSOLVED"


#: What :meth:`Schedule.next_step` returns when the schedule cannot say in advance when it
#: fires (samples, time, dates, plain functions): the loop then asks it at every step.
UNSOLVED: Any = _Unsolved()

#: The most steps a schedule scans one by one in :meth:`Schedule.next_step` (``~a``, a
#: stateless ``a & b``, the loops' own predicates); past it, it answers the step it reached,
#: where a call returns False and changes nothing.
_SCAN = 1024


class Schedule:
    """Base class: a predicate on the clock with ``&``, ``|``, ``~`` and a state dict.

    Subclasses implement ``__call__(elapsed) -> bool``; stateful ones override
    :meth:`state_dict`/:meth:`load_state_dict`. ``a & b``, ``a | b`` evaluate every operand every
    step (no short-circuit), so stateful ones stay in step.

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
        """The clock counters the schedule reads, or ``None`` when it cannot tell.

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

    def next_step(self, after: Elapsed | int, *, epoch_steps: int | None = None) -> Any:
        """The first step ``s >= after.steps`` where a call could fire or change the state; ``None``
        when never again; :data:`UNSOLVED` when it cannot say (samples, time, dates, functions).

        Calling the schedule only at the steps this returns (asking again after each call) gives
        the same firings and state as calling it every step. It changes no state.

        Args:
            after: the clock of the step in progress; an ``int`` is ``Elapsed(steps=after)``.
            epoch_steps: steps per epoch; ``None``: epoch schedules are UNSOLVED.

        Subclasses override ``_next_step(clock, epoch_steps)``.

        Example:
            >>> every(10).next_step(13), always().next_step(13), never().next_step(13)
            (20, 13, None)
            >>> s = after(steps=50).every(100)
            >>> s.next_step(13)  # the switch at step 50 is a state change, and fires
            50
            >>> every(epochs=2).next_step(Elapsed(steps=3, step_in_epoch=3), epoch_steps=5)
            10
        """
        if not isinstance(after, Elapsed):
            steps = whole(after, "after", problem="next_step(after=...) takes the clock of a step",
                          expected="a gyre.Elapsed, or a step index (an int >= 0)",
                          fix="pass the loop's elapsed, or elapsed.steps")
            after = Elapsed(steps=steps)
        if epoch_steps is not None and (type(epoch_steps) is not int or epoch_steps < 1):
            epoch_steps = whole(epoch_steps, "epoch_steps", minimum=1,
                                problem="next_step(epoch_steps=...) is the number of steps per epoch",
                                expected="an int >= 1, or None when the epoch length is unknown",
                                fix="pass epoch_steps=len(dataset), or leave it out")
        return self._next_step(after, epoch_steps)

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        return clock.steps if self.fires_always else UNSOLVED

    def _cycle(self, epoch_steps: int | None) -> int | None:
        """For a stateless schedule of the step counters (steps, epochs, step_in_epoch): a
        number of steps after which its firings repeat. ``None`` for any other schedule."""
        return 1 if self.fires_always else None

    def _next_change(self, clock: Elapsed, epoch_steps: int | None = None) -> Any:
        """Like :meth:`next_step`, for the state changes alone (a stateless schedule: None)."""
        return None if self._cycle(epoch_steps) is not None else self.next_step(clock, epoch_steps=epoch_steps)

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
    return _Function(instance(fn, "a schedule", Callable, kind="callable",
                              expected="a callable elapsed -> bool, e.g. gyre.every(10)",
                              fix="use gyre.every(...), gyre.after(...), or a function of the clock"))


class _And(Schedule):
    def __init__(self, *parts: Schedule) -> None:
        self.parts = parts

    def __call__(self, elapsed: Elapsed) -> bool:
        return all([part(elapsed) for part in self.parts])  # a list: every part runs

    def reads(self) -> frozenset[str] | None:
        return _union(part.reads() for part in self.parts)

    def _cycle(self, epoch_steps: int | None) -> int | None:
        cycles = [part._cycle(epoch_steps) for part in self.parts]
        return None if None in cycles else math.lcm(*cycles)  # type: ignore[arg-type]

    def _next_change(self, clock: Elapsed, epoch_steps: int | None = None) -> Any:
        return _first(part._next_change(clock, epoch_steps) for part in self.parts)

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        # The first state change of a part, or else the first step where every part may fire:
        # until a change, each part's next step from a later clock holds, and none fires
        # together before the latest of them.
        change = self._next_change(clock, epoch_steps)
        cycle = self._cycle(epoch_steps)
        if change is UNSOLVED:
            return UNSOLVED
        end = clock.steps + min(cycle or _SCAN, _SCAN)
        step = clock.steps
        while step < end and (change is None or step < change):
            at = _at(clock, step, epoch_steps)
            steps = [part.next_step(at, epoch_steps=epoch_steps) for part in self.parts]
            if UNSOLVED in steps:
                return UNSOLVED
            if None in steps:  # a part never fires again
                return change
            if max(steps) == step:
                return step
            step = max(steps)
        if change is not None and step >= change:
            return change
        return None if cycle is not None and cycle <= _SCAN else step

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [p.state_dict() for p in self.parts]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for part, sub in zip(self.parts, state.get("parts", []), strict=False):
            part.load_state_dict(sub)

    def __repr__(self) -> str:
        return "(" + " & ".join(map(repr, self.parts)) + ")"


class _Or(_And):
    def __call__(self, elapsed: Elapsed) -> bool:
        return any([part(elapsed) for part in self.parts])  # a list: every part runs

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        return _first(part.next_step(clock, epoch_steps=epoch_steps) for part in self.parts)

    def __repr__(self) -> str:
        return "(" + " | ".join(map(repr, self.parts)) + ")"


class _Not(_And):
    def __call__(self, elapsed: Elapsed) -> bool:
        return not self.parts[0](elapsed)

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        cycle = self.parts[0]._cycle(epoch_steps)
        return UNSOLVED if cycle is None else first_firing(self, clock, epoch_steps, cycle)

    _next_change = Schedule._next_change  # stateless, or UNSOLVED

    def __repr__(self) -> str:
        return f"~{self.parts[0]!r}"


def _first(steps: Any) -> Any:
    """The earliest of some :meth:`Schedule.next_step` answers (``None``: never; any
    UNSOLVED makes it UNSOLVED)."""
    found = [step for step in steps if step is not None]
    if any(step is UNSOLVED for step in found):
        return UNSOLVED
    return min(found, default=None)


def _at(clock: Elapsed, step: int, epoch_steps: int | None) -> Elapsed:
    """The clock of ``step`` (>= ``clock.steps``) as the loop makes it: epochs and
    step_in_epoch advanced as :meth:`Elapsed.update` does; the other counters kept."""
    done = clock.step_in_epoch + step - clock.steps
    epochs, in_epoch = divmod(done, epoch_steps) if epoch_steps else (0, done)
    return Elapsed(step, clock.samples, clock.epochs + epochs, in_epoch, clock.time, clock.date)


def first_firing(predicate: ScheduleLike, clock: Elapsed, epoch_steps: int | None, cycle: int | None) -> int | None:
    """The first step from ``clock`` where the stateless ``predicate`` is true, tried one by one."""
    span = min(cycle or _SCAN, _SCAN)
    for step in range(clock.steps, clock.steps + span):
        if predicate(_at(clock, step, epoch_steps)):
            return step
    return None if cycle is not None and cycle <= _SCAN else clock.steps + span


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

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        return None

    def _cycle(self, epoch_steps: int | None) -> int:
        return 1

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
    """Never fires (switches a task off).

    Example:
        >>> never()(Elapsed())
        False
    """
    return _Never()


def _one_quantity(fname: str, **given: Any) -> tuple[str, float]:
    chosen = [(k, v) for k, v in given.items() if v is not None]
    if len(chosen) != 1:
        shown = ", ".join(f"{k}={v!r}" for k, v in chosen) or "nothing"
        raise ValueError(explain(
            f"{fname}() takes exactly one of steps, samples, epochs, time",
            expected="one quantity, e.g. every(10) or every(epochs=1)", received=shown,
            fix="to fire on either of two, combine schedules: every(steps=10) | every(time=60)"))
    name, value = chosen[0]
    if name == "time":
        return name, real(value, f"{fname}(time=...)", above=0, unit="seconds", fix=f"e.g. {fname}(time=60.0)")
    return name, whole(value, f"{fname}({name}=...)", minimum=1, fix=f"e.g. {fname}({name}=1)")


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
        # (a clock behind the last firing is a new loop's, the schedule reused: it starts anew)
        if self._last is None or bucket != self._last:
            self._last = bucket
            return True
        return False

    def reads(self) -> frozenset[str]:
        return frozenset(("epochs", "step_in_epoch") if self.unit == "epochs" else (self.unit,))

    def _cycle(self, epoch_steps: int | None) -> int | None:
        if self.unit == "steps":
            return self.amount  # type: ignore[return-value]
        return self.amount * epoch_steps if self.unit == "epochs" and epoch_steps else None  # type: ignore[return-value]

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        n = int(self.amount)
        if self.unit == "steps":
            return clock.steps + (-clock.steps) % n
        if self.unit != "epochs" or epoch_steps is None:
            return UNSOLVED
        # Epoch starts are the steps where step_in_epoch + (s - steps) is a multiple m of
        # epoch_steps; that epoch is epochs + m.
        first = -(-clock.step_in_epoch // epoch_steps)
        m = first + (-(clock.epochs + first)) % n
        return clock.steps + m * epoch_steps - clock.step_in_epoch

    def state_dict(self) -> dict[str, Any]:
        return {} if self._last is None else {"last": self._last}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._last = state.get("last")

    def __repr__(self) -> str:
        return f"every({self.unit}={self.amount!r})"


@keywords_checked
def every(
    steps: int | None = None,
    *,
    samples: int | None = None,
    epochs: int | None = None,
    time: float | None = None,
) -> Schedule:
    """Fires periodically, counted in exactly one of steps, samples, epochs or seconds.

    ``every(n)``: step indices 0, n, 2n, ...; ``every(epochs=n)``: the first step of epochs 0, n,
    2n, ...; ``every(samples=n)``/``every(time=t)``: the first step starting at or past each
    multiple of n samples / t seconds, the first step included (stateful).

    Example:
        >>> s = every(3)
        >>> [i for i in range(10) if s(Elapsed(steps=i))]
        [0, 3, 6, 9]
    """
    unit, amount = _one_quantity("every", steps=steps, samples=samples, epochs=epochs, time=time)
    return Every(unit, amount)


class Piecewise(Schedule):
    """Switches between schedules at points on the clock; see :func:`piecewise`."""

    def __init__(self, initial: ScheduleLike, pieces: Mapping[Period, ScheduleLike]) -> None:
        instance(pieces, "piecewise()'s pieces", Mapping, kind="a dict from periods to schedules",
                 expected="{gyre.at(steps=1000): gyre.every(100), ...}", fix="pass the pieces as a dict")
        for period in pieces:
            instance(period, "piecewise() keys", Period, kind="periods",
                     expected="gyre.at(steps=..., ...) as each key",
                     fix="write the key as gyre.at(steps=1000)")
        self.initial = as_schedule(initial)
        self.periods = list(pieces)
        _check_order(self.periods)
        self.schedules = [as_schedule(s) for s in pieces.values()]
        self._origins: list[Elapsed | None] = [None] * len(self.periods)

    def _rewind(self, clock: Elapsed) -> None:
        """Forgets the switch points of an earlier loop: a clock before one of them is a new
        loop's (the schedule reused in another loop, or a re-run), which starts anew."""
        if any(o is not None and clock.steps < o.steps for o in self._origins):
            self._origins = [None] * len(self.periods)

    def __call__(self, elapsed: Elapsed) -> bool:
        self._rewind(elapsed)
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

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        return self._solve(clock, epoch_steps, change=False)

    def _next_change(self, clock: Elapsed, epoch_steps: int | None = None) -> Any:
        return self._solve(clock, epoch_steps, change=True)

    def _solve(self, clock: Elapsed, epoch_steps: int | None, *, change: bool) -> Any:
        # Candidates: each switch point not reached yet (recording it changes the state), and
        # the active piece's own step (or state change), solved on its relative clock. Pieces
        # that may still become active must be solvable too, so the answer stays known.
        self._rewind(clock)
        active = max((i for i, o in enumerate(self._origins) if o is not None), default=-1)
        later = self.schedules[active:] if active >= 0 else [self.initial, *self.schedules]
        if any(part.next_step(Elapsed(), epoch_steps=epoch_steps) is UNSOLVED for part in later[1:]):
            return UNSOLVED
        steps = [_reach(p, clock, epoch_steps) for p, o in zip(self.periods, self._origins, strict=True) if o is None]
        piece, origin = (self.initial, None) if active < 0 else (self.schedules[active], self._origins[active])
        ask = piece._next_change if change else piece.next_step
        inner = ask(clock if origin is None else clock.since(origin), epoch_steps=epoch_steps)
        if origin is not None and inner is not None and inner is not UNSOLVED:
            inner += origin.steps
        return _first([*steps, inner])

    def then(self, schedule: ScheduleLike) -> Piecewise:
        """After the last switch point, run ``schedule`` (on the clock counted from there).

        Example:
            >>> s = after(steps=5).then(every(2))
            >>> [i for i in range(10) if s(Elapsed(steps=i))]
            [5, 7, 9]
        """
        if len(self.periods) != 1 or not isinstance(self.schedules[0], _Always):
            raise TypeError(explain(
                ".then() and >> apply to a bare after(...)",
                expected="after(steps=...).then(schedule)", received=repr(self),
                fix="use piecewise(initial, {period: schedule, ...}) for several pieces"))
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


def _reach(period: Period, clock: Elapsed, epoch_steps: int | None) -> Any:
    """The first step from ``clock`` on whose clock reaches ``period`` (UNSOLVED for samples,
    time, dates, and epochs of unknown length)."""
    steps = []
    for name, value in period.items():
        if name == "steps":
            steps.append(max(clock.steps, value))
        elif name == "epochs" and epoch_steps is not None:
            # epochs + (step_in_epoch + s - steps) // epoch_steps >= value
            wanted = (value - clock.epochs) * epoch_steps - clock.step_in_epoch
            steps.append(clock.steps + max(wanted, 0))
        else:
            return UNSOLVED
    return min(steps)


def _check_order(periods: list[Period]) -> None:
    """Refuses a piece listed after one it does not follow (pieces sharing no quantity pass)."""
    for first, second in zip(periods, periods[1:], strict=False):
        for name in Period.__slots__:
            a, b = getattr(first, name), getattr(second, name)
            if a is not None and b is not None and b <= a:
                raise ValueError(explain(
                    "piecewise() pieces must be listed in increasing order of their points",
                    expected=f"each piece's {name} greater than the one before it",
                    received=f"{first!r} then {second!r} (the piece at {first!r} would never run)",
                    fix="sort the pieces by their point, and merge two pieces at the same point"))


def piecewise(initial: ScheduleLike, pieces: Mapping[Period, ScheduleLike]) -> Piecewise:
    """``initial`` until the first period is reached, then that period's schedule, and so on.

    Pieces must be in increasing order (out of order, or two at one point, is an error). Each
    piece sees the clock counted from the step where its period was reached.

    Example:
        >>> s = piecewise(every(1), {Period(steps=4): every(3)})
        >>> [i for i in range(12) if s(Elapsed(steps=i))]
        [0, 1, 2, 3, 4, 7, 10]
    """
    return Piecewise(initial, pieces)


@keywords_checked
def after(
    steps: int | None = None,
    *,
    samples: int | None = None,
    epochs: int | None = None,
    time: float | None = None,
) -> Piecewise:
    """Fires on every step once any of the given quantities is reached.

    ``.every(...)``, ``.then(schedule)`` or ``>> schedule`` refine it, on the clock counted from
    the step where the period was reached.

    Example:
        >>> s = after(steps=3)
        >>> [i for i in range(6) if s(Elapsed(steps=i))]
        [3, 4, 5]
    """
    return Piecewise(never(), {Period(steps, samples, epochs, time): always()})


# -- the schedules of gyre.fit and TrainerModule.train_model, solved in advance --------------------


class EpochEnds(Schedule):
    """Fires on the last step of every ``every``-th epoch (epochs counted from 1) and of epoch
    ``last``; with ``others=True``, on the last step of every other epoch instead.

    Args:
        epoch_steps: the steps of an epoch.
        label: the schedule's name (its ``repr``, in the loop's messages).
        every: epochs between two firings.
        last: the last epoch of the run, where it also fires (``None``: no such epoch).
        others: fire at the epoch ends that the rest of the arguments leave out.
    """

    def __init__(self, epoch_steps: int, label: str, *, every: int = 1, last: int | None = None, others: bool = False) -> None:
        self.epoch_steps, self.label = epoch_steps, label
        self.every, self.last, self.others = every, last, others

    def _epoch_fires(self, epoch: int) -> bool:
        """Whether it fires at the end of the (0-based) ``epoch``."""
        chosen = (epoch + 1) % self.every == 0 or epoch + 1 == self.last
        return chosen != self.others

    def __call__(self, elapsed: Elapsed) -> bool:
        return elapsed.step_in_epoch == self.epoch_steps - 1 and self._epoch_fires(elapsed.epochs)

    def reads(self) -> frozenset[str]:
        return frozenset(("epochs", "step_in_epoch"))

    def _next_step(self, after: Elapsed, epoch_steps: int | None) -> int | None:
        """The first step ``>= after.steps`` where it fires (``None``: never), by its own epoch length."""
        length, position, epoch = self.epoch_steps, after.step_in_epoch, after.epochs
        end = after.steps + length - 1 - position
        if position >= length:  # (an epoch length changed on resume) the epoch rolls at once
            end, epoch = after.steps + length, epoch + 1
        for _ in range(self.every + 2):  # the pattern repeats every `every` epochs past `last`
            if self._epoch_fires(epoch):
                return end
            end, epoch = end + length, epoch + 1
        return None

    def __repr__(self) -> str:
        return self.label


def periodic(seconds: float) -> Schedule:
    """Fires at the first step once ``seconds`` have passed, then once every ``seconds``
    (at the first step starting at or past each multiple): a checkpoint on a clock. An
    ``every(time=...)`` that skips the first step, so the loop ends its blocks at its deadline.
    """
    schedule = every(time=seconds)
    schedule.load_state_dict({"last": 0})
    return schedule
