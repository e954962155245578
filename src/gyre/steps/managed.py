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

from typing import Any

import jax

from gyre.core import metrics
from gyre.core._checks import real, whole
from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.engine._nan import SKIPPED_STEPS
from gyre.steps._managed_call import StepFn as StepFn
from gyre.steps._managed_call import _call, _check_params, _takes_batch
from gyre.steps._managed_call import check_floating_loss as check_floating_loss
from gyre.steps._managed_call import total_loss as total_loss
from gyre.steps._managed_metrics import _is_metric
from gyre.steps._managed_metrics import merge_stateful_metrics as merge_stateful_metrics
from gyre.steps._managed_state import ManagedState as ManagedState
from gyre.steps._managed_step import ManagedStep as ManagedStep
from gyre.steps._precision import MixedPrecision, get_policy
from gyre.steps._update import skip_non_finite as skip_non_finite
from gyre.steps._update import train_update

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
