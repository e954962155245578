"""The managed step object: compiled per strategy, fused, its skipping form, masks of padded batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre import managed
from tests.steps._managed_helpers import batch_of, fresh, init_params, regression


def test_fuse_runs_steps_in_one_scan():
    batches = [batch_of(8, seed=i) for i in range(3)]
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *batches)
    step = regression()
    logs, fused = step.fuse(3)(fresh(), stacked)
    state = fresh()
    for b in batches:
        _, state = step(state, b)
    np.testing.assert_allclose(fused.params["w"], state.params["w"], atol=1e-6)
    assert logs.losses.mse.shape == (3,) and int(fused.step) == 3


def test_the_compiled_count_comes_from_the_compat_module():
    step = regression()
    assert step.compiled_count() == 0
    _, state = step(fresh(), batch_of(8))
    _, state = step(state, batch_of(8))
    assert step.compiled_count() == 1
    step(state, batch_of(16))
    assert step.compiled_count() == 2


def test_with_nan_policy_builds_the_skipping_step_once():
    step = regression()
    skipping = step.with_nan_policy("skip")
    assert skipping is step.with_nan_policy("skip") and skipping.nan_policy == "skip"
    assert skipping.with_nan_policy("skip") is skipping
    assert step.with_nan_policy("ignore") is step and step.nan_policy is None
    evaluate = managed.step(lambda state, batch: gyre.logs())
    assert evaluate.with_nan_policy("skip") is evaluate and evaluate.nan_policy is None
    skipping(fresh(), batch_of(4))
    assert step.compiled_count() == 1  # the skipping form's program counts as the step's


def _masked_test_step():
    @managed.step
    def test_step(state, batch, mask=None):
        x, y = batch
        errors = jnp.mean((x @ state.params["w"] + state.params["b"][None] - y) ** 2, axis=1)
        return gyre.logs().add_metric("mse", jnp.sum(errors * mask) / jnp.sum(mask)), state

    return test_step


def test_a_managed_test_step_with_mask_compiles_once_and_its_mean_is_exact():
    from gyre.engine._named import DEFAULT_TEST_AGGREGATION

    x, y = batch_of(1000)
    test = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 1000, 64)]  # 15 of 64, one of 40
    test_step, state = _masked_test_step(), fresh()
    assert test_step.takes_mask
    for steps_per_call in (1, 4):
        evaluate = gyre.inner_loop("test", lambda s, k=steps_per_call: gyre.test_loop(
            s, test, {gyre.on_test_step: test_step}, steps_per_call=k), aggregation=DEFAULT_TEST_AGGREGATION)
        logs, _ = evaluate(state)
        exact = np.mean((x.astype(np.float64) @ np.asarray(state.params["w"]) - y) ** 2)
        assert float(logs.metrics.mse_test) == pytest.approx(exact, abs=1e-6)
    # the fused scan of 4; step by step (in blocks) the step is compiled inside the loop's ring step
    assert test_step.compiled_count() == 1


def test_a_managed_step_takes_mask_by_hand_and_refuses_it_without_a_mask_parameter():
    x, y = batch_of(4)
    mask = np.array([True, True, True, False])
    logs, _ = _masked_test_step()(fresh(), (x, y), mask=mask)
    errors = np.mean((x @ np.asarray(init_params()["w"]) - y) ** 2, axis=1)
    assert float(logs.metrics.mse) == pytest.approx(errors[:3].mean(), rel=1e-5)
    unmasked = managed.step(lambda state, batch: (gyre.logs().add_metric("n", batch[0].shape[0]), state))
    assert not unmasked.takes_mask
    with pytest.raises(TypeError, match="got the mask of a padded batch, and takes no mask") as info:
        unmasked(fresh(), (x, y), mask=mask)
    assert "add mask=None" in str(info.value)


@pytest.mark.parametrize("loop", ["train_loop", "loop"])
def test_managed_step_used_as_a_train_step_warns_that_nothing_is_minimised(loop):
    import optax

    @managed.step  # meant: managed.train_step
    def train_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.sum(state.params["w"] * batch)), state

    state = managed.ManagedState.create(params={"w": jnp.ones(2)}, tx=optax.sgd(0.1))
    data = [jnp.ones(2)] * 3
    with pytest.warns(gyre.LoopWarning, match=r"(?s)managed.step.*compiles without gradients.*"
                      r"managed.train_step") as caught:
        if loop == "loop":
            gyre.loop(state, data, {gyre.every(1): train_step})
        else:
            gyre.train_loop(state, data, {gyre.on_train_step: train_step})
    assert len([w for w in caught if w.category is gyre.LoopWarning]) == 1


def test_managed_step_in_test_loop_logging_a_loss_stays_quiet():
    import warnings

    @managed.step
    def test_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.mean(batch[0])), state

    with warnings.catch_warnings():
        warnings.simplefilter("error", gyre.LoopWarning)
        gyre.test_loop(fresh(), [batch_of(4)] * 2, {gyre.on_test_step: test_step})
