"""The fork's array specs and pytree files: specs round-trip, pytrees come back exact without
pickle, and what cannot be stored safely (or was pickled) is an explained error."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.trainer import (
    ArraySpec,
    array_to_spec,
    convert_from_array_spec,
    convert_to_array_spec,
    load_pytree,
    np_array_to_spec,
    save_pytree,
    spec_to_array,
)


def test_specs_round_trip_shape_dtype_and_fill_value():
    spec = array_to_spec(jnp.arange(6, dtype=jnp.int32).reshape(2, 3) + 4)
    assert (spec.shape, spec.dtype, spec.value) == ((2, 3), jnp.int32, 4)
    back = spec_to_array(spec)
    assert isinstance(back, jax.Array) and back.shape == (2, 3) and bool(jnp.all(back == 4))
    spec = np_array_to_spec(np.full((3,), 2.5, np.float16))
    assert spec.device == "numpy"
    assert spec_to_array(spec).dtype == np.float16
    assert convert_to_array_spec("leaf") == "leaf" and convert_from_array_spec(None) is None


def test_a_spec_of_an_unknown_device_lands_on_the_default_device():
    array = spec_to_array(ArraySpec((2,), jnp.float32, "tpu:7", 1.0))
    assert next(iter(array.devices())) == jax.devices()[0]


def test_spec_to_array_explains_a_non_spec():
    with pytest.raises(TypeError, match="spec_to_array takes an ArraySpec") as info:
        spec_to_array((2, 3))
    assert "expected" in str(info.value) and "fix" in str(info.value)


def test_pytree_values_come_back_exact_with_their_kinds(tmp_path):
    tree = {
        "w": jnp.arange(6.0).reshape(2, 3),
        "half": jnp.ones(2, jnp.bfloat16) * 1.5,
        "np": np.array([8, 9], np.int64),
        "nested": {"t": (1, 2.5, None, "s", True), "l": [np.float32(3.0)]},
    }
    path = tmp_path / "tree"
    save_pytree(tree, path)
    assert path.exists() and not (tmp_path / "tree.npz").exists()  # exactly the given name
    back = load_pytree(str(path))
    assert isinstance(back["w"], jax.Array) and np.array_equal(back["w"], tree["w"])
    assert back["half"].dtype == jnp.bfloat16 and np.array_equal(back["half"], tree["half"])
    assert isinstance(back["np"], np.ndarray) and back["np"].tolist() == [8, 9]
    assert back["nested"]["t"] == (1, 2.5, None, "s", True)
    assert back["nested"]["l"][0].tolist() == 3.0


@pytest.mark.parametrize("leaf", [object(), {1: 2}, np.array([{}], dtype=object)])
def test_what_needs_pickle_is_refused_naming_where(tmp_path, leaf):
    with pytest.raises(TypeError, match="cannot store the leaf at /a") as info:
        save_pytree({"a": leaf}, tmp_path / "t")
    assert "pickle" in str(info.value)


def test_a_pickled_file_is_never_loaded(tmp_path):
    path = tmp_path / "fork.pkl"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="load_pytree cannot read") as info:
        load_pytree(path)
    assert "never" in str(info.value)


def test_a_plain_npz_archive_is_explained(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, x=np.ones(2))
    with pytest.raises(ValueError, match="without gyre's tree"):
        load_pytree(path)
