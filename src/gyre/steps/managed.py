"""The managed API: write the maths of a step, gyre compiles, differentiates and shards it.

``ManagedState`` is a :class:`~gyre.TrainState` that carries a strategy. ``train_step``
turns ``(state, batch) -> (logs, state)`` into a full training step: it differentiates the
sum of the losses the function logged with ``add_loss`` with respect to ``state.params``,
applies the optimizer, and compiles the whole for the state's strategy (donating the state).
``step`` compiles without gradients (evaluation, prediction).

The function may take ``(state, batch)`` or just ``(state)``, and return ``(logs, state)``
(``None`` for either means "none" / "unchanged"), the logs alone or the state alone.

A function that also takes ``mask`` (``def test_step(state, batch, mask=None)``) gets the
mask of a padded batch: ``step(state, batch, mask=mask)`` by hand, or in an evaluation
(``gyre.test_loop``, ``train_loop``'s ``test_dataset``), which then pads its last, smaller
batch to the batch size, so the step compiles once. ``mask`` is a boolean vector over the
batch (``True`` for the real rows); the function computes its means over the real rows
(``jnp.sum(x * mask) / jnp.sum(mask)``) and passes ``mask=`` to the metric objects it logs
(``clu.metrics.Accuracy.from_model_output(..., mask=mask)``). Without a padded batch it gets
its default.
Metric objects logged as stateful metrics (``logs.add_stateful_metric("accuracy",
clu.metrics.Accuracy.from_model_output(...))``, or any object with ``merge`` and
``compute``) are merged into the state's accumulator of the same name (a field or extra
``state.accuracy``), which is replaced, and logged as its ``compute()`` (a dict adds one entry
per key), as ciclo's managed API does, on the device.

Non-finite updates: ``train_step(nan_policy="skip")``, or a loop run with
``nan_policy="skip"``, drops an update whose loss or gradients are NaN or infinite inside the
compiled step (the whole state is kept as it was, ``state.step`` included: it counts the
updates applied) and adds one to ``state.skipped_steps``, logged as the stateful metric
``skipped_steps``.

Example:
    >>> import gyre, jax.numpy as jnp, optax
    >>> from gyre import managed
    >>> @managed.train_step
    ... def train_step(state, batch):
    ...     x, y = batch
    ...     loss = jnp.mean((x * state.params["w"] - y) ** 2)
    ...     return gyre.logs().add_loss("mse", loss), state
    >>> state = managed.ManagedState.create(params={"w": jnp.float32(0.0)}, tx=optax.sgd(0.1))
    >>> batch = (jnp.ones(8), 2 * jnp.ones(8))
    >>> for _ in range(50):
    ...     logs, state = train_step(state, batch)
    >>> round(float(state.params["w"]), 3), int(state.step)
    (2.0, 50)
"""

from __future__ import annotations

from typing import Any

from gyre.core._checks import whole
from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.steps._managed_call import StepFn as StepFn
from gyre.steps._managed_call import _call, _check_params, _takes_batch
from gyre.steps._managed_call import check_floating_loss as check_floating_loss
from gyre.steps._managed_call import total_loss as total_loss
from gyre.steps._managed_metrics import merge_stateful_metrics as merge_stateful_metrics
from gyre.steps._managed_state import ManagedState as ManagedState
from gyre.steps._managed_step import ManagedStep as ManagedStep
from gyre.steps._managed_train import _check_nan_policy, _make_train, _settle
from gyre.steps._precision import MixedPrecision, get_policy
from gyre.steps._update import skip_non_finite as skip_non_finite


def _check_options(accumulate_steps: Any, clip_grad_norm: Any) -> None:
    whole(accumulate_steps, "accumulate_steps=", minimum=1, fix="pass a positive int",
          expected="e.g. accumulate_steps=4 to average the gradients of 4 microbatches")
    if clip_grad_norm is not None and not (isinstance(clip_grad_norm, (int, float)) and clip_grad_norm > 0):
        raise ValueError(explain(
            "clip_grad_norm= must be a positive number or None",
            expected="e.g. clip_grad_norm=1.0", received=describe(clip_grad_norm),
            fix="pass a positive float, or None for no clipping"))


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
    ``state.params``; the optimizer update is applied and ``state.step`` grows by one.

    Args:
        fn: the step's maths (usable bare, ``@train_step``, or with options,
            ``@train_step(accumulate_steps=4)``).
        accumulate_steps: split each batch into this many microbatches and average their
            gradients inside the compiled step (a ``lax.scan``; each microbatch gets its
            own rng, ``fold_in(rng, i)``); losses and metrics are averaged.
        clip_grad_norm: clip gradients to this global norm (logs ``grad_norm``).
        policy: mixed precision, e.g. ``"bfloat16"``: ``fn`` sees params and floating batch
            values in bfloat16, the update is applied to float32 params.
        nan_policy: ``"skip"``: when the summed loss or a gradient is NaN or infinite, the
            update is dropped inside the compiled step (the whole state is kept as it was;
            ``state.step`` counts applied updates) and ``state.skipped_steps`` grows by one,
            logged as the stateful metric ``skipped_steps``. ``None`` (default): follow the
            loop (skip under a loop's ``nan_policy="skip"``; by hand, apply every update).

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
    _check_options(accumulate_steps, clip_grad_norm)
    _check_nan_policy(nan_policy)
    chosen = get_policy(policy)

    def wrap(f: StepFn) -> ManagedStep:
        def make(skip: bool) -> StepFn:
            return _make_train(
                f, accumulate_steps=accumulate_steps, clip_grad_norm=clip_grad_norm, policy=chosen, skip=skip
            )

        return ManagedStep(f, make(nan_policy == "skip"), kind="train_step", nan_policy=nan_policy, make=make)

    return wrap if fn is None else wrap(fn)


def step(fn: StepFn | None = None, *, policy: str | MixedPrecision | None = None) -> Any:
    """Makes ``fn(state, batch) -> (logs, state)`` (or ``fn(state) -> state``) a compiled step
    without gradients.

    A function that takes ``mask`` gets the mask of a padded batch (see the module docs): in
    an evaluation loop the last, smaller batch is padded and the step compiles once.

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> @step
        ... def evaluate(state, batch):
        ...     return gyre.logs().add_metric("mean", batch.mean()), state
        >>> logs, _ = evaluate(ManagedState.create(params=()), jnp.arange(4.0))
        >>> float(logs.metrics.mean)
        1.5
        >>> @step
        ... def masked_mean(state, batch, mask=None):
        ...     return gyre.logs().add_metric("mean", jnp.sum(batch * mask) / jnp.sum(mask)), state
        >>> logs, _ = masked_mean(ManagedState.create(params=()), jnp.array([1.0, 2.0, 2.0]),
        ...                       mask=jnp.array([True, True, False]))
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
