"""gyre.steps._update: the one train-step builder the managed step, the trainer and fit use."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre.steps._update import train_update


def objective(state, batch):
    x, y = batch
    loss = jnp.mean((x @ state.params - y) ** 2)
    return loss, ({"loss": loss}, state)


def state_and_batch(tx=None, **extras):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=8).astype(np.float32)
    state = gyre.TrainState.create(params=jnp.ones(3), tx=tx or optax.sgd(0.1), rng=0, **extras)
    return state, (x, y)


def test_one_update_is_the_optax_update_of_the_gradients_of_the_loss():
    state, batch = state_and_batch()
    out = jax.jit(lambda s, b: train_update(objective, s, b))(state, batch)
    loss, grads = jax.value_and_grad(lambda p: objective(state.replace(params=p), batch)[0])(state.params)
    expected = state.apply_gradients(grads=grads)
    assert float(out.loss) == float(loss) and float(out.values["loss"]) == float(loss)
    np.testing.assert_array_equal(out.grads, grads)
    np.testing.assert_array_equal(out.state.params, expected.params)
    assert int(out.state.step) == 1 and out.grad_norm is None and out.skipped is None


def test_microbatches_average_their_gradients_and_get_their_own_keys():
    state, batch = state_and_batch()
    keys = []

    def keyed(state, batch):
        keys.append(state.rng)
        return objective(state, batch)

    out = jax.jit(lambda s, b: train_update(keyed, s, b, accumulate_steps=2))(state, batch)
    whole = train_update(objective, state, batch)
    np.testing.assert_allclose(out.grads, whole.grads, rtol=1e-6)  # equal halves of a mean loss
    np.testing.assert_allclose(float(out.loss), float(whole.loss), rtol=1e-6)
    assert len(keys) == 1  # traced once, inside the scan
    with pytest.raises(ValueError, match="cannot be split into 3 microbatches"):
        train_update(objective, state, batch, accumulate_steps=3)


def test_settle_runs_before_the_update_and_is_undone_with_a_skipped_one():
    state, (x, y) = state_and_batch(skipped_steps=jnp.zeros((), jnp.int32), seen=jnp.zeros(()))

    def settle(values, state):
        return values, state.replace(extras={**state.extras, "seen": state.extras["seen"] + 1})

    step = jax.jit(lambda s, b: train_update(objective, s, b, settle=settle, skip=True, clip_grad_norm=1.0))
    out = step(state, (x, y))
    assert float(out.state.extras["seen"]) == 1 and int(out.skipped) == 0 and float(out.grad_norm) > 1.0
    bad = step(out.state, (np.full_like(x, np.nan), y))
    assert float(bad.state.extras["seen"]) == 1 and int(bad.skipped) == 1 == int(bad.state.extras["skipped_steps"])
    np.testing.assert_array_equal(bad.state.params, out.state.params)


def test_apply_replaces_the_update():
    state, batch = state_and_batch()
    out = train_update(objective, state, batch, apply=lambda s, g: s.replace(params=s.params - g))
    np.testing.assert_array_equal(out.state.params, state.params - out.grads)
    assert int(out.state.step) == 0
