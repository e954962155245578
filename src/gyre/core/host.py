"""The single door through which gyre moves device values to the host.

Every read of a device value in gyre goes through :func:`fetch`, an explicit
``jax.device_get`` of a whole batch of values at once. Nothing on the step path calls
``float()``, ``np.asarray`` or ``.item()`` on a device array; the no-host-sync test patches
those implicit paths to raise and lets only this function through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from gyre.core.errors import explain


def fetch(tree: Any) -> Any:
    """Copies a pytree of device values to host numpy values in one explicit transfer.

    In a multi-process run, a global array can be read when it is fully replicated (what a
    data-parallel step's logs are): each process reads its own copy, no process waits for
    another. A global array split over several processes cannot be read by one of them.

    Example:
        >>> import jax.numpy as jnp
        >>> fetch({"loss": jnp.float32(0.5)})
        {'loss': array(0.5, dtype=float32)}
    """
    try:
        return jax.device_get(tree)
    except RuntimeError as err:
        if "non-addressable" not in str(err):
            raise
        raise ValueError(
            explain(
                "a value split over several processes cannot be read by one of them",
                expected="logged values every process holds whole (fully replicated), "
                "as a step's out_shardings=replicated gives",
                received="a global array sharded over devices of other processes",
                fix="log a reduced value (a mean or sum over the batch) instead of a "
                "per-example array, or gather it first with "
                "jax.experimental.multihost_utils.process_allgather",
            )
        ) from err


def is_ready(tree: Any) -> bool:
    """True when every device array in ``tree`` has been computed (never blocks).

    Values that are not JAX arrays (numbers, numpy arrays) are always ready.

    Example:
        >>> import jax.numpy as jnp
        >>> is_ready({"x": jnp.ones(2).block_until_ready(), "y": 1.0})
        True
    """
    for leaf in jax.tree_util.tree_leaves(tree):
        ready = getattr(leaf, "is_ready", None)
        if ready is not None and not ready():
            return False
    return True


def to_python(value: Any) -> Any:
    """Turns a 0-d numpy value into a Python scalar; leaves anything else as it is.

    Example:
        >>> import numpy as np
        >>> to_python(np.float32(2.5)), to_python(np.arange(2)).tolist()
        (2.5, [0, 1])
    """
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _stack_columns(columns: tuple[tuple[Any, ...], ...]) -> list[Any]:
    import jax.numpy as jnp

    out: list[Any] = []
    for column in columns:
        first = column[0]
        if all(x.shape == first.shape and x.dtype == first.dtype for x in column):
            out.append(jnp.stack(column))
        else:  # mixed shapes: decided once per signature, at trace time
            out.append(list(column))
    return out


_stack_columns_jit = jax.jit(_stack_columns)
_MIN_STACK = 8


def _stackable(column: Sequence[Any]) -> bool:
    # The array type is read from the values (never built at import: importing gyre must not
    # start JAX's backend, or gyre.distributed.initialize could not run after it).
    if len(column) < _MIN_STACK or not isinstance(column[0], jax.Array):
        return False
    if len(set(map(type, column))) != 1:
        return False
    if column[0].is_fully_addressable:
        return True
    # multi-process: global arrays every process holds whole are read from the local copy
    return all(x.is_fully_replicated for x in column)


def _local(x: Any) -> Any:
    """A fully replicated global array's copy on this process's first device holding it
    (stacking those is a computation of this process alone: no process waits for another)."""
    return x if x.is_fully_addressable else x.addressable_data(0)


def _local_column(column: Sequence[Any]) -> tuple[Any, ...]:
    # one property read per column, not per value: the step path pays for every value
    if column[0].is_fully_addressable:
        return tuple(column)
    return tuple(map(_local, column))


class ColumnFetch:
    """Columns of values on their way to the host (see :func:`start_fetch`).

    Example:
        >>> import jax.numpy as jnp
        >>> moving = start_fetch([[jnp.float32(i) for i in range(8)]])
        >>> column, = moving.result()
        >>> moving.ready(), column.tolist()
        (True, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    """

    __slots__ = ("_lengths", "_chosen", "_stacked", "_rest")

    def __init__(self, columns: Sequence[Sequence[Any]], chosen: list[int], stacked: Any) -> None:
        # the stacked columns' values are let go: only the stacked copy stays on the device
        self._lengths = [len(c) for c in columns]
        self._chosen = chosen
        self._stacked = stacked
        taken = set(chosen)
        self._rest = {i: list(c) for i, c in enumerate(columns) if i not in taken}

    def ready(self) -> bool:
        """True when :meth:`result` will not wait for the device (never blocks)."""
        return is_ready(self._stacked) and is_ready(self._rest)

    def result(self) -> list[Sequence[Any]]:
        """The columns on the host: a numpy array per stacked column (a row per value), a
        list for the others. Waits for the device if the values are not computed yet."""
        out: list[Sequence[Any]] = [()] * len(self._lengths)
        for i, host in zip(self._chosen, fetch(self._stacked), strict=True):
            out[i] = host[: self._lengths[i]]
        for i, host in fetch(self._rest).items():
            out[i] = host
        return out


def start_fetch(columns: Sequence[Sequence[Any]]) -> ColumnFetch:
    """Starts copying columns of values to the host, without waiting for the device.

    ``jax.device_get`` pays several microseconds per array, so a history of scalar metrics
    would pay that per step. Here every column of same-shaped device arrays is stacked on the
    device by one jitted call for all columns (padded to a power of two rows, so few lengths
    ever compile) and its copy to the host starts at once. The stacking runs after the work
    already queued on the device, so the caller does not wait for it: it reads the result
    later (:meth:`ColumnFetch.result`), once :meth:`ColumnFetch.ready` says it is there.

    Example:
        >>> import jax.numpy as jnp
        >>> loss, acc = start_fetch([[jnp.float32(i) for i in range(10)], [1.0, 2.0]]).result()
        >>> loss[9].item(), acc
        (9.0, [1.0, 2.0])
    """
    chosen = [i for i, column in enumerate(columns) if _stackable(column)]
    stacked: Any = []
    if chosen:
        size = 1 << (max(len(columns[i]) for i in chosen) - 1).bit_length()
        padded = tuple(
            _local_column(columns[i]) + (_local(columns[i][0]),) * (size - len(columns[i]))
            for i in chosen
        )
        try:
            stacked = _stack_columns_jit(padded)
        except ValueError:  # values placed on different devices: fetch them one by one
            chosen, stacked = [], []
        start_copy(stacked)
    return ColumnFetch(columns, chosen, stacked)


def start_copy(tree: Any) -> None:
    """Starts copying the device arrays of ``tree`` to the host, without waiting; a later
    :func:`fetch` of them then finds them there.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.arange(3); start_copy([x]); fetch(x).tolist()
        [0, 1, 2]
    """
    for leaf in jax.tree_util.tree_leaves(tree):
        copy = getattr(leaf, "copy_to_host_async", None)
        if copy is not None:
            copy()

