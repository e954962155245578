"""Fusing a step: K steps in one ``lax.scan`` over K stacked batches (see :func:`fuse`)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax

from gyre.core import _compat
from gyre.core._checks import whole
from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.engine._binding import Invoker, StateMethod, bind, callback_name
from gyre.engine._loop_state import fold

FusedStep = Callable[[Any, Any], tuple[Logs, Any]]
"""``fused(state, stacked_batch) -> (stacked_logs, state)``: K steps in one call."""


@runtime_checkable
class FusableStep(Protocol):
    """A step that can compile K of itself into one call.

    ``fuse(steps)`` returns ``fused(state, stacked_batch) -> (stacked_logs, state)``: batch leaves
    and log values have a leading axis of ``steps``; the state is donated.
    """

    def fuse(self, steps: int) -> FusedStep:  # pragma: no cover - protocol
        ...


def check_steps(steps: Any, name: str = "steps") -> int:
    """Validates a number of fused steps (an integral number >= 1); returns it as an int."""
    return whole(steps, name, minimum=1, unit="steps", fix=f"pass a positive int, e.g. {name}=100",
                 expected=f"{name}=100 (fuse 100 steps per call), or 1 to run step by step")


def step_function(fn: Any) -> Any:
    """What is fused for a callback: the method of a :class:`StateMethod`, else the callback."""
    return fn.method if isinstance(fn, StateMethod) else fn


def is_fusable(fn: Any) -> bool:
    """True when :func:`fuse` accepts ``fn``: a ``jax.jit`` function or a :class:`FusableStep`."""
    fn = step_function(fn)
    return _compat.is_jitted(fn) or callable(getattr(fn, "fuse", None))


#: Steps per iteration of a fused ``lax.scan``: with one, a step that updates a weight before its
#: last read makes XLA copy the loop carry every iteration (``benchmarks/fused_steps.py``).
UNROLL = 2


def scan_steps(
    body: Callable[[Any, Any], tuple[Any, Any]], state: Any, batches: Any, length: int | None = None
) -> tuple[Any, Any]:
    """``jax.lax.scan(body, state, batches)`` unrolled :data:`UNROLL` steps per iteration."""
    try:
        return jax.lax.scan(body, state, batches, length=length, unroll=UNROLL)
    except TypeError as err:
        if "carry input and carry output must have" not in str(err):  # (equal types, the same tree)
            raise
        lines = [line.strip() for line in str(err).splitlines() if line.strip().startswith("The input carry")]
        raise TypeError(explain(
            "a fused step returned its state with other types than it received",
            expected="a step whose returned state has the dtypes, shapes and tree of the state it "
            "receives (fused steps pass the state from one step to the next inside one lax.scan)",
            received=lines[0] if lines else str(err).splitlines()[0],
            fix="give the initial state the types and tree the step returns (e.g. jnp.float32(0), not "
            "an int that a float update promotes; not None for a state the first step makes), or "
            "cast in the step; or run with steps_per_call=1")) from err


def scanned(step: Callable[[Any, Any], tuple[Any, Any]]) -> Callable[[Any, Any], tuple[Any, Any]]:
    """``(state, batches) -> (logs, state)``: ``step`` on each row, its logs stacked."""

    def scan(state: Any, batches: Any) -> tuple[Any, Any]:
        def body(carry: Any, batch: Any) -> tuple[Any, Any]:
            logs, carry = step(carry, batch)
            return carry, logs

        state, logs = scan_steps(body, state, batches)
        return logs, state

    return scan


class _NotInFusedStep:
    """Stands for ``elapsed``/``logs``/``loop`` inside a fused step; reading it raises."""

    def __init__(self, arg: str, step: str) -> None:
        self._arg = arg
        self._step = step

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # protocol probes (copy, pickle, jax): not a read
            raise AttributeError(attr)
        raise TypeError(explain(
            f"the fused step {self._step} reads {self._arg}.{attr}",
            expected=f"a step of (state, batch) only: inside one lax.scan there is no per-step {self._arg}",
            received=f"a step that uses its {self._arg!r} parameter",
            fix="keep the step counter in the state (state.step) and log by returning "
            "(logs, state); or run with steps_per_call=1"))


jax.tree_util.register_pytree_node(
    _NotInFusedStep,
    lambda x: ((), (x._arg, x._step)),
    lambda aux, _: _NotInFusedStep(*aux),
)


def step_body(invoker: Invoker) -> Callable[[Any, Any], tuple[Any, Logs]]:
    """``body(state, batch) -> (state, logs)``: one call of the callback, its return folded."""
    missing = [_NotInFusedStep(a, invoker.name) for a in ("elapsed", "logs", "loop")]

    def body(state: Any, batch: Any) -> tuple[Any, Logs]:
        logs = Logs()
        out = invoker.call(state, batch, *missing)
        if out is not None:
            state = fold(out, logs, state, invoker)
        return state, logs

    return body


def _scan_of(invoker: Invoker, steps: int) -> FusedStep:
    """``steps`` calls of the callback in one scan; its return folded as in the loop."""
    body = step_body(invoker)

    def fused(state: Any, batches: Any) -> tuple[Logs, Any]:
        state, logs = scan_steps(body, state, batches, length=steps)
        return logs, state

    fused.__name__ = fused.__qualname__ = f"fused_{steps}_{invoker.name.split('.')[-1]}"
    return fused


_FUSED: weakref.WeakKeyDictionary[Any, dict[int, FusedStep]] = weakref.WeakKeyDictionary()
#: The invoker the cached scans of a jitted step fold its returns with, when traced: whether
#: the step returned a state is known there, whichever loop's invoker asks later.
TRACING: weakref.WeakKeyDictionary[Any, Invoker] = weakref.WeakKeyDictionary()


def _fuse_jitted(invoker: Invoker, jitted: Any, steps: int) -> FusedStep:
    try:
        by_length = _FUSED.setdefault(jitted, {})
        tracing = TRACING.setdefault(jitted, invoker)
    except TypeError:  # not weakly referenceable: no cache
        by_length, tracing = {}, invoker
    fused = by_length.get(steps)
    if fused is None:
        donated = _compat.donated_argnums(jitted)
        donate = (0,) if donated is None or 0 in donated else ()
        fused = by_length[steps] = jax.jit(_scan_of(tracing, steps), donate_argnums=donate)
    return fused


def returned_state(invoker: Invoker) -> bool:
    """Whether a fused step has returned a state (recorded when its scans were traced)."""
    fn = step_function(invoker.fn)
    if invoker.returned_state or not _compat.is_jitted(fn):
        return True
    try:
        tracing = TRACING.get(fn)
    except TypeError:  # not weakly referenceable: never cached, traced with this invoker
        return False
    return tracing is not None and tracing.returned_state


def fuse(step: Any, steps: int) -> FusedStep:
    """K steps in one call: ``fused(state, stacked_batch) -> (stacked_logs, state)``.

    Batch leaves carry a leading axis of ``steps``, the logs one row per step. A ``jax.jit``
    function runs inside one ``lax.scan`` with its own jit options (compiled once per ``steps``);
    a :class:`FusableStep` fuses itself.

    Args:
        step: a ``jax.jit``-wrapped ``(state, batch) -> (logs, state)`` (or a bound callback of
            one, or a state's method), or an object with a ``fuse(steps)`` method.
        steps: steps per call.

    Example:
        >>> import gyre, jax, numpy as np
        >>> @jax.jit
        ... def step(state, batch):
        ...     state = state + batch
        ...     return gyre.logs().add_metric("total", state), state
        >>> fused = gyre.fuse(step, 3)
        >>> logs, state = fused(np.float32(0), np.array([1.0, 2.0, 3.0], np.float32))
        >>> float(state), logs.metrics.total.tolist()
        (6.0, [1.0, 3.0, 6.0])
    """
    steps = check_steps(steps)
    invoker = bind(step)
    fn = step_function(invoker.fn)
    if _compat.is_jitted(fn):
        return _fuse_jitted(invoker, fn, steps)
    method = getattr(fn, "fuse", None)
    if callable(method):
        fused = method(steps)
        if not callable(fused):
            raise TypeError(explain(
                f"{callback_name(fn)}.fuse({steps}) did not return a function",
                expected="fuse(steps) -> fused(state, stacked_batch) -> (stacked_logs, state)",
                received=describe(fused), fix="return the compiled function from fuse()"))
        return fused
    raise TypeError(explain(
        f"cannot fuse {callback_name(fn)}: it is not a compiled step",
        expected="a jax.jit-wrapped step (state, batch) -> (logs, state), or a managed step "
        "with a fuse(steps) method (gyre.FusableStep)",
        received=describe(fn) + (" (a plain Python function)" if callable(fn) else ""),
        fix="compile it: step = jax.jit(step, donate_argnums=0); or run step by step with steps_per_call=1"))
