"""The managed API: gradients from logged losses, accumulation, clipping, precision, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed


def init_params():
    return {"w": jax.random.normal(jax.random.PRNGKey(1), (5, 3)) * 0.5, "b": jnp.zeros(3)}


def batch_of(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 5)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32)


def mse(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"][None] - y) ** 2)


def regression(**options):
    @managed.train_step(**options)
    def train_step(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)).add_metric("n", x.shape[0]), state

    return train_step


def fresh(tx=None, **kwargs):
    return managed.ManagedState.create(params=init_params(), tx=tx or optax.sgd(0.1), **kwargs)


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


def test_method_form_and_loops():
    class State(managed.ManagedState):
        @managed.train_step
        def train_step(self, batch):
            x, y = batch
            return gyre.logs().add_loss("mse", mse(self.params, x, y)), self

        @managed.step
        def test_step(self, batch):
            x, y = batch
            return gyre.logs().add_metric("mse", mse(self.params, x, y)), self

    state = State.create(params=init_params(), tx=optax.sgd(0.1))
    logs, state = state.train_step(batch_of(8))
    assert int(state.step) == 1
    batches = [batch_of(8, seed=i) for i in range(6)]
    state, history, _ = gyre.train_loop(state, batches, test_dataset=lambda: batches[:2], epoch_duration=3)
    assert int(state.step) == 7
    losses = history.collect("mse")
    assert len(history.collect("mse_test")) == 2 and losses[-1] < losses[0]


def test_managed_step_does_not_update():
    @managed.step
    def evaluate(state, batch):
        x, y = batch
        return gyre.logs().add_metric("mse", mse(state.params, x, y)), state

    state = fresh()
    logs, after = evaluate(state, batch_of(8))
    assert int(after.step) == 0 and evaluate.compiled_count() == 1


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


# -- bad input ---------------------------------------------------------------------------------


def test_no_loss_logged():
    @managed.train_step
    def no_loss(state, batch):
        return gyre.logs().add_metric("acc", 1.0), state

    with pytest.raises(ValueError, match="logged no loss") as err:
        no_loss(fresh(), batch_of(4))
    assert "add_loss" in str(err.value) and "metrics" in str(err.value)


def test_loss_that_is_not_a_scalar():
    @managed.train_step
    def per_example(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", jnp.mean((x[:3, :3] - y[:3]) ** 2, axis=1)), state

    with pytest.raises(ValueError, match="loss 'mse' is not a scalar") as err:
        per_example(fresh(), batch_of(4))
    assert "(3,)" in str(err.value) and ".mean()" in str(err.value)


def test_bad_options():
    with pytest.raises(ValueError, match="accumulate_steps"):
        managed.train_step(accumulate_steps=0)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        managed.train_step(clip_grad_norm=-1)
    with pytest.raises(ValueError, match="unknown precision policy 'bf16'"):
        managed.train_step(policy="bf16")
    with pytest.raises(ValueError, match="cannot be split into 4 microbatches"):
        regression(accumulate_steps=4)(fresh(), batch_of(6))
    with pytest.raises(TypeError, match="must return \\(logs, state\\)"):
        managed.train_step(lambda s, b: gyre.logs())(fresh(), batch_of(4))
    with pytest.raises(TypeError, match="optax optimizer"):
        managed.ManagedState.create(params=init_params(), tx="adam")
