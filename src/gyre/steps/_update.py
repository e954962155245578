"""The one train-step builder: gradients, microbatch accumulation, mixed precision, clipping, the
optax update and skipping non-finite updates.

The managed step, the trainer's step and :func:`gyre.fit`'s step are vocabularies over
:func:`train_update`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from gyre.core._errors import explain
from gyre.core._logs import Logs
from gyre.engine._nan import SKIPPED_STEPS
from gyre.steps._precision import MixedPrecision


def _shapes(tree: Any, limit: int = 300) -> str:
    text = str(jax.tree_util.tree_map(lambda x: f"{jnp.result_type(x)}{list(jnp.shape(x))}", tree))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Update(NamedTuple):
    """What :func:`train_update` returns: loss, values, averaged unclipped gradients, the new state,
    the gradients' norm and the skipped count."""

    loss: jax.Array
    values: Any
    grads: Any
    state: Any
    grad_norm: Any = None
    skipped: Any = None


def _mean(losses: jax.Array, values: Any) -> tuple[jax.Array, Any]:
    """Microbatch losses and values, averaged."""
    return jnp.mean(losses), jax.tree_util.tree_map(lambda v: jnp.mean(v, axis=0), values)


def train_update(
    objective: Callable[[Any, Any], tuple[jax.Array, tuple[Any, Any]]],
    state: Any,
    batch: Any,
    *,
    accumulate_steps: int = 1,
    reduce: Callable[[jax.Array, Any], tuple[jax.Array, Any]] = _mean,
    settle: Callable[[Any, Any], tuple[Any, Any]] | None = None,
    clip_grad_norm: float | None = None,
    policy: MixedPrecision | None = None,
    skip: bool = False,
    apply: Callable[[Any, Any], Any] | None = None,
    where: str = "train_step",
) -> Update:
    """One differentiate-and-update step, traced inside the caller's compiled step.

    ``objective(state, batch) -> (loss, (values, state))`` gets the params being differentiated
    (in the policy's compute dtype, as is ``batch``); the params and rng of the state it returns
    are dropped. Its key is ``fold_in(state.rng, state.step)``.

    Args:
        accumulate_steps: microbatches in a ``lax.scan`` (each gets ``fold_in(rng, i)`` and the
            previous one's state); gradients are averaged, ``reduce(losses, values)`` combines
            the rest (default: means).
        settle: ``(values, state) -> (values, state)`` before the update (undone with it).
        skip: keep the whole state on a non-finite loss or gradient, counting it in
            ``skipped_steps``.
        apply: ``(state, grads) -> state`` (default ``state.apply_gradients``).
        where: the step's name in error messages.
    """
    policy = policy or MixedPrecision()

    def grads_of(current: Any, batch: Any) -> tuple[Any, Any, Any, Any]:
        def loss_fn(params: Any) -> tuple[jax.Array, tuple[Any, Any]]:
            return objective(current.replace(params=policy.cast_to_compute(params)), policy.cast_to_compute(batch))

        (loss, (values, after)), grads = jax.value_and_grad(loss_fn, has_aux=True)(current.params)
        return loss, values, grads, after

    if accumulate_steps == 1:
        loss, values, grads, after = grads_of(state, batch)
    else:
        # The state each microbatch leaves (model_state, extras, metric states...) is carried
        # to the next one; params and rng stay those of the step.
        def body(carry: tuple[Any, Any], xs: tuple[jax.Array, Any]) -> tuple[tuple[Any, Any], Any]:
            acc, current = carry
            i, mb = xs
            loss, values, grads, after = grads_of(current.replace(rng=jax.random.fold_in(state.rng, i)), mb)
            acc = jax.tree_util.tree_map(jnp.add, acc, grads)
            return (acc, after.replace(params=current.params, rng=current.rng)), (loss, values)

        zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
        index = jnp.arange(accumulate_steps)
        (acc, after), stacked = jax.lax.scan(body, (zeros, state), (index, _split_micro(batch, accumulate_steps)))
        grads = jax.tree_util.tree_map(lambda g: g / accumulate_steps, acc)
        loss, values = reduce(*stacked)
    if settle is not None:
        values, after = settle(values, after)
    applied, norm = grads, None
    if clip_grad_norm is not None:
        norm = optax.global_norm(grads)
        scale = jnp.minimum(1.0, clip_grad_norm / (norm + 1e-6))
        applied = jax.tree_util.tree_map(lambda g: g * scale.astype(g.dtype), grads)
    # The objective saw compute-dtype params; the update applies to the float32 ones.
    after = after.replace(params=state.params, rng=state.rng)
    updated = after.apply_gradients(grads=applied) if apply is None else apply(after, applied)
    if not skip:
        return Update(loss, values, grads, updated, norm)
    updated = skip_non_finite(state, updated, loss, applied, None, where)
    return Update(loss, values, grads, updated, norm, _skip_counter(updated, where)[0])


def _split_micro(batch: Any, k: int) -> Any:
    """``batch`` with each leaf split into ``k`` microbatches along a new leading axis."""

    def split(x: Any) -> Any:
        x = jnp.asarray(x)
        if x.ndim == 0 or x.shape[0] % k != 0:
            raise ValueError(explain(
                f"a batch of {x.shape[0] if x.ndim else 'a scalar'} cannot be split into {k} microbatches",
                expected=f"every batch leaf with a leading dimension divisible by accumulate_steps={k}",
                received=f"a leaf of shape {x.shape}",
                fix="use a batch size that is a multiple of accumulate_steps"))
        return x.reshape((k, x.shape[0] // k, *x.shape[1:]))

    return jax.tree_util.tree_map(split, batch)


# -- skipping non-finite updates ------------------------------------------------------------------


def state_slot(state: Any, name: str) -> tuple[Any, Callable[[Any, Any], Any]] | None:
    """The state's field or extra ``name`` and how to replace it, else ``None``."""
    fields = getattr(type(state), "__dataclass_fields__", {})
    if name in fields and name != "extras":
        return getattr(state, name), lambda s, value: s.replace(**{name: value})
    extras = getattr(state, "extras", None) if "extras" in fields else None
    if isinstance(extras, Mapping) and name in extras:
        return extras[name], lambda s, value: s.replace(extras={**s.extras, name: value})
    return None


def _skip_counter(state: Any, where: str) -> tuple[Any, Callable[[Any, Any], Any]]:
    """The state's count of skipped steps and how to replace it (a field, or an extra)."""
    slot = state_slot(state, SKIPPED_STEPS)
    if slot is not None:
        return slot
    fields = getattr(type(state), "__dataclass_fields__", {})
    extras = getattr(state, "extras", None) if "extras" in fields else None
    raise TypeError(explain(
        f"{where} skips non-finite updates (nan_policy='skip'), but its state has no "
        "skipped_steps to count them in",
        expected="a gyre.managed.ManagedState (its field skipped_steps starts at 0), or a "
        "state with a skipped_steps field or extra",
        received=f"a {type(state).__name__} with fields {sorted(f for f in fields if f != 'extras')}"
        + (f" and extras {sorted(extras)}" if isinstance(extras, Mapping) else ""),
        fix="create the state with gyre.managed.ManagedState.create(...); or "
        "TrainState.create(..., skipped_steps=jnp.zeros((), jnp.int32)), which keeps it in "
        "extras; or declare `skipped_steps: jax.Array` in your state class"))


def _all_finite(tree: Any) -> jax.Array:
    """Whether every floating value of ``tree`` is finite (a boolean scalar on the device)."""
    ok = jnp.array(True)
    for leaf in jax.tree_util.tree_leaves(tree):
        if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            ok = ok & jnp.all(jnp.isfinite(leaf))
    return ok


def _keep(ok: jax.Array, new: Any, old: Any) -> Any:
    """``new`` where ``ok``, else ``old``, in ``new``'s dtype."""
    if new is old:  # unchanged by the step (the rng, a counter): nothing to choose
        return new
    kept = jnp.where(ok, new, old)
    return kept if kept.dtype == jnp.result_type(new) else kept.astype(jnp.result_type(new))


def skip_non_finite(
    before: Any, after: Any, loss: Any, grads: Any, logs: Logs | None, where: str = "train_step"
) -> Any:
    """``after`` when ``loss`` and ``grads`` are finite, else ``before`` with ``skipped_steps``
    grown by one (logged as a stateful metric unless ``logs`` is ``None``)."""
    count, put = _skip_counter(before, where)
    if jax.tree_util.tree_structure(before) != jax.tree_util.tree_structure(after):
        raise ValueError(explain(
            f"{where} skips non-finite updates, and returned a state of another structure "
            "than it received, so the previous one cannot be kept",
            expected=f"a state structured like the one it received: {_shapes(before)}",
            received=_shapes(after),
            fix="return the state you received, changing only the values of its fields "
            "(state.replace(...)); create every field and extra before the loop"))
    ok = jnp.isfinite(jnp.asarray(loss)) & _all_finite(grads)
    kept = jax.tree_util.tree_map(lambda new, old: _keep(ok, new, old), after, before)
    count = jnp.asarray(count) + jnp.where(ok, 0, 1).astype(jnp.result_type(count))
    if logs is not None:
        logs.add_stateful_metric(SKIPPED_STEPS, count)
    return put(kept, count)
