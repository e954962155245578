"""The pure function of a managed train step: gradients of the logged losses, microbatch
accumulation, clipping and mixed precision."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from tests.steps._managed_helpers import batch_of, fresh, init_params, mse, regression


def test_train_step_matches_hand_written_gradient_descent():
    x, y = batch_of(8)
    logs, state = regression()(fresh(), (x, y))
    grads = jax.grad(mse)(init_params(), x, y)
    expected = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, init_params(), grads)
    np.testing.assert_allclose(state.params["w"], expected["w"], atol=1e-6)
    assert int(state.step) == 1 and float(logs.losses.mse) == pytest.approx(float(mse(init_params(), x, y)))


def test_accumulating_four_microbatches_of_16_equals_one_batch_of_64():
    batch = batch_of(64)
    logs_big, big = regression()(fresh(), batch)
    logs_acc, acc = regression(accumulate_steps=4)(fresh(), batch)
    for name in ("w", "b"):
        np.testing.assert_allclose(acc.params[name], big.params[name], atol=1e-6)
    assert float(logs_acc.losses.mse) == pytest.approx(float(logs_big.losses.mse), abs=1e-6)
    assert int(logs_acc.metrics.n) == 16  # metrics are averaged over microbatches


def test_microbatches_get_their_own_keys():
    @managed.train_step(accumulate_steps=2)
    def noisy(state, batch):
        draw = jax.random.normal(state.step_key("noise"))
        logs = gyre.logs().add_loss("l", jnp.sum(state.params["b"] ** 2))
        return logs.add_metric("draw", draw).add_output("last_draw", draw), state

    logs, _ = noisy(fresh(), batch_of(4))
    # microbatch i draws from fold_in(rng, i), then the step and stream are folded in
    draws = []
    for i in range(2):
        sub = gyre.TrainState.create(params=(), rng=jax.random.fold_in(jax.random.PRNGKey(0), i))
        draws.append(float(jax.random.normal(sub.step_key("noise"))))
    assert draws[0] != draws[1]
    assert float(logs.outputs.last_draw) == pytest.approx(draws[1], abs=1e-6)
    assert float(logs.metrics.draw) == pytest.approx(sum(draws) / 2, abs=1e-6)


def test_clipping_limits_the_update_and_logs_the_norm():
    x, y = batch_of(8)
    logs, clipped = regression(clip_grad_norm=1e-3)(fresh(tx=optax.sgd(1.0)), (x, y))
    delta = jax.tree_util.tree_map(lambda a, b: a - b, clipped.params, init_params())
    assert float(optax.global_norm(delta)) == pytest.approx(1e-3, rel=1e-3)
    assert float(logs.metrics.grad_norm) > 1e-3


def test_bfloat16_policy_computes_low_and_keeps_float32_params():
    dtypes = []

    @managed.train_step(policy="bfloat16")
    def train_step(state, batch):
        x, y = batch
        dtypes.append((state.params["w"].dtype, x.dtype))
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state

    state = fresh()
    for _ in range(30):
        logs, state = train_step(state, batch_of(16, seed=0))
    assert dtypes[0] == (jnp.bfloat16, jnp.bfloat16)
    assert state.params["w"].dtype == jnp.float32
    assert float(logs.losses.mse) < float(mse(init_params(), *batch_of(16, seed=0)))
