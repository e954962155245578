"""Strategy names (gyre.parallel._registry): unknown and misspelt names explained, ciclo's
strategy names and register_strategy."""

import jax
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from tests.parallel.test_strategies import init_params


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown strategy 'fdsp'") as err:
        managed.ManagedState.create(params=init_params(), strategy="fdsp")
    message = str(err.value)
    for name in ("eager", "jit", "data_parallel", "fsdp"):
        assert name in message
    assert "did you mean 'fsdp'" in message.lower()
    with pytest.raises(ValueError, match="unknown strategy"):
        gyre.get_strategy(3)


# -- ciclo's strategy surface --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, cls, donate",
    [
        ("eager", gyre.Eager, True),
        ("jit", gyre.Jit, True),
        ("jit_donate", gyre.Jit, True),
        ("data_parallel", gyre.DataParallel, True),
        ("data_parallel_donate", gyre.DataParallel, True),
        ("data-parallel", gyre.DataParallel, True),
        ("dp", gyre.DataParallel, True),
        ("fsdp", gyre.FSDP, True),
        ("spmd", gyre.SPMD, True),
    ],
)
def test_every_registered_name_resolves(name, cls, donate):
    strategy = gyre.get_strategy(name)
    assert type(strategy) is cls and strategy.donate is donate


def test_ciclo_spellings_of_the_classes():
    assert gyre.JIT is gyre.Jit
    assert gyre.JIT(donate_args=False) == gyre.Jit(donate=False) != gyre.Jit()
    assert gyre.DataParallel(donate_args=False).donate is False
    with pytest.raises(ValueError, match="donate= and donate_args= disagree"):
        gyre.Jit(donate=True, donate_args=False)
    assert gyre.get_strategy("jit").lift_batch_size(32) == 32
    assert gyre.get_strategy("data_parallel").lift_batch_size(32) == 32 * 8


def test_register_strategy_with_ciclo_signatures():
    assert gyre.register_strategy("test_keep_state", constructor=lambda: gyre.Jit(donate=False)) is None
    assert gyre.get_strategy("test_keep_state") == gyre.Jit(donate=False)

    @gyre.register_strategy("test_half_mesh")
    class Half(gyre.DataParallel):
        def __init__(self):
            super().__init__(mesh=jax.sharding.Mesh(np.asarray(jax.devices()[:4]), ("data",)))

    assert isinstance(Half, type)  # the decorator returns the constructor unchanged
    strategy = gyre.get_strategy("test_half_mesh")
    assert strategy.data_size == 4
    # a registered name works wherever a strategy is taken
    state = managed.ManagedState.create(params=init_params(), tx=optax.sgd(0.1), strategy="test_half_mesh")
    assert state.strategy.data_size == 4
    with pytest.raises(ValueError, match="'test_half_mesh' is already registered") as info:
        gyre.register_strategy("test_half_mesh", constructor=gyre.Jit)
    assert "replace=True" in str(info.value)
    gyre.register_strategy("test_half_mesh", constructor=gyre.Jit, replace=True)
    assert gyre.get_strategy("test_half_mesh").name == "jit"


def test_register_strategy_refuses_bad_input():
    with pytest.raises(ValueError, match="non-empty string"):
        gyre.register_strategy("", constructor=gyre.Jit)
    with pytest.raises(TypeError, match="is not callable"):
        gyre.register_strategy("test_not_callable", constructor=gyre.Jit())
    gyre.register_strategy("test_not_a_strategy", constructor=lambda: "jit")
    with pytest.raises(TypeError, match="did not build a gyre.Strategy") as info:
        gyre.get_strategy("test_not_a_strategy")
    assert "str 'jit'" in str(info.value)


def test_a_misspelt_name_gets_the_closest_one():
    with pytest.raises(ValueError, match="unknown strategy 'jti'") as info:
        gyre.get_strategy("jti")
    message = str(info.value)
    assert "Did you mean 'jit'?" in message
    assert "'data_parallel_donate'" in message and "'spmd'" in message
