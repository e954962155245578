"""The single door through which gyre moves device values to the host.

Every read of a device value in gyre goes through :func:`fetch`, an explicit
``jax.device_get`` of a whole batch of values at once. Nothing on the step path calls
``float()``, ``np.asarray`` or ``.item()`` on a device array; the no-host-sync test patches
those implicit paths to raise and lets only this function through.
"""

from __future__ import annotations

from typing import Any

import jax


def fetch(tree: Any) -> Any:
    """Copies a pytree of device values to host numpy values in one explicit transfer.

    Example:
        >>> import jax.numpy as jnp
        >>> fetch({"loss": jnp.float32(0.5)})
        {'loss': array(0.5, dtype=float32)}
    """
    return jax.device_get(tree)


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


def _stack(*arrays: Any) -> Any:
    import jax.numpy as jnp

    return jnp.stack(arrays)


_stack_jit = jax.jit(_stack)
_MIN_STACK = 8


def fetch_all(trees: list[Any]) -> list[Any]:
    """Copies a list of pytrees to the host, stacking same-shaped values into one transfer.

    ``jax.device_get`` pays several microseconds per array; a history of scalar metrics
    would pay that per step. Here the device arrays of equal shape, dtype and placement are
    stacked on the device by one jitted call (padded to a power of two, so few lengths ever
    compile) and fetched as one array.

    Example:
        >>> import jax.numpy as jnp
        >>> fetch_all([{"x": jnp.float32(i)} for i in range(10)])[9]
        {'x': array(9., dtype=float32)}
    """
    flat = [jax.tree_util.tree_flatten(tree) for tree in trees]
    out = [list(leaves) for leaves, _ in flat]
    groups: dict[Any, list[tuple[int, int]]] = {}
    for i, (leaves, _) in enumerate(flat):
        for j, leaf in enumerate(leaves):
            if isinstance(leaf, jax.Array):
                groups.setdefault((leaf.shape, leaf.dtype), []).append((i, j))
    for places in groups.values():
        arrays = [out[i][j] for i, j in places]
        stacked = None
        if len(arrays) >= _MIN_STACK and arrays[0].is_fully_addressable:
            size = 1 << (len(arrays) - 1).bit_length()
            try:
                stacked = _stack_jit(*arrays, *([arrays[0]] * (size - len(arrays))))
            except ValueError:  # values placed on different devices: fetch them one by one
                stacked = None
        if stacked is not None:
            host = fetch(stacked)
            for k, (i, j) in enumerate(places):
                out[i][j] = host[k, ...]
        else:
            for (i, j), value in zip(places, fetch(arrays), strict=True):
                out[i][j] = value
    return [jax.tree_util.tree_unflatten(treedef, leaves) for leaves, (_, treedef) in zip(out, flat, strict=True)]
