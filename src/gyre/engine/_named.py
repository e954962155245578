"""``train_loop``, ``test_loop``, ``predict_loop``: :func:`gyre.loop` over a table of named points.

A callback reaches a named point under its schedule in ``tasks`` (``{gyre.on_train_step: step}``
or ciclo's strings), as a method of a ``callbacks=`` object, or as a method of the state's class
(``train_step``...; only for points the other two leave empty).

Order within a training step: ``on_reset_step`` and ``on_epoch_begin`` (an epoch's first step),
``on_train_batch_begin``, ``on_train_step``, the clock-scheduled tasks, then on an epoch's last
step the evaluation and ``on_epoch_end``, and last ``on_train_batch_end``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gyre.core._clock import Elapsed, Period
from gyre.core._errors import describe, explain, keywords_checked, suggest, warn
from gyre.core._history import History
from gyre.core._hooks import (
    ALL_HOOKS,
    PREDICT_HOOKS,
    SHORT_NAMES,
    TEST_HOOKS,
    TRAIN_HOOKS,
    hook_name,
)
from gyre.core._schedules import Schedule
from gyre.engine._binding import StateMethod, bind
from gyre.engine._elapse import StopLike, check_stop, epoch_steps_of, epochs_unknown
from gyre.engine._engine import loop
from gyre.engine._inner import Aggregation, check_aggregation, inner_loop
from gyre.engine._masked import MaskedBatches, mask_wanted, real_rows, unmasking
from gyre.engine._nan import check_nan_policy
from gyre.engine._tasks import EachStep, StepPoint, Tasks, When, as_list, check_table

#: Methods a callback object may have: every loop's named points and the engine's own.
KNOWN_HOOKS = frozenset((*ALL_HOOKS, "on_loop_start", "on_loop_end"))

DEFAULT_TEST_AGGREGATION: dict[str, str] = {
    "losses": "mean",
    "metrics": "mean",
    "stateful_metrics": "last",
    "outputs": "last",
}


class NamedHooks:
    """One loop's callbacks by named point (tasks, then callback objects, then state methods),
    and its clock-scheduled entries."""

    def __init__(
        self,
        loop_name: str,
        hooks: Sequence[str],
        tasks: Tasks | None,
        callbacks: Sequence[Any] | None,
        state: Any,
        extra: Sequence[str] = (),
    ) -> None:
        self.loop_name = loop_name
        self.accepted = tuple(dict.fromkeys((*hooks, *extra)))
        self.named: dict[str, list[Any]] = {h: [] for h in self.accepted}
        self.in_tasks: set[str] = set()
        self.clock: dict[Any, list[Any]] = {}
        self._add_tasks(tasks)
        self._add_callbacks(callbacks)
        self._add_state_methods(state)

    def _add_tasks(self, tasks: Tasks | None) -> None:
        for key, callbacks in check_table(tasks, f"tasks of {self.loop_name}").items():
            name = hook_name(key)
            if name is not None:
                if name not in self.accepted:
                    raise ValueError(explain(
                        f"unknown named schedule {name!r} for {self.loop_name}",
                        expected=f"one of {list(self.accepted)}", received=repr(key),
                        fix="use one of the expected names." + suggest(name, self.accepted)))
                self.named[name].extend(as_list(callbacks))
                self.in_tasks.add(name)
            elif isinstance(key, Schedule) or callable(key):
                self.clock.setdefault(key, []).extend(as_list(callbacks))
            else:
                raise TypeError(explain(
                    f"a key of the tasks of {self.loop_name} is not a schedule",
                    expected="a named schedule (gyre.on_train_step) or a clock schedule (gyre.every(10))",
                    received=describe(key), fix="key each list of callbacks by a schedule"))

    def _add_callbacks(self, callbacks: Sequence[Any] | None) -> None:
        for obj in as_list(callbacks):
            self._check_hook_names(obj)
            methods = [(h, getattr(obj, h, None)) for h in self.accepted]
            found = [(h, m) for h, m in methods if callable(m)]
            if not found:
                raise TypeError(explain(
                    f"callback {describe(obj)} of {self.loop_name} matches no named schedule",
                    expected=f"an object with a method named after one of {list(self.accepted)}",
                    received=f"an object of type {type(obj).__name__} with none of them", fix="put a plain "
                    "function in tasks under a schedule, e.g. tasks={gyre.every(1): [fn]} or {gyre.on_epoch_end: [fn]}"))
            for hook, method in found:
                self.named[hook].append(method)

    def _check_hook_names(self, obj: Any) -> None:
        """A method named like a hook (``on_...``) that is none would never be called."""
        for name in dir(obj):
            if name.startswith("on_") and name not in KNOWN_HOOKS and callable(getattr(obj, name, None)):
                raise ValueError(explain(
                    f"callback {type(obj).__name__} of {self.loop_name} has a method {name!r} "
                    "that is no named point: it would never be called",
                    expected=f"methods named after the points of {self.loop_name}: {list(self.accepted)}",
                    received=f"{name!r}",
                    fix="rename it." + (_hook_hint(name) or " (Methods of your own: "
                    "a name that does not start with on_.)")))

    def _add_state_methods(self, state: Any) -> None:
        cls = type(state)
        short = {v: k for k, v in SHORT_NAMES.items()}
        for hook in self.accepted:
            if self.named[hook]:
                continue
            for attr in (hook, short.get(hook)):
                if attr and callable(getattr(cls, attr, None)):
                    self.named[hook].append(StateMethod(getattr(cls, attr)))
                    break


def _test_factory(test_dataset: Any) -> Callable[[], Iterable[Any]]:
    if callable(test_dataset):
        return test_dataset
    try:
        is_iterator = iter(test_dataset) is test_dataset
    except TypeError:
        is_iterator = None
    if is_iterator is None or is_iterator:
        raise TypeError(explain(
            "test_dataset must be a function returning a fresh dataset for each evaluation",
            expected="test_dataset=lambda: make_test_batches() (or a list, re-read each time)",
            received=describe(test_dataset)
            + (" (an iterator, which would be empty after the first evaluation)" if is_iterator else ""),
            fix="wrap it: test_dataset=lambda: iter_test_batches()"))
    return lambda: test_dataset


def _evaluation_loop(
    kind: str, state: Any, dataset: Any, tasks: Tasks | None, callbacks: Sequence[Any] | None, **kwargs: Any
) -> tuple[Any, History, Elapsed]:
    """``test_loop`` (``kind`` "test") or ``predict_loop`` ("predict") with the loop's other arguments."""
    where = f"{kind}_loop"
    kwargs["nan_policy"] = check_nan_policy(kwargs["nan_policy"], where)
    hooks = NamedHooks(where, TEST_HOOKS if kind == "test" else PREDICT_HOOKS, tasks, callbacks, state)
    named = hooks.named
    if kind == "test":
        steps, masked = mask_wanted(named["on_test_step"], where)
        masked = masked and hasattr(dataset, "__iter__")  # (not iterable: the loop explains)
    else:
        named["on_predict_step"], masked = [bind(cb) for cb in named["on_predict_step"]], False
        for step in named["on_predict_step"]:
            step.read_only = True  # a changed state is said once (see fold)
    if masked:
        named["on_test_step"] = steps
        if not isinstance(dataset, MaskedBatches):  # (fit gives its own, padded to split over the devices)
            dataset = MaskedBatches(
                dataset, state, stop=kwargs["stop"], initial=kwargs["elapsed"], batch_size_fn=kwargs["batch_size_fn"])
        kwargs.update(batch_size_fn=real_rows, prefetch=0)  # (placed ahead by MaskedBatches)
    around = (lambda callbacks: [unmasking(cb) for cb in callbacks]) if masked else list
    table: dict[Any, list[Any]] = {}
    table[EachStep(f"on_{kind}_batch_begin")] = around(named[f"on_{kind}_batch_begin"])
    table[StepPoint(f"on_{kind}_step")] = named[f"on_{kind}_step"]
    table.update({key: around(callbacks) for key, callbacks in hooks.clock.items()})
    table[EachStep(f"on_{kind}_batch_end")] = around(named[f"on_{kind}_batch_end"])
    on_start = named.get("on_reset_step", []) + named[f"on_{kind}_begin"]
    return loop(state, dataset, table, on_start=on_start, on_end=named[f"on_{kind}_end"], **kwargs)


@keywords_checked
def test_loop(
    state: Any,
    dataset: Iterable[Any],
    tasks: Tasks | None = None,
    *,
    callbacks: Sequence[Any] | None = None,
    stop: StopLike = None,
    history: History | None = None,
    elapsed: Elapsed | None = None,
    resume: Any = None,
    batch_size_fn: Any = None,
    metadata: Any = None,
    catch_keyboard_interrupt: bool = True,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
    nan_policy: str = "raise",
    data_resume: str = "restart",
) -> tuple[Any, History, Elapsed]:
    """An evaluation loop: ``on_reset_step``, ``on_test_begin``, then per batch
    ``on_test_batch_begin``, ``on_test_step``, the clock-scheduled tasks, ``on_test_batch_end``;
    then ``on_test_end``.

    Args:
        tasks: ``{named or clock schedule: callbacks}``.
        callbacks: objects registered under the named points whose names they have as methods.
        stop: steps or a Period (default: the whole dataset).
        history, elapsed, resume, batch_size_fn, metadata, catch_keyboard_interrupt, clock,
            data_resume: as in :func:`gyre.loop`.
        steps_per_call: fuse up to this many ``on_test_step`` steps into one call.
        nan_policy: ``"raise"`` or ``"ignore"`` (an evaluation makes no update: ``"skip"`` is an
            error).

    Returns:
        ``(state, history, elapsed)``.

    An ``on_test_step`` that takes ``mask`` gets every batch padded to one size (a list's largest
    batch, else the first one's) and compiles once (docs/concepts/named-loops.md: "Evaluation without recompiles"); mixing steps with and without
    ``mask`` is an error.

    Example:
        >>> import gyre
        >>> def test_step(state, batch):
        ...     return gyre.logs().add_metric("x", batch)
        >>> _, history, _ = gyre.test_loop(None, [1, 2, 3], {gyre.on_test_step: test_step})
        >>> history.collect("x")
        [1, 2, 3]
    """
    return _evaluation_loop(
        "test", state, dataset, tasks, callbacks, stop=stop, history=history, elapsed=elapsed, resume=resume,
        batch_size_fn=batch_size_fn, metadata=metadata, clock=clock, steps_per_call=steps_per_call,
        catch_keyboard_interrupt=catch_keyboard_interrupt, nan_policy=nan_policy, data_resume=data_resume)


@keywords_checked
def predict_loop(
    state: Any,
    dataset: Iterable[Any],
    tasks: Tasks | None = None,
    *,
    callbacks: Sequence[Any] | None = None,
    stop: StopLike = None,
    history: History | None = None,
    elapsed: Elapsed | None = None,
    resume: Any = None,
    batch_size_fn: Any = None,
    metadata: Any = None,
    catch_keyboard_interrupt: bool = True,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
    nan_policy: str = "raise",
    data_resume: str = "restart",
) -> tuple[Any, History, Elapsed]:
    """An inference loop: ``on_predict_begin``, per batch ``on_predict_batch_begin``,
    ``on_predict_step``, the clock-scheduled tasks, ``on_predict_batch_end``; then
    ``on_predict_end``.

    Arguments are :func:`test_loop`'s. Predictions logged with ``logs.add_output`` are in the
    returned history; ``nan_policy`` checks losses and metrics, not outputs.

    Example:
        >>> import gyre
        >>> def predict_step(state, batch):
        ...     return gyre.logs().add_output("y", batch * 2)
        >>> _, history, _ = gyre.predict_loop(None, [1, 2], {gyre.on_predict_step: predict_step})
        >>> history.collect("outputs.y")
        [2, 4]
    """
    return _evaluation_loop(
        "predict", state, dataset, tasks, callbacks, stop=stop, history=history, elapsed=elapsed, resume=resume,
        batch_size_fn=batch_size_fn, metadata=metadata, clock=clock, steps_per_call=steps_per_call,
        catch_keyboard_interrupt=catch_keyboard_interrupt, nan_policy=nan_policy, data_resume=data_resume)


def _check_steps(hooks: NamedHooks, test_dataset: Any) -> str | None:
    """Refuses a test step with no test set; returns the warning for nothing to train (given
    once the run has ended, after any door error), or ``None``."""
    if test_dataset is None and "on_test_step" in hooks.in_tasks:
        raise ValueError(explain(
            "train_loop got a test step but no test_dataset to run it on",
            expected="test_dataset= (a function returning the evaluation batches) beside a "
            "step at gyre.on_test_step",
            received="a callback at on_test_step and test_dataset=None: it would never run",
            fix="pass test_dataset=lambda: test_batches, or leave the test step out "
            "(gyre.test_loop evaluates on its own)"))
    if hooks.named["on_train_step"] or any(hooks.clock.values()):
        return None
    filled = [h for h, callbacks in hooks.named.items() if callbacks]
    return explain(
        "train_loop had no train step: it ran over the data and trained nothing",
        expected="a callback at gyre.on_train_step (or under a clock schedule: "
        "{gyre.every(1): train_step}), or a state class with a train_step method",
        received=f"callbacks only at {filled}" if filled else "no callback at all",
        fix="add {gyre.on_train_step: train_step} to the tasks (to evaluate only, use gyre.test_loop)")


def _evaluation(
    hooks: NamedHooks,
    test_dataset: Any,
    *,
    test_name: str,
    test_duration: StopLike,
    aggregation: Aggregation,
    batch_size_fn: Any,
    metadata: Any,
    clock: Callable[[], float] | None,
    inner_loop_kwargs: Mapping[str, Any] | None,
) -> Any:
    """The callback that runs one evaluation on the test set (an inner ``test_loop``)."""
    named = hooks.named
    make_test = _test_factory(test_dataset)
    if not named["on_test_step"]:
        raise ValueError(explain(
            "train_loop got a test_dataset but no test step to run on it",
            expected="a callback under gyre.on_test_step, a callbacks= object with "
            "on_test_step, or a state class with a test_step method",
            received="test_dataset= and nothing registered at on_test_step",
            fix="add {gyre.on_test_step: test_step} to the tasks, or leave test_dataset out"))
    mask_wanted(named["on_test_step"], "train_loop")  # (mixed: an error before training)
    test_tasks = {h: named[h] for h in TEST_HOOKS}

    evaluations = [0]

    def evaluate(state: Any) -> tuple[Any, History, Elapsed]:
        # checked by the training loop, through the entries it logs (loss_test...): an
        # evaluation never waits for the device
        result = test_loop(
            state, make_test(), test_tasks, stop=test_duration,
            batch_size_fn=batch_size_fn, metadata=metadata, clock=clock, nan_policy="ignore",
        )
        if result[2].steps == 0:
            raise ValueError(explain(
                f"the evaluation at the end of epoch {evaluations[0]} ran on no batch",
                expected="test_dataset() returning at least one batch at each evaluation",
                received="test_dataset returned an empty dataset (an exhausted iterator "
                "or generator, an empty list): no test entry would be logged",
                fix="make test_dataset a function that builds the batches anew each time, "
                "e.g. test_dataset=lambda: gyre.data.batches(test_arrays, 64, shuffle=False, epochs=1)"))
        evaluations[0] += 1
        return result

    return inner_loop(test_name, evaluate, **{"aggregation": aggregation, **dict(inner_loop_kwargs or {})})


def _epoch_tasks(
    hooks: NamedHooks, evaluation: Any, epoch_steps: int | None, dataset: Any
) -> tuple[list[Any], list[Any]]:
    named = hooks.named
    epoch_begin = named["on_reset_step"] + named["on_epoch_begin"]
    epoch_end = ([evaluation] if evaluation is not None else []) + named["on_epoch_end"]
    if epoch_steps is None and (epoch_begin or epoch_end):  # what needs the epoch's end, in the user's words:
        users = ["an evaluation on test_dataset= (run at the end of each epoch)"] if evaluation is not None else []
        filled = [h for h in ("on_reset_step", "on_epoch_begin", "on_epoch_end") if named[h]]
        if filled:
            users.append(f"callbacks on {filled}")
        raise ValueError(epochs_unknown(f"train_loop with {' and '.join(users)}", dataset))
    return epoch_begin, epoch_end


@keywords_checked
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
    resume: Any = None,
    batch_size_fn: Any = None,
    metadata: Any = None,
    catch_keyboard_interrupt: bool = True,
    clock: Callable[[], float] | None = None,
    steps_per_call: int = 1,
    inner_loop_kwargs: Mapping[str, Any] | None = None,
    nan_policy: str = "raise",
    data_resume: str = "restart",
) -> tuple[Any, History, Elapsed]:
    """A training loop with epochs and an evaluation at the end of each epoch.

    Args:
        state: the initial state.
        dataset: the training batches (all epochs: repeat the data yourself).
        tasks: ``{named or clock schedule: callbacks}`` (named points: :mod:`gyre.core._hooks`).
        callbacks: objects registered under every named point whose name they have as a method.
        test_dataset: a function returning the evaluation batches, called at each evaluation
            (it needs a step at ``on_test_step``; one taking ``mask`` compiles once, see
            :func:`test_loop`).
        epoch_duration: steps per epoch (default: the dataset's ``epoch_steps`` or ``len``);
            needed for epochs, epoch hooks and evaluation.
        test_duration: steps (or Period) of each evaluation (default: the whole test set).
        test_name: suffix of evaluation entries (``accuracy`` becomes ``accuracy_test``).
        test_aggregation: how each evaluation is reduced (see :func:`gyre.inner_loop`); by
            default batch-weighted means of losses and metrics, last value of stateful metrics.
        stop, history, elapsed, resume, batch_size_fn, metadata, catch_keyboard_interrupt,
            clock, data_resume, nan_policy: as in :func:`gyre.loop`.
        steps_per_call: fuse up to this many ``on_train_step`` steps into one call.
        inner_loop_kwargs: more arguments of the evaluation's :func:`gyre.inner_loop`.

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
    policy = check_nan_policy(nan_policy, "train_loop")
    hooks = NamedHooks("train_loop", TRAIN_HOOKS, tasks, callbacks, state, extra=TEST_HOOKS)
    idle = _check_steps(hooks, test_dataset)
    epoch_steps = epoch_steps_of(epoch_duration, dataset)
    test_duration = check_stop(test_duration, "test_duration")
    aggregation = DEFAULT_TEST_AGGREGATION if test_aggregation is None else test_aggregation
    check_aggregation(aggregation)
    evaluation = None
    if test_dataset is not None:
        evaluation = _evaluation(
            hooks, test_dataset, test_name=test_name, test_duration=test_duration,
            aggregation=aggregation, batch_size_fn=batch_size_fn, metadata=metadata, clock=clock,
            inner_loop_kwargs=inner_loop_kwargs,
        )
    epoch_begin, epoch_end = _epoch_tasks(hooks, evaluation, epoch_steps, dataset)
    named = hooks.named
    table: dict[Any, list[Any]] = {}
    if epoch_begin:
        table[When(lambda e: e.step_in_epoch == 0, "on_epoch_begin", reads=("step_in_epoch",), in_epoch=0)] = epoch_begin
    table[EachStep("on_train_batch_begin")] = named["on_train_batch_begin"]
    table[StepPoint("on_train_step", expects_state=True)] = named["on_train_step"]
    table.update(hooks.clock)
    if epoch_end:
        last = (epoch_steps or 0) - 1
        table[When(lambda e: e.step_in_epoch == last, "on_epoch_end", reads=("step_in_epoch",), in_epoch=last)] = epoch_end
    table[EachStep("on_train_batch_end")] = named["on_train_batch_end"]
    result = loop(
        state, dataset, table, stop=stop, on_start=named["on_train_begin"],
        on_end=named["on_train_end"], history=history, elapsed=elapsed, resume=resume,
        catch_keyboard_interrupt=catch_keyboard_interrupt, batch_size_fn=batch_size_fn,
        metadata=metadata, epoch_duration=epoch_steps, clock=clock, steps_per_call=steps_per_call,
        nan_policy=policy, data_resume=data_resume,
    )
    if idle:
        warn(idle)
    return result


def _hook_hint(name: str) -> str:
    """The named point a misnamed method means: Lightning's ``on_..._start`` is ``on_..._begin``."""
    begin = name.removesuffix("_start") + "_begin"
    if name.endswith("_start") and begin in KNOWN_HOOKS:
        return f" Did you mean {begin!r}? (Lightning's on_..._start is on_..._begin here, as in Keras.)"
    return suggest(name, KNOWN_HOOKS)
