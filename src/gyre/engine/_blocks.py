"""Blocks: the loop plans its table once and runs its steps a block at a time.

A block ends at the next event, the stop or the data's end; inside it the only Python is the
iteration and the compiled call. ``loop.plan`` says which path a loop took; see README.md here.
"""

from __future__ import annotations

import contextlib
import math
import time as _time
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax

from gyre.core._clock import Elapsed, infer_batch_size
from gyre.core._errors import warn
from gyre.core._history import block_clocks
from gyre.core._logs import Logs
from gyre.core._schedules import UNSOLVED, Every
from gyre.engine._chunks import Chunk, ChunkRunner, Raised, _asks, explain_text, first_firing
from gyre.engine._elapse import END, Elapse, stop_index
from gyre.engine._fuse import is_fusable, step_function
from gyre.engine._loop_state import BETWEEN_STEPS, STEP_RAN, LoopState, run_callbacks
from gyre.engine._ring import ROWS, Ring, RingMismatch, arg_shapes, ringable
from gyre.engine._split import ChunkPlan, split_tasks
from gyre.engine._tasks import StepPoint, Task, between_steps, reads_history

#: The longest a block lasts (it also ends after ROWS steps).
BLOCK_SECONDS = 0.5
#: ``steps_per_call="auto"``: the steps it tries fused per call when dispatching a block's steps
#: took at least HOST_BOUND of its time or a step took under SHORT_STEP seconds (fusing such short
#: steps can pay when their dispatch looked cheap: the CPU MLP of benchmarks/loop_overhead.py
#: --hidden 256; trying costs one compilation), and keeps when they then took under FASTER of a block's.
AUTO_STEPS = 100
AUTO_TIMED = 32  # the steps of the block it times
HOST_BOUND = 0.1
SHORT_STEP = 1e-3
FASTER = 0.9


def _fusable(plan: ChunkPlan) -> bool:
    return plan.step is not None and is_fusable(plan.step.fn)


class Plan(NamedTuple):
    """How a loop runs its table (``loop.plan``): ``"blocks"``, ``"fused"`` or ``"steps"``, and why."""

    path: str
    reason: str | None = None


def _shapes(batch: Any) -> list[Any]:
    return [(getattr(x, "shape", ()), getattr(x, "dtype", type(x))) for x in jax.tree_util.tree_leaves(batch)]


def _next(task: Task, clock: Elapsed, epoch_steps: int | None) -> Any:
    solve = getattr(task.schedule, "next_step", None)
    return UNSOLVED if solve is None else solve(clock, epoch_steps=epoch_steps)


def _deadline(task: Task, now: float = math.inf) -> float | None:
    """When an ``every(time=...)`` task can next fire, in loop seconds (the loop's clock at
    ``now`` seconds), else None."""
    schedule = task.schedule
    if isinstance(schedule, Every) and schedule.unit == "time":
        last = schedule.state_dict().get("last")
        if last is None or now < last * schedule.amount:  # (behind its last firing: a new loop's, at once)
            return -math.inf
        return (last + 1) * schedule.amount
    return None


def plan_table(table: Sequence[Task], elapse: Elapse, state: Any = None, steps: int = 1) -> ChunkPlan | str:
    """The table sorted for blocks, or why it runs step by step."""
    try:
        plan = split_tasks(table, steps)
    except (TypeError, ValueError):
        every = [i.name for t in table if t.schedule is None or isinstance(t.key, StepPoint) for i in t.invokers]
        return f"the table has no one jax.jit step on every step ({', '.join(every) or 'none'})"
    step = plan.step
    if step is None or (steps == 1 and not ringable(step_function(step.fn), state)):
        return f"the step {step.name if step else ''} is not a jax.jit function or a managed step on one device"
    if steps == 1 and not step.uses <= {"state", "batch"}:  # (a fused step explains a read)
        return f"the step {step.name} takes more than (state, batch)"
    if _stop_step(elapse, elapse.elapsed) is False:
        return f"stop={elapse.stop!r} cannot be solved in advance"
    for task in (*plan.before, *plan.after, *plan.display):
        if task.schedule is None:
            if task in plan.display:
                continue
            names = ", ".join(i.name for i in task.invokers)
            return f"{names} runs on every step: a plain Python function"
        if _deadline(task) is None and _next(task, elapse.elapsed, elapse.epoch_steps) is UNSOLVED:
            return f"the schedule {task.key!r} cannot say in advance when it fires"
    return plan


def plan_loop(table: Sequence[Task], elapse: Elapse, state: Any, steps: int | str) -> tuple[Plan, ChunkPlan | None]:
    """The loop's :class:`Plan` and, to run in blocks or fused, the table sorted (a fused table
    that cannot fuse warns and runs step by step)."""
    planned = plan_table(table, elapse, state, 1 if steps == "auto" else steps)  # type: ignore[arg-type]
    if not isinstance(planned, str):
        return Plan("fused" if steps != "auto" and steps > 1 else "blocks"), planned  # type: ignore[operator]
    if steps != "auto" and steps > 1:  # type: ignore[operator]
        warn(
            f"steps_per_call={steps} cannot fuse this table, so it runs step by step (the same "
            f"results, one call per step): {planned}. Give the callbacks schedules that say in "
            "advance when they fire (gyre.every(n), every(epochs=n), after(...)), or pass "
            "steps_per_call=1"
        )
    return Plan("steps", planned), None


def _stop_step(elapse: Elapse, clock: Elapsed) -> int | None | bool:
    """The step index the loop stops before (None: no stop; False: not solvable)."""
    return stop_index(elapse.stop, clock, elapse.epoch_steps)


class BlockClocks(Sequence[Elapsed]):
    """The clocks of a block's steps, made when read; the steps share the first step's time."""

    def __init__(self, first: Elapsed, sizes: Sequence[int], epoch_steps: int | None) -> None:
        self.first, self.sizes, self.epoch_steps = first, sizes, epoch_steps
        self._columns: dict[str, Any] | None = None
        self._last: Elapsed | None = None  # one object, the loop's clock once the block ran

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        first, epoch_steps = self.first, self.epoch_steps
        if i == 0:
            return first
        if i == len(self) - 1:  # the loop's clock once the block ran: no columns needed
            if self._last is None:
                self._last = first._after_steps(i, sum(self.sizes[:-1]), epoch_steps)
            return self._last
        if self._columns is None:
            self._columns = block_clocks(first, self.sizes, epoch_steps)
        c = self._columns
        counters = (int(c[name][i]) for name in ("steps", "samples", "epochs", "step_in_epoch"))
        return Elapsed(*counters, first.time, first.date)


class BlockRunner(ChunkRunner):
    """Runs a planned table block by block; built by :func:`gyre.loop`."""

    def __init__(
        self, plan: ChunkPlan, elapse: Elapse, loop_state: LoopState, steps: int = ROWS, *, outermost: bool = True
    ) -> None:
        super().__init__(plan, elapse, loop_state, steps, outermost=outermost)
        step = step_function(plan.step.fn)  # type: ignore[union-attr]
        sized = elapse.size_of is infer_batch_size  # the ring step gives the batch sizes
        self.ring = Ring(plan.step, step, sized=sized) if ringable(step, loop_state.state) else None  # type: ignore[arg-type]
        self.n, self.deadline = ROWS, math.inf  # the block's steps, and when it ends at the latest
        self.limit = steps  # the most steps of a block ("auto" measures shorter ones)
        self.partial: tuple[Logs, int] = (Logs(), 0)
        self.failed: Any = None  # the batch of the step that raised
        self.dispatched = 0.0  # seconds per step the last block took to dispatch its steps
        #: a block's last row comes from its seal (the same compiled call) when a callback
        #: at its end may read or add to it: all but the observers that read the history
        self.row_wanted = bool(plan.after) or not all(reads_history(i.fn) for t in plan.display for i in t.invokers)
        #: the tasks after the step that a block runs between its steps (see between_steps)
        self.between_tasks = [t for t in plan.after if between_steps(t)] if self.ring is not None else []
        self.after = [t for t in plan.after if t not in self.between_tasks]
        self._between_at: list[Any] = []  # each one's next step (None: never)
        self._fire = 0  # the block's count of steps after which the next of them runs (0: none)

    def extend(self, chunk: Chunk) -> None:
        """Solves the block's length (up to the next event, the stop, :data:`ROWS` steps) and
        its deadline (:data:`BLOCK_SECONDS` from now, or a time schedule's next firing)."""
        clock, epoch_steps = chunk.clocks[0], self.elapse.epoch_steps
        n = 1 if self.ls.saves else min(self.steps, self.limit)
        stop = _stop_step(self.elapse, clock)
        if stop is not None:
            n = min(n, stop - clock.steps)
        deadline = clock.time + BLOCK_SECONDS
        later = clock._after(chunk.sizes[0], clock.time, clock.date, epoch_steps)
        for tasks, start, extra in ((self.plan.before, later, 0), (self.after, clock, 1)):
            for task in tasks:
                timed = _deadline(task, clock.time)
                if timed is not None:
                    deadline = min(deadline, timed)
                elif (e := _next(task, start, epoch_steps)) is not None:
                    n = min(n, e - clock.steps + extra)
        self.n = max(n, 1)
        self.deadline = self.elapse._t0 + deadline  # on the monotonic clock
        self.between = {}
        self._between_at = [_next(task, clock, epoch_steps) for task in self.between_tasks]
        self._fire = self._next_fire(clock)

    def _next_fire(self, first: Elapsed) -> int:
        return min((e - first.steps + 1 for e in self._between_at if e is not None), default=0)

    def _run_between(self, chunk: Chunk, k: int, batch: Any, state: Any) -> Any:
        """Runs the tasks between steps due after the block's ``k``-th step; returns the state."""
        ls, first, epoch_steps = self.ls, chunk.clocks[0], self.elapse.epoch_steps
        step = first.steps + k - 1
        clock = first if k == 1 else first._after_steps(k - 1, 0, epoch_steps)  # (only steps and epochs are read)
        ls.state, elapsed, logs = state, ls.elapsed, Logs()
        for i, task in enumerate(self.between_tasks):
            if self._between_at[i] == step:
                if _asks(task, clock):
                    run_callbacks(task.invokers, ls, clock, batch, logs)
                self._between_at[i] = _next(task, first._after_steps(k, 0, epoch_steps), epoch_steps)
        ls.elapsed = elapsed
        if logs:
            self.between[k - 1] = logs
        self._fire = self._next_fire(first)
        return ls.state

    def call(self, chunk: Chunk) -> Logs:
        """Runs the block's steps; if one raises, the steps before it stay counted."""
        start = _time.perf_counter()
        sizes, epoch_steps = chunk.sizes, self.elapse.epoch_steps
        try:
            if self.ring.ring is None:  # type: ignore[union-attr]
                self.ring.open(self.ls.state, chunk.batches[0])  # type: ignore[union-attr]
        except TypeError as err:  # (the step traced on the first batch)
            explain_text(err, chunk.batches[:1])
            raise
        try:
            logs, last = self._ringed(chunk, sizes)
        except BaseException as err:
            logs, k = self.partial
            if not isinstance(err, KeyboardInterrupt):  # the clock of the step that failed (err.elapsed
                sizes = sizes[:k + 1]  # matches err.state), not of batches pulled after it
            clocks = BlockClocks(chunk.clocks[0], sizes, epoch_steps)
            self.elapse.advance(clocks, sizes)
            between, self.between = self.between, {}
            if k and logs:
                self.ls.history.commit_block(clocks[0], sizes[:k], logs, epoch_steps=epoch_steps,
                                             between={row: extra for row, extra in between.items() if row < k})
            explain_text(err, [self.failed])
            raise
        self.dispatched = (_time.perf_counter() - start) / len(sizes)
        chunk.row = self.ring.last_row  # type: ignore[union-attr]
        chunk.clocks = BlockClocks(chunk.clocks[0], sizes, epoch_steps)
        chunk.batches = [last]
        self.elapse.advance(chunk.clocks, sizes)
        self._ask(chunk)
        return logs

    def timed(self) -> float | None:
        """Runs one block (or chunk) between two device waits; its seconds per step, or None at the end."""
        jax.block_until_ready(self.ls.state)
        start, steps = _time.perf_counter(), self.elapse.elapsed.steps
        self.run(chunks=1)
        jax.block_until_ready(self.ls.state)
        steps = self.elapse.elapsed.steps - steps
        if self.ls.stop_requested or self.elapse.exhausted or steps < 1:
            return None
        return (_time.perf_counter() - start) / steps

    def poll(self, nan: Any, steps: int) -> None:
        """The NaN check after a block: what landed is read, the rest sent."""
        nan.after_block()

    def _ask(self, chunk: Chunk) -> None:
        """Asks the schedules of the block's last step (the tasks after the step) and of the
        observers (on each step where theirs can fire)."""
        clocks, epoch_steps = chunk.clocks, self.elapse.epoch_steps
        if self.after:
            first_firing(self.after, clocks[-1], chunk.after)
        first, last = clocks[0].steps, clocks[-1].steps
        for i, task in enumerate(self.plan.display):
            if task.schedule is None or _deadline(task) is not None:  # (a time schedule: asked once)
                chunk.shown[i] = task.schedule is None or bool(task.schedule(clocks[-1])) or chunk.shown[i]
                continue
            at = _next(task, clocks[0], epoch_steps)
            while at is not None and at <= last:
                chunk.shown[i] = bool(task.schedule(clocks[at - first])) or chunk.shown[i]
                if at == last:
                    break
                at = _next(task, clocks[at - first + 1], epoch_steps)

    def _ringed(self, chunk: Chunk, sizes: list[int]) -> tuple[Logs, Any]:
        """The block's steps through the ring, pulling batches or taking those already pulled."""
        ring, ls, n = self.ring, self.ls, self.n
        flatten, unflatten = jax.tree_util.tree_flatten, jax.tree_util.tree_unflatten
        leaves, treedef = flatten(ls.state)  # the state travels as its leaves within the block
        (fn, out), rows = ring.function(treedef), ring.ring  # type: ignore[union-attr]
        it, size_of, now, deadline = self.elapse._it, self.elapse.size_of, self.elapse._clock, self.deadline
        pulled = len(chunk.batches) > 1
        if pulled:
            it, n, deadline = iter(chunk.batches[1:]), len(chunk.batches), math.inf
        sized = ring.sized and not pulled  # type: ignore[union-attr]
        batch = chunk.batches[0]
        last, k, tags, in_step, pulling, between, fire = batch, 0, [], False, False, False, self._fire
        try:
            while True:
                try:
                    leaves, rows, tag = fn(leaves, batch, rows)
                except RingMismatch:
                    if k == 0:  # a new structure: a ring for it
                        ring.open(unflatten(treedef, leaves), batch, again=True)  # type: ignore[union-attr]
                        (fn, out), rows = ring.function(treedef), ring.ring  # type: ignore[union-attr]
                        continue
                    self.carry = (batch, [])  # the next block starts with it
                    if not sized:
                        sizes.pop()
                    break
                except BaseException:
                    in_step = k > 0  # the step of a batch pulled in the block raised
                    raise
                tags.append(tag)
                k, last = k + 1, batch
                if out["def"] is not treedef:  # a first step made the state (it was None)
                    treedef = out["def"]
                    fn, out = ring.function(treedef)  # type: ignore[union-attr]
                if k == fire:
                    between = True  # (a task between steps that raises: the step before it ran and counts)
                    leaves, structure = flatten(self._run_between(chunk, k, batch, unflatten(treedef, leaves)))
                    between = False
                    if structure != treedef:  # (a task's gyre.replace_state)
                        treedef = structure
                        fn, out = ring.function(treedef)  # type: ignore[union-attr]
                    fire = self._fire
                if k == n or now() >= deadline:
                    break
                try:
                    batch = next(it, END)
                except BaseException:
                    pulling = True  # the data raised after k steps: the state and clock after them
                    raise
                if pulled:
                    continue
                if batch is END:
                    self.elapse.exhausted = True
                    break
                if not sized:
                    sizes.append(size_of(batch))
        except BaseException:
            ls.state = unflatten(treedef, leaves)
            ls.step_start = BETWEEN_STEPS if pulling else STEP_RAN if between else ls.state
            ls.start_clock = None  # (the clock stops at the step that raised: see call)
            ring.ring = rows  # type: ignore[union-attr]
            counted = ring.untag(tags)  # type: ignore[union-attr]
            if sized:
                sizes[1:] = counted[1:]
            if sized and in_step:  # the step that raised counts its batch, as when sized on the host
                with contextlib.suppress(Exception):  # (not when its size is the error: leaves that disagree)
                    sizes.append(size_of(batch))
            self.partial, self.failed = (ring.seal(), k), batch  # type: ignore[union-attr]
            raise
        ls.state = unflatten(treedef, leaves)
        ring.ring = rows  # type: ignore[union-attr]
        counted = ring.untag(tags)  # type: ignore[union-attr]
        if sized:
            sizes[1:] = counted[1:]
        return ring.seal(last=self.row_wanted), last  # type: ignore[union-attr]


class FusedBlockRunner(BlockRunner):
    """``steps_per_call=K`` on a planned table: blocks rounded to K steps, each one fused call."""

    def __init__(self, plan: ChunkPlan, elapse: Elapse, loop_state: LoopState, steps: int, *, outermost: bool = True) -> None:
        super().__init__(plan, elapse, loop_state, steps, outermost=outermost)
        self.short = False  # the chunk is shorter than K: its steps go through the ring
        self.between_tasks, self.after = [], plan.after  # a fused call runs them as events

    def extend(self, chunk: Chunk) -> None:
        """Pulls the chunk's batches: up to its solved length, its deadline, the data's end,
        or a batch of other shapes (which starts the next chunk)."""
        super().extend(chunk)
        it, now, deadline = self.elapse._it, self.elapse._clock, self.deadline
        first = _shapes(chunk.batches[0])
        ringed = self.n < self.steps and self.ring is not None  # solved short: not pulled here
        while len(chunk.batches) < self.n and now() < deadline and not ringed:
            try:
                batch = next(it, END)
            except BaseException as err:  # noqa: BLE001 - raised once the batches pulled have run (Ctrl-C too)
                self.carry = (Raised(err), [])
                self.n = len(chunk.batches)
                break
            if batch is END:
                self.elapse.exhausted = True
                self.n = len(chunk.batches)  # nor past the data's end
                break
            if _shapes(batch) != first:
                self.carry = (batch, [])
                self.n = len(chunk.batches)  # the ring must not pull past the carried batch
                break
            chunk.batches.append(batch)
            chunk.sizes.append(self.elapse.size_of(batch))
        chunk.clocks = BlockClocks(chunk.clocks[0], chunk.sizes, self.elapse.epoch_steps)
        self.short = len(chunk.batches) < self.steps and self.ring is not None

    def call(self, chunk: Chunk) -> Logs:
        """The fused call, then the schedules of its last step; a chunk shorter than K runs
        through the ring (a fused call of another length would compile again)."""
        if self.short:
            return BlockRunner.call(self, chunk)
        logs = ChunkRunner.call(self, chunk)
        self._ask(chunk)
        return logs


#: ``steps_per_call="auto"``'s choices, per step function and argument shapes: a later loop
#: over the same step and shapes (each epoch's, each evaluation's) takes it without measuring.
_CHOSEN: weakref.WeakKeyDictionary[Any, dict[Any, tuple[str | None, str | None]]] = weakref.WeakKeyDictionary()


def run_auto(plan: ChunkPlan, elapse: Elapse, loop_state: LoopState, *, outermost: bool = True) -> None:
    """``steps_per_call="auto"``: times blocks against a fused chunk, runs on the faster way
    (the choice is kept per step and argument shapes)."""
    blocks = BlockRunner(plan, elapse, loop_state, outermost=outermost)
    fused = FusedBlockRunner(plan, elapse, loop_state, AUTO_STEPS, outermost=outermost)
    batch = elapse.pull(elapse.complete())  # the first step's: its shapes key the choice
    blocks.carry = (batch, [])
    try:
        chosen = _CHOSEN.setdefault(plan.step.fn, {})  # type: ignore[union-attr]
    except TypeError:  # not weakly referenceable: measured every time
        chosen = {}
    shapes = None if batch is END else arg_shapes(loop_state.state, batch)

    def ended() -> bool:
        return loop_state.stop_requested or elapse.exhausted

    reason, unfused = None, "steps_per_call='auto' ran one step per call: the run ended before its steps were timed"
    if shapes in chosen:
        earlier = " (measured by an earlier loop over this step)"
        reason, unfused = (None if text is None else text + earlier for text in chosen[shapes])
    else:
        blocks.limit = 1  # the step compiles
        blocks.run(chunks=1)
        blocks.limit = AUTO_TIMED
        per_step = None if ended() else blocks.timed()
        if per_step is not None and not _fusable(plan):
            unfused = "steps_per_call='auto' ran one step per call: the table cannot fuse (see steps_per_call=2's warning)"
        elif per_step is not None and blocks.dispatched < HOST_BOUND * per_step and per_step >= SHORT_STEP:
            unfused = (f"steps_per_call='auto' ran one step per call: a step takes {per_step * 1e6:.0f} us, "
                       f"its call {blocks.dispatched * 1e6:.0f} of them, so fusing would not pay")
        elif per_step is not None:
            fused.carry = blocks.carry
            fused.run(chunks=1)
            fused_per_step = None if ended() else fused.timed()
            blocks.carry = fused.carry
            if fused_per_step is not None and fused_per_step < FASTER * per_step:
                reason = (f"steps_per_call='auto' chose {AUTO_STEPS}: {fused_per_step * 1e6:.0f} us per step "
                          f"against {per_step * 1e6:.0f}")
            elif fused_per_step is not None:
                unfused = (f"steps_per_call='auto' ran one step per call: {fused_per_step * 1e6:.0f} us per step "
                           f"fused against {per_step * 1e6:.0f}")
            else:
                unfused = "steps_per_call='auto' fused the steps it timed, and the run ended before it could compare"
        if per_step is not None:
            chosen[shapes] = (reason, None if reason else unfused)
    blocks.limit = ROWS
    if reason is None or ended():
        if reason is None and loop_state.plan is not None:
            loop_state.plan = Plan(loop_state.plan.path, unfused)
        blocks.run()
        return
    loop_state.plan = Plan("fused", reason)
    fused.carry = blocks.carry
    fused.run()
