"""Task tables: :func:`compile_tasks` validates and binds a ``{schedule: callbacks}`` table into
:class:`Task` s, and the explicit types the engine reads (:class:`StepPoint`,
:class:`ChunkSafe`, :class:`LoopElement`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gyre.core._checks import instance
from gyre.core._clock import Elapsed
from gyre.core._errors import explain, suggest, warn
from gyre.core._hooks import ALL_HOOKS, NamedSchedule
from gyre.core._logs import Logs
from gyre.core._schedules import UNSOLVED, Schedule, as_schedule, every, first_firing
from gyre.engine._binding import Invoker, bind, callback_name, inject

Callback = Callable[..., Any]
Tasks = Mapping[Any, Callback | Sequence[Callback]]


class When(Schedule):
    """A named loop's own stateless schedule over the counters in ``reads``."""

    def __init__(
        self, predicate: Callable[[Elapsed], bool], label: str, *, reads: Sequence[str] = (),
        in_epoch: int | None = None,
    ) -> None:
        self.predicate = predicate
        self.label = label
        self._reads = frozenset(reads)
        self.in_epoch = in_epoch  # the step_in_epoch the predicate is true on, when known
        self._firing: dict[int, list[int]] = {}  # epoch_steps -> the steps_in_epoch it fires on

    def __call__(self, elapsed: Elapsed) -> bool:
        return self.predicate(elapsed)

    def reads(self) -> frozenset[str]:
        return self._reads

    def _cycle(self, epoch_steps: int | None) -> int | None:
        if self.fires_always or not self._reads:
            return 1
        return epoch_steps if self._reads == {"step_in_epoch"} else None

    def _next_step(self, clock: Elapsed, epoch_steps: int | None) -> Any:
        epochs = self._reads & {"epochs", "step_in_epoch"}
        if not self._reads <= {"steps", "epochs", "step_in_epoch"} or (epochs and epoch_steps is None):
            return UNSOLVED
        if self._reads == {"step_in_epoch"} and epoch_steps is not None:
            return self._in_epoch(clock, epoch_steps)
        return first_firing(self.predicate, clock, epoch_steps, self._cycle(epoch_steps))

    def _in_epoch(self, clock: Elapsed, epoch_steps: int) -> int | None:
        """next_step of a predicate of step_in_epoch alone: tried once per step of an epoch."""
        firing = self._firing.get(epoch_steps)
        if firing is None:
            if self.in_epoch is not None:  # (an epoch of thousands of steps: not tried on each)
                firing = [self.in_epoch] if 0 <= self.in_epoch < epoch_steps else []
            else:
                firing = [i for i in range(epoch_steps) if self.predicate(Elapsed(step_in_epoch=i))]
            self._firing[epoch_steps] = firing
        if not firing:
            return None
        here = clock.step_in_epoch % epoch_steps
        later = bisect.bisect_left(firing, here)
        ahead = firing[later] - here if later < len(firing) else epoch_steps - here + firing[0]
        return clock.steps + ahead

    def __repr__(self) -> str:
        return self.label


class EachStep(When):
    """A named loop's point that fires on every step (``on_train_batch_end``, ...)."""

    fires_always = True

    def __init__(self, label: str) -> None:
        super().__init__(lambda e: True, label)


class StepPoint(EachStep):
    """The schedule of a named loop's step point: fires every step; its callbacks are fused."""

    def __init__(self, name: str, *, expects_state: bool = False) -> None:
        super().__init__(name)
        self.expects_state = expects_state


class ChunkSafe:
    """Base class of callbacks that only show progress: fused, they run once per chunk.

    Example:
        >>> class Dots(ChunkSafe):
        ...     def __call__(self, elapsed):
        ...         print(".", end="")
        >>> is_chunk_safe(Dots()), is_chunk_safe(print)
        (True, False)
    """


def reads_history(fn: Any) -> bool:
    """Whether a callback sets ``_reads_history = True`` (reads the history, never ``logs``)."""
    return bool(getattr(fn, "_reads_history", False) or getattr(getattr(fn, "__self__", None), "_reads_history", False))


def between_steps(task: Task) -> bool:
    """Whether a block may run ``task`` between two of its steps instead of ending there: each
    callback sets ``_between_steps = True`` and takes the state alone (it returns ``(logs,
    state)``, reads no clock, logs or loop, and cannot stop the loop)."""
    return all(getattr(i.fn, "_between_steps", False) and i.uses <= {"state"} for i in task.invokers)


def is_chunk_safe(fn: Any) -> bool:
    """Whether a callback (or the object of a bound method) is :class:`ChunkSafe`."""
    return isinstance(fn, ChunkSafe) or isinstance(getattr(fn, "__self__", None), ChunkSafe)


class LoopElement:
    """ciclo's loop element: spreads into a task table under its default schedule.

    Example:
        >>> class Printer(LoopElement):
        ...     def __call__(self, elapsed):
        ...         pass
        >>> p = Printer()
        >>> [(repr(k), v) for k, v in {**p}.items()] == [("every(steps=1)", [p])]
        True
    """

    def default_schedule(self) -> Schedule:
        return every(1)

    def keys(self) -> list[Schedule]:
        return [self.default_schedule()]

    def __getitem__(self, key: Any) -> list[Any]:
        return [self]


class LoopCallbackBase(LoopElement):
    """ciclo's callback base class: ``__loop_callback__(loop_state)`` returns ``(logs, state)``.

    Example:
        >>> import gyre
        >>> class Count(LoopCallbackBase):
        ...     def __loop_callback__(self, loop_state):
        ...         return gyre.logs().add_metric("n", loop_state.elapsed.steps), loop_state.state
        >>> gyre.loop(None, [0, 0], {**Count()})[1].collect("n")
        [0, 1]
    """

    def __loop_callback__(self, loop_state: Any) -> tuple[Logs, Any]:  # pragma: no cover
        raise NotImplementedError


class FunctionCallback(LoopCallbackBase):
    """What :func:`callback` returns: ``fn`` called by position, its return made ``(logs, state)``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._call = inject(fn)

    def __loop_callback__(self, loop_state: Any) -> tuple[Logs, Any]:
        out = self._call(loop_state.state, loop_state.batch, loop_state.elapsed, loop_state)
        if out is None:
            return Logs(), loop_state.state
        if type(out) is tuple and len(out) == 2:
            return out[0] if out[0] is not None else Logs(), out[1] if out[1] is not None else loop_state.state
        if isinstance(out, Logs):
            return out, loop_state.state
        return Logs(), out

    def __repr__(self) -> str:
        return f"gyre.callback({callback_name(self.fn)})"


def callback(fn: Callable[..., Any]) -> FunctionCallback:
    """ciclo's ``callback``: a function as a loop element under ``every(1)``, called by position.

    Example:
        >>> import gyre
        >>> log = gyre.callback(lambda state, batch: gyre.logs().add_metric("b", batch))
        >>> gyre.loop(None, [3, 4], {**log})[1].collect("b")
        [3, 4]
    """
    instance(fn, "gyre.callback's argument", Callable, problem="gyre.callback needs a function",
             expected="a function of (state, batch, elapsed, loop_state), or a prefix of them",
             fix="pass the function itself: gyre.callback(my_fn)")
    return FunctionCallback(fn)


class Task:
    """One entry of a compiled task table; ``schedule`` ``None``: every step, not asked."""

    __slots__ = ("key", "schedule", "invokers")

    def __init__(self, key: Any, schedule: Schedule | None, invokers: list[Invoker]) -> None:
        self.key = key
        self.schedule = schedule
        self.invokers = invokers

    def __repr__(self) -> str:
        return f"Task({self.key!r}: {[i.name for i in self.invokers]})"


def as_list(value: Any) -> list[Any]:
    """Callbacks given as one, a list or a tuple, as a list (``None``: none)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def check_table(tasks: Any, where: str = "tasks") -> Mapping[Any, Any]:
    """``tasks`` when it is a dict (``None``: empty), else the explained error."""
    if tasks is None:
        return {}
    return instance(tasks, where, Mapping, kind="a dict from schedules to callbacks",
                    expected="{gyre.every(1): [train_step], gyre.every(100): [save]}",
                    fix="wrap the callbacks in a dict keyed by their schedule; a callback object "
                    "that is a gyre.LoopElement spreads into one: {**gyre.keras_bar(total=n)}")


def compile_tasks(tasks: Tasks | None) -> list[Task]:
    """Validates a task table and binds its callbacks; the caller's dict is only read."""
    plan = []
    for key, callbacks in check_table(tasks).items():
        _check_key(key)
        schedule: Schedule | None = as_schedule(key)
        if getattr(schedule, "fires_always", False):
            schedule = None  # nothing to ask: the loop skips the call
        invokers = [bind(cb) for cb in as_list(callbacks)]
        if invokers or (schedule is not None and schedule.state_dict()):
            plan.append(Task(key, schedule, invokers))  # a task with nothing to run is dropped
    return plan


def _check_key(key: Any) -> None:
    if isinstance(key, NamedSchedule):
        key(Elapsed())  # raises the explanation
    if isinstance(key, str):
        raise TypeError(explain(
            f"unknown schedule {key!r} in the task table",
            expected="a schedule such as gyre.every(10); named schedules "
            "(gyre.on_train_step, ...) belong to train_loop/test_loop/predict_loop",
            received=f"the string {key!r}", fix="use a schedule object." + suggest(key, ALL_HOOKS)))


def loop_end_hooks(tasks: Sequence[Task], name: str = "on_loop_end") -> list[Callable[[], Any]]:
    """The ``on_loop_end()`` methods (or ``name``'s) of a table's callback objects, each object once."""
    hooks: dict[int, Callable[[], Any]] = {}
    for task in tasks:
        for invoker in task.invokers:
            for obj in (invoker.fn, getattr(invoker.fn, "__self__", None)):  # a bound method's object too
                hook = getattr(obj, name, None)
                if callable(hook) and id(obj) not in hooks:
                    hooks[id(obj)] = hook
    return list(hooks.values())


def warn_if_untrained(tasks: Sequence[Task], logs: Any = None, *, state: Any = None, outermost: bool = True) -> None:
    """Warns once, after the first step, when a training loop's callbacks returned no state (a
    plain ``gyre.loop`` trains when its state is set, its first step logged a loss and it is outermost)."""
    losses = logs.get("losses") if isinstance(logs, Mapping) else None
    points = [t for t in tasks if isinstance(t.key, StepPoint)]
    invokers = [inv for task in tasks for inv in task.invokers]
    if _no_gradients(invokers, losses, points, outermost):
        return
    if points:
        for task in points:
            if task.key.expects_state and task.invokers and not any(inv.returned_state for inv in task.invokers):
                _untrained(f"the {task.key!r} callbacks", task.invokers, "a train step")
        return
    if state is None or not losses or not outermost:
        return
    if invokers and not any(inv.returned_state for inv in invokers):
        every_step = [inv for task in tasks if task.schedule is None for inv in task.invokers] or invokers
        _untrained(
            f"the loop logged a loss ({', '.join(map(repr, losses))}) and its callbacks", every_step,
            "a training step", " (an evaluation that logs a loss: run it with gyre.test_loop)",
        )


def _no_gradients(invokers: list[Invoker], losses: Any, points: list[Task], outermost: bool) -> bool:
    """Warns (and returns True) when the loss's only state-returning steps are ``managed.step``."""
    if not losses or not outermost or (points and not any(t.key.expects_state for t in points)):
        return False  # (test_loop and predict_loop do not train)
    static = [inv for inv in invokers if getattr(inv.fn, "trains", None) is False]
    if not static or any(inv.returned_state and getattr(inv.fn, "trains", True) for inv in invokers):
        return False
    warn(
        f"the loop logged a loss ({', '.join(map(repr, losses))}) and its step "
        f"({', '.join(inv.name for inv in static)}) is a managed.step, which compiles without "
        "gradients: the parameters never change and the loss is never minimised. Use "
        "@managed.train_step for a training step (managed.step is for evaluation and prediction)"
    )
    return True


def _untrained(who: str, invokers: Sequence[Invoker], what: str, evaluation: str = "") -> None:
    names = ", ".join(inv.name for inv in invokers)
    warn(
        f"{who} ({names}) returned no state on the first step, so the loop trains nothing: "
        f"{what} returns (logs, new_state){evaluation}"
    )
