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
