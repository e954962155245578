"""gyre.core._placement: the one function that moves values onto shardings (8 CPU devices).

Several processes (global arrays from per-process slices) are covered by
tests/parallel/test_distributed.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from gyre.core._placement import is_array, place, place_leaf

MESH = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
SPLIT = NamedSharding(MESH, PartitionSpec("data"))
REPLICATED = NamedSharding(MESH, PartitionSpec())


def test_array_leaves_move_and_other_leaves_stay():
    batch = {"x": np.ones((8, 3), np.float32), "name": "batch-1", "scale": 0.5, "none": None}
    placed = place(batch, SPLIT)
    assert placed["x"].sharding == SPLIT and placed["x"].addressable_shards[0].data.shape == (1, 3)
    assert placed["name"] == "batch-1" and placed["scale"] == 0.5 and placed["none"] is None
    assert is_array(np.float32(1)) and is_array(jnp.ones(1)) and not is_array([1.0])


def test_the_three_forms_of_sharding():
    tree = {"x": np.zeros((8, 2)), "y": np.zeros(8)}
    by_leaf = place(tree, lambda leaf: SPLIT if leaf.ndim == 2 else REPLICATED)
    assert by_leaf["x"].sharding == SPLIT and by_leaf["y"].sharding == REPLICATED
    by_tree = place(tree, {"x": REPLICATED, "y": SPLIT})
    assert by_tree["x"].sharding == REPLICATED and by_tree["y"].sharding == SPLIT
    # a sharding standing for a whole subtree (a prefix of the tree), and an empty subtree
    nested = place({"a": {"b": np.zeros(8), "c": np.zeros(8)}, "d": {}}, {"a": SPLIT, "d": {}})
    assert nested["a"]["c"].sharding == SPLIT and nested["d"] == {}


def test_copy_never_shares_the_callers_buffers():
    donate = jax.jit(lambda x: x + 1, donate_argnums=0)
    for sharding in (REPLICATED, SPLIT, SingleDeviceSharding(jax.devices()[0])):
        source = jnp.zeros(8)
        donate(place_leaf(source, sharding, copy=True))
        assert not source.is_deleted(), sharding
    already = jax.device_put(jnp.zeros(8), REPLICATED)
    donate(place_leaf(already, REPLICATED, copy=True))
    assert not already.is_deleted()


def test_without_copy_a_placed_leaf_is_returned_as_it_is():
    placed = jax.device_put(jnp.zeros(8), SPLIT)
    assert place_leaf(placed, SPLIT) is placed


def test_a_bad_sharding_is_explained():
    with pytest.raises(TypeError, match="not a sharding") as info:
        place({"x": np.zeros(2)}, "data")
    assert "NamedSharding(mesh, PartitionSpec('data'))" in str(info.value)
    with pytest.raises(TypeError, match="not a sharding"):
        place({"x": np.zeros(2)}, None)
