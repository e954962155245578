"""Fused execution: ``steps_per_call=K`` runs K steps in one ``lax.scan`` over K stacked batches.

A step can be fused when it is compiled: a ``jax.jit``-wrapped function (gyre scans its
undecorated function and compiles that once per chunk length), or an object with a method
``fuse(steps)`` (:class:`FusableStep`, what managed steps provide). :func:`fuse` turns either
into ``fused(state, stacked_batch) -> (stacked_logs, state)``.

How a loop runs with ``steps_per_call=K``:

* It pulls up to K batches (never one past ``stop``, never across the end of an epoch, so an
  evaluation at an epoch end happens after the right step), stacks them (``numpy.stack`` for
  host batches, one jitted stack for device batches) and calls the fused step once. A last,
  shorter chunk of k steps runs a fused step compiled for k.
* The history gets one record per step, with the clock each step would have seen step by
  step (steps, samples, epochs, step in epoch); the stacked logs are split into rows on the
  host when they are moved there (:meth:`gyre.History.commit_stacked`).
* The step is the compiled callback under ``every(1)``/``always()`` in :func:`gyre.loop`, or
  the ``on_train_step``/``on_test_step``/``on_predict_step`` callback in the named loops.
  Every other callback runs at chunk boundaries: those placed before the step in the table run
  before the chunk, with the first step's clock; those placed after it run after the chunk,
  with the last step's clock, batch and logs (what they log joins the last step's record). A
  clock schedule fires at a boundary when it would have fired on any step of the chunk (it is
  asked once per step, in order, so stateful schedules keep count), and its callbacks run once.
* A callback under ``every(1)`` that is not compiled would silently run K times less often,
  so it is an error unless it is boundary-safe: an object with an ``on_train_batch_end``-style
  method (progress bars count steps from the clock, so they show every step), or any callable
  with the attribute ``gyre_boundary_safe = True``.
* A stop request takes effect at the end of the chunk.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core.clock import Elapsed
from gyre.core.errors import describe, explain, whole_number
from gyre.core.logs import Logs
from gyre.loop.binding import Invoker, bind
from gyre.loop.engine import Elapse, LoopState, _apply, _as_list, run_callbacks

FusedStep = Callable[[Any, Any], tuple[Logs, Any]]
"""``fused(state, stacked_batch) -> (stacked_logs, state)``: K steps in one call."""

#: Methods that mark a callback object as one that runs once per batch at its end: with
#: ``steps_per_call`` it runs once per chunk.
BATCH_END_HOOKS = ("on_train_batch_end", "on_test_batch_end", "on_predict_batch_end")


@runtime_checkable
class FusableStep(Protocol):
    """A step that can compile K of itself into one call.

    ``fuse(steps)`` returns ``fused(state, stacked_batch) -> (stacked_logs, state)``: the batch
    leaves have a leading axis of ``steps``, so do the logs' values (one row per step), and the
    state is donated. It is called once per chunk length in a loop.
    """

    def fuse(self, steps: int) -> FusedStep:  # pragma: no cover - protocol
        ...


def check_steps(steps: Any, name: str = "steps") -> int:
    """Validates a number of fused steps (an int >= 1); returns it.

    Example:
        >>> check_steps(4)
        4
    """
    return whole_number(
        steps,
        minimum=1,
        problem=f"{name} must be a whole number of steps >= 1",
        expected=f"{name}=100 (fuse 100 steps per call), or 1 to run step by step",
        fix=f"pass a positive int, e.g. {name}=100",
    )


def _is_jitted(fn: Any) -> bool:
    return hasattr(fn, "__wrapped__") and hasattr(fn, "lower")


def is_fusable(fn: Any) -> bool:
    """True when :func:`fuse` accepts ``fn``: a ``jax.jit`` function or a :class:`FusableStep`.

    Example:
        >>> import jax
        >>> is_fusable(jax.jit(lambda s, b: s)), is_fusable(lambda s, b: s)
        (True, False)
    """
    return _is_jitted(fn) or callable(getattr(fn, "fuse", None))


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class _NotInFusedStep:
    """Stands for ``elapsed``/``logs``/``loop`` inside a fused step, where they do not exist."""

    def __init__(self, arg: str, step: str) -> None:
        self._arg = arg
        self._step = step

    def __getattr__(self, attr: str) -> Any:
        raise TypeError(
            explain(
                f"the fused step {self._step} reads {self._arg}.{attr}",
                expected="a step of (state, batch) only: inside one lax.scan there is no "
                f"per-step {self._arg}",
                received=f"a step that uses its {self._arg!r} parameter",
                fix="keep the step counter in the state (state.step) and log by returning "
                "(logs, state); or run with steps_per_call=1",
            )
        )


def _donates_state(fn: Any) -> bool:
    info = getattr(fn, "_jit_info", None)  # jax's record of the jit options; absent: donate
    donated = getattr(info, "donate_argnums", None)
    return True if donated is None else 0 in donated


#: Steps per iteration of a fused ``lax.scan``. Two, not one: a step that updates a weight
#: before its last read of the old value (the backward pass reads weights that the optimizer
#: has already been given) makes XLA copy that weight on every iteration of a one-step loop,
#: because a loop carry is updated in place. With two steps per iteration the carry is only
#: written by the second step, after every read of it by the first, so the copies go away
#: (on the digits MLP of ``benchmarks/fused_steps.py``: a 256x256 and a 256x10 copy per step).
#: The price is a loop body twice as long to compile.
UNROLL = 2


def scan_steps(
    body: Callable[[Any, Any], tuple[Any, Any]], state: Any, batches: Any, length: int | None = None
) -> tuple[Any, Any]:
    """``jax.lax.scan(body, state, batches)`` as fused steps run it (:data:`UNROLL` steps per
    iteration; results are the same as the plain scan's).

    Example:
        >>> import jax.numpy as jnp
        >>> total, seen = scan_steps(lambda c, x: (c + x, c), jnp.float32(0), jnp.arange(5.0))
        >>> float(total), seen.tolist()
        (10.0, [0.0, 0.0, 1.0, 3.0, 6.0])
    """
    return jax.lax.scan(body, state, batches, length=length, unroll=UNROLL)


def _scan_of(fn: Callable[..., Any], steps: int) -> FusedStep:
    invoke = bind(fn)
    name = _name(fn)
    elapsed, logs_arg, loop_arg = (_NotInFusedStep(a, name) for a in ("elapsed", "logs", "loop"))

    def body(state: Any, batch: Any) -> tuple[Any, Logs]:
        logs = Logs()
        out = invoke(state, batch, elapsed, logs_arg, loop_arg)
        if out is not None:
            state = _apply(out, logs, state, fn)
        return state, logs

    def fused(state: Any, batches: Any) -> tuple[Logs, Any]:
        state, logs = scan_steps(body, state, batches, length=steps)
        return logs, state

    fused.__name__ = fused.__qualname__ = f"fused_{steps}_{getattr(fn, '__name__', 'step')}"
    return fused


_FUSED: weakref.WeakKeyDictionary[Any, dict[int, FusedStep]] = weakref.WeakKeyDictionary()


def _fuse_jitted(step: Any, steps: int) -> FusedStep:
    try:
        by_length = _FUSED.setdefault(step, {})
    except TypeError:  # not weakly referenceable: no cache
        by_length = {}
    fused = by_length.get(steps)
    if fused is None:
        donate = (0,) if _donates_state(step) else ()
        fused = by_length[steps] = jax.jit(_scan_of(step.__wrapped__, steps), donate_argnums=donate)
    return fused


def fuse(step: Any, steps: int) -> FusedStep:
    """K steps in one call: ``fused(state, stacked_batch) -> (stacked_logs, state)``.

    The batch's leaves carry a leading axis of ``steps`` (the batches stacked), the logs'
    values one row per step; the state is donated when the step donates it. For a
    ``jax.jit`` function, gyre compiles a ``lax.scan`` of the undecorated function, once per
    ``steps`` (the result is cached); a :class:`FusableStep` fuses itself.

    Args:
        step: a ``jax.jit``-wrapped ``(state, batch) -> (logs, state)``, or an object with a
            ``fuse(steps)`` method.
        steps: steps per call.

    Returns:
        The fused callable.

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
    check_steps(steps)
    if _is_jitted(step):
        return _fuse_jitted(step, steps)
    method = getattr(step, "fuse", None)
    if callable(method):
        fused = method(steps)
        if not callable(fused):
            raise TypeError(
                explain(
                    f"{_name(step)}.fuse({steps}) did not return a function",
                    expected="fuse(steps) -> fused(state, stacked_batch) -> (stacked_logs, state)",
                    received=describe(fused),
                    fix="return the compiled function from fuse()",
                )
            )
        return fused
    raise TypeError(
        explain(
            f"cannot fuse {_name(step)}: it is not a compiled step",
            expected="a jax.jit-wrapped step (state, batch) -> (logs, state), or a managed step "
            "with a fuse(steps) method (gyre.loop.fused.FusableStep)",
            received=describe(step) + (" (a plain Python function)" if callable(step) else ""),
            fix="compile it: step = jax.jit(step, donate_argnums=0); or run step by step "
            "with steps_per_call=1",
        )
    )


# -- the chunked loop ------------------------------------------------------------------------

Entry = tuple[Callable[[Elapsed], bool] | None, list[Invoker]]


class ChunkPlan:
    """A task table split for fused execution: entries before the step, the step, entries after."""

    def __init__(self, before: list[Entry], step: Any, after: list[Entry]) -> None:
        self.before = before
        self.step = step
        self.after = after


def _boundary_safe(fn: Any) -> bool:
    if getattr(fn, "gyre_boundary_safe", False):
        return True
    owner = getattr(fn, "__self__", fn)
    return any(callable(getattr(owner, hook, None)) for hook in BATCH_END_HOOKS)


def split_plan(
    tasks: Mapping[Any, Any] | None,
    plan: Sequence[Entry],
    steps: int,
) -> ChunkPlan:
    """Finds the step to fuse in a compiled task table and sorts the other callbacks around it.

    ``plan`` is what :func:`gyre.loop.engine.compile_tasks` made of ``tasks``. The step is the
    one compiled callback under a schedule that fires on every step, or under a key marked
    ``gyre_fused_step`` (the named loops' ``on_train_step``, ...), whose callbacks must all be
    compiled. A callback with a ``gyre_step`` attribute (a state's ``train_step`` method, as
    the named loops wrap it) is fused as that step, called ``step(state, batch)``.

    Example:
        >>> import gyre, jax
        >>> from gyre.loop.engine import compile_tasks
        >>> step = jax.jit(lambda s, b: s)
        >>> tasks = {gyre.every(1): [step], gyre.every(10): [print]}
        >>> chunked = split_plan(tasks, compile_tasks(tasks), 4)
        >>> chunked.step is step, len(chunked.before), len(chunked.after)
        (True, 0, 1)
    """
    before: list[Entry] = []
    after: list[Entry] = []
    step: Any = None
    for (key, callbacks), (schedule, invokers) in zip((tasks or {}).items(), plan, strict=True):
        marked = getattr(key, "gyre_fused_step", False)
        if not marked and schedule is not None:
            (before if step is None else after).append((schedule, invokers))
            continue
        pre: list[Invoker] = []
        post: list[Invoker] = []
        for callback, invoker in zip(_as_list(callbacks), invokers, strict=True):
            callback = getattr(callback, "gyre_step", callback)  # a state's method: the step
            if is_fusable(callback):
                if step is not None:
                    raise ValueError(
                        explain(
                            f"steps_per_call={steps} fuses one step, and the table has two",
                            expected="one compiled step on every step",
                            received=f"{_name(step)} and {_name(callback)}",
                            fix="combine them into one jitted function, or run with steps_per_call=1",
                        )
                    )
                step = callback
            elif marked:
                raise TypeError(
                    explain(
                        f"with steps_per_call={steps}, the {key!r} callback "
                        f"{_name(callback)} must be a compiled step",
                        expected="a jax.jit-wrapped step or a managed step (gyre.loop.fused.FusableStep)",
                        received=describe(callback),
                        fix="wrap it: jax.jit(step, donate_argnums=0); move other callbacks to "
                        "another point (e.g. on_train_batch_end); or use steps_per_call=1",
                    )
                )
            elif not _boundary_safe(callback):
                raise TypeError(
                    explain(
                        f"callback {_name(callback)} runs on every step but is not a compiled "
                        f"step: steps_per_call={steps} would run it once per {steps} steps",
                        expected="on every(1)/always(): one compiled step (jax.jit or a managed "
                        "step, gyre.loop.fused.FusableStep) and boundary-safe callbacks such as "
                        "progress bars",
                        received=describe(callback),
                        fix="if it is the step, compile it: jax.jit(step, donate_argnums=0), or "
                        "use a managed step; if once per chunk is right, set "
                        "fn.gyre_boundary_safe = True; else schedule it less often "
                        "(gyre.every(100)) or use steps_per_call=1",
                    )
                )
            else:
                (pre if step is None else post).append(invoker)
        if pre:
            before.append((schedule, pre))
        if post:
            after.append((schedule, post))
    if step is None:
        raise ValueError(
            explain(
                f"steps_per_call={steps} found no step to fuse",
                expected="a compiled step under gyre.every(1) (gyre.loop) or on_train_step / "
                "on_test_step / on_predict_step (named loops)",
                received="no jax.jit function or managed step on every step",
                fix="wrap the step: jax.jit(step, donate_argnums=0); or use steps_per_call=1",
            )
        )
    return ChunkPlan(before, step, after)


def _stack_leaves(batches: list[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *batches)


_stack_on_device = jax.jit(_stack_leaves)


def _on_device(leaves: list[Any]) -> bool:
    return any(isinstance(x, jax.Array) for x in leaves)


def stack(batches: Sequence[Any]) -> Any:
    """Stacks batches along a new leading axis: numpy for host batches, one jit for device ones.

    Example:
        >>> import numpy as np
        >>> stack([(np.zeros(2), 1), (np.ones(2), 2)])[0].shape
        (2, 2)
    """
    batches = list(batches)
    if _on_device(jax.tree_util.tree_leaves(batches[0])):
        return _stack_on_device(batches)
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *batches)


#: Byte alignment of the staging buffers: JAX on CPU reads a numpy argument aligned like this
#: in place instead of copying it (a 1.6 MB chunk: 62 us per call against 230 us).
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised numpy array whose data starts at a multiple of :data:`ALIGNMENT` bytes.

    Example:
        >>> a = aligned_empty((3, 5), np.float32)
        >>> a.shape, a.dtype, a.ctypes.data % ALIGNMENT
        ((3, 5), dtype('float32'), 0)
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def _in_buffers(value: Any, buffers: dict[Any, list[np.ndarray]]) -> bool:
    """True when ``value`` (an output of a finished call) lies in one of ``buffers``."""
    if isinstance(value, np.ndarray):
        return any(np.may_share_memory(value, b) for bs in buffers.values() for b in bs)
    try:
        address = value.unsafe_buffer_pointer()
    except Exception:  # not a single-buffer array: never one of ours
        return False
    return any(
        b.ctypes.data <= address < b.ctypes.data + b.nbytes for bs in buffers.values() for b in bs
    )


class Stager:
    """Stacks the host batches of each chunk into a few reused, aligned buffers.

    A fresh array of a chunk's size costs a page fault per 4 KiB on first touch, several times
    the copy itself (about 0.65 ms per 1.6 MB chunk of digits batches, against 0.05 ms into a
    buffer already touched). The buffers are aligned (:func:`aligned_empty`), so JAX on CPU
    reads them in place rather than copying each chunk a second time; a buffer is therefore
    reused only once the call that read it has finished (its outputs are ready):
    :meth:`release` records those outputs. A step whose outputs are the buffer itself (an
    uncompiled fused step that logs its batch) keeps it: the slot gets new buffers.

    Example:
        >>> import numpy as np
        >>> stager = Stager()
        >>> stacked, slot = stager.stack([(np.zeros(2), 1), (np.ones(2), 2)])
        >>> stacked[0].tolist(), stacked[1].tolist()
        ([[0.0, 0.0], [1.0, 1.0]], [1, 2])
        >>> stager.release(slot, [])
    """

    def __init__(self, slots: int = 3) -> None:
        self._slots = slots
        self._next = 0
        self._buffers: list[dict[Any, list[np.ndarray]]] = [{} for _ in range(slots)]
        self._busy: list[list[Any]] = [[] for _ in range(slots)]

    def stack(self, batches: Sequence[Any]) -> tuple[Any, int | None]:
        """The batches stacked, and the buffer slot to :meth:`release` after the call."""
        leaves, treedef = jax.tree_util.tree_flatten(batches[0])
        if _on_device(leaves):
            return _stack_on_device(list(batches)), None
        slot = self._next
        self._next = (slot + 1) % self._slots
        if self._busy[slot]:
            outputs = self._busy[slot]
            jax.block_until_ready(outputs)  # a wait for compute, never a transfer
            if any(_in_buffers(x, self._buffers[slot]) for x in outputs):
                self._buffers[slot].clear()  # an output is the buffer: leave it to its owner
            self._busy[slot] = []
        shapes = tuple([(np.shape(x), np.result_type(x)) for x in leaves])
        key = (treedef, len(batches), shapes)
        buffers = self._buffers[slot].get(key)
        if buffers is None:
            self._buffers[slot].clear()  # keep one set per slot: a new shape replaces it
            buffers = self._buffers[slot][key] = [
                aligned_empty((len(batches), *shape), dtype) for shape, dtype in shapes
            ]
        expected = [b.shape[1:] for b in buffers]
        ndarray = np.ndarray
        for i, batch in enumerate(batches):
            flat = leaves if i == 0 else treedef.flatten_up_to(batch)
            for buffer, shape, x in zip(buffers, expected, flat, strict=True):
                if (x.shape if type(x) is ndarray else np.shape(x)) != shape:
                    raise ValueError(
                        explain(
                            "the batches of a fused chunk must all have the same shapes",
                            expected=f"every batch shaped like the first: {[s for s, _ in shapes]}",
                            received=f"batch {i} of the chunk with a leaf of shape {np.shape(x)}",
                            fix="drop or pad the last, smaller batch (drop_remainder=True), "
                            "or use steps_per_call=1",
                        )
                    )
                buffer[i] = x
        return jax.tree_util.tree_unflatten(treedef, list(buffers)), slot

    def release(self, slot: int | None, outputs: list[Any]) -> None:
        """Records the outputs of the call that read ``slot``: its buffers are reused once
        they are ready. With no outputs to wait on, the slot's buffers are dropped."""
        if slot is None:
            return
        if outputs:
            self._busy[slot] = outputs
        else:
            self._buffers[slot].clear()


def _take_row(tree: Any, i: Any) -> Any:
    return jax.tree_util.tree_map(lambda x: x[i], tree)


_row = jax.jit(_take_row)


def _identities(logs: Logs) -> list[tuple[str, str, int]]:
    """What ``logs`` holds, by entry and value identity: equal lists mean nothing was added
    or replaced."""
    return [(c, n, id(v)) for c, n, v in logs.entries()]


def _firing(entries: list[Entry], clocks: list[Elapsed]) -> list[Invoker]:
    """The callbacks whose schedule fires on any of ``clocks``; every schedule is asked about
    every clock, in order, so stateful schedules count as they would step by step."""
    out: list[Invoker] = []
    for schedule, callbacks in entries:
        if schedule is None or any([schedule(c) for c in clocks]):
            out.extend(callbacks)
    return out


def run_chunks(chunked: ChunkPlan, clock_iter: Elapse, loop_state: LoopState, steps: int) -> None:
    """The loop of :func:`gyre.loop` with ``steps_per_call=steps``; keeps ``loop_state.state``.

    Called by the engine once the start callbacks have run (see the module docs for the
    rules). Example: ``gyre.loop(state, batches, {gyre.every(1): [step]}, steps_per_call=4)``.
    """
    history = loop_state.history
    fused_by_length: dict[int, FusedStep] = {}
    before, after = chunked.before, chunked.after
    stager = Stager()
    while not loop_state.stop_requested:
        batches, sizes = clock_iter.take(steps)
        k = len(batches)
        if k == 0:
            return
        advanced = False
        try:
            fused = fused_by_length.get(k)
            if fused is None:
                fused = fused_by_length[k] = fuse(chunked.step, k)
            stacked, slot = stager.stack(batches)
            first = Logs()
            if before:
                firing = _firing(before, clock_iter.preview(sizes))
                if firing:
                    run_callbacks(firing, loop_state, clock_iter.elapsed, batches[0], first, until_stop=True)
            logs, loop_state.state = fused(loop_state.state, stacked)
            del stacked
            stager.release(slot, jax.tree_util.tree_leaves(logs))
            clocks = clock_iter.advance(sizes)
            advanced = True
        finally:
            if not advanced:  # interrupted: the chunk's batches were consumed, count them
                clock_iter.advance(sizes)
        last: Logs | None = None
        firing = _firing(after, clocks) if after and not loop_state.stop_requested else None
        if firing:
            last = Logs()
            if first and k == 1:
                last.merge(first)
            if logs:
                last.merge(_row(logs, k - 1))
            shown = None if first and k == 1 else _identities(last)
            run_callbacks(firing, loop_state, clocks[-1], batches[-1], last, until_stop=True)
            if shown is not None and shown == _identities(last):
                last = None  # the callbacks only read the last row: it stays in the stacked commit
        start, stop = 0, k
        if first and (k > 1 or last is None):
            head = Logs().merge(first)
            if logs:
                head.merge(_row(logs, 0))
            history.commit(clocks[0], head, batch_size=sizes[0])
            start = 1
        if last is not None:
            stop = k - 1
        if logs and stop > start:
            history.commit_stacked(clocks[start:stop], logs, batch_sizes=sizes[start:stop], start=start)
        if last:
            history.commit(clocks[-1], last, batch_size=sizes[-1])
