"""``LoopState``, the owner of a running loop's state, clock and logs, and :func:`fold`, the one
place a callback's return is read (docs/concepts/named-loops.md: "What a callback returns")."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from gyre.core._checks import instance
from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain, warn
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.engine._binding import Invoker
from gyre.engine._snapshot import Snapshot, new_block, state_dicts

BETWEEN_STEPS: Any = object()  #: ``LoopState.step_start`` while no step is in progress
#: ``LoopState.step_start`` once the step in progress made the state its later tasks are given (the
#: tasks after a chunk's last step, or a task after one that changed the state): an error hands that
#: state back with the step (every step of the chunk) counted, as the data that fed it was used
STEP_RAN: Any = object()


class LoopState:
    """What a callback that takes a ``loop`` parameter sees, and how it asks to stop.

    Attributes:
        state: the current state (assign to replace it, as a callback's return would).
        history: the run's :class:`~gyre.History`.
        elapsed: the clock of the current step.
        logs: the current step's logs.
        batch: the current batch.
        metadata: the loop's ``metadata=``.
        stop_requested: whether a callback asked to stop (ciclo's ``stop_iteration`` too).
        stop_reason: the reason given.
        data: the data position: ``loop.data.state_dict()`` is what a checkpoint saves.

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
        "stop_requested", "stop_reason", "_completed", "_nan",
        "resumables", "data", "saves", "history_saved", "preempted", "step_start",
        "start_clock", "checkpoints", "plan", "resumed_step", "on_saved",
    )

    def __init__(self, state: Any, history: History, elapsed: Elapsed, metadata: Any = None) -> None:
        self.state = state
        self.history = history
        self.elapsed = elapsed
        self.logs = Logs()
        self.batch: Any = None
        self.metadata = metadata
        self.stop_requested = False
        self.stop_reason = ""
        self._completed: Callable[[], Elapsed] = lambda: self.elapsed.completed()
        self.resumables: dict[str, Any] = {}  # what a checkpoint carries besides the state
        self.data: Any = None
        self.saves: list[tuple[Any, dict[str, float] | None]] = []  # asked for at this step's end
        self.checkpoints: list[Any] = []
        #: per checkpoint (by id): the history records written to its directory, their CRC-32
        self.history_saved: dict[int, tuple[int, int]] = {}
        #: ``preempted(first, end)``, asked after steps ``first`` to ``end - 1`` (``_engine.Preemption``)
        self.preempted: Callable[[int, int], bool] = lambda first, end: False
        #: the state when the current step started (what an error hands back); BETWEEN_STEPS when none
        #: is in progress (the next batch is being pulled): a state may be None itself
        self.step_start: Any = BETWEEN_STEPS
        #: the clock of ``step_start`` when it is a chunk's first step (None: the loop's clock now)
        self.start_clock: Elapsed | None = None
        self._nan: Any = None  # the loop's FiniteCheck, None for "ignore"
        self.plan: Any = None  # how the loop runs its table (a gyre.engine._blocks.Plan)
        #: the completed steps of the checkpoint the loop resumed from (None: not resumed); a writer's
        #: events of later steps, written before a crash, are the ones this run writes again
        self.resumed_step: int | None = None
        #: called after each save (write_to's ``_on_saved``: what a resume keeps must be on disk by then)
        self.on_saved: list[Callable[[], Any]] = []

    def snapshot(self, owner: Any = None, metrics: dict[str, float] | None = None) -> Snapshot:
        """What a checkpoint saves now: state, clock, resumables, data position, new records.

        Example:
            >>> ls = LoopState({"w": 1.0}, History(), Elapsed(steps=2))
            >>> snap = ls.snapshot(); snap.step, snap.state, snap.meta["history"]
            (2, {'w': 1.0}, 0)
        """
        self.check_finite()
        clock = self.completed
        arrays: dict[str, Any] = {}
        meta = {
            "format": 1,
            "resumables": state_dicts(self.resumables, arrays),
            "data": None if self.data is None else self.data.state_dict(),
            "history": len(self.history),
        }
        files = {}
        if owner is not None:  # the new records, and the running CRC-32 of the blocks so far
            start, crc = self.history_saved.get(id(owner), (0, 0))
            block = new_block(self.history, start)
            if block is not None:
                files[block[0]] = block[1]
                crc = zlib.crc32(block[1], crc)
            self.history_saved[id(owner)] = (meta["history"], crc)
            meta["history_crc"] = crc
        return Snapshot(
            step=int(clock.steps), state=self.state, elapsed=clock, meta=meta,
            arrays={"resumables": arrays} if arrays else {}, metrics=metrics, files=files,
        )

    def end_step(self, step: int, first: int | None = None) -> None:
        """Between two steps: makes the saves asked for, and stops on a preemption signal."""
        if self.saves:
            self.run_saves()
        for checkpoint in self.checkpoints:
            checkpoint.poll()
        if self.preempted(step if first is None else first, step + 1) and not self.stop_requested:
            self.request_stop("preempted")
        self.step_start = BETWEEN_STEPS  # the step is done: an error before the next one (the data's) hands back the state now

    def request_save(self, checkpoint: Any, metrics: dict[str, float] | None = None) -> None:
        """Asks the engine to save through ``checkpoint`` once this step has completed."""
        if all(c is not checkpoint for c, _ in self.saves):
            self.saves.append((checkpoint, metrics))

    def run_saves(self, *, wait: bool = False) -> None:
        """Saves what :meth:`request_save` asked for (the engine calls it at step ends)."""
        saves, self.saves = self.saves, []
        for checkpoint, metrics in saves:
            checkpoint.save_snapshot(self.snapshot(checkpoint, metrics), wait=wait)
        for hook in self.on_saved if saves else ():
            hook()

    def check_finite(self) -> None:
        """Raises :class:`gyre.NonFiniteError` if a NaN or Inf loss or metric was logged so far.

        Under ``nan_policy="ignore"`` it checks nothing. It waits for the device.

        Example:
            >>> import gyre, math
            >>> def save(loop):
            ...     loop.check_finite()  # what a checkpoint does before it saves
            >>> step = lambda state, batch: (gyre.logs().add_loss("loss", batch), state)
            >>> try:
            ...     gyre.loop(0, [1.0, math.inf], {gyre.every(1): [step, save]})
            ... except gyre.NonFiniteError as err:
            ...     print(err.step, err.value)
            1 inf
        """
        if self._nan is not None:
            self._nan.check(self.logs, self.elapsed)

    def request_stop(self, reason: str = "") -> None:
        """Asks the loop to stop after this callback (the step completes, ``on_end`` runs);
        ``reason`` becomes ``history.stop_reason``."""
        instance(reason, "request_stop's reason", str, problem="request_stop takes a reason (a string), and stops "
                 "after the current step", expected="loop.request_stop() or loop.request_stop('validation plateaued')",
                 fix="to stop at a given step, pass it to the loop: stop=5 (or stop=gyre.at(epochs=2)); to stop now, "
                 "call request_stop() with no argument or a string")
        self.stop_requested = True
        self.stop_reason = reason

    @property
    def stop_iteration(self) -> bool:
        """ciclo's name for :attr:`stop_requested`; setting it to True requests a stop."""
        return self.stop_requested

    @stop_iteration.setter
    def stop_iteration(self, value: bool) -> None:
        if value:
            self.request_stop("stop_iteration")
        else:
            self.stop_requested = False

    @property
    def completed(self) -> Elapsed:
        """The clock as it will be once the current step completes (what a checkpoint saves)."""
        return self._completed()

    @property
    def accumulated_logs(self) -> Logs:
        """ciclo's accumulated logs: the latest value of every entry logged so far in this
        history, the current step's included (device values; nothing waits)."""
        return self.history.latest().merge(self.logs)


class ReplaceState:
    """What :func:`replace_state` returns: taken as the new state whatever its structure."""

    __slots__ = ("state",)

    def __init__(self, state: Any) -> None:
        self.state = state


def replace_state(state: Any) -> ReplaceState:
    """Marks a callback's returned state as a deliberate change of the state's structure.

    Example:
        >>> import gyre
        >>> grow = lambda state: gyre.replace_state({**state, "ema": 0.0})
        >>> gyre.loop({"w": 1.0}, [0], {gyre.every(1): grow})[0]
        {'w': 1.0, 'ema': 0.0}
    """
    return ReplaceState(state)


def fold(out: Any, logs: Logs, state: Any, invoker: Invoker) -> Any:
    """Folds a callback's return value into the step's ``logs``; returns the new state."""
    if type(out) is tuple:
        if len(out) != 2:
            raise TypeError(explain(
                f"callback {invoker.name} returned a {len(out)}-tuple",
                expected="None, Logs, a new state, or a pair (logs, state)",
                received=f"a tuple of {len(out)} values: ({', '.join(type(v).__name__ for v in out)})",
                fix="return (logs, state); use None in the pair for what did not change"))
        first, second = out
        if type(first) is Logs:
            logs.merge(first)
        elif first is not None:
            _merge_other(first, second, logs, invoker)
        if second is None:
            return state
        out = second
    elif isinstance(out, Logs):
        logs.merge(out)
        return state
    if type(out) is ReplaceState:
        return out.state
    if not invoker.returned_state:
        check_structure(out, state, invoker)
        invoker.returned_state = True
        if invoker.read_only and _changed(out, state):
            warn(
                f"predict_loop's on_predict_step ({invoker.name}) returned a changed state on its "
                "first step: a prediction should not change the model, and predict_loop returns "
                "the changed state. Return only the logs (or (logs, state) with the state as it "
                "came); to update the state, use gyre.train_loop or gyre.loop"
            )
    return out


def _changed(new: Any, old: Any) -> bool:
    """Whether two states of one structure differ in a value (a donated buffer counts as unchanged)."""
    import numpy as np

    try:
        return not all(
            a is b or np.array_equal(np.asarray(a), np.asarray(b))
            for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(old), strict=True)
        )
    except (RuntimeError, ValueError, TypeError):
        return False


def _merge_other(first: Any, second: Any, logs: Logs, invoker: Invoker) -> None:
    if isinstance(second, Logs):
        raise TypeError(explain(
            f"callback {invoker.name} returned (state, logs): the pair is (logs, state)",
            expected="(logs, state)", received=f"({describe(first, 40)}, Logs(...))",
            fix="swap them: return logs, state"))
    if not isinstance(first, Mapping) or (
        not isinstance(first, Logs) and not all(isinstance(v, Mapping) for v in first.values())
    ):  # (a dict of arrays: the state, or a state that is itself a pair, returned alone)
        raise TypeError(explain(
            f"callback {invoker.name} returned a pair whose first value is not logs",
            expected="(logs, state) with logs a gyre.Logs, a dict of collections, or None",
            received=f"({describe(first)}, ...)", fix="return (gyre.logs().add_metric(...), state); if your state "
            "is itself a pair, return (None, state)"))
    logs.merge(first)


def check_structure(new: Any, old: Any, invoker: Invoker) -> None:
    """Refuses a returned state whose structure is not the current state's (``None`` takes any)."""
    if old is None:
        return
    before, after = jax.tree_util.tree_structure(old), jax.tree_util.tree_structure(new)
    if before == after:
        return
    raise TypeError(explain(
        f"callback {invoker.name} returned a value whose structure differs from the state's, "
        "so it would silently become the new state",
        expected=f"a state structured like the current one: {_short(before)}", received=f"{_short(after)}",
        fix="return (logs, state) to log values with an unchanged state, or (logs, None); "
        "to change the state's structure on purpose, return gyre.replace_state(new_state)"))


def _short(treedef: Any, limit: int = 300) -> str:
    text = str(treedef)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_callbacks(
    invokers: Sequence[Invoker],
    loop_state: LoopState,
    elapsed: Elapsed,
    batch: Any = None,
    logs: Logs | None = None,
) -> Logs:
    """Runs bound callbacks in order, folding their returns; stops after one that requests a stop."""
    logs = Logs() if logs is None else logs
    loop_state.elapsed = elapsed
    loop_state.logs = logs
    loop_state.batch = batch
    for invoker in invokers:
        out = invoker.call(loop_state.state, batch, elapsed, logs, loop_state)
        if out is not None:
            loop_state.state = fold(out, logs, loop_state.state, invoker)
        if loop_state.stop_requested:
            break
    return logs
