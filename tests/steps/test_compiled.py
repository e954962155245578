"""gyre.steps._compiled: a step compiled per strategy (fit's, and the managed step's base)."""

import jax
import jax.numpy as jnp
import numpy as np

import gyre
from gyre import managed
from gyre.steps._compiled import StrategyStep, strategy_of
from tests.steps._managed_helpers import fresh


def test_strategy_step_runs_one_step_and_fused_steps():
    add = StrategyStep(lambda s, b: (gyre.logs(), s + b.sum()), gyre.get_strategy("jit"))
    assert float(add(jnp.zeros(()), jnp.ones(4))[1]) == 4.0
    assert float(add.fuse(2)(jnp.zeros(()), jnp.ones((2, 4)))[1]) == 8.0


def test_a_state_without_a_strategy_runs_under_the_default_jit():
    plain = gyre.TrainState.create(params=jnp.zeros(2))
    assert strategy_of(plain).name == "jit" and strategy_of(fresh(strategy="eager")).name == "eager"


def test_fits_step_places_batches_on_any_mesh_the_managed_step_only_when_the_data_axis_splits():
    def pure(s, b):
        return gyre.logs(), s

    one = gyre.DataParallel(mesh=jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",)))
    assert StrategyStep(pure)._places(one) and not managed.step(pure)._places(one)
    assert not StrategyStep(pure)._places(gyre.get_strategy("jit"))
