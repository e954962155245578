"""What every strategy does (gyre.parallel._strategy): batches that do not split are
explained, placing a state copies it, Python numbers in a state become arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from tests.parallel.test_strategies import init_params, make_batches, make_train_step

# -- bad input ---------------------------------------------------------------------------------


def test_batch_not_divisible_by_the_device_count():
    state = managed.ManagedState.create(params=init_params(), tx=optax.sgd(0.1), strategy="data_parallel")
    x, y = make_batches(1, size=12)[0]
    with pytest.raises(ValueError, match="cannot be split evenly over 8 devices") as err:
        make_train_step()(state, (x, y))
    assert "(12, 8)" in str(err.value) and "multiple of 8" in str(err.value)
    # a test set's short last batch: the fix names the mask that pads it (the padded evaluation)
    assert "test step that takes mask=" in str(err.value)


def test_a_process_batch_not_divisible_by_its_devices_names_the_per_process_size(monkeypatch):
    """With several processes each feeds its share: 3 rows over 2 processes of 2 devices said
    'a batch of 3 cannot be split over 4 devices ... a batch size such as 4', though 2 per
    process (a global 4) would do and the batch given is one process's."""
    import jax

    monkeypatch.setattr(jax, "process_count", lambda: 2)  # 8 devices: 4 of each process
    with pytest.raises(ValueError, match="this process's batch of 6 cannot be split evenly over its 4 devices") as err:
        gyre.DataParallel().check_batch((np.zeros((6, 2)), np.zeros(6)))
    assert "a multiple of 4" in str(err.value) and "such as 4" in str(err.value)
    gyre.DataParallel().check_batch((np.zeros((4, 2)), np.zeros(4)))  # 4 per process: 8 in all


@pytest.mark.parametrize("strategy", ["jit", "data_parallel", "fsdp", "spmd"])
def test_creating_a_state_never_aliases_the_callers_arrays(strategy):
    # device_put onto a replicated sharding reuses the source buffer on its own device, even
    # with may_alias=False: the donated step then deleted the caller's arrays
    params = init_params()
    state = managed.ManagedState.create(params=params, tx=optax.sgd(0.1), strategy=strategy)
    make_train_step()(state, make_batches(1)[0])  # donates the state's buffers
    assert not any(x.is_deleted() for x in params.values())
    assert state.params["w1"].is_deleted()  # the state itself was donated


def test_python_numbers_in_a_state_become_arrays():
    state = managed.ManagedState.create(params={"w": 0.5}, strategy="data_parallel", scale=2)
    assert isinstance(state.params["w"], jax.Array) and state.params["w"].dtype == jnp.float32
    assert isinstance(state.extras["scale"], jax.Array)


def test_jit_compiles_under_the_strategy_without_constraining_what_comes_out():
    strategy = gyre.DataParallel()
    x = strategy.place_batch(np.ones((16, 2), np.float32))
    f = strategy.jit(lambda x, scale: x * scale)
    assert f(x, 3.0).sharding.spec == jax.sharding.PartitionSpec("data")
    assert not x.is_deleted()
    assert float(strategy.jit(lambda x: x * 2, donate=True)(x).sum()) == 64.0 and x.is_deleted()
    eager = gyre.get_strategy("eager").jit(lambda x: x + 1)
    assert eager(1) == 2  # not compiled: a Python int goes through as it is
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        strategy.jit(lambda x: x, not_an_option=1)
