"""jaxloop's inner loops on gyre's engine: ``Loop``, ``StatLoop``, ``ActionLoop``,
``TrainLoop``, ``EvalLoop``.

A :class:`Loop` runs its step over batches through :func:`gyre.loop` (one task: the step,
every step), so it pulls a batch only for a step that will run and reads nothing back from
the device per step: the step's outputs are appended to per-key lists as the device arrays
they are (``outputs["loss"]`` is the list of the loop's losses). :func:`reduce_outputs`
turns such outputs into numbers when you ask.

The classes keep jaxloop's layering (``Loop`` <- ``StatLoop`` <- ``ActionLoop`` <-
``TrainLoop`` / ``EvalLoop``) and its hooks: ``__call__`` runs ``begin(state, dataset)``,
``run(state, dataset, num_steps)`` and ``end(state, outputs)``.
"""

from __future__ import annotations

import collections
import logging
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from gyre.core._errors import LoopWarning, describe, explain, whole_number
from gyre.core._schedules import always
from gyre.data._padding import accepts_mask, padded
from gyre.loop._engine import loop as _engine_loop

Output = dict[str, Any]
State = Any

STAT_PREFIX = "jaxloop"
STAT_NUM_PARAMS = f"{STAT_PREFIX}/num_params"
STAT_NUM_FLOPS = f"{STAT_PREFIX}/num_flops"
STAT_INIT_TIME = f"{STAT_PREFIX}/init_time"
STAT_BEGIN_TIME = f"{STAT_PREFIX}/begin_time"
STAT_LIFE_TIME_SECS = f"{STAT_PREFIX}/life_time_secs"
STAT_LOOP_TIME_SECS = f"{STAT_PREFIX}/loop_time_secs"
STAT_STEPS_PER_SEC = f"{STAT_PREFIX}/steps_per_sec"
STAT_EXAMPLES_PER_SEC = f"{STAT_PREFIX}/examples_per_sec"

_log = logging.getLogger(__name__)


def _as_iterator(dataset: Any) -> Iterator[Any]:
    if isinstance(dataset, Iterator):
        return dataset
    if isinstance(dataset, Iterable):
        return iter(dataset)
    raise TypeError(
        explain(
            "a jaxloop loop's dataset must be an iterator or an iterable of batches",
            expected="an iterator (a generator, ds.as_numpy_iterator()) or an iterable "
            "(a list of batches, gyre.data.batches(...))",
            received=describe(dataset),
            fix="pass the batches, e.g. loop(state, iter(batches), num_steps=100)",
        )
    )


def _check_num_steps(num_steps: Any) -> int | None:
    if num_steps is None:
        return None
    return whole_number(
        num_steps, minimum=0, problem="num_steps must be a whole number >= 0 or None",
        expected="the number of steps to run, or None to run until the data ends",
        fix="pass num_steps=100, or num_steps=None",
    )


class Loop:
    """jaxloop's base loop: runs ``step`` over the batches of a dataset.

    Args:
        step: a :class:`gyre.Step` (or any callable ``step(state, batch,
            per_loop_step_number, **kwargs) -> (state, outputs)``).

    Calling the loop (``loop(state, dataset, num_steps)``) runs :meth:`begin`, :meth:`run`
    and :meth:`end`; override them (and :meth:`update_outputs`) to customise it.

    Attributes:
        pads_batches: pad the batches to the first one's size and pass ``mask=`` to a step
            that takes it (:func:`takes_mask`); ``True`` for :class:`EvalLoop` only.

    Example:
        >>> import gyre
        >>> def step(state, batch, per_loop_step_number, **kwargs):
        ...     return state + batch, {"seen": batch}
        >>> loop = gyre.jaxloop.Loop(step)
        >>> state, outputs = loop(0, [1, 2, 3, 4], num_steps=3)
        >>> state, outputs["seen"]
        (6, [1, 2, 3])
    """

    pads_batches = False

    def __init__(self, step: Any) -> None:
        if not callable(step):
            raise TypeError(
                explain(
                    "a jaxloop loop needs a step",
                    expected="a gyre.Step (or a callable (state, batch, per_loop_step_number) "
                    "-> (state, outputs))",
                    received=describe(step),
                    fix="pass the step: TrainLoop(MyStep(key, model, optimizer=..., train=True))",
                )
            )
        self._step = step

    @property
    def step(self) -> Any:
        """The step this loop runs.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.Loop(print).step is print
            True
        """
        return self._step

    def begin(self, state: State, dataset: Iterator[Any]) -> tuple[State, Iterator[Any]]:
        """Runs before the loop; returns ``(state, dataset)``. The identity by default.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.Loop(print).begin("state", "data")
            ('state', 'data')
        """
        return state, dataset

    def update_outputs(self, loop_outputs: Output, step_outputs: Output | None) -> Output:
        """Adds one step's outputs to the loop's: each value is appended to the list under
        its key (a ``defaultdict(list)``); values stay on the device.

        Example:
            >>> import collections, gyre
            >>> outputs = collections.defaultdict(list)
            >>> outputs = gyre.jaxloop.Loop(print).update_outputs(outputs, {"loss": 0.5})
            >>> dict(outputs)
            {'loss': [0.5]}
        """
        if step_outputs is not None:
            for key, value in step_outputs.items():
                loop_outputs[key].append(value)
        return loop_outputs

    def run(
        self,
        state: State,
        dataset: Iterable[Any],
        num_steps: int | None = None,
        log_num_flops: bool = False,
        **kwargs: Any,
    ) -> tuple[State, Output]:
        """Runs the step over the dataset, through :func:`gyre.loop`.

        Args:
            state: the state (donated to a train step: use the returned one).
            dataset: an iterator (it continues where the last call left it) or an iterable
                (a list starts from its beginning at each call).
            num_steps: how many steps; ``None`` runs until the data ends. A batch is pulled
                only for a step that runs.
            log_num_flops: compute the step's flop count at the first step
                (``step.compute_num_flops``) where the step can.
            **kwargs: passed to each step call; ``return_state_from_step=False`` keeps
                the input state (the step's returned state is dropped: an evaluation that
                returns no state saves memory).

        Returns:
            ``(state, outputs)``, ``outputs[key]`` the list of each step's values.

        Example:
            >>> import gyre
            >>> def step(state, batch, per_loop_step_number, **kwargs):
            ...     return state + batch, {"n": per_loop_step_number}
            >>> gyre.jaxloop.Loop(step).run(10, iter([1, 1, 1]), return_state_from_step=False)
            (10, defaultdict(<class 'list'>, {'n': [1, 2, 3]}))
        """
        num_steps = _check_num_steps(num_steps)
        keep_state = bool(kwargs.pop("return_state_from_step", True))
        data = _as_iterator(dataset)
        loop_outputs: Output = collections.defaultdict(list)
        self._last_steps = 0
        if num_steps == 0:
            return state, loop_outputs
        step, count, box = self._step, [0], [loop_outputs]
        flops = bool(log_num_flops) and callable(getattr(step, "compute_num_flops", None))
        masked = self.pads_batches and takes_mask(step)
        if masked:
            data = iter(padded(data))  # (batch, mask) pairs, pulled one source batch at a time

        def jaxloop_step(state: Any, batch: Any) -> Any:
            count[0] += 1
            extra = kwargs
            if masked:
                batch, mask = batch
                extra = {**kwargs, "mask": mask}
            if flops and count[0] == 1:
                step.compute_num_flops(state, batch)
            new_state, step_outputs = step(state, batch, count[0], **extra)
            box[0] = self.update_outputs(box[0], step_outputs)
            # (None, state): a state that is itself a pair is never read as (logs, state)
            return (None, new_state) if keep_state else None

        with warnings.catch_warnings():
            # data that ends before num_steps is how a jaxloop loop ends (an evaluation, the
            # last train loop): not worth the engine's warning
            warnings.filterwarnings("ignore", message="the data ended", category=LoopWarning)
            state, _, _ = _engine_loop(
                state, data, {always(): [jaxloop_step]}, stop=num_steps, prefetch=0,
                nan_policy="ignore", catch_keyboard_interrupt=False,
            )
        self._last_steps = count[0]
        return state, box[0]

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """Runs after the loop; returns ``(state, outputs)``. The identity by default.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.Loop(print).end("state", {"loss": [1.0]})
            ('state', {'loss': [1.0]})
        """
        return state, outputs

    def __call__(
        self, state: State, dataset: Iterable[Any], num_steps: int | None = None, **kwargs: Any
    ) -> tuple[State, Output | None]:
        """Runs :meth:`begin`, :meth:`run` and :meth:`end`; returns ``(state, outputs)``.

        Example:
            >>> import gyre
            >>> def step(state, batch, n, **kwargs):
            ...     return state + batch, {"x": batch}
            >>> gyre.jaxloop.Loop(step)(0, range(5))[0]
            10
        """
        state, dataset = self.begin(state, dataset)
        state, outputs = self.run(state, dataset, num_steps, **kwargs)
        return self.end(state, outputs)


def takes_mask(step: Any) -> bool:
    """Whether a jaxloop step takes the keyword ``mask``: its ``run`` (a :class:`gyre.Step`,
    whose call passes keywords on to ``run``) or the callable itself.

    Example:
        >>> takes_mask(lambda state, batch, n, mask=None, **kwargs: None)
        True
        >>> takes_mask(lambda state, batch, n, **kwargs: None)
        False
    """
    if accepts_mask(step):
        return True
    run = getattr(step, "run", None)
    return callable(run) and accepts_mask(run)


def state_step(state: Any) -> int | None:
    """The state's step as an int (``state.step``, or ``state["step"]``), ``None`` without one.
    Reading a device value waits for it.

    Example:
        >>> state_step({"step": 3}), state_step(0)
        (3, None)
    """
    step = getattr(state, "step", None)
    if step is None and isinstance(state, Mapping):
        step = state.get("step")
    return None if step is None else int(step)


class StatLoop(Loop):
    """A loop that adds statistics to its outputs, by name (``STAT_*`` of this module):
    ``jaxloop/steps_per_sec``, ``examples_per_sec`` (needs ``global_batch_size``),
    ``loop_time_secs``, ``num_params``, ``num_flops`` (the compiled step's cost analysis),
    ``init_time``, ``begin_time``, ``life_time_secs``.

    ``steps_per_sec`` and ``examples_per_sec`` never make an inner loop wait for its own
    last step (that wait would leave the device idle between inner loops): the first inner
    loop waits once and reports its exact rate; from then on each reports the rate of the
    inner loop before it (see ``_Throughput``). ``loop_time_secs`` and ``life_time_secs``
    wait for the loop's state, as jaxloop's do.

    Args:
        step: the step.
        stat_names: the statistics to add.
        global_batch_size: examples per step, for ``examples_per_sec``.

    Example:
        >>> import gyre
        >>> from gyre.jaxloop import STAT_LOOP_TIME_SECS
        >>> def step(state, batch, n, **kwargs):
        ...     return state, {}
        >>> _, outputs = gyre.jaxloop.StatLoop(step, stat_names=[STAT_LOOP_TIME_SECS])(0, [1, 2])
        >>> outputs[STAT_LOOP_TIME_SECS] >= 0
        True
    """

    def __init__(
        self, step: Any, stat_names: Sequence[str] | None = None, global_batch_size: int | None = None
    ) -> None:
        super().__init__(step)
        self._stat_names = list(stat_names or [])
        self._init_time = time.time()
        self._global_batch_size = global_batch_size
        self._begin_time = 0.0
        self._last_steps = 0
        self._speed = _Throughput()

    @property
    def stat_names(self) -> list[str]:
        """The statistics this loop adds.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.StatLoop(print, stat_names=["jaxloop/num_params"]).stat_names
            ['jaxloop/num_params']
        """
        return self._stat_names

    def begin(self, state: State, dataset: Iterator[Any]) -> tuple[State, Iterator[Any]]:
        """Starts the loop's clock.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.StatLoop(print).begin(0, [])
            (0, [])
        """
        self._begin_time = time.time()
        return super().begin(state, dataset)

    def run(
        self, state: State, dataset: Iterable[Any], num_steps: int | None = None,
        log_num_flops: bool = False, **kwargs: Any,
    ) -> tuple[State, Output]:
        """:meth:`Loop.run`, computing the flops when ``num_flops`` is asked for.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.StatLoop(lambda s, b, n: (s, {"b": b})).run(0, [5])
            (0, defaultdict(<class 'list'>, {'b': [5]}))
        """
        flops = log_num_flops or (STAT_NUM_FLOPS in self._stat_names and getattr(self._step, "num_flops", None) is None)
        return super().run(state, dataset, num_steps, flops, **kwargs)

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """Adds the statistics to the outputs (the clock stops once the state is ready).

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.StatLoop(print, stat_names=["jaxloop/steps_per_sec"])
            >>> _ = loop.begin(0, [])
            >>> sorted(loop.end(0, {})[1])
            ['jaxloop/steps_per_sec']
        """
        outputs = outputs if outputs is not None else collections.defaultdict(list)
        names = self._stat_names
        timed = STAT_LOOP_TIME_SECS in names or STAT_LIFE_TIME_SECS in names
        if timed:
            jax.block_until_ready(state)
        speed = None
        if STAT_STEPS_PER_SEC in names or STAT_EXAMPLES_PER_SEC in names:
            speed = self._speed.measure(state, self._last_steps, self._begin_time, waited=timed)
        now = time.time()
        if STAT_NUM_PARAMS in names:
            if getattr(self._step, "num_params", None) is None and hasattr(self._step, "compute_num_params"):
                self._step.compute_num_params(state)
            outputs[STAT_NUM_PARAMS] = getattr(self._step, "num_params", None) or _count_params(state)
        if STAT_NUM_FLOPS in names:
            outputs[STAT_NUM_FLOPS] = getattr(self._step, "num_flops", None) or 0
        if STAT_INIT_TIME in names:
            outputs[STAT_INIT_TIME] = self._init_time
        if STAT_BEGIN_TIME in names:
            outputs[STAT_BEGIN_TIME] = self._begin_time
        if STAT_LIFE_TIME_SECS in names:
            outputs[STAT_LIFE_TIME_SECS] = now - self._init_time
        seconds = max(now - self._begin_time, 1e-9)
        if STAT_LOOP_TIME_SECS in names:
            outputs[STAT_LOOP_TIME_SECS] = seconds
        if speed is not None:
            steps_per_sec = speed
            if STAT_STEPS_PER_SEC in names:
                outputs[STAT_STEPS_PER_SEC] = steps_per_sec
            if STAT_EXAMPLES_PER_SEC in names and self._global_batch_size:
                outputs[STAT_EXAMPLES_PER_SEC] = steps_per_sec * self._global_batch_size
        return super().end(state, outputs)


@jax.jit
def _done_marker(leaf: Any) -> Any:
    """A one-element array computed once ``leaf`` is: waiting for it later costs nothing,
    even after ``leaf`` itself was donated to the next step."""
    return leaf.ravel()[:1]


class _Throughput:
    """``steps_per_sec`` of a train loop without waiting for the loop's own last step.

    Waiting at every inner loop's end for its state drains the device's queue and leaves it
    idle while the host sets up the next loop (on a small model, 0.90 of the hand-written
    loop's speed with 100 steps per inner loop, 0.77 with 20). Instead, the first inner loop
    waits once (its rate is exact); each later one starts a marker after its last step and
    waits for the *previous* loop's marker, which is done (or nearly: the wait only keeps the
    host at most one inner loop ahead of the device). The rate reported at the end of inner
    loop ``k`` is the one of loop ``k - 1``: its steps over the time between the moments the
    loops ``k - 2`` and ``k - 1`` were seen done. Over steady training that is the rate of
    the loop, one loop late.
    """

    def __init__(self) -> None:
        self.seen: float | None = None  # when the previous measured loop was seen done
        self.pending: tuple[Any, int] | None = None  # (marker, steps) of the loop before
        self.rate: float | None = None

    def measure(self, state: Any, steps: int, begin: float, *, waited: bool) -> float:
        leaves = [x for x in jax.tree_util.tree_leaves(state) if isinstance(x, jax.Array) and x.size]
        if self.seen is None or not leaves:  # the first loop (or a host state): wait, exactly
            if leaves and not waited:
                jax.block_until_ready(state)
            self.seen = time.time()
            self.rate = steps / max(self.seen - begin, 1e-9)
            return self.rate
        if self.pending is not None:
            marker, before = self.pending
            jax.block_until_ready(marker)
            now = time.time()
            self.rate = before / max(now - self.seen, 1e-9)
            self.seen = now
        self.pending = (_done_marker(leaves[0]), steps)
        assert self.rate is not None
        return self.rate


def _count_params(state: Any) -> int:
    params = getattr(state, "params", state)
    return int(sum(np.size(x) for x in jax.tree_util.tree_leaves(params)))


def check_interval(interval: Any, owner: str) -> int:
    """``interval`` as an int >= 1, else a ``ValueError`` that says so.

    Example:
        >>> check_interval(5, "Action")
        5
    """
    if isinstance(interval, bool):
        interval = None
    return whole_number(
        interval, minimum=1, problem=f"{owner}'s interval must be a positive whole number",
        expected="an int >= 1: the action runs every `interval` loops (or steps)",
        fix="pass interval=1 to run it every time, interval=10 for every tenth",
    )


def _check_action_list(actions: Any, name: str) -> list[Any]:
    actions = list(actions or ())
    for action in actions:
        if not callable(action) or not hasattr(action, "interval"):
            raise TypeError(
                explain(
                    f"{name} must be a list of actions",
                    expected="gyre.jaxloop actions (Action subclasses: SummaryAction, "
                    "CheckpointAction, ...), each with an interval",
                    received=describe(action),
                    fix=f"pass {name}=[gyre.jaxloop.SummaryAction(writer, interval=1)]",
                )
            )
        check_interval(action.interval, type(action).__name__)
    return actions


class ActionLoop(StatLoop):
    """A loop that runs actions before and after itself: each action runs when the loop's
    count (1 for the first call, kept across calls) is a multiple of its interval.

    Args:
        step: the step.
        begin_actions: actions run at the start, called ``action(state, None)``.
        end_actions: actions run at the end, called ``action(state, outputs)``.
        **kwargs: :class:`StatLoop`'s ``stat_names``, ``global_batch_size``.

    Example:
        >>> import gyre
        >>> seen = []
        >>> class Record(gyre.jaxloop.Action):
        ...     def __call__(self, state, outputs, **kwargs):
        ...         seen.append(state)
        >>> loop = gyre.jaxloop.ActionLoop(lambda s, b, n: (s + b, {}), end_actions=[Record(interval=2)])
        >>> for _ in range(4):
        ...     _ = loop(0, [1])
        >>> loop.loop_count, seen
        (4, [1, 1])
    """

    def __init__(
        self,
        step: Any,
        begin_actions: Sequence[Any] | None = None,
        end_actions: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(step, **kwargs)
        self._begin_actions = _check_action_list(begin_actions, "begin_actions")
        self._end_actions = _check_action_list(end_actions, "end_actions")
        self._loop_count = 0

    @property
    def begin_actions(self) -> list[Any]:
        """The actions run at the start of a loop.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.ActionLoop(print).begin_actions
            []
        """
        return self._begin_actions

    @property
    def end_actions(self) -> list[Any]:
        """The actions run at the end of a loop.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.ActionLoop(print).end_actions
            []
        """
        return self._end_actions

    @property
    def loop_count(self) -> int:
        """How many times the loop began (settable, e.g. to align with a resumed step).

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.ActionLoop(print)
            >>> loop.loop_count = 7
            >>> loop.loop_count
            7
        """
        return self._loop_count

    @loop_count.setter
    def loop_count(self, loop_count: int) -> None:
        self._loop_count = whole_number(
            loop_count, minimum=0, problem="loop_count must be a whole number >= 0",
            expected="the number of loops already run", fix="set loop.loop_count = 0 to start over",
        )

    def begin(self, state: State, dataset: Iterator[Any]) -> tuple[State, Iterator[Any]]:
        """Counts the loop and runs the begin actions whose interval divides the count.

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.ActionLoop(print)
            >>> _ = loop.begin(0, [])
            >>> loop.loop_count
            1
        """
        self._loop_count += 1
        for action in self._begin_actions:
            if self._loop_count % action.interval == 0:
                action(state, None)
        return super().begin(state, dataset)

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """Adds the statistics, then runs the end actions whose interval divides the count.

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.ActionLoop(print)
            >>> _ = loop.begin(0, [])
            >>> loop.end(0, {"x": [1]})
            (0, {'x': [1]})
        """
        state, outputs = super().end(state, outputs)
        for action in self._end_actions:
            if self._loop_count % action.interval == 0:
                try:
                    action(state, outputs)
                except Exception as err:
                    # the loop's input state may be donated: hand the caller this one
                    err.state, err.outputs = state, outputs  # type: ignore[attr-defined]
                    raise
        return state, outputs


class TrainLoop(ActionLoop):
    """The training loop: an :class:`ActionLoop` adding ``steps_per_sec`` by default and
    logging it.

    Example:
        >>> import gyre
        >>> from gyre.jaxloop import STAT_STEPS_PER_SEC
        >>> loop = gyre.jaxloop.TrainLoop(lambda s, b, n: (s + b, {"b": b}))
        >>> state, outputs = loop(0, iter(range(10)), num_steps=4)
        >>> state, outputs["b"], outputs[STAT_STEPS_PER_SEC] > 0
        (6, [0, 1, 2, 3], True)
    """

    def __init__(self, step: Any, stat_names: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(step, stat_names=stat_names or [STAT_STEPS_PER_SEC], **kwargs)

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """:meth:`ActionLoop.end`, then logs the speed (``logging`` at INFO).

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.TrainLoop(print, stat_names=["jaxloop/loop_time_secs"])
            >>> _ = loop.begin(0, [])
            >>> sorted(loop.end(0, {})[1])
            ['jaxloop/loop_time_secs']
        """
        state, outputs = super().end(state, outputs)
        if outputs is not None and STAT_STEPS_PER_SEC in outputs and _log.isEnabledFor(logging.INFO):
            _log.info("train    | step: %s | steps_per_sec: %6.1f", state_step(state), outputs[STAT_STEPS_PER_SEC])
        return state, outputs


class EvalLoop(ActionLoop):
    """The evaluation loop: an :class:`ActionLoop` adding ``loop_time_secs`` by default.

    **Evaluation without recompiles.** When the step takes the keyword ``mask`` (a
    :class:`gyre.Step` whose ``run(self, state, batch, mask=None)`` does, or a callable
    ``step(state, batch, n, mask=None, **kwargs)``), every batch is padded to the first one's
    size (the last real row repeated, :func:`gyre.data.pad_batch`) and the step gets
    ``mask=``, a boolean vector over the batch, ``True`` for the real rows: it compiles once.
    Return metric objects weighted by the mask (``gyre.core.metrics.Mean.from_stacked(
    per_example, mask)``): :func:`reduce_outputs` merges them into the exact means over the
    examples (it averages bare scalars per step, unweighted). A step without ``mask`` gets
    the batches as they come.

    Args:
        step: the (eval) step.
        stat_names: the statistics to add.
        name: the key of this loop's outputs in an :class:`OuterLoop`'s outputs
            (``"eval"``, then ``"eval_1"``... by position when not given).
        **kwargs: :class:`ActionLoop`'s ``begin_actions``, ``end_actions``,
            ``global_batch_size``.

    Example:
        >>> import gyre
        >>> loop = gyre.jaxloop.EvalLoop(lambda s, b, n: (s, {"acc": b}), name="test")
        >>> state, outputs = loop(0, [0.5, 1.0])
        >>> loop.name, outputs["acc"]
        ('test', [0.5, 1.0])

        A step that takes ``mask``: 10 examples in batches of 4, one compilation, the exact
        mean:

        >>> import jax, numpy as np
        >>> from gyre.core.metrics import Mean
        >>> @jax.jit
        ... def run(batch, mask):
        ...     return Mean.from_stacked(batch, mask)
        >>> def step(state, batch, n, mask=None, **kwargs):
        ...     return state, {"x": run(batch, mask)}
        >>> x = np.arange(10.0, dtype=np.float32)
        >>> _, outputs = gyre.jaxloop.EvalLoop(step)(0, [x[i : i + 4] for i in range(0, 10, 4)])
        >>> float(gyre.jaxloop.reduce_outputs(outputs)["x"]), run._cache_size()
        (4.5, 1)
    """

    pads_batches = True

    def __init__(
        self, step: Any, stat_names: Sequence[str] | None = None, *, name: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(step, stat_names=stat_names or [STAT_LOOP_TIME_SECS], **kwargs)
        self.name = name

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """:meth:`ActionLoop.end`, then logs the evaluation's time (``logging`` at INFO).

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.EvalLoop(print)
            >>> _ = loop.begin(0, [])
            >>> sorted(loop.end(0, {})[1])
            ['jaxloop/loop_time_secs']
        """
        state, outputs = super().end(state, outputs)
        if outputs is not None and STAT_LOOP_TIME_SECS in outputs and _log.isEnabledFor(logging.INFO):
            _log.info("eval     | step: %s | eval time: %4.2f seconds.", state_step(state), outputs[STAT_LOOP_TIME_SECS])
        return state, outputs


def reduce_outputs(outputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """A loop's outputs as one value per key, read to the host once.

    A list of scalars (the per-step losses) becomes its mean; a list of gyre (or CLU-style)
    metric objects, with ``merge`` and ``compute``, is merged and computed; a list of arrays
    with more than one element is stacked (``(steps, ...)``); any other value (a statistic,
    ``STOP_LOOP``) is kept as it is.

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> from gyre.core.metrics import Mean
        >>> outputs = {"loss": [jnp.float32(1.0), jnp.float32(3.0)],
        ...            "acc": [Mean.from_value(jnp.float32(0.5), 2), Mean.from_value(jnp.float32(1.0), 2)],
        ...            "jaxloop/steps_per_sec": 12.5}
        >>> {k: float(v) for k, v in gyre.jaxloop.reduce_outputs(outputs).items()}
        {'loss': 2.0, 'acc': 0.75, 'jaxloop/steps_per_sec': 12.5}
    """
    reduced: dict[str, Any] = {}
    for key, values in (outputs or {}).items():
        if not isinstance(values, list):
            reduced[key] = values
        elif not values:
            reduced[key] = None
        elif all(hasattr(v, "merge") and hasattr(v, "compute") for v in values):
            merged = values[0]
            for other in values[1:]:
                merged = merged.merge(other)
            reduced[key] = np.asarray(jax.device_get(merged.compute()))
        else:
            host = [np.asarray(v) for v in jax.device_get(values)]
            if all(v.ndim == 0 for v in host) and all(np.issubdtype(v.dtype, np.number) or v.dtype == bool for v in host):
                reduced[key] = np.float64(np.mean(np.stack(host).astype(np.float64)))
            else:
                reduced[key] = np.stack(host) if len({v.shape for v in host}) == 1 else host
    return reduced
