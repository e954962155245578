"""The clock of a loop: :class:`Elapsed`, the :class:`Period` it is compared with, and ``at``."""

from __future__ import annotations

import datetime as _dt
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import jax

from gyre.core._checks import instance, whole
from gyre.core._errors import describe, explain, keywords_checked

CLOCK_FIELDS = ("steps", "samples", "epochs", "step_in_epoch", "time", "date")


class Elapsed:
    """Completed steps, samples, epochs, step within the epoch, seconds since start, and date.

    Immutable and a pytree (its six counters are the leaves). During step ``i`` a loop's clock
    says ``steps == i``; passing a returned clock back as ``elapsed=`` continues at the next step.

    Attributes:
        steps: completed steps.
        samples: completed samples (sum of the batch sizes of completed steps).
        epochs: completed epochs.
        step_in_epoch: completed steps of the current epoch.
        time: seconds of training since the start (excluding time between resumed runs).
        date: wall-clock POSIX timestamp of the last update.

    Example:
        >>> e = Elapsed.create(date=0.0).update(32, time=1.5, date=1.5)
        >>> e.steps, e.samples, e.time
        (1, 32, 1.5)
        >>> e >= at(steps=1), e >= at(samples=64)
        (True, False)
    """

    __slots__ = (*CLOCK_FIELDS, "_step")

    def __init__(
        self,
        steps: int = 0,
        samples: int = 0,
        epochs: int = 0,
        step_in_epoch: int = 0,
        time: float = 0.0,
        date: float = 0.0,
    ) -> None:
        put = object.__setattr__  # (the counters are read-only afterwards: see __setattr__)
        put(self, "steps", steps)
        put(self, "samples", samples)
        put(self, "epochs", epochs)
        put(self, "step_in_epoch", step_in_epoch)
        put(self, "time", time)
        put(self, "date", date)
        put(self, "_step", None)  # (batch size, epoch length) of the step in progress: a loop's mark

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle build a new clock (no setattr)
        return type(self), tuple(getattr(self, n) for n in CLOCK_FIELDS), (None, {"_step": self._step})

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_step":
            object.__setattr__(self, name, value)
            return
        raise AttributeError(explain(
            f"Elapsed is immutable: its {name!r} cannot be set",
            expected="a new clock", received=f"elapsed.{name} = {describe(value)}",
            fix=f"elapsed.replace({name}=...) returns a copy with it changed"
            if name in CLOCK_FIELDS else f"use one of the counters {CLOCK_FIELDS} through replace(...)"))

    @classmethod
    def create(
        cls, steps: int = 0, samples: int = 0, *, epochs: int = 0, date: float | None = None
    ) -> Elapsed:
        """A clock at the given counts (zero by default), dated now (or at ``date``).

        Example:
            >>> Elapsed.create(steps=5, samples=40, date=0.0).samples
            40
        """
        import time as _time

        given = zip(CLOCK_FIELDS[:3], (steps, samples, epochs), strict=True)
        counts = [_check_amount(name, value, integral=True) for name, value in given]
        return cls(*counts, date=_time.time() if date is None else float(date))

    @property
    def in_progress(self) -> bool:
        """True for the clock a loop hands out during a step; :meth:`completed` gives it once done.

        Example:
            >>> import gyre
            >>> [(e.steps, e.in_progress) for e, _ in gyre.elapse([10, 20])]
            [(0, True), (1, True)]
        """
        return self._step is not None

    def completed(self, *, time: float | None = None, date: float | None = None) -> Elapsed:
        """The clock once the step in progress completes (itself when none is in progress).

        Args:
            time, date: the moment of completion (default: this clock's own).

        Example:
            >>> import gyre, numpy as np
            >>> for elapsed, batch in gyre.elapse([np.zeros(32), np.zeros(32)], stop=1):
            ...     done = elapsed.completed()
            >>> (elapsed.steps, elapsed.samples), (done.steps, done.samples)
            ((0, 0), (1, 32))
        """
        if self._step is None:
            return self
        batch_size, epoch_steps = self._step
        return self.update(
            batch_size,
            time=self.time if time is None else time,
            date=self.date if date is None else date,
            epoch_steps=epoch_steps,
        )

    def started(self, batch_size: int, epoch_steps: int | None) -> Elapsed:
        """This clock, marked in progress for a step of ``batch_size`` samples; returns ``self``.

        Example:
            >>> Elapsed().started(8, None).completed().samples
            8
        """
        self._step = (batch_size, epoch_steps)
        return self

    def update(
        self,
        batch_size: int,
        *,
        time: float | None = None,
        date: float | None = None,
        epoch_steps: int | None = None,
    ) -> Elapsed:
        """The clock after one more completed step of ``batch_size`` samples.

        Args:
            batch_size: samples in the step just completed.
            time: seconds since start; left out (ciclo's form), this clock's time plus the
                seconds since its ``date`` (unchanged when undated, ``date == 0``).
            date: POSIX timestamp (default: now).
            epoch_steps: steps per epoch, after which ``epochs`` grows and ``step_in_epoch``
                restarts; ``None``: epochs never advance.

        Example:
            >>> e = Elapsed().update(8, time=0.1, date=0.1, epoch_steps=1)
            >>> e.epochs, e.step_in_epoch
            (1, 0)
        """
        if date is None:
            import time as _time

            date = _time.time()
        if time is None:
            time = self.time + max(date - self.date, 0.0) if self.date else self.time
        return self._after(batch_size, time, date, epoch_steps)

    def _after(self, batch_size: int, time: float, date: float, epoch_steps: int | None) -> Elapsed:
        """:meth:`update` with every argument given (the loops' form)."""
        step_in_epoch = self.step_in_epoch + 1
        epochs = self.epochs
        if epoch_steps is not None and step_in_epoch >= epoch_steps:
            epochs += 1
            step_in_epoch = 0
        return Elapsed(self.steps + 1, self.samples + batch_size, epochs, step_in_epoch, time, date)

    def _after_steps(self, steps: int, samples: int, epoch_steps: int | None) -> Elapsed:
        """The clock ``steps`` steps and ``samples`` samples later, as ``steps`` calls of
        :meth:`_after` give it (the time and date kept: a block's steps share them)."""
        epochs, in_epoch = epochs_after(self.epochs, self.step_in_epoch, steps, epoch_steps)
        return Elapsed(self.steps + steps, self.samples + samples, epochs, in_epoch, self.time, self.date)

    def replace(self, **changes: Any) -> Elapsed:
        """A copy with some counters changed."""
        unknown = set(changes) - set(CLOCK_FIELDS)
        if unknown:
            raise TypeError(explain(
                f"Elapsed has no counter {sorted(unknown)}",
                expected=f"some of {CLOCK_FIELDS}", received=str(sorted(changes)),
                fix="use one of the names listed as expected"))
        values = {name: getattr(self, name) for name in CLOCK_FIELDS}
        values.update(changes)
        return Elapsed(**values)

    def since(self, origin: Elapsed) -> Elapsed:
        """The clock counted from ``origin``: steps, samples, epochs and time are differences.

        ``step_in_epoch`` and ``date`` are kept.

        Example:
            >>> Elapsed(steps=12, samples=96).since(Elapsed(steps=10, samples=80)).steps
            2
        """
        return Elapsed(
            self.steps - origin.steps,
            self.samples - origin.samples,
            self.epochs - origin.epochs,
            self.step_in_epoch,
            self.time - origin.time,
            self.date,
        )

    def __sub__(self, origin: Elapsed) -> Elapsed:
        """``elapsed - origin`` (ciclo's spelling of :meth:`since`).

        Example:
            >>> (Elapsed(steps=12, samples=96) - Elapsed(steps=10, samples=80)).samples
            16
        """
        if not isinstance(origin, Elapsed):
            return NotImplemented
        return self.since(origin)

    def reached(self, period: Period) -> bool:
        """True when any quantity set in ``period`` has been reached.

        Example:
            >>> Elapsed(steps=3).reached(at(steps=3))
            True
        """
        instance(period, "what an Elapsed is compared with", Period, kind="a Period",
                 expected="gyre.at(steps=..., samples=..., epochs=..., time=..., date=...)",
                 fix="wrap the bound in gyre.at(...), e.g. elapsed >= gyre.at(steps=100)")
        return any(getattr(self, name) >= value for name, value in period.items())

    def passed(self, period: Period) -> bool:
        """True when any quantity set in ``period`` has been exceeded (strictly).

        Example:
            >>> Elapsed(steps=3).passed(at(steps=3)), Elapsed(steps=4).passed(at(steps=3))
            (False, True)
        """
        self.reached(period)  # the type check and its explanation
        return any(getattr(self, name) > value for name, value in period.items())

    # Comparisons with a Period (ciclo's operators): ``>=`` reached, ``>`` passed, and ``<`` /
    # ``<=`` their negations; ``==`` is true when any quantity of the period is exactly hit.
    __ge__, __gt__ = reached, passed

    def __lt__(self, period: Period) -> bool:
        return not self.reached(period)

    def __le__(self, period: Period) -> bool:
        return not self.passed(period)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Period):
            return any(getattr(self, name) == value for name, value in other.items())
        if not isinstance(other, Elapsed):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in CLOCK_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, float]:
        """The counters as a plain dict (JSON-ready)."""
        return {name: getattr(self, name) for name in CLOCK_FIELDS}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Elapsed:
        """The inverse of :meth:`to_dict`."""
        return cls().replace(**dict(values))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in CLOCK_FIELDS)
        return f"Elapsed({inner})"


jax.tree_util.register_pytree_node(
    Elapsed,
    lambda e: ((e.steps, e.samples, e.epochs, e.step_in_epoch, e.time, e.date), None),
    lambda _, children: Elapsed(*children),
)


def _check_amount(name: str, value: Any, *, integral: bool) -> Any:
    """A Period's amount: a whole number >= 0 (steps, samples, epochs: as an int) or a number >= 0."""
    fix = f"pass {name}=10 (or leave it out)"
    if integral:
        return whole(value, f"{name}=", expected="a whole number >= 0", fix=fix)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:  # NaN too
        raise ValueError(explain(f"{name}= must be a number >= 0", expected="a number >= 0",
                                 received=describe(value), fix=fix))
    return value


class Period:
    """A point on the clock: any of steps, samples, epochs, seconds of training, or a date.

    ``elapsed >= period`` is true as soon as any of the given quantities is reached:
    ``at(steps=1000, time=3600)`` is "after 1000 steps or one hour, whichever comes first".

    Example:
        >>> p = Period(steps=100, time=60.0)
        >>> p
        Period(steps=100, time=60.0)
        >>> Elapsed(steps=5, time=61.0) >= p
        True
    """

    __slots__ = ("steps", "samples", "epochs", "time", "date")

    def __init__(
        self,
        steps: int | None = None,
        samples: int | None = None,
        epochs: int | None = None,
        time: float | _dt.timedelta | None = None,
        date: float | _dt.datetime | None = None,
    ) -> None:
        if isinstance(time, _dt.timedelta):
            time = time.total_seconds()
        for name, value in zip(self.__slots__, (steps, samples, epochs, time, date), strict=True):
            if name == "date" and isinstance(value, _dt.datetime):
                value = value.timestamp()
            elif value is not None:
                value = _check_amount(name, value, integral=name not in ("time", "date"))
            setattr(self, name, value)
        if not self.items():
            raise ValueError(explain(
                "a Period needs at least one quantity",
                expected="one or more of steps=, samples=, epochs=, time=, date=", received="none of them",
                fix="e.g. gyre.at(steps=1000) or gyre.at(epochs=5)"))

    @classmethod
    def create(
        cls,
        steps: int | None = None,
        samples: int | None = None,
        time: float | _dt.timedelta | None = None,
        date: float | _dt.datetime | None = None,
        *,
        epochs: int | None = None,
    ) -> Period:
        """ciclo's constructor: ``Period.create(steps=, samples=, time=, date=)``.

        Example:
            >>> import datetime
            >>> Period.create(time=datetime.timedelta(minutes=1))
            Period(time=60.0)
        """
        return cls(steps, samples, epochs, time, date)

    def items(self) -> list[tuple[str, float]]:
        """The quantities that are set, as (name, value) pairs.

        Example:
            >>> Period(epochs=2).items()
            [('epochs', 2)]
        """
        return [(n, getattr(self, n)) for n in self.__slots__ if getattr(self, n) is not None]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Period) and self.items() == other.items()

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        return "Period(" + ", ".join(f"{n}={v!r}" for n, v in self.items()) + ")"


@keywords_checked
def at(
    steps: int | None = None,
    *,
    samples: int | None = None,
    epochs: int | None = None,
    time: float | None = None,
    date: float | _dt.datetime | None = None,
) -> Period:
    """A :class:`Period`: the point where any of the given quantities is reached.

    Example:
        >>> end = at(steps=10_000, time=3600)
        >>> Elapsed(steps=10_000) >= end
        True
    """
    return Period(steps, samples, epochs, time, date)


def epochs_after(epochs: int, step_in_epoch: int, steps: Any, epoch_steps: int | None) -> tuple[Any, Any]:
    """``(epochs, step_in_epoch)`` after ``steps`` more steps (an int, or a numpy array of
    them), an epoch every ``epoch_steps`` (``None``: never), as that many steps of
    :meth:`Elapsed._after` count them (a position past the epoch's length rolls at once)."""
    in_epoch = step_in_epoch + steps
    if epoch_steps is None:
        return epochs, in_epoch
    roll = max(epoch_steps - step_in_epoch, 1)  # steps to the next epoch's first
    rolled = steps >= roll
    return epochs + rolled * (1 + (steps - roll) // epoch_steps), in_epoch + rolled * ((steps - roll) % epoch_steps - in_epoch)


def infer_batch_size(batch: Any, *, strict: bool = True, default: int | None = 1) -> int:
    """Samples in a batch: the leading dimension its array leaves share (scalars are not
    counted). Leaves that disagree (time-major inputs beside labels) are refused: pass the
    loop's ``batch_size_fn=``.

    Args:
        batch: a pytree (a tuple, dict, named tuple, a single array...).
        strict: ``False``: leaves that disagree give the first array leaf's leading dimension
            (in ``jax.tree_util`` order) instead of an error.
        default: the answer for a batch without array leaves; ``None``: an error.

    Example:
        >>> import numpy as np
        >>> infer_batch_size({"x": np.zeros((32, 8)), "y": np.zeros(32)})
        32
    """
    kind = type(batch)
    if kind is tuple or kind is list or kind is dict or (isinstance(batch, tuple) and hasattr(kind, "_fields")):
        # the common batches (a named tuple's fields are its children too), without flattening
        size = None
        for leaf in batch.values() if kind is dict else batch:
            if type(leaf) not in _ARRAY_TYPES and not _is_array(leaf):
                break
            shape = leaf.shape
            if shape and shape[0] != size:
                if size is not None:
                    break  # (the general path explains, or gives the first leaf's)
                size = shape[0]
        else:
            if size is not None:
                return size
    size = None
    for leaf in jax.tree_util.tree_leaves(batch):
        shape = getattr(leaf, "shape", None)
        if shape and shape[0] != size:
            if size is not None:
                if not strict:
                    return size
                _refuse(batch)
            size = shape[0]
    if size is None and default is None:
        _refuse(batch)
    return default if size is None else size  # type: ignore[return-value]


def _refuse(batch: Any) -> None:
    """The error for a batch whose samples cannot be counted (leaves disagree, or none)."""
    shapes = [tuple(getattr(leaf, "shape", ())) for leaf in jax.tree_util.tree_leaves(batch)]
    sizes = sorted({s[0] for s in shapes if s})
    raise ValueError(explain(
        "cannot tell the samples (rows) in a batch: "
        + ("its arrays disagree on their leading dimension" if sizes else "it holds no array"),
        expected="array leaves of one leading dimension (the samples), e.g. (x of shape (40, 28, 28, 1), "
        "y of shape (40,)), or batch_size_fn=",
        received=f"leading dimensions {sizes}, leaves of shapes {shapes}" if sizes else "no array leaf",
        fix="give every array of the batch its examples along axis 0, or say how to count them: "
        "batch_size_fn=lambda batch: batch['y'].shape[0] (a keyword of gyre.loop, train_loop, "
        "test_loop, gyre.fit and the jaxloop loops; it weighs evaluation means and counts samples)"))


_ARRAY_TYPES: set[type] = set()  # array types met so far (numpy, jax's concrete array types)


def _is_array(value: Any) -> bool:
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        _ARRAY_TYPES.add(type(value))
        return True
    return False


BatchSizeFn = Callable[[Any], int]
