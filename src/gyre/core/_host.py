"""The one door through which gyre moves device values to the host: :func:`fetch` (the
no-host-sync test lets only it through).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._errors import explain


def fetch(tree: Any) -> Any:
    """Copies a pytree of device values to host numpy in one transfer (replicated global arrays
    are read from the process's own copy).
    """
    try:
        return jax.device_get(tree)
    except RuntimeError as err:
        if "non-addressable" not in str(err):
            raise
        raise ValueError(explain(
            "a value split over several processes cannot be read by one of them",
            expected="logged values every process holds whole (fully replicated), "
            "as a step's out_shardings=replicated gives",
            received="a global array sharded over devices of other processes",
            fix="log a reduced value (a mean or sum over the batch) instead of a per-example array, "
            "or gather it first with jax.experimental.multihost_utils.process_allgather")) from err


def is_ready(tree: Any) -> bool:
    """True when every device array in ``tree`` has been computed (never blocks)."""
    return all(getattr(leaf, "is_ready", lambda: True)() for leaf in jax.tree_util.tree_leaves(tree))


def to_python(value: Any) -> Any:
    """Turns a 0-d numpy value into a Python scalar; leaves anything else as it is."""
    return value.item() if getattr(value, "ndim", None) == 0 and hasattr(value, "item") else value


def numeric_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` holds real numbers (bools, ints, floats, low-precision ones included)."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # an extended dtype (a PRNG key)
        return False
    return dtype.kind in "biuf" or (dtype.kind == "V" and bool(jnp.issubdtype(dtype, jnp.number)))


#: One compiled stacking per (number of values, shape, dtype); padded to a power of two rows.
_stack_jit = jax.jit(lambda values: jnp.stack(values))


def stacked(values: Sequence[Any]) -> Any | None:
    """One device array of ``values`` (a row per value, padded to a power of two rows) when
    they are device arrays this process holds whole, of one shape and dtype; else ``None``."""
    first = values[0] if values else None
    if not isinstance(first, jax.Array) or not all(isinstance(x, jax.Array) for x in values):
        return None
    if len({(x.shape, x.dtype) for x in values}) != 1 or not all(x.is_fully_addressable for x in values):
        return None
    try:
        return _stack_jit(tuple(values) + (first,) * ((1 << (len(values) - 1).bit_length()) - len(values)))
    except ValueError:  # values placed on different devices: fetched one by one
        return None


def start_copy(tree: Any) -> None:
    """Starts copying the device arrays of ``tree`` to the host, without waiting."""
    for leaf in jax.tree_util.tree_leaves(tree):
        copy = getattr(leaf, "copy_to_host_async", None)
        if copy is not None:
            copy()
