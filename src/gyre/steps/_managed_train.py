"""The managed train step: the user's function as the objective of
:func:`~gyre.steps._update.train_update` (the sum of its logged losses)."""

from __future__ import annotations

from typing import Any

import jax

from gyre.core import metrics
from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.engine._nan import SKIPPED_STEPS
from gyre.steps._managed_call import StepFn, _call, _check_params, _takes_batch, total_loss
from gyre.steps._managed_metrics import _is_metric, merge_stateful_metrics
from gyre.steps._precision import MixedPrecision
from gyre.steps._update import train_update


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
