"""The pure function of a managed train step: gradients of the logged losses, microbatch
accumulation, clipping, mixed precision, the optimizer update and skipping non-finite ones.

Part of :mod:`gyre.steps.managed` (``train_step`` compiles what :func:`_make_train` builds).

Example:
    >>> import jax.numpy as jnp
    >>> _split_micro(jnp.arange(6.0), 3).shape
    (3, 2)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from gyre.core import metrics
from gyre.core._errors import explain
from gyre.core._logs import Logs
from gyre.steps._managed_call import StepFn, _call, _check_params, _takes_batch, total_loss
from gyre.steps._managed_metrics import _is_metric, merge_stateful_metrics
from gyre.steps._managed_nan import skip_non_finite
from gyre.steps._precision import MixedPrecision


def _split_micro(batch: Any, k: int) -> Any:
    def split(x: Any) -> Any:
        x = jnp.asarray(x)
        if x.ndim == 0 or x.shape[0] % k != 0:
            raise ValueError(
                explain(
                    f"a batch of {x.shape[0] if x.ndim else 'a scalar'} cannot be split into "
                    f"{k} microbatches",
                    expected=f"every batch leaf with a leading dimension divisible by accumulate_steps={k}",
                    received=f"a leaf of shape {x.shape}",
                    fix="use a batch size that is a multiple of accumulate_steps",
                )
            )
        return x.reshape((k, x.shape[0] // k, *x.shape[1:]))

    return jax.tree_util.tree_map(split, batch)


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
            if _is_metric(value):
                out.add_entry(collection, name, _merge_rows(value))
            else:
                out.add_entry(
                    collection, name, jax.tree_util.tree_map(lambda v, r=reduction: r.from_stacked(v).compute(), value)
                )
    return out


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

    def grads_of(state: Any, batch: Any) -> tuple[Any, Any, Any]:
        def loss_fn(params: Any) -> tuple[jax.Array, tuple[Any, Any]]:
            inner = state.replace(params=policy.cast_to_compute(params))
            logs, new_state = _call(fn, takes_batch, inner, policy.cast_to_compute(batch), where)
            _check_params(inner.params, getattr(new_state, "params", None), where)
            return total_loss(logs, where), (logs, new_state)

        (_, (logs, new_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return grads, logs, new_state

    def train(state: Any, batch: Any) -> tuple[Logs, Any]:
        if accumulate_steps == 1:
            grads, logs, new_state = grads_of(state, batch)
        else:
            micro = _split_micro(batch, accumulate_steps)
            zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)

            # The state each microbatch returns (model_state, extras, metric states...) is
            # carried to the next one; params and rng stay those of the step.
            def body(carry: tuple[Any, Any], xs: tuple[jax.Array, Any]) -> tuple[tuple[Any, Any], Any]:
                acc, current = carry
                i, mb = xs
                grads, logs, new_state = grads_of(current.replace(rng=jax.random.fold_in(state.rng, i)), mb)
                acc = jax.tree_util.tree_map(jnp.add, acc, grads)
                return (acc, new_state.replace(params=current.params, rng=current.rng)), logs

            index = jnp.arange(accumulate_steps)
            (acc, new_state), stacked = jax.lax.scan(body, (zeros, state), (index, micro))
            grads = jax.tree_util.tree_map(lambda g: g / accumulate_steps, acc)
            logs = _mean_logs(stacked)
        logs, new_state = merge_stateful_metrics(logs, new_state, where)
        if not isinstance(logs, Logs):
            logs = Logs().merge(logs)
        if clip_grad_norm is not None:
            norm = optax.global_norm(grads)
            scale = jnp.minimum(1.0, clip_grad_norm / (norm + 1e-6))
            grads = jax.tree_util.tree_map(lambda g: g * scale.astype(g.dtype), grads)
            logs.add_metric("grad_norm", norm)
        # The function saw compute-dtype params; the update applies to the float32 ones.
        new_state = new_state.replace(params=state.params, rng=state.rng)
        updated = new_state.apply_gradients(grads=grads)
        if skip:
            updated = skip_non_finite(state, updated, total_loss(logs, where), grads, logs, where)
        return logs, updated

    return train
