"""The managed API's state: a TrainState that carries its strategy and counts skipped steps."""

import jax.numpy as jnp
import pytest

from gyre import managed
from tests.steps._managed_helpers import fresh, init_params


def test_a_state_with_an_optimizer_name_instead_of_an_optimizer_is_explained():
    with pytest.raises(TypeError, match="optax optimizer"):
        managed.ManagedState.create(params=init_params(), tx="adam")


def test_a_state_counts_no_skipped_steps_and_keeps_the_count_under_another_strategy():
    state = fresh(strategy="eager")
    assert state.skipped_steps.dtype == jnp.int32 and int(state.skipped_steps) == 0
    moved = state.replace(skipped_steps=jnp.int32(2)).with_strategy("jit")
    assert moved.strategy.name == "jit" and int(moved.skipped_steps) == 2
