"""The clock of a running loop: :class:`Elapse` pulls batches and counts completed steps.

During step ``i`` the clock says ``steps == i`` and is ``in_progress``; the step counts as
completed when the next batch is asked for, or when the loop ends (see README.md here).
"""

from __future__ import annotations

import inspect
import sys
import time as _time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax

from gyre.core._checks import instance, whole
from gyre.core._clock import BatchSizeFn, Elapsed, Period, infer_batch_size
from gyre.core._errors import as_integer, describe, explain, keywords_checked, warn
from gyre.data._source import refuse_sources

StopLike = int | Period | None

#: What :meth:`Elapse.pull` returns when no step will run.
END = object()


def check_stop(stop: Any, name: str = "stop") -> StopLike:
    """A loop's ``stop``: a whole number of steps >= 1, a Period (no quantity 0: reached at once), or None."""
    if stop is None:
        return stop
    if isinstance(stop, Period):
        if all(n == "date" or v for n, v in stop.items()):
            return stop
    else:
        steps = as_integer(stop)
        if steps is not None and steps >= 1:
            return Period(steps=steps)
    zeros = isinstance(stop, Period)  # (gyre.at(steps=0): every clock has reached it, so no step would run)
    raise ValueError(explain(
        f"{name}= must be a number of steps >= 1, a Period" + (" without a quantity of 0" if zeros else "") + ", or None",
        expected=f"{name}=1000, {name}=gyre.at(epochs=5), or {name}=None (until the data ends)",
        received=repr(stop) if zeros else describe(stop), fix=f"pass a positive number of steps, e.g. {name}=100"))


def steps_only(period: Period | None) -> int | None:
    """The step count of a Period that counts steps and nothing else, else None."""
    return period.steps if period is not None and [name for name, _ in period.items()] == ["steps"] else None


def stop_index(stop: Period | None, clock: Elapsed, epoch_steps: int | None) -> int | None | bool:
    """The step index a loop at ``clock`` stops before: ``None`` without a stop, ``False`` when
    it cannot be solved in advance (samples, time, or epochs of unknown length)."""
    if stop is None:
        return None
    steps = steps_only(stop)
    if steps is not None:
        return steps
    given = dict(stop.items())
    if set(given) - {"steps", "epochs"} or epoch_steps is None:
        return False
    ends = [given["steps"]] if "steps" in given else []
    if "epochs" in given:
        ends.append(clock.steps + (given["epochs"] - clock.epochs) * epoch_steps - clock.step_in_epoch)
    return max(min(ends), clock.steps)


def epoch_steps_of(epoch_duration: Any, dataset: Any) -> int | None:
    """Steps per epoch: ``epoch_duration``, else the dataset's own, else None."""
    if isinstance(epoch_duration, Period) and steps_only(epoch_duration) is not None:
        epoch_duration = epoch_duration.steps
    if epoch_duration is None:
        return dataset_epoch_steps(dataset)
    return whole(epoch_duration, "epoch_duration=", minimum=1, unit="steps",
                 fix="pass the number of steps in one epoch",
                 expected="epoch_duration=len(train_batches) or gyre.at(steps=...)")


def dataset_epoch_steps(dataset: Any) -> int | None:
    """The dataset's ``epoch_steps`` or ``len``; None when unknown or endless (``sys.maxsize``)."""
    steps = as_integer(getattr(dataset, "epoch_steps", None))
    if steps is not None and steps >= 1:
        return steps
    try:
        size = len(dataset)
    except TypeError:
        return None
    return size if 0 < size < sys.maxsize else None


def check_iterable(dataset: Any) -> None:
    """Raises the explained error for a dataset a loop cannot iterate (an array, a dict, a pair,
    a data set's whole train/test split)."""
    refuse_sources(dataset, "the dataset")
    if _looks_like_arrays(dataset):
        shapes = ", ".join(str(tuple(x.shape)) for x in dataset)
        raise TypeError(explain(
            "the dataset is a tuple of whole arrays, which the loop would iterate "
            "array by array (a Keras habit: fit(x, y))",
            expected="an iterable of batches", received=f"a tuple of {len(dataset)} arrays with shapes {shapes}",
            fix="batch them: gyre.data.batches((X, Y), batch_size=32, seed=0)"))
    if hasattr(dataset, "shape") and hasattr(dataset, "dtype") and len(dataset.shape) >= 1:
        raise TypeError(explain(
            f"the dataset is a single array of shape {tuple(dataset.shape)}, which the loop "
            "would iterate row by row (one example per step, with no batch dimension)",
            expected="an iterable of batches", received=f"a {type(dataset).__name__} of shape {tuple(dataset.shape)}",
            fix="batch it: gyre.data.batches(x, batch_size=32, seed=0), or a list of batches"))
    if isinstance(dataset, Mapping):
        keys = list(dataset)
        shown = "(" + ", ".join(f"d[{k!r}]" for k in keys[:3]) + ")"
        raise TypeError(explain(
            "the dataset is a dict: the loop would iterate its keys as batches",
            expected="an iterable of batches (each batch may be a dict)", received=f"a dict with keys {keys[:8]}",
            fix=f"batch its arrays: gyre.data.batches({shown}, batch_size=32, seed=0), or pass a list of dict batches"))
    if not (isinstance(dataset, Iterable) or hasattr(type(dataset), "__getitem__")):
        raise _not_iterable(dataset)


def _not_iterable(dataset: Any) -> TypeError:
    return TypeError(explain(
        "the dataset is not iterable",
        expected="an iterable of batches: a list, a generator, a data loader", received=describe(dataset),
        fix="pass e.g. [batch0, batch1, ...] or a generator that yields batches; "
        "for one batch repeated, itertools.repeat(batch)"))


def check_dataset(dataset: Any) -> Iterator[Any]:
    """An iterator over the dataset, or the explained error (see :func:`check_iterable`)."""
    check_iterable(dataset)
    try:
        return iter(dataset)
    except TypeError:
        raise _not_iterable(dataset) from None


def _looks_like_arrays(dataset: Any) -> bool:
    """A tuple of 2 or 3 arrays of equal length but different shapes or dtypes (whole
    features and labels; several batches would look alike)."""
    return (
        type(dataset) is tuple and 2 <= len(dataset) <= 3
        and all(hasattr(x, "shape") and hasattr(x, "dtype") and len(x.shape) >= 1 for x in dataset)
        and len({x.shape[0] for x in dataset}) == 1
        and len({(tuple(x.shape), str(x.dtype)) for x in dataset}) > 1
    )


def size_function(batch_size_fn: Any) -> BatchSizeFn:
    """The batch-size function: leading dimension by default, else ``batch_size_fn``.

    A ``batch_size_fn`` whose parameter is named ``batch`` gets the batch, any other the list of
    leaf shapes (ciclo's form; scalars as ``(1,)``).
    """
    if batch_size_fn is None:
        return infer_batch_size
    instance(batch_size_fn, "batch_size_fn", Callable, kind="a function",
             fix="pass a function returning the number of samples in a batch",
             expected="batch_size_fn=lambda shapes: shapes[0][0] (ciclo's form: the list of leaf shapes) or a function with a parameter named batch")
    try:
        first = next(iter(inspect.signature(batch_size_fn).parameters), None)
    except (TypeError, ValueError):
        first = None
    if first == "batch":
        return lambda batch: samples(batch_size_fn(batch))

    def from_shapes(batch: Any) -> int:
        shapes = [tuple(getattr(x, "shape", ())) or (1,) for x in jax.tree_util.tree_leaves(batch)]
        return samples(batch_size_fn(shapes)) if shapes else 1

    return from_shapes


def samples(size: Any) -> int:
    """A ``batch_size_fn``'s result as an ``int``, or the explained error."""
    if type(size) is int and size >= 0:
        return size
    number = as_integer(size)
    if number is not None and number >= 0:
        return number
    raise TypeError(explain(
        f"batch_size_fn returned {size!r} as the samples of a batch",
        expected="a whole number >= 0 (the examples in the batch)", received=describe(size),
        fix="return the batch's leading dimension as an int, e.g. "
        "batch_size_fn=lambda batch: batch['y'].shape[0]"))


class Elapse:
    """Yields ``(elapsed, batch)`` for a hand-written loop; the clock counts completed steps
    (a step is completed when the next is asked for). ``gyre.elapse`` is this class.

    Args:
        dataset: an iterable of batches.
        stop: steps (a whole number) or a :class:`Period` after which iteration ends.
        initial: the clock to continue from (the ``elapsed`` a previous loop returned).
        epoch_duration: steps per epoch; by default the dataset's ``epoch_steps`` or ``len``.
        batch_size_fn: samples in a batch; by default the leading dimension of its arrays.
        clock: seconds source (default ``time.monotonic``).

    Attributes:
        elapsed: the clock of the step in progress (what each pair holds), or of the next step
            between steps; ``elapsed.completed()`` is the clock once it is done (what
            ``gyre.checkpoint`` saves).
        exhausted: the data ended (rather than the stop).

    Example:
        >>> import gyre
        >>> [e.steps for e, batch in gyre.elapse(range(100), stop=3)]
        [0, 1, 2]
    """

    @keywords_checked
    def __init__(
        self,
        dataset: Iterable[Any],
        *,
        stop: StopLike = None,
        initial: Elapsed | None = None,
        epoch_duration: int | Period | None = None,
        batch_size_fn: Any = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.stop = check_stop(stop)
        self.epoch_steps = epoch_steps_of(epoch_duration, dataset)
        self._check_epochs(dataset)
        self._it = check_dataset(dataset)
        self.size_of = size_function(batch_size_fn)
        self._clock = clock or _time.monotonic
        base = _check_initial(initial)
        self._first = base.steps  # the clock's steps when this loop began
        start = self._clock()
        # time counts seconds inside loops; date is the wall clock moved by the same amount.
        self._t0 = start - base.time
        self._d0 = _time.time() - start
        self.elapsed = base.replace(date=self._d0 + start)
        self._pending: int | None = None  # batch size of the step in progress
        self.exhausted = False

    def _check_epochs(self, dataset: Any) -> None:
        if self.stop is not None and self.stop.epochs is not None and self.epoch_steps is None:
            raise ValueError(epochs_unknown(f"stop={self.stop!r}", dataset))

    def __iter__(self) -> Elapse:
        return self

    def now(self) -> tuple[float, float]:
        """``(time, date)`` now, as the clock counts them."""
        now = self._clock()
        return now - self._t0, self._d0 + now

    def pull(self, clock: Elapsed) -> Any:
        """The batch of the step at ``clock``, or :data:`END` (the stop or the data's end)."""
        if self.exhausted or (self.stop is not None and clock.reached(self.stop)):
            return END  # (an iterator is not asked again once it ended: some start a new pass)
        try:
            return next(self._it)
        except StopIteration:
            self.exhausted = True
            return END

    def __next__(self) -> tuple[Elapsed, Any]:
        clock = self.complete()
        batch = self.pull(clock)
        if batch is END:
            raise StopIteration
        size = self._pending = self.size_of(batch)
        clock._step = (size, self.epoch_steps)
        return clock, batch

    @property
    def batch_size(self) -> int | None:
        """Samples in the step in progress (``None`` between steps)."""
        return self._pending

    def advance(self, clocks: Sequence[Elapsed], sizes: Sequence[int]) -> None:
        """Counts the steps of a fused chunk as done, but the last, which stays in progress (as
        the step of a per-step loop does while its callbacks run)."""
        self.elapsed = clocks[-1].started(sizes[-1], self.epoch_steps)
        self._pending = sizes[-1]

    def complete(self) -> Elapsed:
        """Counts the step in progress as completed; returns the clock."""
        self.elapsed, self._pending = self.peek_completed(), None
        return self.elapsed

    def forget_step(self) -> None:
        """Drops the step in progress, which did not run: its batch is not counted as consumed."""
        self.rewind(self.elapsed)

    def rewind(self, clock: Elapsed) -> None:
        """Goes back to ``clock`` (of a step not run yet): the batches of the steps after it are not
        counted as consumed, nor is a step in progress."""
        self.elapsed, self._pending = clock.replace(), None  # (a copy without the in-progress mark)

    def peek_completed(self) -> Elapsed:
        """The clock as it will be when the step in progress completes (changes nothing)."""
        if self._pending is None:
            return self.elapsed
        time, date = self.now()
        return self.elapsed._after(self._pending, time, date, self.epoch_steps)

    def warn_if_short(self, stopped: bool, *, nested: bool = False) -> None:
        """Says once when the data ended before ``stop``, or gave no batch at all (an outermost
        loop: an evaluation's caller says it)."""
        if self.exhausted and self.stop is not None and not stopped and not self.elapsed.reached(self.stop):
            warn(
                f"the data ended after {self.elapsed.steps} steps, before stop={self.stop!r}: "
                "the loop ran every batch it was given (repeat the data for more epochs, e.g. "
                "gyre.data.batches(..., epochs=None), or lower stop)"
            )
        elif self.exhausted and not stopped and not nested and self.elapsed.steps == self._first:
            warn(
                "the data gave no batch, so the loop ran no step and returned the state it was "
                "given: an empty dataset, or a generator or iterator that an earlier loop "
                "exhausted (make a new one for each loop, or pass a list)"
            )


def _check_initial(initial: Any) -> Elapsed:
    if initial is None:
        return Elapsed()
    instance(initial, "elapsed= / initial=", Elapsed, kind="a gyre.Elapsed",
             expected="the Elapsed returned by a previous loop, or None",
             fix="pass the third value a loop returned: state, history, elapsed = gyre.loop(...)")
    return initial.completed()


def epochs_unknown(what: str, dataset: Any = None) -> str:
    """The explanation for epoch-based timing over data of unknown epoch length."""
    source = source_of(dataset)
    kind = "a dataset" if source is None else f"a dataset of type {type(source).__name__}"
    return explain(
        f"{what} counts epochs, and the loop cannot tell where an epoch ends",
        expected="epoch_duration=<steps per epoch>, or a dataset that knows its epoch length "
        "(gyre.data.batches(...), or anything with len())",
        received=f"{kind} with neither len() nor epoch_steps, and no epoch_duration",
        fix="pass epoch_duration=<batches per epoch> (e.g. gyre.data.steps_per_epoch(len(x), "
        "batch_size)), iterate gyre.data.batches(...), or count in steps")


def source_of(dataset: Any) -> Any:
    """The user's dataset inside the loop's wrappers (``wrapped_dataset``)."""
    for _ in range(8):  # wrappers are a few levels deep at most
        inner = getattr(dataset, "wrapped_dataset", None)
        if inner is None:
            break
        dataset = inner
    return dataset


#: The public spelling (``gyre.elapse(dataset, stop=...)``): one class, two names.
elapse = Elapse
