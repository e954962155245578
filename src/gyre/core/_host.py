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

from gyre.core._errors import explain


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


def _stack(values: tuple[Any, ...]) -> Any:
    import jax.numpy as jnp

    return jnp.stack(values)


#: One compiled stacking per (number of values, shape, dtype): a history stacks its columns by
#: shape group, so values of new shapes (a short last batch) never recompile the others.
_stack_jit = jax.jit(_stack)
_MIN_STACK = 8

Signature = tuple[tuple[int, ...], Any]


def _local(x: Any) -> Any:
    """A fully replicated global array's copy on this process's first device holding it
    (stacking those is a computation of this process alone: no process waits for another)."""
    return x if x.is_fully_addressable else x.addressable_data(0)


def _signature(x: Any) -> Signature | None:
    """The stacking group of one value: its (shape, dtype), or None when it is not a device
    array this process can stack (a host value, or a global array split over processes)."""
    if not isinstance(x, jax.Array):
        return None
    if not x.is_fully_addressable and not x.is_fully_replicated:
        return None
    return (x.shape, x.dtype)


class _Groups:
    """Values sorted into stacking groups; ``runs`` says where each column's values went:
    ``(column, first row, count, group, offset in the group)``."""

    def __init__(self) -> None:
        self.values: dict[Signature, list[Any]] = {}
        self.runs: list[tuple[int, int, int, Signature | None, int]] = []

    def add(self, column: int, row: int, values: Sequence[Any], sig: Signature | None) -> None:
        if sig is None:
            self.runs.append((column, row, len(values), None, 0))
            return
        bucket = self.values.setdefault(sig, [])
        self.runs.append((column, row, len(values), sig, len(bucket)))
        bucket.extend(values if values[0].is_fully_addressable else map(_local, values))

    def add_column(self, i: int, column: Sequence[Any], *, trust: bool) -> None:
        """Adds a column whole under its first value's group when its values are device arrays
        of one type and shape; else value by value. ``trust``: the shapes in between the first
        and the last value are checked by the stacking itself (in C++), so the step path reads
        no property per value; the caller retries untrusted if the stacking refuses them."""
        first = column[0]
        sig = _signature(first)
        if sig is not None and len(set(map(type, column))) == 1 and first.shape == column[-1].shape:
            whole = trust or len({(x.shape, x.dtype) for x in column}) == 1
            if whole and (first.is_fully_addressable or all(x.is_fully_replicated for x in column)):
                self.add(i, 0, column, sig)
                return
        for r, x in enumerate(column):  # mixed values: each one to its own group
            self.add(i, r, [x], _signature(x))


def _stack_groups(columns: Sequence[Sequence[Any]], trust: bool) -> tuple[_Groups, dict[Any, Any]] | None:
    """The stacking groups of ``columns`` and their stacked device arrays; ``None`` when a
    trusted column turned out to mix shapes (the caller sorts value by value instead)."""
    groups = _Groups()
    for i, column in enumerate(columns):
        if len(column):
            groups.add_column(i, column, trust=trust)
    stacked: dict[Any, Any] = {}
    for sig, values in groups.values.items():
        if len(values) < _MIN_STACK:
            continue
        size = 1 << (len(values) - 1).bit_length()
        try:
            stacked[sig] = _stack_jit(tuple(values) + (values[0],) * (size - len(values)))
        except ValueError:
            if trust:  # a trusted column mixes shapes (or devices): sort value by value
                return None
            continue  # values placed on different devices: fetch them one by one
    return groups, stacked


class ColumnFetch:
    """Columns of values on their way to the host (see :func:`start_fetch`).

    Example:
        >>> import jax.numpy as jnp
        >>> moving = start_fetch([[jnp.float32(i) for i in range(8)]])
        >>> column, = moving.result()
        >>> moving.ready(), column.tolist()
        (True, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    """

    __slots__ = ("_lengths", "_runs", "_stacked", "_rest")

    def __init__(self, lengths: list[int], runs: list[Any], stacked: dict[Any, Any], rest: dict[Any, Any]) -> None:
        self._lengths = lengths
        self._runs = runs  # (column, row, count, group or None, offset)
        self._stacked = stacked  # group -> stacked device array (only it stays on the device)
        self._rest = rest  # (column, row) -> the values fetched as they are

    def ready(self) -> bool:
        """True when :meth:`result` will not wait for the device (never blocks)."""
        return is_ready(self._stacked) and is_ready(self._rest)

    def result(self) -> list[Sequence[Any]]:
        """The columns on the host: a numpy array for a column stacked whole (a row per
        value), a list for the others. Waits for the device if the values are not computed."""
        stacked, rest = fetch((self._stacked, self._rest))
        out: list[Any] = [None] * len(self._lengths)
        for column, row, count, group, offset in self._runs:
            values = rest[(column, row)] if group not in stacked else stacked[group][offset : offset + count]
            if count == self._lengths[column]:
                out[column] = values
                continue
            if out[column] is None:
                out[column] = [None] * self._lengths[column]
            out[column][row : row + count] = list(values)
        return out

    def device_columns(self) -> list[Any]:
        """The columns as they are on the device now, without waiting: a stacked array (a row
        per value) for a column stacked whole, else a list of per-row values."""
        out: list[Any] = [None] * len(self._lengths)
        for column, row, count, group, offset in self._runs:
            if group in self._stacked:
                values = self._stacked[group][offset : offset + count]
            else:
                values = self._rest[(column, row)]
            if count == self._lengths[column]:
                out[column] = values
                continue
            if out[column] is None:
                out[column] = [None] * self._lengths[column]
            out[column][row : row + count] = [values[k] for k in range(count)]
        return out


def start_fetch(columns: Sequence[Sequence[Any]]) -> ColumnFetch:
    """Starts copying columns of values to the host, without waiting for the device.

    ``jax.device_get`` pays several microseconds per array, so a history of scalar metrics
    would pay that per step. Here the device values are sorted by shape and dtype, and each
    group is stacked on the device by one jitted call (padded to a power of two rows, so few
    lengths ever compile; a new shape compiles its own group only) and its copy to the host
    starts at once. The stacking runs after the work already queued on the device, so the
    caller does not wait: it reads the result later (:meth:`ColumnFetch.result`), once
    :meth:`ColumnFetch.ready` says it is there.

    Example:
        >>> import jax.numpy as jnp
        >>> loss, acc = start_fetch([[jnp.float32(i) for i in range(10)], [1.0, 2.0]]).result()
        >>> loss[9].item(), acc
        (9.0, [1.0, 2.0])
    """
    found = _stack_groups(columns, trust=True)
    if found is None:  # a column mixes shapes: sort its values one by one
        found = _stack_groups(columns, trust=False) or (_Groups(), {})
    groups, stacked = found
    rest = {}
    for column, row, count, group, _ in groups.runs:
        if group not in stacked:
            rest[(column, row)] = list(columns[column][row : row + count])
    start_copy(stacked)
    return ColumnFetch([len(c) for c in columns], groups.runs, stacked, rest)


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

