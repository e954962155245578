"""Calling the user's managed step function, and checking what it takes, returns and logs."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.data._padding import accepts_mask
from gyre.engine._binding import Masked

StepFn = Callable[[Any, Any], tuple[Logs, Any]]


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


def _shapes(tree: Any, limit: int = 300) -> str:
    text = str(jax.tree_util.tree_map(lambda x: f"{jnp.result_type(x)}{list(jnp.shape(x))}", tree))
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
