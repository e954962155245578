"""The managed API: write the maths of a step; gyre compiles, differentiates and shards it.

The function may take ``(state, batch)`` or ``(state)`` and return ``(logs, state)``
(``None`` for either: none / unchanged), the logs alone or the state alone.

A function that also takes ``mask`` gets the mask of a padded batch (``True`` for real rows), so
an evaluation's last, smaller batch compiles once: average over the real rows
(``jnp.sum(x * mask) / jnp.sum(mask)``) and pass ``mask=`` to metric objects.

Metric objects logged with ``add_stateful_metric`` (anything with ``merge`` and ``compute``)
are merged into the state's accumulator of that name and logged as its ``compute()``, as in
ciclo. :func:`train_step` and :func:`step` have examples.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from gyre.core import metrics
from gyre.core._checks import real, whole
from gyre.core._compat import cache_size
from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.core._train_state import TrainState
from gyre.data._padding import accepts_mask
from gyre.engine._binding import Masked
from gyre.engine._nan import SKIPPED_STEPS
from gyre.engine._tasks import LoopElement
from gyre.parallel._registry import get_strategy
from gyre.parallel._strategies import Jit
from gyre.parallel._strategy import Strategy
from gyre.steps._compiled import StepFn, StrategyStep
from gyre.steps._precision import MixedPrecision, get_policy
from gyre.steps._update import _shapes, state_slot, train_update
from gyre.steps._update import skip_non_finite as skip_non_finite

# -- calling the user's function -----------------------------------------------------------------


def _takes_batch(fn: Callable[..., Any], where: str) -> bool:
    """Whether ``fn`` takes ``(state, batch)`` (else ``(state)``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    P = inspect.Parameter
    if any(p.kind is P.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    if not positional:
        raise TypeError(explain(
            f"{where} cannot be a managed step: it takes no state",
            expected="fn(state, batch) -> (logs, state), or fn(state) -> state",
            received=f"signature {inspect.signature(fn)}", fix="def step(state, batch): ..."))
    required = [p for p in positional if p.default is P.empty]
    if len(required) > 2:
        raise TypeError(explain(
            f"{where} takes {len(required)} arguments; a managed step gets (state, batch)",
            expected="fn(state, batch) or fn(state)", received=f"signature {inspect.signature(fn)}",
            fix="drop the other parameters (ciclo's elapsed: the state's step counter is "
            "state.step, and its per-step key state.step_key()), or give them defaults"))
    return len(positional) >= 2


def _as_pair(out: Any, state: Any, where: str) -> tuple[Any, Any]:
    """``(logs, state)`` from what the function returned: the pair (``None`` parts: none /
    unchanged), the logs or the state."""
    if isinstance(out, tuple) and len(out) == 2:
        logs, new = out
        if type(logs) is type(state) and isinstance(new, Mapping) and type(new) is not type(state):
            raise TypeError(explain(
                f"{where} returned (state, logs): the pair is in the wrong order",
                expected="(logs, state)", received=f"({type(logs).__name__}, {type(new).__name__})",
                fix="return logs, state"))
        if logs is not None and not isinstance(logs, Mapping):
            raise TypeError(explain(
                f"{where} must return (logs, state)",
                expected="a pair: (gyre.logs().add_loss(...), state)",
                received=f"a pair whose first value is {describe(logs)}", fix="return logs, state"))
        return (Logs() if logs is None else logs), (state if new is None else new)
    if out is None:
        return Logs(), state
    if type(out) is type(state):
        return Logs(), out
    if isinstance(out, Mapping):
        return out, state
    raise TypeError(explain(
        f"{where} must return (logs, state)",
        expected="a pair: (gyre.logs().add_loss(...), state), the logs, or the state", received=describe(out),
        fix="return logs, state"))


def _call(fn: Callable[..., Any], takes_batch: bool, state: Any, batch: Any, where: str) -> tuple[Any, Any]:
    if type(batch) is Masked:  # a padded batch: its mask goes to the function
        if not accepts_mask(fn):
            raise TypeError(_takes_no_mask(fn))
        out = fn(state, batch.batch, mask=batch.mask)
    else:
        out = fn(state, batch) if takes_batch else fn(state)
    return _as_pair(out, state, where)


def _takes_no_mask(fn: Any) -> str:
    where = getattr(fn, "__qualname__", "the step")
    return explain(
        f"{where} got the mask of a padded batch, and takes no mask",
        expected="a function with a mask parameter: def step(state, batch, mask=None)",
        received=f"signature {inspect.signature(fn)}",
        fix="add mask=None to the function and leave the padded rows out of its means "
        "(jnp.sum(x * mask) / jnp.sum(mask)), or call the step without mask=")


def _check_params(given: Any, returned: Any, where: str) -> None:
    """A clear error when the function returned params unlike those it received (the step computes
    their update itself)."""
    if returned is given:
        return
    same = jax.tree_util.tree_structure(given) == jax.tree_util.tree_structure(returned) and all(
        jnp.shape(a) == jnp.shape(b) and jnp.result_type(a) == jnp.result_type(b)
        for a, b in zip(jax.tree_util.tree_leaves(given), jax.tree_util.tree_leaves(returned), strict=True))
    if not same:
        raise ValueError(explain(
            f"{where} returned params of another structure or shape than it received",
            expected=f"the params it received: {_shapes(given)}", received=_shapes(returned),
            fix="a managed train step computes the params update itself from the logged "
            "losses: return the state you received, changing only model_state or extras "
            "(return logs, state); to update params yourself write a plain jax.jit step"))


# -- losses ------------------------------------------------------------------------------------


def check_floating_loss(name: str, value: Any, where: str) -> None:
    """A clear error for an integer or bool loss, whose gradient is silently zero."""
    dtype = jnp.result_type(value)
    if not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(explain(
            f"loss {name!r} of {where} is {dtype}: its gradient would be zero",
            expected="a floating-point loss (float32, bfloat16, ...)", received=f"a loss of dtype {dtype}",
            fix="compute the loss in floating point (cast its inputs with .astype(jnp.float32) "
            "before the arithmetic); log counts and accuracies with add_metric instead"))


def total_loss(logs: Any, where: str = "train_step") -> jax.Array:
    """The sum of the losses in ``logs``, in float32; a clear error when there are none or one is
    not a floating scalar."""
    losses = logs.get("losses") if isinstance(logs, dict) else None
    if not losses:
        raise ValueError(explain(
            f"{where} logged no loss to differentiate",
            expected="the step to log at least one scalar with logs.add_loss(name, value)",
            received="logs with collections " + (repr(sorted(logs)) if isinstance(logs, dict) else describe(logs)),
            fix="return (gyre.logs().add_loss('loss', loss), state); metrics logged with "
            "add_metric are not differentiated"))
    total = jnp.zeros((), jnp.float32)
    for name, value in losses.items():
        shape = jnp.shape(value)
        if shape != ():
            raise ValueError(explain(
                f"loss {name!r} is not a scalar",
                expected="a scalar loss (shape ()) per add_loss", received=f"shape {shape}",
                fix=f"reduce it before logging, e.g. logs.add_loss({name!r}, per_example.mean())"))
        check_floating_loss(name, value, where)
        total = total + jnp.asarray(value, jnp.float32)
    return total


# -- stateful metrics ------------------------------------------------------------------------------


def _is_metric(value: Any) -> bool:
    return not isinstance(value, jax.Array) and all(callable(getattr(value, m, None)) for m in ("merge", "compute"))


def _accumulator(state: Any, name: str, value: Any, where: str) -> tuple[Any, Callable[[Any, Any], Any]]:
    """The state's accumulator ``name`` and how to replace it (a field, or an extra)."""
    slot = state_slot(state, name)
    if slot is None:
        fields = getattr(type(state), "__dataclass_fields__", {})
        kind = type(value).__name__
        raise ValueError(explain(
            f"{where} logged the metric object {name!r} ({kind}) as a stateful metric, but the "
            f"state has no {name!r} to accumulate it in",
            expected=f"a state field or extra named {name!r} holding an empty {kind}",
            received=f"a {type(state).__name__} with fields {sorted(f for f in fields if f != 'extras')}",
            fix=f"create the state with {name}={kind}.empty() (ManagedState.create(..., {name}=...)) "
            f"or declare `{name}: {kind}` in your state class; reset it with "
            f"state.replace({name}={kind}.empty()); or log {name}.compute() for this batch alone"))
    found = slot[0]
    if type(found) is not type(value):
        raise TypeError(explain(
            f"state.{name} cannot accumulate the stateful metric {name!r} logged by {where}",
            expected=f"state.{name} of the logged metric's type, {type(value).__name__}",
            received=f"state.{name} = {describe(found)}",
            fix=f"initialise it with {type(value).__name__}.empty()"))
    return slot


def merge_stateful_metrics(logs: Any, state: Any, where: str = "step") -> tuple[Any, Any]:
    """Merges each metric object of ``logs.stateful_metrics`` into the state's accumulator of that
    name and logs its ``compute()``."""
    entries = logs.get("stateful_metrics") if isinstance(logs, Mapping) else None
    if not entries or not any(_is_metric(v) for v in entries.values()):
        return logs, state
    values: dict[str, Any] = {}
    for name, value in entries.items():
        if not _is_metric(value):
            values[name] = value
            continue
        accumulator, put = _accumulator(state, name, value, where)
        merged = accumulator.merge(value)
        state = put(state, merged)
        result = merged.compute()
        if isinstance(result, Mapping):
            values.update({str(k): v for k, v in result.items()})
        else:
            values[name] = result
    out = Logs().merge({c: v for c, v in logs.items() if c != "stateful_metrics"})
    return out.add_stateful_metrics(values), state


class ManagedState(TrainState, kw_only=True):
    """A :class:`~gyre.TrainState` with a static strategy, placed on its devices.

    Subclasses may declare fields (``ema_params: Any``), which ``create`` takes as keywords.
    ``skipped_steps`` (int32, 0 at creation) counts the updates ``nan_policy="skip"`` dropped; a
    checkpoint keeps it.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> s = ManagedState.create(params=jnp.zeros(4), tx=optax.adam(1e-3), strategy="jit")
        >>> s.strategy.name, s.with_strategy("eager").strategy.name
        ('jit', 'eager')
    """

    strategy: Strategy = struct.field(pytree_node=False, default_factory=Jit)
    skipped_steps: jax.Array = struct.field(default_factory=lambda: jnp.zeros((), jnp.int32))

    @classmethod
    def create(  # type: ignore[override]
        cls,
        *,
        params: Any,
        tx: optax.GradientTransformation | None = None,
        strategy: str | Strategy = "jit",
        apply_fn: Callable[..., Any] | None = None,
        rng: Any = None,
        model_state: Any = None,
        **extra: Any,
    ) -> Any:
        """A state at step 0 placed for ``strategy`` (a name or a :class:`~gyre.Strategy`).

        Example:
            >>> import jax.numpy as jnp
            >>> ManagedState.create(params=jnp.zeros(2), strategy="fsdp").strategy.name
            'fsdp'
        """
        chosen = get_strategy(strategy)
        state = super().create(
            params=params, tx=tx, apply_fn=apply_fn, rng=rng, model_state=model_state,
            strategy=chosen, **extra)
        return chosen.place_state(state)

    def with_strategy(self, strategy: str | Strategy) -> Any:
        """The same state under another strategy, moved onto its devices.

        Example:
            >>> import jax.numpy as jnp
            >>> ManagedState.create(params=jnp.zeros(2)).with_strategy("data_parallel").strategy.name
            'data_parallel'
        """
        chosen = get_strategy(strategy)
        return chosen.place_state(self.replace(strategy=chosen))


class ManagedStep(StrategyStep, LoopElement):
    """A step compiled per strategy; built by :func:`train_step` and :func:`step`.

    Call it as ``step(state, batch)`` (``mask=`` for a padded batch when the function takes
    it), as a method of the state when it is a class attribute, or spread it into a task table
    (``{**train_step, gyre.every(100): [...]}``, under ``every(1)`` as in ciclo). ``nan_policy``
    is ``"skip"`` when it drops non-finite updates, else ``None``.

    Example:
        >>> import gyre
        >>> from gyre.steps.managed import step
        >>> count = step(lambda s, b: (gyre.logs().add_metric("b", b), s))
        >>> [repr(k) for k in {**count}]
        ['every(steps=1)']
    """

    def __init__(
        self,
        fn: StepFn,
        pure: StepFn,
        *,
        kind: str,
        nan_policy: str | None = None,
        make: Callable[[bool], StepFn] | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        super().__init__(pure)
        self._fn = fn
        self.kind = kind
        self.trains = kind == "train_step"  # read by the loops: a managed.step never trains
        self.nan_policy = nan_policy
        self._make = make  # builds the pure step, skipping or not (train steps only)
        self.takes_mask = accepts_mask(fn)
        self._variants: dict[str, ManagedStep] = {}
        # A training step replaces the state: donate it. Other steps (evaluation, prediction)
        # return it unchanged and callers keep using the one they passed: never donate.
        self.donates = None if kind == "train_step" else False

    def __repr__(self) -> str:
        return f"<gyre managed {self.kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _places(self, strategy: Strategy) -> bool:  # a mesh with one data shard: left to jax.jit, unlike fit's step
        return strategy.data_size > 1

    def __call__(self, state: Any, batch: Any = None, mask: Any = None) -> tuple[Logs, Any]:
        if mask is not None:
            if not self.takes_mask:
                raise TypeError(_takes_no_mask(self._fn))
            batch = Masked(batch, mask)
        return super().__call__(state, batch)

    def with_nan_policy(self, policy: str) -> ManagedStep:
        """This step as a loop with ``nan_policy=policy`` runs it: under ``"skip"``, a train step
        that drops non-finite updates; else this step.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> from gyre.steps.managed import train_step
            >>> fit = train_step(lambda s, b: (gyre.logs().add_loss("l", jnp.sum(s.params * b)), s))
            >>> fit.nan_policy, fit.with_nan_policy("skip").nan_policy, fit.with_nan_policy("raise") is fit
            (None, 'skip', True)
        """
        if policy != "skip" or self.nan_policy == "skip" or self._make is None:
            return self
        if policy not in self._variants:
            self._variants[policy] = ManagedStep(self._fn, self._make(True), kind=self.kind, nan_policy="skip", make=self._make)
        return self._variants[policy]

    def compiled_count(self) -> int:
        """How many programs this step's compiled functions hold, its skipping form's included (for
        tests).

        Example:
            >>> from gyre.steps.managed import step
            >>> step(lambda s, b: (None, s)).compiled_count()
            0
        """
        own = sum(cache_size(f) for f in self._compiled.values())
        return own + sum(v.compiled_count() for v in self._variants.values())


# -- the train step: the user's function as train_update's objective (the sum of its logged losses) --


def _merge_rows(stacked: Any) -> Any:
    """One metric object from a metric object stacked over microbatches (merged in order)."""
    first = jax.tree_util.tree_map(lambda x: x[0], stacked)
    rest = jax.tree_util.tree_map(lambda x: x[1:], stacked)
    merged, _ = jax.lax.scan(lambda acc, m: (acc.merge(m), None), first, rest)
    return merged


def _mean_logs(stacked: Logs) -> Logs:
    """Microbatch logs: losses and metrics averaged (:class:`gyre.core.metrics.Mean`), metric
    objects merged, everything else from the last microbatch (:class:`~gyre.core.metrics.Last`)."""
    out = Logs()
    for collection, values in stacked.items():
        reduction = metrics.Mean if collection in ("losses", "metrics") else metrics.Last
        for name, value in values.items():
            out.add_entry(collection, name, _merge_rows(value) if _is_metric(value) else
                          jax.tree_util.tree_map(lambda v, r=reduction: r.from_stacked(v).compute(), value))
    return out


def _settle(logs: Any, state: Any, where: str) -> tuple[Logs, Any]:
    """The step's logs as ``Logs``, its metric objects merged into the state's accumulators."""
    logs, state = merge_stateful_metrics(logs, state, where)
    return (logs if isinstance(logs, Logs) else Logs().merge(logs)), state


def _make_train(
    fn: StepFn,
    *,
    accumulate_steps: int,
    clip_grad_norm: float | None,
    policy: MixedPrecision,
    skip: bool = False,
) -> StepFn:
    where = getattr(fn, "__qualname__", "train_step")
    takes_batch = _takes_batch(fn, where)

    def objective(inner: Any, batch: Any) -> tuple[jax.Array, tuple[Any, Any]]:
        logs, new_state = _call(fn, takes_batch, inner, batch, where)
        _check_params(inner.params, getattr(new_state, "params", None), where)
        return total_loss(logs, where), (logs, new_state)

    def reduce(losses: jax.Array, stacked: Logs) -> tuple[jax.Array, Logs]:
        logs = _mean_logs(stacked)
        return total_loss(logs, where), logs

    def train(state: Any, batch: Any) -> tuple[Logs, Any]:
        out = train_update(
            objective, state, batch, accumulate_steps=accumulate_steps, reduce=reduce,
            settle=lambda logs, s: _settle(logs, s, where), clip_grad_norm=clip_grad_norm,
            policy=policy, skip=skip, where=where)
        logs = out.values
        if out.grad_norm is not None:
            logs.add_metric("grad_norm", out.grad_norm)
        if out.skipped is not None:
            logs.add_stateful_metric(SKIPPED_STEPS, out.skipped)
        return logs, out.state

    return train


def _check_nan_policy(nan_policy: Any) -> None:
    """A clear error unless ``nan_policy`` is ``None`` or ``"skip"``."""
    if nan_policy is None or nan_policy == "skip":
        return
    raising = nan_policy in ("raise", "ignore")
    raise ValueError(explain(
        "train_step's nan_policy= must be None or 'skip'",
        expected="None (follow the loop's nan_policy: skip under a loop's 'skip', else apply every update) "
        "or 'skip' (always drop an update whose loss or gradients are not finite, also when called by hand)",
        received=describe(nan_policy),
        fix="pass nan_policy='raise' or 'ignore' to the loop, not to the step (a compiled step "
        "cannot stop the loop without waiting for the device): gyre.train_loop(..., "
        "nan_policy=...)"
        if raising
        else "pass nan_policy='skip', or leave it out"))


def train_step(
    fn: StepFn | None = None,
    *,
    accumulate_steps: int = 1,
    clip_grad_norm: float | None = None,
    policy: str | MixedPrecision | None = None,
    nan_policy: str | None = None,
) -> Any:
    """Makes ``fn(state, batch) -> (logs, state)`` a compiled training step.

    The sum of the losses ``fn`` logs with ``add_loss`` is differentiated with respect to
    ``state.params``; the update is applied and ``state.step`` grows by one.

    Args:
        fn: the step's maths (``@train_step``, or ``@train_step(accumulate_steps=4)``).
        accumulate_steps: microbatches per batch, their gradients averaged in the compiled step
            (each gets ``fold_in(rng, i)``); losses and metrics are averaged.
        clip_grad_norm: clip gradients to this global norm (logs ``grad_norm``).
        policy: mixed precision, e.g. ``"bfloat16"``: ``fn`` sees params and floating batch
            values in bfloat16; the update applies to float32 params.
        nan_policy: ``"skip"``: a NaN or infinite loss or gradient drops the update (the whole
            state kept, ``state.step`` counting applied updates) and grows
            ``state.skipped_steps``, logged as a stateful metric. ``None`` (default): follow the
            loop's ``nan_policy``; by hand, apply every update.

    Example:
        >>> import gyre, jax.numpy as jnp, optax
        >>> @train_step(clip_grad_norm=1.0)
        ... def fit(state, batch):
        ...     return gyre.logs().add_loss("l", jnp.sum((state.params - batch) ** 2)), state
        >>> state = ManagedState.create(params=jnp.zeros(2), tx=optax.sgd(0.1))
        >>> logs, state = fit(state, jnp.ones(2))
        >>> round(float(logs.metrics.grad_norm), 3)
        2.828
    """
    whole(accumulate_steps, "accumulate_steps=", minimum=1, fix="pass a positive int",
          expected="e.g. accumulate_steps=4 to average the gradients of 4 microbatches")
    real(clip_grad_norm, "clip_grad_norm=", above=0, none=True, problem="clip_grad_norm= must be a positive number "
         "or None", expected="e.g. clip_grad_norm=1.0", fix="pass a positive float, or None for no clipping")
    _check_nan_policy(nan_policy)
    chosen = get_policy(policy)

    def wrap(f: StepFn) -> ManagedStep:
        def make(skip: bool) -> StepFn:
            return _make_train(
                f, accumulate_steps=accumulate_steps, clip_grad_norm=clip_grad_norm, policy=chosen, skip=skip)

        return ManagedStep(f, make(nan_policy == "skip"), kind="train_step", nan_policy=nan_policy, make=make)

    return wrap if fn is None else wrap(fn)


def step(fn: StepFn | None = None, *, policy: str | MixedPrecision | None = None) -> Any:
    """Makes ``fn(state, batch) -> (logs, state)`` (or ``fn(state) -> state``) a compiled step
    without gradients; ``mask`` as in the module docs.

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> @step
        ... def evaluate(state, batch):
        ...     return gyre.logs().add_metric("mean", batch.mean()), state
        >>> logs, _ = evaluate(ManagedState.create(params=()), jnp.arange(4.0))
        >>> float(logs.metrics.mean)
        1.5
    """
    chosen = get_policy(policy)

    def wrap(f: StepFn) -> ManagedStep:
        where = getattr(f, "__qualname__", "step")
        takes_batch = _takes_batch(f, where)

        def pure(state: Any, batch: Any) -> tuple[Logs, Any]:
            inner = state.replace(params=chosen.cast_to_compute(state.params)) if chosen.casts else state
            logs, new_state = _call(f, takes_batch, inner, chosen.cast_to_compute(batch), where)
            if chosen.casts:
                _check_params(inner.params, getattr(new_state, "params", None), where)
                new_state = new_state.replace(params=state.params)
            return _settle(logs, new_state, where)

        return ManagedStep(f, pure, kind="step")

    return wrap if fn is None else wrap(fn)
