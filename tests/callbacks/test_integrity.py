"""The checkpoint's integrity checks: leaf descriptions, checksums, fit, one-line reasons."""

import json
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.callbacks._store import (
    Unreadable,
    abstract,
    checksums,
    describe_tree,
    empty_nodes,
    leaf_path,
    leaf_type,
    mismatch,
    reason,
    verify,
)
from gyre.core import TrainState


def paths(tree):
    return [leaf_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def test_leaf_paths_name_dict_keys_attributes_and_indices_alike():
    state = TrainState.create(params={"dense": {"w": jnp.ones(2)}}, tx=optax.sgd(0.1), rng=0)
    names = paths(state)
    assert "params/dense/w" in names and "step" in names
    # a dict with the same names gives the same paths as the dataclass
    assert paths({"params": {"dense": {"w": 0}}}) == ["params/dense/w"]
    assert paths({"a": (1, [2, 3])}) == ["a/0", "a/1/0", "a/1/1"]


def test_leaf_types_of_arrays_structs_and_python_numbers():
    assert leaf_type(jnp.zeros((2, 3), jnp.bfloat16)) == ((2, 3), "bfloat16")
    assert leaf_type(np.float16(1)) == ((), "float16")
    assert leaf_type(jax.ShapeDtypeStruct((4,), jnp.int8)) == ((4,), "int8")
    assert leaf_type(True) == ((), "bool") and leaf_type(3) == ((), "int")
    assert leaf_type(jax.random.key(0)) == ((), "key<fry>")


def test_a_leaf_that_is_not_an_array_is_refused_with_the_fix():
    with pytest.raises(TypeError) as info:
        describe_tree({"w": jnp.ones(2), "name": "mlp"}, with_checksums=False)
    lines = str(info.value).splitlines()
    assert lines[0] == "a checkpoint saves arrays and numbers; the state holds something else"
    assert lines[2] == "  received: str 'mlp'"
    assert "static fields" in lines[3]


def test_checksums_are_crc32_of_the_bytes_in_c_order():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (crc,) = checksums([jnp.asarray(a)])
    assert crc == zlib.crc32(a.tobytes())
    (transposed,) = checksums([jnp.asarray(a.T)])
    assert transposed == zlib.crc32(np.ascontiguousarray(a.T).tobytes()) != crc


def test_checksums_of_keys_empty_arrays_numbers_and_bfloat16():
    key, empty, number, half = checksums(
        [jax.random.key(3), jnp.zeros((0, 4)), 2.5, jnp.ones(3, jnp.bfloat16)]
    )
    assert key == zlib.crc32(np.asarray(jax.random.key_data(jax.random.key(3))).tobytes())
    assert empty == 0
    assert number == zlib.crc32(np.float64(2.5).tobytes())
    assert half == zlib.crc32(np.asarray(jnp.ones(3, jnp.bfloat16)).tobytes())


def test_checksum_of_a_sharded_array_is_that_of_its_whole_value():
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
    whole = jnp.arange(32.0).reshape(8, 4)
    sharded = jax.device_put(whole, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d")))
    assert checksums([sharded]) == checksums([whole])


def test_description_is_json_and_round_trips():
    tree = {"w": jnp.ones((2, 2)), "k": jax.random.key(0), "n": 3}
    described = describe_tree(tree, with_checksums=True)
    assert json.loads(json.dumps(described)) == described
    assert [(d["path"], d["shape"], d["dtype"]) for d in described] == [
        ("k", [], "key<fry>"), ("n", [], "int"), ("w", [2, 2], "float32")
    ]
    assert all(isinstance(d["crc32"], int) for d in described)
    assert all(d["crc32"] is None for d in describe_tree(tree, with_checksums=False))


def test_mismatch_names_missing_extra_shape_and_dtype():
    saved = describe_tree({"w": jnp.zeros((2, 3)), "b": jnp.zeros(3, jnp.int32), "old": jnp.zeros(1)},
                          with_checksums=False)
    target = {"w": jnp.zeros((3, 3)), "b": jnp.zeros(3, jnp.float32), "new": jnp.zeros(1)}
    text = mismatch(saved, target)
    assert text == (
        "1 target leaves not in the checkpoint (new); 1 saved leaves not in the target (old); "
        "shape of w: saved (2, 3), target (3, 3); dtype of b: saved int32, target float32"
    )
    assert mismatch(saved, {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3, jnp.int32), "old": jnp.zeros(1)}) is None


def test_mismatch_accepts_abstract_targets_and_limits_long_lists():
    saved = describe_tree({f"w{i}": jnp.zeros(2) for i in range(6)}, with_checksums=False)
    abstract_target = {f"w{i}": jax.ShapeDtypeStruct((2,), jnp.float32) for i in range(6)}
    assert mismatch(saved, abstract_target) is None
    text = mismatch(saved, {f"w{i}": jnp.zeros(3) for i in range(6)})
    assert text.count("shape of") == 3 and text.endswith("3 more leaves of another shape or dtype")
    text = mismatch(saved, {})
    assert text == "6 saved leaves not in the target (w0, w1, w2 and 3 more)"


def test_abstract_keeps_shardings_and_fills_a_missing_one():
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
    target = {
        "placed": jax.device_put(jnp.zeros(8), sharding),
        "struct": jax.ShapeDtypeStruct((8,), jnp.float32, sharding=sharding),
        "bare": jax.ShapeDtypeStruct((2,), jnp.int32),
        "host": np.zeros(2),
        "number": 1.0,
    }
    out = abstract(target)
    assert out["placed"].sharding == sharding and isinstance(out["placed"], jax.ShapeDtypeStruct)
    assert out["struct"].sharding == sharding
    assert out["bare"].sharding == jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    assert out["host"] is target["host"] and out["number"] == 1.0


def test_abstract_of_a_donated_target_still_works():
    x = jnp.ones(3)
    x.delete()
    assert abstract({"x": x})["x"].shape == (3,)


def test_verify_passes_equal_values_and_names_the_changed_leaves():
    tree = {"a": jnp.arange(3.0), "b": jnp.ones(2), "c": 5}
    saved = describe_tree(tree, with_checksums=True)
    verify(saved, tree)
    verify(describe_tree(tree, with_checksums=False), {"a": jnp.zeros(3), "b": jnp.zeros(2), "c": 0})
    with pytest.raises(Unreadable) as info:
        verify(saved, {"a": jnp.arange(3.0), "b": jnp.zeros(2), "c": 5})
    assert info.value.kind == "corrupt"
    assert str(info.value).startswith("the values of b differ from those saved (checksum mismatch")


TENSORSTORE = (
    'DATA_LOSS: Error opening "cast" driver: Error opening "zarr" driver: Error reading "b/.zarray" '
    'in OCDBT database at local file "/c/7/state/": Error reading Byte range [0, 307) of local file '
    '"/c/7/state/d/e29270814e73b650": Error decoding b-tree node [tensorstore_spec[1]=\'{"base":'
    + "x" * 1500
    + "}'] [source locations='tensorstore/x.cc:1']"
)


def test_reason_turns_a_tensorstore_status_into_one_line():
    assert reason(ValueError(TENSORSTORE), "/c/7") == "a file is damaged (state/d/e29270814e73b650)"
    assert reason(ValueError(TENSORSTORE.replace("DATA_LOSS", "OUT_OF_RANGE"))).startswith(
        "a file is truncated (/c/7/state/d/"
    )
    assert reason(ValueError("NOT_FOUND: gone")) == "a file is missing"
    assert reason(ValueError("UNAVAILABLE: busy")) == "unavailable"


def test_reason_looks_through_the_causes_and_names_the_array():
    try:
        try:
            raise ValueError('FAILED_PRECONDITION: Error reading "w/0.0" in OCDBT database at local '
                             'file "/c/1/state/": Truncated Zstd-compressed stream; at byte 0')
        except ValueError as inner:
            raise Exception("Encountered error while reading array index: (slice(0, 64, 1),). See full "
                            "TensorStore details: <bound method spec of TensorStore({...})>.") from inner
    except Exception as outer:
        assert reason(outer, "/c/1") == "a file is damaged (array w)"
    spec = Exception("Encountered error while reading. See full TensorStore details: <spec " + "x" * 900)
    assert reason(spec) == "Exception: Encountered error while reading."


def test_reason_of_other_errors_is_their_first_line_clipped():
    assert reason(json.JSONDecodeError("Expecting value", "", 0)) == (
        "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"
    )
    long = reason(ValueError("x" * 500 + "\nsecond line"))
    assert len(long) < 200 and long.endswith("...") and "second" not in long
    assert reason(KeyError()) == "KeyError"


def test_empty_nodes_are_the_structure_the_leaves_do_not_show_and_a_mismatch_names_them():
    assert empty_nodes({"w": 1.0, "extras": {}, "opt": (2.0, ())}) == ["extras", "opt/1"]
    saved = describe_tree({"w": jnp.zeros(2)}, with_checksums=False)
    assert mismatch(saved, {"w": jnp.zeros(2), "opt": ((), ())}, saved_empty=[]) == (
        "2 target nodes not in the checkpoint (opt/0, opt/1)"
    )
    assert mismatch(saved, {"w": jnp.zeros(2), "opt": ((), ())}) is None  # without saved_empty: leaves only
