"""Staging a fused chunk's batches: stacked along a new leading axis, host batches into a few
reused, aligned buffers (read in place by JAX on CPU), device batches by one jitted stack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._errors import explain


def _stack_leaves(batches: list[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *batches)


_stack_on_device = jax.jit(_stack_leaves)


#: Byte alignment of the staging buffers: JAX on CPU reads a numpy argument aligned like this
#: in place instead of copying it.
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised numpy array whose data starts at a multiple of :data:`ALIGNMENT` bytes."""
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
    """Stacks each chunk's host batches into a few aligned buffers, reused once the call that
    read them has finished (:meth:`release`); fresh ones page-fault."""

    def __init__(self, slots: int = 3) -> None:
        self._slots = slots
        self._next = 0
        self._buffers: list[dict[Any, list[np.ndarray]]] = [{} for _ in range(slots)]
        self._busy: list[list[Any]] = [[] for _ in range(slots)]

    def stack(self, batches: Sequence[Any]) -> tuple[Any, int | None]:
        """The batches stacked, and the buffer slot to :meth:`release` after the call."""
        leaves, treedef = jax.tree_util.tree_flatten(batches[0])
        if any(isinstance(x, jax.Array) for x in leaves):
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
        for i, batch in enumerate(batches):
            flat = leaves if i == 0 else treedef.flatten_up_to(batch)
            for buffer, shape, x in zip(buffers, expected, flat, strict=True):
                if np.shape(x) != shape:
                    raise ValueError(explain(
                        "the batches of a fused chunk must all have the same shapes",
                        expected=f"every batch shaped like the first: {[s for s, _ in shapes]}",
                        received=f"batch {i} of the chunk with a leaf of shape {np.shape(x)}",
                        fix="drop or pad the last, smaller batch (drop_remainder=True), or use steps_per_call=1"))
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
