"""Calling the user's step function: what it may take and return, its losses and params, errors."""

import jax.numpy as jnp
import pytest

import gyre
from gyre import managed
from tests.steps._managed_helpers import batch_of, fresh, mse


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


def test_params_of_another_shape_are_an_error_not_silently_dropped():
    @managed.train_step
    def grows(state, batch):
        x, y = batch
        params = {**state.params, "w": jnp.zeros((6, 3))}
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state.replace(params=params)

    with pytest.raises(ValueError, match="grows returned params of another structure or shape") as info:
        grows(fresh(), batch_of(4))
    text = str(info.value)
    assert "float32[5, 3]" in text and "float32[6, 3]" in text
    assert "computes the params update itself" in text and "model_state or extras" in text

    @managed.train_step
    def drops(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", mse(state.params, x, y)), state.replace(params={"w": state.params["w"]})

    with pytest.raises(ValueError, match="drops returned params of another structure"):
        drops(fresh(), batch_of(4))


@pytest.mark.parametrize("value", [jnp.int32(3), jnp.array(True), 2], ids=["int32", "bool", "python int"])
def test_an_integer_loss_is_an_error(value):
    @managed.train_step
    def counts(state, batch):
        return gyre.logs().add_loss("hits", value), state

    with pytest.raises(TypeError, match="loss 'hits' of .*counts is (int32|bool)") as info:
        counts(fresh(), batch_of(4))
    assert "gradient would be zero" in str(info.value) and "astype(jnp.float32)" in str(info.value)


def test_returns_logs_alone_state_alone_or_none_parts():
    state = fresh()
    only_logs = managed.step(lambda s, b: gyre.logs().add_metric("m", b.sum()))
    logs, same = only_logs(state, jnp.ones(3))
    assert float(logs.metrics.m) == 3.0 and int(same.step) == 0
    bump = managed.step(lambda s: s.replace(extras={"n": s.extras.get("n", 0) + 1}))  # ciclo's reset style
    logs, bumped = bump(state)
    assert logs == {} and int(bumped.extras["n"]) == 1
    logs, same = managed.step(lambda s, b: (None, None))(state, 0)
    assert logs == {} and same.params["w"].shape == (5, 3)


def test_a_step_taking_more_than_state_and_batch_is_explained():
    with pytest.raises(TypeError, match="takes 3 arguments; a managed step gets \\(state, batch\\)") as info:
        managed.train_step(lambda state, batch, elapsed: (gyre.logs(), state))
    assert "state.step" in str(info.value)


def test_swapped_pair_is_explained():
    swapped = managed.step(lambda s, b: (s, gyre.logs()))
    with pytest.raises(TypeError, match="wrong order") as info:
        swapped(fresh(), 0)
    assert "return logs, state" in str(info.value)
