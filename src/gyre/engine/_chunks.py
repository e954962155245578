"""What blocks and fused chunks share (:class:`ChunkRunner`): a run of steps between two events
and the tasks, observers, commit and checks around it (see README.md here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from gyre.core._clock import Elapsed
from gyre.core._errors import explain
from gyre.core._logs import Logs
from gyre.engine._elapse import END, Elapse
from gyre.engine._fuse import FusedStep, fuse, returned_state
from gyre.engine._loop_state import STEP_RAN, LoopState, run_callbacks
from gyre.engine._split import ChunkPlan
from gyre.engine._staging import Stager
from gyre.engine._tasks import Task, reads_history, warn_if_untrained


class Chunk:
    """The steps of one fused call, as planned."""

    __slots__ = ("batches", "sizes", "clocks", "first", "after", "shown", "row")

    def __init__(self, batch: Any, size: int, clock: Elapsed, displays: int) -> None:
        self.batches = [batch]
        self.sizes = [size]
        self.clocks = [clock]
        self.first = Logs()  # what the tasks before the step logged on the first step
        self.after: list[bool] = []  # answers of the after tasks on the last step so far
        self.shown = [False] * displays  # display tasks that fired on some step
        self.row: Logs | None = None  # the last step's logs, when its call gave them


class Raised:
    """What the data raised while a chunk pulled its batches: raised where the next chunk starts,
    once the steps of the batches pulled before it have run, as step by step."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:  # (a KeyboardInterrupt too)
        self.error = error


def explain_text(err: BaseException, batches: Sequence[Any]) -> None:
    """Raises a compiled step's ``TypeError`` over a batch that holds text (a file name beside the
    arrays) as the explained error; JAX's names gyre's wrapper of the step, and K > 1 another one."""
    if not isinstance(err, TypeError):
        return
    for batch in batches:
        for path, leaf in jax.tree_util.tree_leaves_with_path(batch):
            if isinstance(leaf, str | bytes):
                raise TypeError(explain(
                    "a batch holds text, and a compiled step takes arrays and numbers only",
                    expected="batches whose leaves are arrays or numbers (a jax.jit or managed step, and "
                    "steps_per_call > 1, trace every leaf of the batch)",
                    received=f"batch{jax.tree_util.keystr(path)} = {leaf!r}",
                    fix="keep the text out of the batch (e.g. an index into a list of names), or make it an "
                    "array; a plain Python step takes any batch")) from err


def _asks(task: Task, clock: Elapsed) -> bool:
    return task.schedule is None or bool(task.schedule(clock))


def first_firing(tasks: Sequence[Task], clock: Elapsed, answers: list[bool]) -> int | None:
    """Asks the tasks not yet in ``answers``, in order, until one fires (its index), appending
    each answer; ``None`` when none fires."""
    for k in range(len(answers), len(tasks)):
        fired = _asks(tasks[k], clock)
        answers.append(fired)
        if fired:
            return k
    return None


def _take_row(tree: Any, i: Any) -> Any:
    return jax.tree_util.tree_map(lambda x: x[i], tree)


_row = jax.jit(_take_row)


def _identities(logs: Logs) -> list[tuple[str, str, int]]:
    """What ``logs`` holds, by entry and value identity (equal lists: nothing added or replaced)."""
    return [(c, n, id(v)) for c, n, v in logs.entries()]


class ChunkRunner:
    """Runs a loop's steps chunk by chunk; built by :func:`gyre.loop`."""

    def __init__(self, plan: ChunkPlan, elapse: Elapse, loop_state: LoopState, steps: int, *, outermost: bool = True) -> None:
        self.plan = plan
        self.elapse = elapse
        self.ls = loop_state
        self.steps = steps
        self.fused: dict[int, FusedStep] = {}
        self.stager = Stager()
        self.carry: tuple[Any, list[bool]] | None = None  # a pulled batch that starts the next chunk
        self.fused_once = False
        self.outermost = outermost
        self._row_readers: dict[int, bool] = {}
        self.after = plan.after  # the tasks after the step that end a chunk where they fire
        #: logs of the tasks a block ran between its steps, by the block's row (see BlockRunner)
        self.between: dict[int, Logs] = {}
        self.last: Logs | None = None  # the last step's record while the tasks after a chunk run

    def run(self, chunks: int | None = None) -> None:
        """Runs chunks until the loop ends (or, given ``chunks``, that many)."""
        while not self.ls.stop_requested and (chunks is None or chunks > 0):
            chunks = None if chunks is None else chunks - 1
            chunk = self.start()
            if chunk is None:
                return
            if self.ls.stop_requested:  # a task before the step stopped the loop
                self.elapse.advance(chunk.clocks, chunk.sizes)
                if chunk.first:
                    self.ls.history.commit(chunk.clocks[0], chunk.first, batch_size=chunk.sizes[0])
                return
            self.ls.step_start, self.ls.start_clock = self.ls.state, chunk.clocks[0]
            self.extend(chunk)
            logs = self.execute(chunk)
            if not self.fused_once:
                self.fused_once = True
                self.plan.step.returned_state = returned_state(self.plan.step)
                tasks = [self.plan.step_task, *self.plan.before, *self.plan.after]  # type: ignore[list-item]
                warn_if_untrained(tasks, logs, state=self.ls.state, outermost=self.outermost)

    def start(self) -> Chunk | None:
        """Pulls the first step of a chunk and runs the tasks before the step that fire on it."""
        clock = self.elapse.complete()
        batch, answers = self.carry if self.carry is not None else (self.elapse.pull(clock), [])
        self.carry = None
        if batch is END:
            return None
        if type(batch) is Raised:
            raise batch.error
        size = self.elapse.size_of(batch)
        clock = clock.replace().started(size, self.elapse.epoch_steps)  # (the loop's clock is not marked
        # in progress: a Ctrl-C in a task before the step hands back a clock that a next loop continues at)
        chunk = Chunk(batch, size, clock, len(self.plan.display))
        self.run_lazily(self.plan.before, answers, clock, batch, chunk.first)
        return chunk

    def run_lazily(self, tasks: Sequence[Task], answers: list[bool], clock: Elapsed, batch: Any, logs: Logs) -> None:
        """Runs the tasks that fire on ``clock`` in order (``answers`` holds those already
        asked), asking each remaining schedule only when no stop was requested before it."""
        for k, task in enumerate(tasks):
            if answers[k] if k < len(answers) else _asks(task, clock):
                run_callbacks(task.invokers, self.ls, clock, batch, logs)
                if self.ls.stop_requested:
                    return

    def extend(self, chunk: Chunk) -> None:  # pragma: no cover - each runner plans its own
        """Completes the chunk's plan (its length; its batches, for a fused call)."""
        raise NotImplementedError

    def execute(self, chunk: Chunk) -> Logs:
        """Calls the fused step, runs the tasks after it and commits; returns the stacked logs."""
        logs = self.call(chunk)
        self.settle(chunk, logs)
        return logs

    def call(self, chunk: Chunk) -> Logs:
        """Runs the chunk's steps (one fused call); the clock counts them, the last in progress."""
        k = len(chunk.batches)
        try:
            fused = self.fused.get(k)
            if fused is None:
                fused = self.fused[k] = fuse(self.plan.step, k)
            stacked, slot = self.stager.stack(chunk.batches)
            logs, self.ls.state = fused(self.ls.state, stacked)
            del stacked
            self.stager.release(slot, jax.tree_util.tree_leaves(logs))
        except TypeError as err:
            explain_text(err, chunk.batches)
            raise
        finally:  # the chunk's batches were consumed (a failure hands back the chunk's start state
            self.elapse.advance(chunk.clocks, chunk.sizes)  # with its first clock: ls.start_clock)
        return logs

    def settle(self, chunk: Chunk, logs: Logs) -> None:
        """After a chunk's steps: the tasks after it, the commit, the NaN check, preemption."""
        k = len(chunk.clocks)
        nan = self.ls._nan
        if nan is not None:  # checked by a checkpoint after the chunk, before it is committed
            nan.pending = (chunk.clocks, logs)
        done = 0
        if k > 1 and chunk.after and chunk.after[-1]:  # the tasks after its last step read the
            done = self.commit_leading(chunk, logs)  # history as step by step: all rows before it
        self.ls.step_start = STEP_RAN  # (an error in the tasks after the chunk's last step, in its commit, its
        self.last = None  # NaN check or a save: its start state is stale, the data used, the rows committed)
        try:
            last = self.after_chunk(chunk, logs)
        except BaseException:  # the chunk's steps are counted: their rows go to the history, the last
            row = Logs().merge(self._last_row(chunk, logs)) if logs else Logs()  # with what was logged on it
            self.commit(chunk, logs, row.merge(self.last or (chunk.first if k == 1 else Logs())), done)
            raise
        self.commit(chunk, logs, last, done)
        if nan is not None:
            nan.pending = None
            self.poll(nan, k)
        self.ls.end_step(chunk.clocks[-1].steps, chunk.clocks[0].steps)

    def after_chunk(self, chunk: Chunk, logs: Logs) -> Logs | None:
        """Runs the tasks after the step, then the observers that fired; returns the last logs."""
        after = bool(chunk.after) and chunk.after[-1]
        shown = [t for t, fired in zip(self.plan.display, chunk.shown, strict=True) if fired]
        extra = self.between.pop(len(chunk.clocks) - 1, None)  # logged between steps, on the last
        if not after and not shown and extra is None:
            return None
        k = len(chunk.clocks)
        last = self.last = Logs()  # (what a failure commits as the last step's record)
        alone = bool(chunk.first) and k == 1
        if alone:
            last.merge(chunk.first)
        answers = chunk.after  # the after tasks not asked yet may fire too
        fired = [t for i, t in enumerate(self.after) if i >= len(answers) or answers[i]] if after else []
        lazy = bool(logs) and not alone and extra is None and not any(map(self._reads_row, [*fired, *shown]))
        if logs and not lazy:
            last.merge(self._last_row(chunk, logs))
        if extra is not None:
            last.merge(extra)
        before = None if alone or extra is not None else _identities(last)
        clock, batch = chunk.clocks[-1], chunk.batches[-1]
        if after:
            self.run_lazily(self.after, chunk.after, clock, batch, last)
        for task in shown:
            if self.ls.stop_requested:
                break
            run_callbacks(task.invokers, self.ls, clock, batch, last)
        if before is not None and before == _identities(last):
            return None  # the callbacks only read the last row: it stays in the stacked commit
        return Logs().merge(self._last_row(chunk, logs)).merge(last) if lazy else last

    @staticmethod
    def _last_row(chunk: Chunk, logs: Logs) -> Logs:
        """The chunk's last step's logs: given by its call, else taken from the stacked logs."""
        return _row(logs, len(chunk.clocks) - 1) if chunk.row is None else chunk.row

    def _reads_row(self, task: Task) -> bool:
        """Whether a task's callbacks may read the last step's logs (as ``logs`` or
        ``loop.logs``): all but those that read the loop's history instead."""
        found = self._row_readers.get(id(task))
        if found is None:
            found = self._row_readers[id(task)] = any(
                not {"logs", "loop"}.isdisjoint(inv.uses) and not reads_history(inv.fn) for inv in task.invokers
            )
        return found

    def commit(self, chunk: Chunk, logs: Logs, last: Logs | None, done: int = 0) -> None:
        """Commits the chunk's records from row ``done`` (those before it are committed): first
        step, the stacked middle rows, the last step."""
        between, self.between = self.between, {}
        k = len(chunk.clocks)
        self._commit_rows(chunk, logs, done, k - 1 if last is not None else k, between)
        if last:
            self.ls.history.commit(chunk.clocks[-1], last, batch_size=chunk.sizes[-1])

    def commit_leading(self, chunk: Chunk, logs: Logs) -> int:
        """Commits the chunk's rows before its last (with what was logged between them);
        returns how many."""
        k = len(chunk.clocks)
        between = {row: self.between.pop(row) for row in list(self.between) if row < k - 1}
        self._commit_rows(chunk, logs, 0, k - 1, between)
        return k - 1

    def _commit_rows(self, chunk: Chunk, logs: Logs, lo: int, hi: int, between: dict[int, Logs]) -> None:
        """Commits rows ``lo`` to ``hi - 1``: the first step's own record when it logged before the
        step, the stacked rows, and the rows logged between steps."""
        history, clocks, sizes, first = self.ls.history, chunk.clocks, chunk.sizes, chunk.first
        start = lo
        if lo == 0 and hi > 0 and (first or 0 in between):
            head = Logs().merge(first)
            if logs:
                head.merge(_row(logs, 0))
            if 0 in between:
                head.merge(between.pop(0))
            history.commit(clocks[0], head, batch_size=sizes[0])
            start = 1
        if logs and hi > start:
            history.commit_block(clocks[start], sizes[start:hi], logs, epoch_steps=self.elapse.epoch_steps, start=start,
                                 between={row - start: extra for row, extra in between.items() if start <= row < hi})
        else:  # steps that log nothing: the rows logged between them alone
            for row, extra in sorted(between.items()):
                if start <= row < hi:
                    history.commit(clocks[row], extra, batch_size=sizes[row])

    def poll(self, nan: Any, steps: int) -> None:
        """The NaN check after a chunk of ``steps`` steps."""
        nan.poll(steps, self.elapse.now()[0])
