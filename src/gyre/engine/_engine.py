"""The engine's entry point: :func:`loop` runs a task table over a dataset (see README.md here).

Preemption: SIGTERM (and a caught Ctrl-C) ends the outermost loop cleanly at a step boundary;
on several processes every one stops at the same step (JAX's preemption sync point).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax

from gyre.core._checks import instance, whole
from gyre.core._clock import Elapsed, Period
from gyre.core._errors import describe, explain, flag, keywords_checked, warn
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.engine._binding import bind
from gyre.engine._blocks import BlockRunner, FusedBlockRunner, plan_loop, run_auto
from gyre.engine._data import track_data
from gyre.engine._elapse import Elapse, StopLike, epochs_unknown
from gyre.engine._fuse import check_steps, is_fusable
from gyre.engine._loop_state import BETWEEN_STEPS, STEP_RAN, LoopState, fold, run_callbacks
from gyre.engine._nan import apply_nan_policy, check_nan_policy, finite_check
from gyre.engine._prefetch import prefetched
from gyre.engine._resume import (
    check_resume,
    final_save,
    find_checkpointer,
    prepare,
    resume_from,
)
from gyre.engine._snapshot import table_objects
from gyre.engine._split import split_tasks
from gyre.engine._tasks import (
    Callback,
    Task,
    Tasks,
    as_list,
    compile_tasks,
    loop_end_hooks,
    warn_if_untrained,
)

#: Signals received and not handled yet (a list, so the handler only appends).
_RECEIVED: list[int] = []
_DEPTH = threading.local()  # loops running on this thread: only the outermost catches signals


def depth() -> int:
    """How many loops run on this thread (1 inside the outermost, 0 outside any)."""
    return getattr(_DEPTH, "value", 0)


@contextlib.contextmanager
def guarded(*, catch_interrupt: bool) -> Iterator[Preemption]:
    """Counts a running loop on this thread; the outermost installs the preemption handlers."""
    _DEPTH.value = depth() + 1
    try:
        with Preemption(catch_interrupt=catch_interrupt, outermost=_DEPTH.value == 1) as guard:
            yield guard
    finally:
        _DEPTH.value -= 1


def requested() -> bool:
    """Whether a preemption signal arrived (cheap: the step path asks it)."""
    return bool(_RECEIVED)


def _handler(signum: int, frame: Any) -> None:
    if _RECEIVED:  # the second signal: stop now
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        sys.exit(128 + signum)
    _RECEIVED.append(signum)


class Preemption:
    """Installs the handlers for the outermost loop; ``check(first, end=first + 1)``, asked after
    steps ``first`` to ``end - 1``, says whether to stop now."""

    def __init__(self, *, catch_interrupt: bool, outermost: bool) -> None:
        self.catch_interrupt = catch_interrupt
        self.outermost = outermost
        self.install = outermost and threading.current_thread() is threading.main_thread()
        self.previous: dict[int, Any] = {}
        self.check: Callable[..., bool] = lambda first, end=None: bool(_RECEIVED)

    def __enter__(self) -> Preemption:
        if not self.outermost:
            self.check = lambda first, end=None: False  # an evaluation inside a step runs to its end
            return self
        if jax.process_count() > 1:
            # JAX's runtime handles SIGTERM and agrees on the step (a Ctrl-C keeps its meaning)
            from jax.experimental import multihost_utils

            reached = multihost_utils.reached_preemption_sync_point  # asked at every step
            self.check = lambda first, end=None: any(map(reached, range(first, end or first + 1)))
            return self
        signals: tuple[int, ...] = (signal.SIGTERM,)
        if self.catch_interrupt:
            signals += (signal.SIGINT,)
        if self.install:
            _RECEIVED.clear()
            for signum in signals:
                self.previous[signum] = signal.signal(signum, _handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        if self.install:
            _RECEIVED.clear()

    @staticmethod
    def signal_name() -> str:
        """The signal received, for messages (``"SIGTERM"``)."""
        return signal.Signals(_RECEIVED[0]).name if _RECEIVED else "SIGTERM"


def run_steps(tasks: Sequence[Task], clock: Elapse, ls: LoopState, *, outermost: bool = True) -> None:
    """Runs the table step by step, committing each step's logs (without a copy) to the history."""
    commit = ls.history.commit_owned  # each step's logs are made for it: no copy
    nan = ls._nan
    first = True
    compiled = {id(inv) for task in tasks for inv in task.invokers if is_fusable(inv.fn)}
    for now, batch in clock:
        logs = Logs()
        ls.elapsed, ls.logs, ls.batch, ls.step_start = now, logs, batch, ls.state
        ran = False  # a compiled step returned (a state of None stays None: identity cannot tell)
        try:
            for task in tasks:
                schedule = task.schedule
                if schedule is None or schedule(now):
                    for invoker in task.invokers:
                        out = invoker.call(ls.state, batch, now, logs, ls)
                        if out is not None:
                            ls.state = fold(out, logs, ls.state, invoker)
                            ran = ran or id(invoker) in compiled
                        if ls.stop_requested:
                            break
                    if ls.stop_requested:
                        break
        except BaseException:
            if ran or ls.state is not ls.step_start:  # a task after the step raised: the state it was given,
                ls.step_start = STEP_RAN  # the step counted (as a block's), whether or not the step donated,
                if logs:  # and its logs in the history with it
                    commit(now, logs, clock._pending)
            raise
        ls.step_start = STEP_RAN  # the step ran: an error in its commit, NaN check or save counts it, as its row
        if logs:
            commit(now, logs, clock._pending)
        if nan is not None:
            nan.poll(1, now.time)
        ls.end_step(now.steps)
        if first:
            first = False
            warn_if_untrained(tasks, logs, state=ls.state, outermost=outermost)
        if ls.stop_requested:
            return


def _check_steps_per_call(steps_per_call: Any) -> int | str:
    if isinstance(steps_per_call, str) and steps_per_call != "auto":
        raise ValueError(explain(
            f"steps_per_call={steps_per_call!r} is not a number of steps",
            expected='a whole number of steps >= 1, or "auto"', received=describe(steps_per_call),
            fix='pass steps_per_call="auto" (measured at the start) or a number, e.g. 100'))
    return "auto" if steps_per_call == "auto" else check_steps(steps_per_call, "steps_per_call")


def _check_epoch_schedules(tasks: Sequence[Task], clock: Elapse) -> None:
    if clock.epoch_steps is not None:
        return
    for task in tasks:
        reads = task.schedule.reads() if task.schedule is not None else None
        if reads and reads & {"epochs", "step_in_epoch"}:
            raise ValueError(epochs_unknown(f"the schedule {task.key!r} of {[i.name for i in task.invokers]}"))


def _finish(clock: Elapse, ls: LoopState, ends: list[Any], table: Sequence[Task], *, cut: bool = False) -> Elapsed:
    """Ends a loop: completes the clock, saves the last step unless ``cut``, runs end hooks."""
    final = clock.complete()
    ls.batch = None
    if ls.data is not None:
        ls.data.give_back()
    preempted = ls.stop_reason == "preempted"
    if not cut:
        final_save(ls, wait=preempted)
    logs = run_callbacks(ends, ls, final)
    if logs:
        ls.history.commit(final, logs)
    for hook in loop_end_hooks(table):
        hook()
    ls.history.stop_reason = ls.stop_reason if ls.stop_requested else None
    if preempted:
        warn(
            f"preempted ({Preemption.signal_name()}) during step {final.steps - 1}: the loop "
            f"stopped after {final.steps} steps, saved them, and ran its end callbacks; run it "
            "again with resume='latest' to continue"
        )
    clock.warn_if_short(ls.stop_requested, nested=depth() > 1)
    return final


def _failed(err: BaseException, ls: LoopState, clock: Elapse, saving: Sequence[Any]) -> None:
    """Attaches the last consistent ``err.state``/``err.elapsed`` and finishes saves in flight."""
    start = ls.step_start
    if start is not BETWEEN_STEPS and start is not STEP_RAN and alive(start):  # (a chunk's start state, with the chunk's first clock: the
        state, elapsed = start, (ls.start_clock or clock.elapsed).replace()  # clock moved past it)
        clock.rewind(elapsed)  # the batches of the steps not counted are not consumed: the data is put back before them
    else:
        state, elapsed = ls.state, clock.peek_completed().replace()
    if not alive(state):
        state = None
        err.add_note("gyre: err.state is None: the state's arrays were donated to the step that failed")
    err.state, err.elapsed = state, elapsed  # type: ignore[attr-defined]
    if ls.data is not None:  # data read ahead (prefetch, a fused chunk) is put back after the batches used,
        try:  # as at a loop's end: a loop continued over it from err.state skips none, with or without prefetch
            ls.data.give_back()
        except Exception as other:  # noqa: BLE001 - the loop's own error is the one to raise
            err.add_note(f"gyre: putting the data back after the batches used also failed: {other}")
    for checkpoint in saving:
        try:
            checkpoint.wait_until_finished()
        except Exception as other:  # noqa: BLE001 - the loop's own error is the one to raise
            err.add_note(f"gyre: a checkpoint save also failed: {other}")


def alive(tree: Any) -> bool:
    """Whether no array of ``tree`` is deleted (donated); a tracer counts as alive."""
    return not any(getattr(x, "is_deleted", lambda: False)() for x in jax.tree_util.tree_leaves(tree)
                   if not isinstance(x, jax.core.Tracer))


def refuse_donated(state: Any, who: str, returned: str) -> None:
    """Refuses a state whose arrays an earlier training consumed (a compiled training step donates
    its state), which XLA would refuse deep in the first step; ``returned`` shows the call that
    gives the state to go on with."""
    try:
        consumed = not alive(state)
    except ValueError as err:  # JAX sorts a dict's keys to flatten it
        found = _mixed_keys(state, "state")
        if found is None:
            raise
        raise ValueError(explain(
            f"{who} got a state with a dict whose keys mix types, and JAX sorts a dict's keys to flatten it "
            "(its own error: 'Comparator raised exception while sorting pytree dictionary keys')",
            expected="the keys of each dict of the state of one type (all str, or all int)",
            received=f"{found[0]} with keys {found[1]!r}",
            fix="make them one type, e.g. {str(k): v for k, v in d.items()}")) from err
    if consumed:
        raise ValueError(explain(
            f"{who} got a state whose arrays were donated to an earlier training (a compiled training "
            "step donates the state it is given: its arrays are deleted, and XLA would refuse them "
            "deep in the first step)",
            expected=f"a state no training has consumed: the one {who} returned, or a fresh one",
            received="a state with deleted arrays (passed to a training step, a loop or fit before)",
            fix=f"continue from what {who} returned ({returned}), or create the state again "
            "(TrainState.create(..., params=jax.tree.map(jnp.copy, params)) keeps params for another run)"))


def _mixed_keys(tree: Any, path: str) -> tuple[str, list[Any]] | None:
    """The path and keys of the first dict in ``tree`` whose keys cannot be sorted, else None."""
    if isinstance(tree, dict):
        try:
            sorted(tree)
        except TypeError:
            return path, list(tree)
        items: Iterable[tuple[Any, Any]] = tree.items()
    elif isinstance(tree, list | tuple):
        items = enumerate(tree)
    else:
        return None
    for key, value in items:
        found = _mixed_keys(value, f"{path}[{key!r}]")
        if found is not None:
            return found
    return None


def _interrupted(ls: LoopState, clock: Elapse, catch: bool) -> None:
    """Ctrl-C: only the outermost loop catches it; a second signal (after SIGTERM) stops at once."""
    if depth() > 1:
        raise KeyboardInterrupt
    if requested():
        err = KeyboardInterrupt()
        err.add_note(
            f"gyre: Ctrl-C after {Preemption.signal_name()} stopped the loop at once, during step "
            f"{clock.elapsed.steps}: that step is not saved; resume='latest' continues from the "
            "last step saved"
        )
        raise err
    if not catch:
        raise KeyboardInterrupt
    if clock.batch_size is not None and ls.start_clock is None and ls.state is ls.step_start:
        # raised before any task of the step in progress changed the state (a callback before the step,
        # or a Ctrl-C without gyre's handler): that step did not run, and the clock does not count it
        clock.forget_step()
    ls.request_stop("KeyboardInterrupt")
    ls.saves.clear()  # asked for by the step that was cut short
    done = clock.elapsed.steps + (clock.batch_size is not None)
    if ls.step_start is BETWEEN_STEPS:  # no step in progress: the data raised, or a task before the step
        where, unsaved = f"before step {done} ran", ""
    else:
        where = f"during step {clock.elapsed.steps}"
        unsaved = (f"; step {clock.elapsed.steps} was cut short, so no checkpoint saves it (resume='latest' "
                   "redoes it)" if ls.checkpoints else "")
    warn(
        f"interrupted (Ctrl-C) {where}: the loop stopped after "
        f"{done} step{'' if done == 1 else 's'} and ran its end callbacks{unsaved}"
    )


@keywords_checked
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
    batch_size_fn: Any = None,
    metadata: Any = None,
    epoch_duration: int | Period | None = None,
    clock: Callable[[], float] | None = None,
    steps_per_call: int | str = 1,
    prefetch: int = 2,
    resume: Any = None,
    nan_policy: str = "raise",
    data_resume: str = "restart",
) -> tuple[Any, History, Elapsed]:
    """Runs a task table over a dataset: the loop language.

    Args:
        state: any pytree, threaded through the callbacks.
        dataset: an iterable of batches; a batch is pulled only for a step that will run.
        tasks: ``{schedule: callback or [callbacks]}``, run in table order (never modified); a
            schedule is any callable ``elapsed -> bool``. A :class:`~gyre.LoopElement` (a bar)
            spreads into it under its default schedule: ``{**gyre.keras_bar(total=n)}``.
        stop: steps (a whole number >= 1) or a :class:`Period` (none of its quantities 0: every clock
            has reached it); ``None`` runs until the data ends.
        on_start: callbacks run once before the first step (their logs are not committed).
        on_end: callbacks run once at the end, also after a stop request or Ctrl-C; their logs are
            committed with the final clock. Table callbacks' ``on_loop_end()`` run after them.
        history, elapsed: a history to append to and the clock to continue from (what a previous
            loop returned); new ones by default.
        catch_keyboard_interrupt: Ctrl-C ends the outermost loop cleanly (``on_end`` runs, a
            warning says where) instead of raising; nested loops re-raise.
        batch_size_fn: samples in a batch, from the list of leaf shapes (ciclo's form) or the
            batch (a parameter named ``batch``); by default the arrays' leading dimension.
        metadata: anything, exposed to callbacks as ``loop.metadata``.
        epoch_duration: steps per epoch; by default ``len(dataset)`` when it has one.
        clock: seconds source (default ``time.monotonic``).
        steps_per_call: steps per call of the compiled step under ``every(1)``/``always()``, in
            one ``lax.scan``; callbacks, clock, state and history are the same as step by step.
            ``"auto"`` times the first steps and fuses 100 per call when that measured faster,
            else 1.
        prefetch: batches placed ahead on a managed state's devices (0: off); never beyond a
            ``stop`` given in steps (or epochs of a known length). When a callback stops the loop
            earlier, or an error ends it, ``gyre.data.batches`` (and iterators that save their
            position) are put back after the last batch used; a plain iterator loses the batches
            read ahead.
        resume: continue from the loop's ``gyre.checkpoint``: ``"latest"`` (a fresh start when
            there is none), ``"best"``, a saved step, or a path. State, clock, history, stateful
            schedules and callbacks, and the data position are restored; ``state`` gives the
            structure (and shardings) to restore into.
        nan_policy: a NaN or Inf in the ``losses``/``metrics`` logs: ``"raise"`` raises
            :class:`gyre.NonFiniteError` before any checkpoint saves it; ``"skip"`` makes managed
            train steps drop such updates (counted in ``state.skipped_steps``); ``"ignore"``.
        data_resume: on resume, data that cannot save its position (a list, a generator):
            ``"restart"`` starts it again, with a warning; ``"skip"`` drops the batches consumed
            before the checkpoint.

    Returns:
        ``(state, history, elapsed)``: ``elapsed`` counts the completed steps, and
        ``history.stop_reason`` says why the loop stopped early (``"preempted"``, a callback's
        reason) or is ``None``.

    Raises:
        Exception: whatever a callback raised, carrying ``err.state`` and ``err.elapsed``, the last
            consistent state and its clock.

    Callbacks take ``state``, ``batch``, ``elapsed``, ``logs``, ``loop`` by name, or else the first
    ``n`` by position, and return ``None``, :class:`~gyre.Logs`, a state, or ``(logs, state)``.
    SIGTERM finishes the step, saves and ends the loop.

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
    policy = check_nan_policy(nan_policy, "gyre.loop")
    catch_keyboard_interrupt = flag(catch_keyboard_interrupt, "catch_keyboard_interrupt", "gyre.loop")
    tasks, skipping = apply_nan_policy(tasks, policy)
    table = compile_tasks(tasks)
    steps = _check_steps_per_call(steps_per_call)
    # (checked for every state, though only a managed one's uses it: a state changed later must not make it fail)
    prefetch = whole(prefetch, "prefetch", unit="batches", none=True, fix="pass prefetch=2, or prefetch=0 for none",
                     expected="prefetch=2 (two batches placed ahead while a step runs), or 0 for none")
    if steps != "auto" and steps > 1:
        split_tasks(table, steps)  # refuses a table without a step to fuse
    starts, ends = [bind(cb) for cb in as_list(on_start)], [bind(cb) for cb in as_list(on_end)]
    history = History() if history is None else instance(
        history, "history=", History, kind="a gyre.History", fix="pass the second value a loop returned",
        expected="the history a previous loop returned, gyre.history(), or None")
    resume = check_resume(resume)
    resumables, found = table_objects(table, starts + ends)
    checkpoint = find_checkpointer(found, resume)
    resumed = None
    if resume is not None:
        state, history, elapsed, resumed = resume_from(checkpoint, resume, state, history, elapsed, stop)  # type: ignore[arg-type]
    if resumed is None:  # (a resumed loop's given state is only the shape of the restored one)
        refuse_donated(state, "the loop", "state, history, elapsed = gyre.loop(state, ...)")
    data = track_data(dataset, data_resume)
    dataset = prefetched(data, state, prefetch, stop, elapsed, epoch_duration)
    clock_iter = Elapse(
        dataset, stop=stop, initial=elapsed, epoch_duration=epoch_duration,
        batch_size_fn=batch_size_fn, clock=clock,
    )
    _check_epoch_schedules(table, clock_iter)
    ls = LoopState(state, history, clock_iter.elapsed, metadata)
    ls.plan, chunks = plan_loop(table, clock_iter, state, steps)
    ls._completed = clock_iter.peek_completed
    ls.data = data.follow(clock_iter)
    ls._nan = finite_check(policy, ls.history, lambda: clock_iter.elapsed, skipping=skipping, state=ls.state)
    prepare(ls, resumables, found, resumed)
    ls.on_saved = loop_end_hooks(table, "_on_saved")
    if ls.resumed_step is not None:  # before anything of this run is written (write_to: TensorBoard's purge)
        for hook in loop_end_hooks(table, "_on_loop_resumed"):
            hook(ls)
    with guarded(catch_interrupt=catch_keyboard_interrupt) as preemption:
        ls.preempted = preemption.check
        try:
            final = _run(ls, clock_iter, table, chunks, steps, starts, ends, catch_keyboard_interrupt)
            if ls._nan is not None:  # a nested loop (an evaluation) never waits: its outer loop checks
                ls._nan.check(wait=preemption.outermost)
        except BaseException as err:
            _failed(err, ls, clock_iter, ls.checkpoints)
            _send_recorded(err, table)
            raise
    return ls.state, ls.history, final


def _send_recorded(err: BaseException, table: Sequence[Task]) -> None:
    """After a failure, callbacks that send the history elsewhere (``write_to``, ``wandb_logger``:
    their ``_on_loop_failed``) send the records it holds: the steps before a NaN are the ones to see."""
    for hook in loop_end_hooks(table, "_on_loop_failed"):
        try:
            hook()
        except Exception as other:  # noqa: BLE001 - the loop's own error is the one to raise
            err.add_note(f"gyre: sending the history's records after the failure also failed: {other}")


def _run(
    ls: LoopState, clock_iter: Elapse, table: list[Task], chunks: Any, steps: int | str,
    starts: list[Any], ends: list[Any], catch: bool,
) -> Elapsed:
    run_callbacks(starts, ls, clock_iter.elapsed)
    try:
        if chunks is not None and steps == "auto":
            run_auto(chunks, clock_iter, ls, outermost=depth() == 1)
        elif chunks is not None and steps == 1:
            BlockRunner(chunks, clock_iter, ls, outermost=depth() == 1).run()
        elif chunks is not None and ls.plan.reason is None:
            FusedBlockRunner(chunks, clock_iter, ls, steps, outermost=depth() == 1).run()
        else:
            run_steps(table, clock_iter, ls, outermost=depth() == 1)
    except KeyboardInterrupt:
        _interrupted(ls, clock_iter, catch)
        return _finish(clock_iter, ls, ends, table, cut=True)
    return _finish(clock_iter, ls, ends, table)
