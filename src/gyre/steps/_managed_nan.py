"""Non-finite updates in a managed train step: ``nan_policy="skip"``, inside the compiled step.

Part of :mod:`gyre.steps.managed`: an update whose loss or gradients are NaN or infinite is
dropped (the whole state is kept as it was) and counted in the state's ``skipped_steps``,
logged as the stateful metric ``skipped_steps``; no host sync.

Example:
    >>> _check_nan_policy("skip")  # None or "skip"; anything else is a clear error
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.engine._nan import SKIPPED_STEPS
from gyre.steps._managed_call import _shapes


def _skip_counter(state: Any, where: str) -> tuple[Any, Callable[[Any, Any], Any]]:
    """The state's count of skipped steps and how to replace it (a field, or an extra)."""
    fields = getattr(type(state), "__dataclass_fields__", {})
    if SKIPPED_STEPS in fields:
        return getattr(state, SKIPPED_STEPS), lambda s, count: s.replace(**{SKIPPED_STEPS: count})
    extras = getattr(state, "extras", None) if "extras" in fields else None
    if isinstance(extras, Mapping) and SKIPPED_STEPS in extras:
        return extras[SKIPPED_STEPS], lambda s, count: s.replace(extras={**s.extras, SKIPPED_STEPS: count})
    raise TypeError(
        explain(
            f"{where} skips non-finite updates (nan_policy='skip'), but its state has no "
            "skipped_steps to count them in",
            expected="a gyre.managed.ManagedState (its field skipped_steps starts at 0), or a "
            "state with a skipped_steps field or extra",
            received=f"a {type(state).__name__} with fields {sorted(f for f in fields if f != 'extras')}"
            + (f" and extras {sorted(extras)}" if isinstance(extras, Mapping) else ""),
            fix="create the state with gyre.managed.ManagedState.create(...); or "
            "TrainState.create(..., skipped_steps=jnp.zeros((), jnp.int32)), which keeps it in "
            "extras; or declare `skipped_steps: jax.Array` in your state class",
        )
    )


def _all_finite(tree: Any) -> jax.Array:
    """Whether every floating value of ``tree`` is finite (a boolean scalar on the device)."""
    ok = jnp.array(True)
    for leaf in jax.tree_util.tree_leaves(tree):
        if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            ok = ok & jnp.all(jnp.isfinite(leaf))
    return ok


def _keep(ok: jax.Array, new: Any, old: Any) -> Any:
    if new is old:  # unchanged by the step (the rng, a counter): nothing to choose
        return new
    kept = jnp.where(ok, new, old)
    return kept if kept.dtype == jnp.result_type(new) else kept.astype(jnp.result_type(new))


def skip_non_finite(before: Any, after: Any, loss: Any, grads: Any, logs: Logs, where: str = "train_step") -> Any:
    """``after`` when ``loss`` and ``grads`` are finite, else ``before`` (every leaf: params,
    optimizer state, ``step``, model state, metric accumulators), with the state's
    ``skipped_steps`` grown by one; logs the count as the stateful metric ``skipped_steps``.
    Runs inside the compiled step: no host sync.

    Example:
        >>> import jax.numpy as jnp
        >>> from gyre.steps.managed import ManagedState
        >>> before = ManagedState.create(params=jnp.ones(2))
        >>> after = before.replace(params=jnp.full(2, jnp.nan), step=before.step + 1)
        >>> logs = Logs()
        >>> kept = skip_non_finite(before, after, jnp.float32(jnp.nan), after.params, logs)
        >>> kept.params.tolist(), int(kept.step), int(kept.skipped_steps), int(logs.stateful_metrics.skipped_steps)
        ([1.0, 1.0], 0, 1, 1)
    """
    count, put = _skip_counter(before, where)
    if jax.tree_util.tree_structure(before) != jax.tree_util.tree_structure(after):
        raise ValueError(
            explain(
                f"{where} skips non-finite updates, and returned a state of another structure "
                "than it received, so the previous one cannot be kept",
                expected=f"a state structured like the one it received: {_shapes(before)}",
                received=_shapes(after),
                fix="return the state you received, changing only the values of its fields "
                "(state.replace(...)); create every field and extra before the loop",
            )
        )
    ok = jnp.isfinite(jnp.asarray(loss)) & _all_finite(grads)
    kept = jax.tree_util.tree_map(lambda new, old: _keep(ok, new, old), after, before)
    count = jnp.asarray(count) + jnp.where(ok, 0, 1).astype(jnp.result_type(count))
    logs.add_stateful_metric(SKIPPED_STEPS, count)
    return put(kept, count)


def _check_nan_policy(nan_policy: Any) -> None:
    if nan_policy is None or nan_policy == "skip":
        return
    raising = nan_policy in ("raise", "ignore")
    raise ValueError(
        explain(
            "train_step's nan_policy= must be None or 'skip'",
            expected="None (follow the loop's nan_policy: skip under a loop's 'skip', else apply "
            "every update) or 'skip' (always drop an update whose loss or gradients are not "
            "finite, also when called by hand)",
            received=describe(nan_policy),
            fix="pass nan_policy='raise' or 'ignore' to the loop, not to the step (a compiled step "
            "cannot stop the loop without waiting for the device): gyre.train_loop(..., "
            "nan_policy=...)"
            if raising
            else "pass nan_policy='skip', or leave it out",
        )
    )
