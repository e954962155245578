"""Predefined loops with named schedules: ``train_loop``, ``test_loop``, ``predict_loop``.

Each is :func:`gyre.loop` with a task table assembled from named points. Callbacks reach a
named point three ways: as a value of the ``tasks`` dict under a named schedule
(``{gyre.on_train_step: [train_step]}``), as an object in ``callbacks=`` that has a method
of that name (``keras_bar`` has ``on_train_batch_end``), or as a method of the state's class
(``on_train_step`` or its short form ``train_step``; likewise ``test_step``,
``predict_step``, ``reset_step``), used only for points that ``tasks`` and ``callbacks`` do
not fill.

Order within a training step: ``on_reset_step`` and ``on_epoch_begin`` (first step of each
epoch), ``on_train_step``, the clock-scheduled tasks in table order, then on the last step
of each epoch the evaluation on ``test_dataset`` and ``on_epoch_end``, and finally
``on_train_batch_end`` (where progress bars live, so they see everything the step logged).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gyre.core.clock import BatchSizeFn, Elapsed, Period
from gyre.core.errors import describe, explain, suggest
from gyre.core.history import History
from gyre.core.schedules import NamedSchedule, Schedule
from gyre.loop.engine import StopLike, Tasks, _as_list, _check_epoch_steps, loop
from gyre.loop.inner import Aggregation, check_aggregation, inner_loop

TRAIN_HOOKS = (
    "on_train_begin", "on_epoch_begin", "on_reset_step", "on_train_step",
    "on_epoch_end", "on_train_batch_end", "on_train_end",
)
TEST_HOOKS = ("on_test_begin", "on_reset_step", "on_test_step", "on_test_batch_end", "on_test_end")
PREDICT_HOOKS = ("on_predict_begin", "on_predict_step", "on_predict_batch_end", "on_predict_end")
ALL_HOOKS = tuple(dict.fromkeys(TRAIN_HOOKS + TEST_HOOKS + PREDICT_HOOKS))

on_train_begin = NamedSchedule("on_train_begin")
on_epoch_begin = NamedSchedule("on_epoch_begin")
on_reset_step = NamedSchedule("on_reset_step")
on_train_step = NamedSchedule("on_train_step")
on_epoch_end = NamedSchedule("on_epoch_end")
on_train_batch_end = NamedSchedule("on_train_batch_end")
on_train_end = NamedSchedule("on_train_end")
on_test_begin = NamedSchedule("on_test_begin")
on_test_step = NamedSchedule("on_test_step")
on_test_batch_end = NamedSchedule("on_test_batch_end")
on_test_end = NamedSchedule("on_test_end")
on_predict_begin = NamedSchedule("on_predict_begin")
on_predict_step = NamedSchedule("on_predict_step")
on_predict_batch_end = NamedSchedule("on_predict_batch_end")
on_predict_end = NamedSchedule("on_predict_end")

#: Short method names a state class may define instead of the ``on_`` form.
STATE_METHODS = {
    "on_train_step": "train_step",
    "on_test_step": "test_step",
    "on_predict_step": "predict_step",
    "on_reset_step": "reset_step",
}

DEFAULT_TEST_AGGREGATION: dict[str, str] = {
    "losses": "mean",
    "metrics": "mean",
    "stateful_metrics": "last",
    "outputs": "last",
}


class _Hooks:
    """Callbacks sorted by named point, plus the clock-scheduled entries, for one loop."""

    def __init__(self, loop_name: str, hooks: Sequence[str], extra: Sequence[str] = ()) -> None:
        self.loop_name = loop_name
        self.hooks = tuple(hooks)
        self.accepted = tuple(dict.fromkeys((*hooks, *extra)))
        self.named: dict[str, list[Callable[..., Any]]] = {h: [] for h in self.accepted}
        self.clock: dict[Any, list[Callable[..., Any]]] = {}

    @classmethod
    def gather(
        cls,
        loop_name: str,
        hooks: Sequence[str],
        tasks: Tasks | None,
        callbacks: Sequence[Any] | None,
        state: Any,
        extra: Sequence[str] = (),
    ) -> _Hooks:
        """The hooks of one named loop: its task table, then its callback objects, then the
        methods of the state's class, in that order at each named point."""
        found = cls(loop_name, hooks, extra)
        found.add_tasks(tasks)
        found.add_callbacks(callbacks)
        found.add_state_methods(state)
        return found

    def add_tasks(self, tasks: Tasks | None) -> None:
        if tasks is None:
            return
        if not isinstance(tasks, Mapping):
            raise TypeError(
                explain(
                    f"tasks of {self.loop_name} must be a dict from schedules to callbacks",
                    expected="{gyre.on_train_step: [train_step], gyre.every(100): [log]}",
                    received=describe(tasks),
                    fix="wrap the callbacks in a dict keyed by their schedule",
                )
            )
        for key, callbacks in tasks.items():
            name = key.name if isinstance(key, NamedSchedule) else key if isinstance(key, str) else None
            if name is not None:
                if name not in self.accepted:
                    raise ValueError(
                        explain(
                            f"unknown named schedule {name!r} for {self.loop_name}",
                            expected=f"one of {list(self.accepted)}",
                            received=repr(key),
                            fix="use one of the expected names." + suggest(name, self.accepted),
                        )
                    )
                self.named[name].extend(_as_list(callbacks))
            elif isinstance(key, Schedule) or callable(key):
                self.clock.setdefault(key, []).extend(_as_list(callbacks))
            else:
                raise TypeError(
                    explain(
                        f"a key of the tasks of {self.loop_name} is not a schedule",
                        expected="a named schedule (gyre.on_train_step) or a clock schedule (gyre.every(10))",
                        received=describe(key),
                        fix="key each list of callbacks by a schedule",
                    )
                )

    def add_callbacks(self, callbacks: Sequence[Any] | None) -> None:
        for obj in _as_list(callbacks):
            found = False
            for hook in self.accepted:
                method = getattr(obj, hook, None)
                if callable(method):
                    self.named[hook].append(method)
                    found = True
            if not found:
                raise TypeError(
                    explain(
                        f"callback {describe(obj)} of {self.loop_name} matches no named schedule",
                        expected=f"an object with a method named after one of {list(self.accepted)}",
                        received=f"an object of type {type(obj).__name__} with none of them",
                        fix="put a plain function in tasks under a schedule, e.g. "
                        "tasks={gyre.every(1): [fn]} or {gyre.on_epoch_end: [fn]}",
                    )
                )

    def add_state_methods(self, state: Any) -> None:
        cls = type(state)
        for hook in self.accepted:
            if self.named[hook]:
                continue
            for attr in (hook, STATE_METHODS.get(hook)):
                if attr and callable(getattr(cls, attr, None)):
                    method = getattr(cls, attr)
                    self.named[hook].append(_StateMethod(method))
                    break

    def clock_tasks(self) -> dict[Any, list[Callable[..., Any]]]:
        return dict(self.clock)


class _StateMethod:
    """A method of the state's class, called on the current state at each step."""

    def __init__(self, method: Callable[..., Any]) -> None:
        from gyre.loop.binding import bind

        self.invoke = bind(method, self_is_state=True)
        self.gyre_name = getattr(method, "__qualname__", repr(method))
        self.gyre_step = method  # what steps_per_call fuses: called as method(state, batch)

    def __call__(self, state: Any, batch: Any, elapsed: Elapsed, logs: Any, loop: Any) -> Any:
        return self.invoke(state, batch, elapsed, logs, loop)


class _When(Schedule):
    """A private schedule object (a fresh dict key) with a fixed predicate."""

    def __init__(self, predicate: Callable[[Elapsed], bool], label: str) -> None:
        self.predicate = predicate
        self.label = label

    def __call__(self, elapsed: Elapsed) -> bool:
        return self.predicate(elapsed)

    def __repr__(self) -> str:
        return self.label


def _always(label: str) -> _When:
    key = _When(lambda e: True, label)
    key.fires_always = True  # the loop skips asking it
    return key


def _step_point(label: str) -> _When:
    """The key of a loop's step point: with ``steps_per_call`` its callback is the fused step."""
    key = _always(label)
    key.gyre_fused_step = True  # type: ignore[attr-defined]
    return key


def _test_factory(test_dataset: Any) -> Callable[[], Iterable[Any]]:
    if callable(test_dataset):
        return test_dataset
    try:
        is_iterator = iter(test_dataset) is test_dataset
    except TypeError:
        is_iterator = None
    if is_iterator is None or is_iterator:
        raise TypeError(
            explain(
                "test_dataset must be a function returning a fresh dataset for each evaluation",
                expected="test_dataset=lambda: make_test_batches() (or a list, re-read each time)",
                received=describe(test_dataset)
                + (" (an iterator, which would be empty after the first evaluation)" if is_iterator else ""),
                fix="wrap it: test_dataset=lambda: iter_test_batches()",
            )
        )
    return lambda: test_dataset


def test_loop(
    state: Any,
    dataset: Iterable[Any],
    tasks: Tasks | None = None,
    *,
    callbacks: Sequence[Any] | None = None,
    stop: StopLike = None,
    history: History | None = None,
    elapsed: Elapsed | None = None,
    batch_size_fn: BatchSizeFn | None = None,
    metadata: Any = None,
    catch_keyboard_interrupt: bool = True,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
) -> tuple[Any, History, Elapsed]:
    """An evaluation loop: ``on_reset_step`` and ``on_test_begin``, then per batch
    ``on_test_step``, the clock-scheduled tasks, ``on_test_batch_end``; then ``on_test_end``.

    Args:
        state: the state to evaluate.
        dataset: the evaluation batches.
        tasks: ``{named or clock schedule: callbacks}``.
        callbacks: objects registered under the named points whose names they have as methods.
        stop: steps or a Period (default: the whole dataset).
        history, elapsed, batch_size_fn, metadata, catch_keyboard_interrupt, clock:
            as in :func:`gyre.loop`.
        steps_per_call: fuse this many ``on_test_step`` steps into one call (see
            :mod:`gyre.loop.fused`); the other callbacks run once per chunk.

    Returns:
        ``(state, history, elapsed)``.

    Example:
        >>> import gyre
        >>> def test_step(state, batch):
        ...     return gyre.logs().add_metric("x", batch)
        >>> _, history, _ = gyre.test_loop(None, [1, 2, 3], {gyre.on_test_step: test_step})
        >>> history.collect("x")
        [1, 2, 3]
    """
    hooks = _Hooks.gather("test_loop", TEST_HOOKS, tasks, callbacks, state)
    return _run_simple(
        hooks, "test", state, dataset, stop=stop, history=history, elapsed=elapsed,
        batch_size_fn=batch_size_fn, metadata=metadata,
        catch_keyboard_interrupt=catch_keyboard_interrupt, clock=clock, steps_per_call=steps_per_call,
    )


def predict_loop(
    state: Any,
    dataset: Iterable[Any],
    tasks: Tasks | None = None,
    *,
    callbacks: Sequence[Any] | None = None,
    stop: StopLike = None,
    history: History | None = None,
    elapsed: Elapsed | None = None,
    batch_size_fn: BatchSizeFn | None = None,
    metadata: Any = None,
    catch_keyboard_interrupt: bool = True,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
) -> tuple[Any, History, Elapsed]:
    """An inference loop: ``on_predict_begin``, per batch ``on_predict_step``, the
    clock-scheduled tasks and ``on_predict_batch_end``, then ``on_predict_end``.

    Predictions logged with ``logs.add_output`` are in the returned history. Arguments are
    those of :func:`test_loop`; ``steps_per_call`` fuses ``on_predict_step``.

    Example:
        >>> import gyre
        >>> def predict_step(state, batch):
        ...     return gyre.logs().add_output("y", batch * 2)
        >>> _, history, _ = gyre.predict_loop(None, [1, 2], {gyre.on_predict_step: predict_step})
        >>> history.collect("outputs.y")
        [2, 4]
    """
    hooks = _Hooks.gather("predict_loop", PREDICT_HOOKS, tasks, callbacks, state)
    return _run_simple(
        hooks, "predict", state, dataset, stop=stop, history=history, elapsed=elapsed,
        batch_size_fn=batch_size_fn, metadata=metadata,
        catch_keyboard_interrupt=catch_keyboard_interrupt, clock=clock, steps_per_call=steps_per_call,
    )


def _run_simple(hooks: _Hooks, kind: str, state: Any, dataset: Iterable[Any], **kwargs: Any) -> tuple[Any, History, Elapsed]:
    named = hooks.named
    tasks: dict[Any, list[Callable[..., Any]]] = {}
    tasks[_step_point(f"on_{kind}_step")] = named[f"on_{kind}_step"]
    tasks.update(hooks.clock_tasks())
    tasks[_always(f"on_{kind}_batch_end")] = named[f"on_{kind}_batch_end"]
    on_start = named.get("on_reset_step", []) + named[f"on_{kind}_begin"]
    return loop(
        state, dataset, tasks, on_start=on_start, on_end=named[f"on_{kind}_end"], **kwargs
    )


def train_loop(
    state: Any,
    dataset: Iterable[Any],
    tasks: Tasks | None = None,
    *,
    callbacks: Sequence[Any] | None = None,
    test_dataset: Callable[[], Iterable[Any]] | Iterable[Any] | None = None,
    epoch_duration: int | Period | None = None,
    test_duration: StopLike = None,
    test_name: str = "test",
    test_aggregation: Aggregation | None = None,
    stop: StopLike = None,
    history: History | None = None,
    elapsed: Elapsed | None = None,
    batch_size_fn: BatchSizeFn | None = None,
    metadata: Any = None,
    catch_keyboard_interrupt: bool = True,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
) -> tuple[Any, History, Elapsed]:
    """A training loop with epochs and an evaluation at the end of each epoch.

    Args:
        state: the initial state.
        dataset: the training batches (all epochs: repeat the data yourself).
        tasks: ``{named or clock schedule: callbacks}``; named points are listed in
            :mod:`gyre.loop.named` (``on_train_step``, ``on_epoch_end``, ``on_test_step``, ...).
        callbacks: objects registered under every named point whose name they have as a method.
        test_dataset: a function returning the evaluation batches, called at each evaluation.
        epoch_duration: steps per epoch (default: ``len(dataset)`` when it has one); needed
            for epochs, epoch hooks and evaluation.
        test_duration: steps (or Period) of each evaluation (default: the whole test set).
        test_name: suffix of evaluation entries (``accuracy`` becomes ``accuracy_test``).
        test_aggregation: how each evaluation is reduced (see :func:`gyre.inner_loop`); by
            default batch-weighted means of losses and metrics, last value of stateful metrics.
        stop, history, elapsed, batch_size_fn, metadata, catch_keyboard_interrupt, clock:
            as in :func:`gyre.loop`.
        steps_per_call: fuse this many ``on_train_step`` steps into one call (see
            :mod:`gyre.loop.fused`); chunks end at epoch ends, so evaluations happen after the
            same steps as step by step, and run step by step themselves.

    Returns:
        ``(state, history, elapsed)``.

    Example:
        >>> import gyre
        >>> def train_step(state, batch):
        ...     return gyre.logs().add_metric("seen", batch), state + 1
        >>> def test_step(state, batch):
        ...     return gyre.logs().add_metric("score", state)
        >>> state, history, elapsed = gyre.train_loop(
        ...     0, range(6), {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
        ...     test_dataset=lambda: [0], epoch_duration=3)
        >>> state, elapsed.epochs, history.collect("steps", "score_test")
        (6, 2, ([2, 5], [3.0, 6.0]))
    """
    hooks = _Hooks.gather("train_loop", TRAIN_HOOKS, tasks, callbacks, state, extra=TEST_HOOKS)
    named = hooks.named
    epoch_steps = _check_epoch_steps(epoch_duration, dataset)

    aggregation = DEFAULT_TEST_AGGREGATION if test_aggregation is None else test_aggregation
    check_aggregation(aggregation)
    epoch_end: list[Callable[..., Any]] = []
    if test_dataset is not None:
        make_test = _test_factory(test_dataset)
        test_tasks = {NamedSchedule(h): named[h] for h in TEST_HOOKS if h != "on_reset_step"}
        reset = named["on_reset_step"]

        def evaluate(state: Any) -> tuple[Any, History, Elapsed]:
            return test_loop(
                state, make_test(), {**test_tasks, on_reset_step: reset}, stop=test_duration,
                batch_size_fn=batch_size_fn, metadata=metadata, clock=clock,
            )

        epoch_end.append(inner_loop(test_name, evaluate, aggregation=aggregation))
    epoch_end.extend(named["on_epoch_end"])
    epoch_begin = named["on_reset_step"] + named["on_epoch_begin"]

    needs_epochs = [n for n, cbs in (("on_epoch_begin", epoch_begin), ("on_epoch_end", epoch_end)) if cbs]
    if epoch_steps is None and needs_epochs:
        raise ValueError(
            explain(
                "train_loop cannot tell where an epoch ends",
                expected="epoch_duration=<steps per epoch>, or a dataset with len()",
                received=f"a dataset of type {type(dataset).__name__} without len(), and "
                f"callbacks on {needs_epochs}" + (" plus a test_dataset" if test_dataset is not None else ""),
                fix="pass epoch_duration=steps_per_epoch",
            )
        )
    table: dict[Any, list[Callable[..., Any]]] = {}
    if epoch_begin:
        table[_When(lambda e: e.step_in_epoch == 0, "on_epoch_begin")] = epoch_begin
    table[_step_point("on_train_step")] = named["on_train_step"]
    table.update(hooks.clock_tasks())
    if epoch_end:
        last = (epoch_steps or 0) - 1
        table[_When(lambda e: e.step_in_epoch == last, "on_epoch_end")] = epoch_end
    table[_always("on_train_batch_end")] = named["on_train_batch_end"]
    return loop(
        state, dataset, table, stop=stop, on_start=named["on_train_begin"],
        on_end=named["on_train_end"], history=history, elapsed=elapsed,
        catch_keyboard_interrupt=catch_keyboard_interrupt, batch_size_fn=batch_size_fn,
        metadata=metadata, epoch_duration=epoch_steps, clock=clock, steps_per_call=steps_per_call,
    )
