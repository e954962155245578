"""Moving host or device values onto their shardings: the one placement function of gyre
(prefetching, a strategy's ``place_batch`` and ``place_state`` all use it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Sharding

from gyre.core._errors import describe, explain

#: The leaf types :func:`place_leaf` moves; every other leaf is left as it is.
ARRAY_TYPES: tuple[type, ...] = (np.ndarray, np.generic, jax.Array)

#: What :func:`place` accepts as the place of each leaf.
ShardingSpec = Sharding | Callable[[Any], Sharding] | Any


def is_array(leaf: Any) -> bool:
    """Whether :func:`place_leaf` moves ``leaf`` (a numpy or JAX array or numpy scalar)."""
    return isinstance(leaf, ARRAY_TYPES)


def place_leaf(leaf: Any, sharding: Sharding, *, copy: bool = False) -> Any:
    """One leaf placed on ``sharding``.

    Non-arrays are returned unchanged; on this process's devices: ``jax.device_put``; a global
    array is kept when already so sharded, else resharded; any other leaf onto a sharding across
    processes becomes this process's slice of one global array.

    Args:
        leaf: a numpy or JAX array (any other value is returned unchanged).
        sharding: where it goes.
        copy: never share a buffer with ``leaf`` (for values a compiled step will donate).

    Example:
        >>> import jax, numpy as np
        >>> from jax.sharding import NamedSharding, PartitionSpec
        >>> mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
        >>> x = place_leaf(np.zeros((8 * len(jax.devices()), 2)), NamedSharding(mesh, PartitionSpec("data")))
        >>> x.sharding.spec, place_leaf("label", NamedSharding(mesh, PartitionSpec()))
        (P('data',), 'label')
    """
    if not isinstance(leaf, ARRAY_TYPES):
        return leaf
    if sharding.is_fully_addressable:
        if copy and isinstance(leaf, jax.Array):
            # A copy where the array is first: device_put onto a sharding that replicates
            # over the array's own device reuses its buffer there even with may_alias=False
            # (jax 0.10), and a donating step would then delete the caller's array.
            leaf = jax.device_put(leaf, may_alias=False)
        return jax.device_put(leaf, sharding)
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        if leaf.sharding.is_equivalent_to(sharding, leaf.ndim):
            return leaf  # already the global array asked for
        return jax.device_put(leaf, sharding)  # a reshard between global shardings
    return jax.make_array_from_process_local_data(sharding, np.asarray(leaf))


def place(tree: Any, sharding: ShardingSpec, *, copy: bool = False) -> Any:
    """Every array leaf of ``tree`` placed by :func:`place_leaf`.

    Args:
        tree: any pytree (a batch, a state).
        sharding: one ``jax.sharding.Sharding``, a function ``leaf -> Sharding``, or a pytree of
            shardings shaped like ``tree`` or a prefix of it.
        copy: never share buffers with ``tree``.

    Raises:
        TypeError: ``sharding`` is none of these forms.

    Example:
        >>> import jax, numpy as np
        >>> from jax.sharding import NamedSharding, PartitionSpec
        >>> mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
        >>> split = NamedSharding(mesh, PartitionSpec("data"))
        >>> n = len(jax.devices())
        >>> batch = place({"x": np.ones((n, 3)), "id": "batch-7"}, lambda leaf: split)
        >>> batch["x"].sharding.spec, batch["id"]
        (P('data',), 'batch-7')
    """
    if isinstance(sharding, Sharding):
        return jax.tree_util.tree_map(lambda x: place_leaf(x, sharding, copy=copy), tree)
    if callable(sharding):
        return jax.tree_util.tree_map(lambda x: place_leaf(x, sharding(x), copy=copy), tree)
    if is_sharding_tree(sharding):
        return jax.tree_util.tree_map(
            lambda s, subtree: place(subtree, s, copy=copy), sharding, tree
        )
    raise TypeError(explain(
        "place() got something that is not a sharding",
        expected="a jax.sharding.Sharding, a function leaf -> Sharding, or a pytree of "
        "shardings shaped like the values",
        received=describe(sharding), fix="pass e.g. NamedSharding(mesh, PartitionSpec('data'))"))


def is_sharding_tree(tree: Any) -> bool:
    """A pytree whose leaves are all shardings (an empty container counts: it places an
    empty part of the tree, e.g. a state's empty ``extras``)."""
    if tree is None:
        return False
    try:
        leaves = jax.tree_util.tree_leaves(tree)
    except Exception:  # noqa: BLE001 - anything that is not a pytree
        return False
    return all(isinstance(s, Sharding) for s in leaves)
