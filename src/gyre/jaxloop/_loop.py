"""jaxloop's base ``Loop`` (``__call__`` runs ``begin``, ``run``, ``end``) and the helpers every loop shares."""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._checks import instance, whole
from gyre.core._clock import infer_batch_size
from gyre.core._errors import as_pair, describe, explain, warn
from gyre.core._host import numeric_dtype
from gyre.data._padding import accepts_mask, padded
from gyre.engine._elapse import samples
from gyre.engine._engine import Preemption, alive, guarded
from gyre.engine._nan import NonFiniteError, check_nan_policy
from gyre.parallel._partitioners import step_name

Output = dict[str, Any]
State = Any


def _as_iterator(dataset: Any) -> Iterator[Any]:
    if isinstance(dataset, Iterator):
        return dataset
    return iter(instance(
        dataset, "dataset", Iterable, problem="a jaxloop loop's dataset must be an iterator or an iterable of batches",
        expected="an iterator (a generator, ds.as_numpy_iterator()) or an iterable "
        "(a list of batches, gyre.data.batches(...))",
        fix="pass the batches, e.g. loop(state, iter(batches), num_steps=100)"))


def _check_num_steps(num_steps: Any) -> int | None:
    if num_steps is None:
        return None
    return whole(
        num_steps, "num_steps", minimum=1, problem="num_steps must be a whole number >= 1 or None",
        expected="the number of steps to run, or None to run until the data ends "
        "(num_steps=0 would run nothing; jaxloop itself runs one step for it)",
        fix="pass num_steps=100, or num_steps=None; skip the call to run no step",
    )


class Loop:
    """jaxloop's base loop: runs ``step`` over the batches of a dataset.

    Args:
        step: a :class:`gyre.Step` (or any callable ``step(state, batch,
            per_loop_step_number, **kwargs) -> (state, outputs)``).
        nan_policy: ``"raise"`` (the default): a run whose last scalar float output per key is
            NaN or infinite raises :class:`gyre.NonFiniteError` at its end, naming the first step
            it went non-finite (nothing is read per step); ``"ignore"`` checks nothing.
            ``"skip"`` is refused (use ``optax.apply_if_finite``).
        batch_size_fn: ``batch -> examples``, the weight of the step's scalar outputs in
            :func:`reduce_outputs`; by default the leading dimension the batch's arrays share.

    Override :meth:`begin`, :meth:`run`, :meth:`end`, :meth:`update_outputs` or jaxloop's
    per-step hooks :meth:`_run_one_step` and :meth:`_get_next_batch` to customise it.

    Attributes:
        pads_batches: pad batches to the first one's size and pass ``mask=`` to a step that
            takes it; ``True`` for :class:`EvalLoop` only.

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

    def __init__(self, step: Any, *, nan_policy: str = "raise", batch_size_fn: Any = None) -> None:
        who = type(self).__name__
        self._nan_policy = check_nan_policy(nan_policy, who, no_skip=(
            "the step applies them, not the loop",
            "drop them in the optimizer: optax.apply_if_finite(tx, max_consecutive_errors=5), "
            f"with {who}(step, nan_policy='ignore')",
        ))
        instance(batch_size_fn, "batch_size_fn", Callable, none=True,
                 problem=f"{who}'s batch_size_fn must be a function of the batch",
                 expected="batch_size_fn=lambda batch: batch['y'].shape[0] (the examples in a batch)",
                 fix="pass a function, or leave it None (the leading dimension of the batch's arrays)")
        self._size_of = infer_batch_size if batch_size_fn is None else lambda batch: samples(batch_size_fn(batch))
        self._step = instance(
            step, "step", Callable, problem="a jaxloop loop needs a step",
            expected="a gyre.Step (or a callable (state, batch, per_loop_step_number) -> (state, outputs))",
            fix="pass the step: TrainLoop(MyStep(key, model, optimizer=..., train=True))")
        self._preempted = False
        self._sizes: list[int] | None = None  # each step's examples: the weights of reduce_outputs
        self._pads: _Pads | None = None

    @property
    def step(self) -> Any:
        """The step this loop runs."""
        return self._step

    def begin(self, state: State, dataset: Iterator[Any]) -> tuple[State, Iterator[Any]]:
        """Runs before the loop; returns ``(state, dataset)``. The identity by default."""
        return state, dataset

    def update_outputs(self, loop_outputs: Output, step_outputs: Output | None) -> Output:
        """Appends one step's outputs to the loop's lists, by key (values stay on the device).

        Example:
            >>> import collections, gyre
            >>> outputs = collections.defaultdict(list)
            >>> outputs = gyre.jaxloop.Loop(print).update_outputs(outputs, {"loss": 0.5})
            >>> dict(outputs)
            {'loss': [0.5]}
        """
        if step_outputs is not None:
            for key, value in _items((None, step_outputs), self._step):
                loop_outputs[key].append(value)
        return loop_outputs

    def _get_next_batch(self, dataset: Iterator[Any]) -> Any:
        """jaxloop's per-batch hook (``next(dataset)``); ``StopIteration`` ends the loop."""
        return next(dataset)

    def _run_one_step(
        self,
        state: State,
        dataset: Iterator[Any],
        loop_outputs: Output,
        per_loop_step_number: int,
        log_num_flops: bool = False,
        return_state_from_step: bool = True,
        **kwargs: Any,
    ) -> tuple[State, Output]:
        """jaxloop's per-step hook: pulls a batch, calls the step, adds its outputs; returns
        ``(state, loop_outputs)`` (the input state when not ``return_state_from_step``)."""
        batch = self._get_next_batch(dataset)
        if self._sizes is not None:  # in run()
            self._sizes.append(self._size_of(batch))
        if self._pads is not None:  # an EvalLoop whose step takes a mask: one batch size throughout
            batch, mask = self._pads(batch)
            kwargs = {**kwargs, "mask": mask}
        if log_num_flops and _takes_flops(self._step):
            kwargs = {**kwargs, "log_num_flops": True}
        result = self._step(state, batch, per_loop_step_number, **kwargs)
        if type(result) is not tuple or len(result) != 2:  # explained, or a list read as a pair
            result = as_pair(result, step_name(self._step))
        step_state, step_outputs = result
        if step_outputs is not None:
            _items(result, self._step)  # (outputs and state swapped: said before either is used)
        if return_state_from_step:
            state = step_state
        loop_outputs = self.update_outputs(loop_outputs, step_outputs)
        if loop_outputs is None:
            raise TypeError(explain(
                f"{type(self).__name__}.update_outputs must return the loop's outputs",
                expected="the outputs, updated with the step's (the next step's call receives them)",
                received="None", fix="end it with `return loop_outputs` (a missing return gives None)"))
        return state, loop_outputs

    def run(
        self,
        state: State,
        dataset: Iterable[Any],
        num_steps: int | None = None,
        log_num_flops: bool = False,
        **kwargs: Any,
    ) -> tuple[State, Output]:
        """Runs the step over the dataset, pulling a batch only for a step that runs.

        SIGTERM ends the loop after the step it arrived during, as it ends :func:`gyre.loop`.

        Args:
            state: the state (donated to a train step: use the returned one).
            dataset: an iterator (continued across calls) or an iterable (restarted each call).
            num_steps: how many steps (>= 1; ``0`` is refused, where jaxloop would run one);
                ``None`` runs until the data ends.
            log_num_flops: have the step compute its flop count at the first step.
            **kwargs: passed to each step call; ``return_state_from_step=False`` keeps the
                input state and drops the step's.

        Returns:
            ``(state, outputs)``, ``outputs[key]`` the list of each step's values.

        Raises:
            Exception: whatever a step raised, carrying ``err.state``: the last state a step
                returned (``None`` when the failing step was donated it).

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
        self._last_steps, self._preempted = 0, False
        self._sizes = []
        self._pads = _Pads() if self.pads_batches and takes_mask(self._step) else None
        numbers = itertools.count(1) if num_steps is None else range(1, num_steps + 1)
        steps = self._tight if _default_hooks(self) else self._hooked
        run = _Run(state, bool(log_num_flops), keep_state, kwargs)
        try:
            with preemption() as preempted:
                steps(run, data, numbers, preempted)
        except BaseException as err:
            err.state = run.state if alive(run.state) else None  # type: ignore[attr-defined]
            raise
        finally:
            self._pads = None
        self._last_steps, self._preempted = run.count, run.preempted
        if run.preempted:
            warn(
                f"preempted ({Preemption.signal_name()}) at per_loop_step_number {run.count}: "
                f"{type(self).__name__} stopped after that step and returned its outputs"
            )
        if self._nan_policy != "ignore":
            _check_finite(run.outputs, run.count, type(self).__name__)
        return run.state, _weighted(run.outputs, self._sizes)

    def _hooked(self, run: _Run, data: Iterator[Any], numbers: Iterable[int], preempted: Callable[[int], bool]) -> None:
        """The steps, each one call of the per-step hook :meth:`_run_one_step`."""
        who = f"{type(self).__name__}._run_one_step"
        for n in numbers:
            try:
                result = self._run_one_step(
                    run.state, data, run.outputs, n, log_num_flops=run.flops and n == 1,
                    return_state_from_step=run.keep, **run.kwargs,
                )
            except StopIteration:  # the data ended: how a jaxloop loop without num_steps ends
                return
            run.state, run.outputs = as_pair(result, who, "(state, loop_outputs)", "state, loop_outputs")
            run.count = n
            if preempted(n):
                run.preempted = True
                return

    def _tight(self, run: _Run, data: Iterator[Any], numbers: Iterable[int], preempted: Callable[[int], bool]) -> None:
        """:meth:`_hooked` with the default hooks inlined (no per-step Python call besides the step's own)."""
        step, size_of, pads, sizes, keep = self._step, self._size_of, self._pads, self._sizes, run.keep
        outputs, kwargs, state, n = run.outputs, run.kwargs, run.state, 0
        first = {**kwargs, "log_num_flops": True} if run.flops and _takes_flops(step) else kwargs
        try:
            for n in numbers:
                try:
                    batch = next(data)
                    sizes.append(size_of(batch))  # type: ignore[union-attr]
                    given = first if n == 1 else kwargs
                    if pads is not None:  # an EvalLoop whose step takes a mask: one batch size throughout
                        batch, mask = pads(batch)
                        given = {**given, "mask": mask}
                    result = step(state, batch, n, **given) if given else step(state, batch, n)
                except StopIteration:  # the data ended (or the step said so)
                    n -= 1
                    return
                if type(result) is not tuple or len(result) != 2:
                    result = as_pair(result, step_name(step))
                items = result[1]
                if items is not None:
                    try:  # (no call per step: the explained error only when they are no dict)
                        items = items.items()
                    except AttributeError:
                        _items(result, step)
                if keep:
                    state = result[0]
                if items is not None:
                    for key, value in items:
                        outputs[key].append(value)
                if preempted(n):
                    run.preempted = True
                    return
        finally:
            run.state, run.count = state, n

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """Runs after the loop; returns ``(state, outputs)``. The identity by default."""
        return state, outputs

    def __call__(
        self, state: State, dataset: Iterable[Any], num_steps: int | None = None, **kwargs: Any
    ) -> tuple[State, Output | None]:
        """Runs :meth:`begin`, :meth:`run` and :meth:`end`; returns ``(state, outputs)``."""
        who = type(self).__name__
        _check_num_steps(num_steps)  # before begin's actions run
        state, dataset = as_pair(self.begin(state, dataset), f"{who}.begin", "(state, dataset)", "state, dataset")
        state, outputs = self.run(state, dataset, num_steps, **kwargs)
        return as_pair(self.end(state, outputs), f"{who}.end", "(state, outputs)", "state, outputs")


def _items(result: tuple[Any, Any], step: Any) -> Any:
    """The items of a step's outputs (``result[1]``), or the explained error when they are no dict."""
    try:
        return result[1].items()
    except AttributeError:
        pass
    swapped = isinstance(result[0], Mapping) and not isinstance(result[1], Mapping)
    raise TypeError(explain(
        f"{step_name(step)} returned outputs that are not a dict"
        + (": the pair looks swapped, (outputs, state)" if swapped else ""),
        expected="(state, outputs) with outputs a dict of named values, or None",
        received=f"({describe(result[0])}, {describe(result[1])})" if swapped else describe(result[1]),
        fix="return state, {'loss': loss}" + (" (the state first)" if swapped else "")))


class _Run:
    """What :meth:`Loop.run` carries through its steps (``flops``: ``log_num_flops`` at step 1)."""

    def __init__(self, state: Any, flops: bool, keep: bool, kwargs: dict[str, Any]) -> None:
        self.state, self.flops, self.keep, self.kwargs = state, flops, keep, kwargs
        self.outputs: Output = collections.defaultdict(list)
        self.count, self.preempted = 0, False


_HOOKS = ("_run_one_step", "_get_next_batch", "update_outputs")


def _default_hooks(loop: Loop) -> bool:
    """Whether ``loop`` runs jaxloop's per-step hooks as :class:`Loop` defines them."""
    return all(getattr(type(loop), name) is getattr(Loop, name) and name not in vars(loop) for name in _HOOKS)


@contextlib.contextmanager
def preemption() -> Iterator[Callable[[int], bool]]:
    """SIGTERM for a jaxloop loop, as gyre.loop has it: yields ``preempted(step) -> bool``, asked after each step."""
    with guarded(catch_interrupt=False) as guard:
        yield guard.check


class StepValues(list):  # type: ignore[type-arg]
    """A list of per-step values with each step's examples (``batch_sizes``), which :func:`reduce_outputs` weighs by."""

    def __init__(self, values: Any, batch_sizes: list[int]) -> None:
        super().__init__(values)
        self.batch_sizes = batch_sizes


def _weighted(outputs: Any, sizes: list[int]) -> Any:
    """``outputs`` whose lists of one value per step carry the steps' example counts."""
    if not sizes or not isinstance(outputs, dict):
        return outputs
    for key, values in outputs.items():
        if type(values) is list and len(values) == len(sizes):
            outputs[key] = StepValues(values, sizes)  # type: ignore[arg-type]
    return outputs


def _float_scalar(value: Any) -> bool:
    if isinstance(value, jax.Array):
        return value.ndim == 0 and jnp.issubdtype(value.dtype, jnp.inexact)
    return isinstance(value, (float, np.floating))


def _check_finite(outputs: Any, steps: int, who: str) -> None:
    """Raises :class:`gyre.NonFiniteError` naming the first non-finite step of a key whose last float output is so."""
    first: tuple[int, str, float] | None = None
    for key, values in (outputs.items() if isinstance(outputs, Mapping) else ()):
        if not isinstance(values, list) or not values or not _float_scalar(values[-1]):
            continue
        if np.isfinite(float(values[-1])):  # one read per key and run: a diverged run stays so
            continue
        host = np.array([float(v) if _float_scalar(v) else 0.0 for v in values], np.float64)
        bad = np.flatnonzero(~np.isfinite(host))
        if bad.size and (first is None or bad[0] < first[0]):
            first = (int(bad[0]), str(key), float(host[bad[0]]))
    if first is None:
        return
    index, name, value = first
    text = "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    at = f"per_loop_step_number {index + 1}" if len(outputs[name]) == steps else f"its output number {index + 1}"
    raise NonFiniteError(
        explain(
            f'"{name}" is {text} at {at} of this {who} run',
            expected=f"finite scalar outputs (nan_policy='raise', the default of {who})",
            received=f"{name} = {text} at {at} (of {steps} steps)",
            fix="the training diverged: lower the learning rate, clip the gradients "
            "(optax.clip_by_global_norm(1.0)), and check that step's batch for NaN/Inf inputs; "
            "to drop such updates, optax.apply_if_finite(tx, max_consecutive_errors=5); "
            f"{who}(step, nan_policy='ignore') records them without stopping",
        ),
        step=index, collection="outputs", name=name, value=value,
    )


class _Pads:
    """Pads each batch to the first one's rows and gives its mask (:func:`gyre.data.padded`, a batch at a time)."""

    def __init__(self) -> None:
        self._batch: Any = None
        self._pairs = iter(padded(self._slot()))

    def _slot(self) -> Iterator[Any]:
        while True:
            yield self._batch

    def __call__(self, batch: Any) -> tuple[Any, Any]:
        self._batch = batch
        return next(self._pairs)


def _takes_flops(step: Any) -> bool:
    try:
        return "log_num_flops" in inspect.signature(step).parameters
    except (TypeError, ValueError):
        return False


def takes_mask(step: Any) -> bool:
    """Whether a jaxloop step (or a :class:`gyre.Step`'s ``run``) takes the keyword ``mask``."""
    if accepts_mask(step):
        return True
    run = getattr(step, "run", None)
    return callable(run) and accepts_mask(run)


def state_step(state: Any) -> int | None:
    """The state's step as an int (``state.step`` or ``state["step"]``; a device value is waited for), else ``None``."""
    step = getattr(state, "step", None)
    if step is None and isinstance(state, Mapping):
        step = state.get("step")
    return None if step is None else int(step)


def reduce_outputs(outputs: Mapping[str, Any] | None) -> dict[str, Any]:
    """A loop's outputs as one value per key, read to the host once.

    A list of scalars becomes its mean, weighted by each step's examples when the loop
    recorded them; a list of metric objects (``merge``/``compute``) is merged and computed; a
    list of larger arrays is stacked; any other value is kept.

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
            merged = functools.reduce(lambda a, b: a.merge(b), values)
            reduced[key] = np.asarray(jax.device_get(merged.compute()))
        else:
            host = [np.asarray(v) for v in jax.device_get(values)]
            if all(v.ndim == 0 for v in host) and all(numeric_dtype(v.dtype) for v in host):
                weights = getattr(values, "batch_sizes", None)
                if weights is not None and not sum(weights):
                    weights = None
                reduced[key] = np.float64(np.average(np.stack(host).astype(np.float64), weights=weights))
            else:
                reduced[key] = np.stack(host) if len({v.shape for v in host}) == 1 else host
    return reduced
