"""Non-finite updates in a managed train step: nan_policy="skip"."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from tests.steps._managed_helpers import batch_of, fresh, init_params, mse, nan_batch, regression


def test_a_skipping_step_keeps_the_whole_state_and_counts_the_skip():
    from gyre.core.metrics import Mean

    @managed.train_step(nan_policy="skip")
    def step(state, batch):
        x, y = batch
        loss = mse(state.params, x, y)
        logs = gyre.logs().add_loss("mse", loss).add_stateful_metric("seen", Mean.from_value(loss))
        return logs, state

    state = fresh(tx=optax.adam(0.1), seen=Mean.empty())
    logs, state = step(state, batch_of(8))
    before = jax.device_get(state)
    logs, state = step(state, nan_batch())
    after = jax.device_get(state)
    # params, optimizer state, step and the metric accumulator are those before the NaN batch
    for a, b in zip(jax.tree_util.tree_leaves(before.replace(skipped_steps=0)),
                    jax.tree_util.tree_leaves(after.replace(skipped_steps=0)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(after.skipped_steps) == 1 and int(after.step) == 1
    assert int(logs.stateful_metrics.skipped_steps) == 1 and np.isnan(float(logs.losses.mse))
    logs, state = step(state, batch_of(8, seed=1))  # and trains on
    assert int(state.step) == 2 and int(state.skipped_steps) == 1
    assert step.compiled_count() == 1  # no retrace: the skip keeps every dtype


def test_accumulated_microbatches_skip_when_one_is_not_finite():
    x, y = batch_of(16)
    x[3] = np.inf
    logs, state = regression(accumulate_steps=4, nan_policy="skip")(fresh(), (x, y))
    assert int(state.skipped_steps) == 1 and int(state.step) == 0
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.asarray(init_params()["w"]))


def test_a_skipping_step_with_clipping_and_data_parallel():
    step = regression(clip_grad_norm=1.0, nan_policy="skip")
    state = fresh(strategy="data_parallel")
    logs, state = step(state, nan_batch(16))
    assert int(state.skipped_steps) == 1 and np.isnan(float(logs.metrics.grad_norm))
    logs, state = step(state, batch_of(16))
    assert int(state.skipped_steps) == 1 and int(state.step) == 1


def test_a_bad_nan_policy_for_a_step_is_explained():
    with pytest.raises(ValueError, match="train_step's nan_policy= must be None or 'skip'") as info:
        managed.train_step(nan_policy="raise")
    assert "pass nan_policy='raise' or 'ignore' to the loop, not to the step" in str(info.value)
    with pytest.raises(ValueError, match="received: str 'drop'"):
        managed.train_step(nan_policy="drop")


def test_a_skipping_step_that_changes_the_state_structure_is_explained():
    @managed.train_step(nan_policy="skip")
    def grows(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state.replace(extras={"new": jnp.zeros(())})

    with pytest.raises(ValueError, match="returned a state of another structure than it received"):
        grows(fresh(), batch_of(4))


def test_skip_non_finite_keeps_the_state_on_a_non_finite_gradient_alone():
    before = fresh()
    after = before.replace(params=jax.tree_util.tree_map(lambda p: p + 1, before.params), step=before.step + 1)
    grads = {"w": jnp.full((5, 3), jnp.inf), "b": jnp.zeros(3)}
    kept = managed.skip_non_finite(before, after, jnp.float32(0.5), grads, gyre.logs())
    assert int(kept.step) == 0 and int(kept.skipped_steps) == 1
    kept = managed.skip_non_finite(before, after, jnp.float32(0.5), jax.tree_util.tree_map(jnp.zeros_like, grads), gyre.logs())
    assert int(kept.step) == 1 and int(kept.skipped_steps) == 0
