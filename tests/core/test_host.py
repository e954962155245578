"""gyre.core._host: the one door to the host (fetch), readiness without blocking, and
per-step device values stacked on the device before their copy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core import _host
from gyre.core._host import fetch, is_ready, stacked, start_copy, to_python


def test_stacked_takes_device_arrays_of_one_shape_and_dtype_only():
    assert stacked([jnp.zeros((i % 2 + 1,)) for i in range(8)]) is None  # two shapes
    assert stacked([jnp.float32(1), jnp.int32(1)]) is None  # two dtypes
    assert stacked([jnp.float32(1), 2.0]) is None and stacked([]) is None  # a host value
    assert stacked([jnp.float32(i) for i in range(9)]).tolist()[:9] == list(range(9))


def test_fetch_reads_a_whole_tree_in_one_explicit_transfer(monkeypatch):
    calls = []
    real = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda tree: calls.append(1) or real(tree))
    out = fetch({"a": jnp.float32(1.5), "b": [jnp.arange(3), 2.0]})
    assert calls == [1]
    assert isinstance(out["a"], np.ndarray) and out["a"] == 1.5
    assert out["b"][0].tolist() == [0, 1, 2] and out["b"][1] == 2.0


def test_fetch_of_a_value_split_over_processes_is_explained(monkeypatch):
    def refuse(tree):
        raise RuntimeError("Fetching value for `jax.Array` that spans non-addressable devices")

    monkeypatch.setattr(jax, "device_get", refuse)
    with pytest.raises(ValueError, match="split over several processes") as err:
        fetch(jnp.zeros(2))
    assert "process_allgather" in str(err.value)
    monkeypatch.setattr(jax, "device_get", lambda tree: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):  # any other error is not rewritten
        fetch(jnp.zeros(2))


class _Pending:
    """A device value that is never computed (a stand-in)."""

    def is_ready(self):
        return False


def test_is_ready_never_blocks_and_host_values_are_always_ready():
    assert is_ready([1.0, np.zeros(2), {"x": jnp.ones(2).block_until_ready()}])
    assert not is_ready({"done": 1.0, "pending": _Pending()})
    assert is_ready([])


def test_to_python_turns_only_0d_values_into_scalars():
    assert to_python(np.float32(2.5)) == 2.5 and type(to_python(np.float32(2.5))) is float
    assert type(to_python(np.array(3))) is int
    vector = np.arange(2)
    assert to_python(vector) is vector and to_python("text") == "text"


def test_values_are_stacked_padded_to_a_power_of_two(monkeypatch):
    lengths = []
    real = _host._stack_jit
    monkeypatch.setattr(_host, "_stack_jit", lambda values: lengths.append(len(values)) or real(values))
    scalars = stacked([jnp.float32(i) for i in range(9)])
    vectors = stacked([jnp.full(3, i, jnp.float32) for i in range(8)])
    assert lengths == [16, 8]  # 9 scalars padded to 16: few lengths ever compile
    assert scalars.shape == (16,) and scalars[:9].tolist() == list(range(9))
    assert vectors.shape == (8, 3) and vectors[5].tolist() == [5.0] * 3


def test_start_copy_starts_the_copy_of_device_leaves_only():
    started = []

    class Leaf:
        def copy_to_host_async(self):
            started.append(self)

    leaves = [Leaf(), Leaf()]
    start_copy({"a": leaves[0], "b": [leaves[1], 3.0]})
    assert started == leaves
