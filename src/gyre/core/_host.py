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


#: One compiled stacking per (number of values, shape, dtype); padded to a power of two rows,
#: so few lengths ever compile.
_stack_jit = jax.jit(_stack)


def stacked(values: Sequence[Any]) -> Any | None:
    """One device array of ``values`` (a row per value, padded to a power of two rows), when
    they are device arrays this process holds whole, of one shape and dtype; else ``None``.
    Nothing waits: the stacking runs after the work queued on the device.

    Example:
        >>> import jax.numpy as jnp
        >>> stacked([jnp.float32(1), jnp.float32(2), jnp.float32(3)]).tolist()
        [1.0, 2.0, 3.0, 1.0]
        >>> stacked([1.0, 2.0]) is None
        True
    """
    first = values[0] if values else None
    if not isinstance(first, jax.Array) or not all(isinstance(x, jax.Array) for x in values):
        return None
    if len({(x.shape, x.dtype) for x in values}) != 1 or not all(x.is_fully_addressable for x in values):
        return None
    size = 1 << (len(values) - 1).bit_length()
    try:
        return _stack_jit(tuple(values) + (first,) * (size - len(values)))
    except ValueError:  # values placed on different devices: fetched one by one
        return None


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

