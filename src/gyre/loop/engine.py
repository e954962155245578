"""The engine: ``loop`` runs a task table over a dataset; ``elapse`` counts steps for hand loops.

A step of :func:`loop`: take a batch (never one the loop will not use), then for each
``schedule: callbacks`` entry in table order, if the schedule fires on the clock, run the
callbacks in list order. Each callback may return ``None``, ``Logs``, a new state, or
``(logs, state)``. The step's logs are committed to the history; then the clock advances.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice as _islice
from typing import Any

from gyre.core.clock import BatchSizeFn, Elapsed, Period, infer_batch_size
from gyre.core.errors import describe, explain, suggest, whole_number
from gyre.core.history import History
from gyre.core.logs import Logs
from gyre.core.schedules import NamedSchedule, as_schedule
from gyre.loop.binding import Invoker, bind

Callback = Callable[..., Any]
Tasks = Mapping[Any, Callback | Sequence[Callback]]
StopLike = int | Period | None


class LoopState:
    """What a callback that takes a ``loop`` parameter sees, and how it asks to stop.

    Attributes:
        state: the current state.
        history: the run's :class:`~gyre.History`.
        elapsed: the clock of the current step.
        logs: the current step's logs.
        batch: the current batch.
        metadata: whatever was passed as ``metadata=`` to the loop.
        stop_requested: whether a callback asked to stop.
        stop_reason: the reason given.

    Example:
        >>> import gyre
        >>> def stop_at_three(elapsed, loop):
        ...     if elapsed.steps == 3:
        ...         loop.request_stop("enough")
        >>> _, _, elapsed = gyre.loop(None, range(10), {gyre.every(1): [stop_at_three]})
        >>> elapsed.steps
        4
    """

    __slots__ = (
        "state", "history", "elapsed", "logs", "batch", "metadata",
        "stop_requested", "stop_reason", "_completed",
    )

    def __init__(self, state: Any, history: History, elapsed: Elapsed, metadata: Any) -> None:
        self.state = state
        self.history = history
        self.elapsed = elapsed
        self.logs = Logs()
        self.batch: Any = None
        self.metadata = metadata
        self.stop_requested = False
        self.stop_reason = ""
        self._completed: Callable[[], Elapsed] = lambda: self.elapsed

    def request_stop(self, reason: str = "") -> None:
        """Asks the loop to stop: the rest of this step is skipped, its logs are kept, the step
        counts as completed, and ``on_end`` callbacks still run."""
        self.stop_requested = True
        self.stop_reason = reason

    @property
    def completed(self) -> Elapsed:
        """The clock as it will be once the current step completes (what a checkpoint saves)."""
        return self._completed()


def _check_stop(stop: Any) -> StopLike:
    if stop is None or isinstance(stop, Period):
        return stop
    if isinstance(stop, int) and not isinstance(stop, bool) and stop >= 1:
        return Period(steps=stop)
    raise ValueError(
        explain(
            "stop= must be a number of steps >= 1, a Period, or None",
            expected="stop=1000, stop=gyre.at(epochs=5), or stop=None (until the data ends)",
            received=describe(stop),
            fix="pass a positive number of steps, e.g. stop=100",
        )
    )


def _steps_only(period: Period | None) -> int | None:
    """The step count of a Period that counts steps and nothing else, else None."""
    if period is not None and [name for name, _ in period.items()] == ["steps"]:
        return period.steps
    return None


def _prefetched(dataset: Any, state: Any, size: int, stop: Any, initial: Elapsed | None) -> Any:
    """The dataset placed ahead on the state's strategy's devices (managed states only)."""
    strategy = getattr(state, "strategy", None)
    if not callable(getattr(strategy, "place_batch", None)) or not getattr(strategy, "compiles", False):
        return dataset
    if not hasattr(dataset, "__iter__"):
        return dataset  # Elapse raises the explanation
    from gyre.loop.prefetch import prefetch_to_device  # same layer

    steps = _steps_only(_check_stop(stop))
    limit = None if steps is None else max(steps - (initial.steps if initial is not None else 0), 0)
    return prefetch_to_device(dataset, size=size, sharding=strategy, limit=limit)


def _check_epoch_steps(epoch_duration: Any, dataset: Any) -> int | None:
    if isinstance(epoch_duration, Period) and _steps_only(epoch_duration) is not None:
        epoch_duration = epoch_duration.steps
    if epoch_duration is None:
        try:
            size = len(dataset)
        except TypeError:
            return None
        return size if size > 0 else None
    return whole_number(
        epoch_duration,
        minimum=1,
        problem="epoch_duration= must be a number of steps >= 1",
        expected="epoch_duration=len(train_batches) or gyre.at(steps=...)",
        fix="pass the number of steps in one epoch",
    )


def _iterate(dataset: Any) -> Iterator[Any]:
    try:
        return iter(dataset)
    except TypeError:
        raise TypeError(
            explain(
                "the dataset is not iterable",
                expected="an iterable of batches: a list, a generator, a data loader",
                received=describe(dataset),
                fix="pass e.g. [batch0, batch1, ...] or a generator that yields batches; "
                "for one batch repeated, itertools.repeat(batch)",
            )
        ) from None


class Elapse:
    """Iterates ``(elapsed, batch)`` pairs, advancing the clock as each batch completes.

    Built by :func:`elapse`; :func:`loop` uses the same machinery. A batch is pulled only
    when the next step will run, so a stop never consumes a batch.
    """

    def __init__(
        self,
        dataset: Iterable[Any],
        *,
        stop: StopLike = None,
        initial: Elapsed | None = None,
        epoch_duration: int | Period | None = None,
        batch_size_fn: BatchSizeFn | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._stop = _check_stop(stop)
        self._stop_steps = _steps_only(self._stop)
        self._epoch_steps = _check_epoch_steps(epoch_duration, dataset)
        self._it = _iterate(dataset)
        self._size = batch_size_fn or infer_batch_size
        self._clock = clock or _time.monotonic
        if initial is not None and not isinstance(initial, Elapsed):
            raise TypeError(
                explain(
                    "elapsed= / initial= must be a gyre.Elapsed",
                    expected="the Elapsed returned by a previous loop, or None",
                    received=describe(initial),
                    fix="pass the third value a loop returned: state, history, elapsed = gyre.loop(...)",
                )
            )
        start = self._clock()
        base = initial if initial is not None else Elapsed()
        # time counts seconds inside loops; date is the wall clock moved by the same amount.
        self._t0 = start - base.time
        self._d0 = _time.time() - start
        self.elapsed = base.replace(date=self._d0 + start)
        self._pending: int | None = None  # batch size of the step in progress

    def __iter__(self) -> Elapse:
        return self

    def take(self, limit: int) -> tuple[list[Any], list[int]]:
        """Pulls the batches of one fused chunk, and their sizes.

        At most ``limit`` batches, never one past the stop, and never across the end of an
        epoch (the chunk ends on the epoch's last step). The chunk is in progress until
        :meth:`advance` counts it.
        """
        if self._pending is not None:
            self.complete()
        now = self.elapsed
        n = limit
        if self._epoch_steps is not None:
            n = min(n, max(self._epoch_steps - now.step_in_epoch, 1))
        size = self._size
        if self._stop_steps is not None or self._stop is None:
            if self._stop_steps is not None:
                n = min(n, self._stop_steps - now.steps)
            batches = list(_islice(self._it, n)) if n > 0 else []
            if size is infer_batch_size and batches:  # a chunk's batches share their shapes
                return batches, [size(batches[0])] * len(batches)
            return batches, [size(b) for b in batches]
        batches, sizes = [], []  # a stop in samples, epochs or time: count as we go
        stop, clock = self._stop, now
        while len(batches) < n and not clock.reached(stop):
            try:
                batch = next(self._it)
            except StopIteration:
                break
            batches.append(batch)
            sizes.append(size(batch))
            clock = clock.update(sizes[-1], time=clock.time, date=clock.date, epoch_steps=self._epoch_steps)
        return batches, sizes

    def preview(self, sizes: Sequence[int]) -> list[Elapsed]:
        """The clock each step of a chunk of ``sizes`` will see, timed now (nothing changes)."""
        now = self._clock()
        return self._clocks(sizes, now - self._t0, self._d0 + now)

    def advance(self, sizes: Sequence[int]) -> list[Elapsed]:
        """Counts a chunk's steps as done but the last, which stays in progress (as the step of
        a per-step loop does while its callbacks run); returns the clock of each step."""
        if self._pending is not None:
            self.complete()
        now = self._clock()
        clocks = self._clocks(sizes, now - self._t0, self._d0 + now)
        self.elapsed = clocks[-1]
        self._pending = sizes[-1]
        return clocks

    def _clocks(self, sizes: Sequence[int], time: float, date: float) -> list[Elapsed]:
        clock = self.elapsed
        clocks = [clock]
        epoch_steps = self._epoch_steps
        for size in sizes[:-1]:
            clock = clock.update(size, time=time, date=date, epoch_steps=epoch_steps)
            clocks.append(clock)
        return clocks

    def __next__(self) -> tuple[Elapsed, Any]:
        if self._pending is not None:
            self.complete()
        if self._stop_steps is not None:
            if self.elapsed.steps >= self._stop_steps:
                raise StopIteration
        elif self._stop is not None and self.elapsed.reached(self._stop):
            raise StopIteration
        batch = next(self._it)
        self._pending = self._size(batch)
        return self.elapsed, batch

    @property
    def batch_size(self) -> int | None:
        """Samples in the step in progress (``None`` between steps)."""
        return self._pending

    def peek_completed(self) -> Elapsed:
        """The clock as it will be when the step in progress completes."""
        if self._pending is None:
            return self.elapsed
        now = self._clock()
        return self.elapsed.update(
            self._pending, time=now - self._t0, date=self._d0 + now, epoch_steps=self._epoch_steps
        )

    def complete(self) -> Elapsed:
        """Counts the step in progress as completed; returns the clock."""
        if self._pending is not None:
            now = self._clock()
            self.elapsed = self.elapsed.update(
                self._pending, time=now - self._t0, date=self._d0 + now, epoch_steps=self._epoch_steps
            )
            self._pending = None
        return self.elapsed


def elapse(
    dataset: Iterable[Any],
    *,
    stop: StopLike = None,
    initial: Elapsed | None = None,
    epoch_duration: int | Period | None = None,
    batch_size_fn: BatchSizeFn | None = None,
    clock: Callable[[], float] | None = None,
) -> Elapse:
    """Yields ``(elapsed, batch)`` for a hand-written loop; the clock counts completed steps.

    Args:
        dataset: an iterable of batches.
        stop: steps (int) or a :class:`Period` after which iteration ends.
        initial: the clock to continue from (the ``elapsed`` a previous loop returned).
        epoch_duration: steps per epoch; by default ``len(dataset)`` when it has one.
        batch_size_fn: samples in a batch; by default the largest leading dimension.
        clock: seconds source (default ``time.monotonic``), injectable for tests.

    Example:
        >>> import gyre
        >>> [e.steps for e, batch in gyre.elapse(range(100), stop=3)]
        [0, 1, 2]
    """
    return Elapse(
        dataset, stop=stop, initial=initial, epoch_duration=epoch_duration,
        batch_size_fn=batch_size_fn, clock=clock,
    )


def _as_list(value: Callback | Sequence[Callback] | None) -> list[Callback]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def compile_tasks(
    tasks: Tasks | None,
) -> list[tuple[Callable[[Elapsed], bool] | None, list[Invoker]]]:
    """Validates a task table and binds its callbacks: ``[(schedule, [invoker, ...]), ...]``.

    A schedule that fires on every step (``fires_always``) comes back as ``None``.

    The caller's dict is only read. Example: ``compile_tasks({gyre.every(1): [f]})``.
    """
    if tasks is None:
        return []
    if not isinstance(tasks, Mapping):
        raise TypeError(
            explain(
                "tasks must be a dict from schedules to callbacks",
                expected="{gyre.every(1): [train_step], gyre.every(100): [save]}",
                received=describe(tasks),
                fix="wrap the callbacks in a dict keyed by their schedule",
            )
        )
    plan = []
    for key, callbacks in tasks.items():
        if isinstance(key, NamedSchedule):
            key(None)  # raises the explanation
        if isinstance(key, str):
            from gyre.loop.named import ALL_HOOKS  # same layer; named loops accept these names

            raise TypeError(
                explain(
                    f"unknown schedule {key!r} in the task table",
                    expected="a schedule such as gyre.every(10); named schedules "
                    "(gyre.on_train_step, ...) belong to train_loop/test_loop/predict_loop",
                    received=f"the string {key!r}",
                    fix="use a schedule object." + suggest(key, ALL_HOOKS),
                )
            )
        schedule: Callable[[Elapsed], bool] | None = as_schedule(key)
        if getattr(schedule, "fires_always", False):
            schedule = None  # nothing to ask: the loop skips the call
        plan.append((schedule, [bind(cb) for cb in _as_list(callbacks)]))
    return plan


def _apply(out: Any, logs: Logs, state: Any, where: Any) -> Any:
    """Folds a callback's return value into the step's logs and state; returns the state."""
    where = getattr(where, "gyre_name", where)
    if type(out) is tuple:
        if len(out) != 2:
            raise TypeError(
                explain(
                    f"callback {where} returned a {len(out)}-tuple",
                    expected="None, Logs, a new state, or a pair (logs, state)",
                    received=f"a tuple of {len(out)} values: ({', '.join(type(v).__name__ for v in out)})",
                    fix="return (logs, state); use None in the pair for what did not change",
                )
            )
        new_logs, new_state = out
        if type(new_logs) is Logs:
            logs.merge(new_logs)
        elif new_logs is not None:
            _merge(logs, new_logs, where)
        return state if new_state is None else new_state
    if isinstance(out, Logs):
        logs.merge(out)
        return state
    return out


def _merge(logs: Logs, new: Any, where: Any) -> None:
    if not isinstance(new, Mapping):
        raise TypeError(
            explain(
                f"callback {where} returned a pair whose first value is not logs",
                expected="(logs, state) with logs a gyre.Logs, a dict of collections, or None",
                received=f"({describe(new)}, ...)",
                fix="return (gyre.logs().add_metric(...), state); if your state is itself a "
                "pair, return (None, state)",
            )
        )
    logs.merge(new)


def run_callbacks(
    callbacks: list[Invoker],
    loop_state: LoopState,
    elapsed: Elapsed,
    batch: Any = None,
    logs: Logs | None = None,
    *,
    until_stop: bool = False,
) -> Logs:
    """Runs bound callbacks in order outside the per-step fast path (start and end hooks,
    the callbacks between fused chunks), folding their returns into ``logs`` and the state.

    Args:
        callbacks: invokers from :func:`~gyre.loop.binding.bind`.
        loop_state: what the callbacks see as ``loop``; its state is updated.
        elapsed, batch: what the callbacks see.
        logs: the logs they add to (a new ``Logs`` by default), returned.
        until_stop: stop after the callback that requests a stop.

    Example:
        >>> from gyre.core.history import History
        >>> from gyre.loop.binding import bind
        >>> ls = LoopState(1, History(), Elapsed(), None)
        >>> run_callbacks([bind(lambda state: state + 1)], ls, Elapsed()), ls.state
        (Logs(), 2)
    """
    logs = Logs() if logs is None else logs
    loop_state.elapsed = elapsed
    loop_state.logs = logs
    loop_state.batch = batch
    state = loop_state.state
    for callback in callbacks:
        out = callback(state, batch, elapsed, logs, loop_state)
        if out is not None:
            state = loop_state.state = _apply(out, logs, state, callback)
        if until_stop and loop_state.stop_requested:
            break
    return logs


def loop(
    state: Any,
    dataset: Iterable[Any],
    tasks: Tasks | None = None,
    *,
    stop: StopLike = None,
    on_start: Callback | Sequence[Callback] | None = None,
    on_end: Callback | Sequence[Callback] | None = None,
    history: History | None = None,
    elapsed: Elapsed | None = None,
    catch_keyboard_interrupt: bool = True,
    batch_size_fn: BatchSizeFn | None = None,
    metadata: Any = None,
    epoch_duration: int | Period | None = None,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
    prefetch: int = 2,
) -> tuple[Any, History, Elapsed]:
    """Runs a task table over a dataset: the loop language.

    Args:
        state: any pytree (params, optimizer state, ...), threaded through the callbacks.
        dataset: an iterable of batches. A batch is pulled only for a step that will run.
        tasks: ``{schedule: callback or [callbacks]}``; entries run in table order, and a
            schedule is any callable ``elapsed -> bool``. The dict is never modified.
        stop: steps (int >= 1) or a :class:`Period`; ``None`` runs until the data ends.
        on_start: callbacks run once before the first step (their logs are not committed).
        on_end: callbacks run once at the end, also after a stop request or Ctrl-C; logs they
            return are committed to the history with the final clock.
        history: a history to append to (to continue a run); a new one by default.
        elapsed: the clock to continue from (the third value a previous loop returned).
        catch_keyboard_interrupt: Ctrl-C ends the loop cleanly (``on_end`` runs) instead of
            raising.
        batch_size_fn: samples in a batch; by default the largest leading dimension.
        metadata: anything, exposed to callbacks as ``loop.metadata``.
        epoch_duration: steps per epoch; by default ``len(dataset)`` when it has one.
        clock: seconds source (default ``time.monotonic``), injectable for tests.
        steps_per_call: run this many steps per call of the step, in one ``lax.scan`` over
            stacked batches (see :mod:`gyre.loop.fused`): the compiled step under
            ``every(1)``/``always()`` is fused, the other callbacks run once per chunk, and
            the history still gets one record per step. 1 (the default) runs step by step.
        prefetch: when the state has a strategy (a managed state), this many batches are
            placed on its devices ahead of the step that uses them (0: off). Batches are
            never taken beyond ``stop`` when it is a number of steps.

    Returns:
        ``(state, history, elapsed)``, where ``elapsed`` counts the completed steps.

    Callbacks receive ``state``, ``batch``, ``elapsed``, ``logs``, ``loop`` by parameter name
    (any subset, any order), or else the first ``n`` of them by position. They return
    ``None``, a :class:`~gyre.Logs`, a new state, or ``(logs, state)`` where ``None`` means
    "unchanged" and any other value (``0``, ``{}``) is taken as given.

    Example:
        >>> import gyre, jax, jax.numpy as jnp
        >>> @jax.jit
        ... def step(state, batch):
        ...     state = state + batch
        ...     return gyre.logs().add_metric("total", state), state
        >>> state, history, elapsed = gyre.loop(
        ...     jnp.float32(0), [1.0, 2.0, 3.0, 4.0], {gyre.every(1): [step]}, stop=3)
        >>> float(state), elapsed.steps, history.collect("total")
        (6.0, 3, [1.0, 3.0, 6.0])
    """
    plan = compile_tasks(tasks)
    if steps_per_call != 1:
        from gyre.loop.fused import check_steps, split_plan  # same layer; imports this module

        check_steps(steps_per_call, "steps_per_call")
        chunked = split_plan(tasks, plan, steps_per_call)
    starts = [bind(cb) for cb in _as_list(on_start)]
    ends = [bind(cb) for cb in _as_list(on_end)]
    if history is None:
        history = History()
    elif not isinstance(history, History):
        raise TypeError(
            explain(
                "history= must be a gyre.History",
                expected="the history a previous loop returned, gyre.history(), or None",
                received=describe(history),
                fix="pass the second value a loop returned",
            )
        )
    if prefetch and steps_per_call == 1:
        dataset = _prefetched(dataset, state, prefetch, stop, elapsed)
    clock_iter = Elapse(
        dataset, stop=stop, initial=elapsed, epoch_duration=epoch_duration,
        batch_size_fn=batch_size_fn, clock=clock,
    )
    loop_state = LoopState(state, history, clock_iter.elapsed, metadata)
    loop_state._completed = clock_iter.peek_completed
    run_callbacks(starts, loop_state, clock_iter.elapsed)
    state = loop_state.state
    commit = history.commit
    try:
        if steps_per_call != 1:
            from gyre.loop.fused import run_chunks

            run_chunks(chunked, clock_iter, loop_state, steps_per_call)
        else:
            for now, batch in clock_iter:
                logs = Logs()
                loop_state.elapsed = now
                loop_state.logs = logs
                loop_state.batch = batch
                for schedule, callbacks in plan:
                    if schedule is None or schedule(now):
                        for callback in callbacks:
                            out = callback(state, batch, now, logs, loop_state)
                            if out is not None:
                                if type(out) is tuple and len(out) == 2 and type(out[0]) is Logs:
                                    logs.merge(out[0])  # the common (logs, state) return, inlined
                                    if out[1] is not None:
                                        state = loop_state.state = out[1]
                                else:
                                    state = loop_state.state = _apply(out, logs, state, callback)
                            if loop_state.stop_requested:
                                break
                        if loop_state.stop_requested:
                            break
                if logs:
                    commit(now, logs, batch_size=clock_iter.batch_size)
                if loop_state.stop_requested:
                    break
    except KeyboardInterrupt:
        # The batch in progress was consumed and its callbacks may have changed the state:
        # it counts as completed, so a continued run does not repeat its index.
        if not catch_keyboard_interrupt:
            raise
        loop_state.request_stop("KeyboardInterrupt")
    final = clock_iter.complete()
    if steps_per_call == 1:
        loop_state.state = state
    loop_state.batch = None
    logs = run_callbacks(ends, loop_state, final)
    if logs:
        history.commit(final, logs)
    return loop_state.state, history, final

