"""gyre.core._host: the one door to the host (fetch), readiness without blocking, and
columns stacked by shape group on their way to the host."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core import _host
from gyre.core._host import ColumnFetch, fetch, is_ready, start_copy, start_fetch, to_python


def test_fetched_columns_keep_unstackable_columns_as_lists():
    from gyre.core._host import start_fetch

    mixed = [jnp.zeros((i % 2 + 1,)) for i in range(8)]  # two shapes: not stackable
    same = [jnp.float32(i) for i in range(9)]
    host_mixed, host_same = start_fetch([mixed, same]).result()
    assert [v.shape for v in host_mixed] == [(1,), (2,)] * 4
    assert isinstance(host_same, np.ndarray) and host_same.tolist() == list(range(9))


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


def test_columns_are_stacked_by_shape_group_padded_to_a_power_of_two(monkeypatch):
    stacked = []
    real = _host._stack_jit
    monkeypatch.setattr(_host, "_stack_jit", lambda values: stacked.append(len(values)) or real(values))
    scalars = [jnp.float32(i) for i in range(9)]
    vectors = [jnp.full(3, i, jnp.float32) for i in range(8)]
    few = [jnp.int32(i) for i in range(3)]  # fewer than 8 values: fetched as they are
    host_scalars, host_vectors, host_few = start_fetch([scalars, vectors, few]).result()
    assert sorted(stacked) == [8, 16]  # 9 scalars padded to 16, 8 vectors: one stacking each
    assert host_scalars.tolist() == list(range(9))
    assert host_vectors.shape == (8, 3) and host_vectors[5].tolist() == [5.0] * 3
    assert [int(v) for v in host_few] == [0, 1, 2]


def test_a_column_of_host_values_comes_back_as_it_is():
    (host,) = start_fetch([[1.0, "x", None]]).result()
    assert host == [1.0, "x", None]


def test_column_fetch_ready_and_device_columns_do_not_wait():
    moving = start_fetch([[jnp.float32(i) for i in range(8)]])
    assert isinstance(moving, ColumnFetch)
    (on_device,) = moving.device_columns()
    assert isinstance(on_device, jax.Array) and on_device.shape == (8,)
    jax.block_until_ready(on_device)
    assert moving.ready()
    (column,) = moving.result()
    assert column.tolist() == [float(i) for i in range(8)]


def test_start_copy_starts_the_copy_of_device_leaves_only():
    started = []

    class Leaf:
        def copy_to_host_async(self):
            started.append(self)

    leaves = [Leaf(), Leaf()]
    start_copy({"a": leaves[0], "b": [leaves[1], 3.0]})
    assert started == leaves
