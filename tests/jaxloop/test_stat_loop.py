"""jaxloop's StatLoop: its statistics, and steps_per_sec measured without waiting for the loop's own state."""


import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest

import gyre
from gyre import jaxloop
from tests.jaxloop._helpers import (
    _Linear,
    _linear_batches,
    device_state,
    jit_step,
)


def test_stats_params_flops_speed_and_examples():
    step = _Linear(jax.random.key(0), nn.Dense(1), optimizer=optax.sgd(0.1), train=True)
    names = [jaxloop.STAT_NUM_PARAMS, jaxloop.STAT_NUM_FLOPS, jaxloop.STAT_STEPS_PER_SEC,
             jaxloop.STAT_EXAMPLES_PER_SEC, jaxloop.STAT_LOOP_TIME_SECS, jaxloop.STAT_LIFE_TIME_SECS]
    loop = jaxloop.TrainLoop(step, stat_names=names, global_batch_size=4)
    state, outputs = loop(step.initialize_model((1, 3)), _linear_batches(5))
    assert outputs[jaxloop.STAT_NUM_PARAMS] == 4
    assert outputs[jaxloop.STAT_NUM_FLOPS] > 0
    assert outputs[jaxloop.STAT_STEPS_PER_SEC] > 0 and outputs[jaxloop.STAT_LOOP_TIME_SECS] > 0
    assert outputs[jaxloop.STAT_EXAMPLES_PER_SEC] == pytest.approx(4 * outputs[jaxloop.STAT_STEPS_PER_SEC])
    assert len(outputs["loss"]) == 5 and int(state.step) == 5



def test_steps_per_sec_is_measured_one_inner_loop_late_without_waiting_for_the_loops_own_state(monkeypatch):
    from gyre.jaxloop import _stat_loop

    waited = []
    real = jax.block_until_ready
    monkeypatch.setattr(_stat_loop.jax, "block_until_ready", lambda x: (waited.append(x), real(x))[1])
    train = jaxloop.TrainLoop(jit_step)
    state, rates = device_state(), []
    for _ in range(4):
        state, outputs = train(state, [jnp.float32(x) for x in range(5)])
        rates.append(outputs[jaxloop.STAT_STEPS_PER_SEC])
    # the first inner loop waits for its state (its rate is exact); each later one waits only
    # for a one-element marker of the loop before it, from the third on
    assert len(waited) == 3 and all(getattr(w, "size", None) == 1 for w in waited[1:])
    assert rates[1] == rates[0]  # the second reports the first's rate (nothing newer is done)
    assert rates[2] != rates[0] and all(r > 0 for r in rates)



def test_the_marker_of_an_inner_loop_is_its_last_steps_output_without_a_compiled_call(monkeypatch):
    from gyre.jaxloop import _stat_loop

    waited, markers = [], []
    real = jax.block_until_ready
    monkeypatch.setattr(_stat_loop.jax, "block_until_ready", lambda x: (waited.append(x), real(x))[1])
    monkeypatch.setattr(_stat_loop, "_done_marker", lambda leaf: markers.append(leaf))
    train = jaxloop.TrainLoop(jit_step)
    state, losses = device_state(), []
    for _ in range(3):
        state, outputs = train(state, [jnp.float32(x) for x in range(5)])
        losses.append(outputs["loss"][-1])
    assert markers == [] and waited[1] is losses[1]  # the third loop waits for the second's last loss


def test_a_step_that_outputs_gyre_logs_marks_its_loop_with_them(monkeypatch):
    from gyre.jaxloop import _stat_loop

    markers = []
    monkeypatch.setattr(_stat_loop, "_done_marker", lambda leaf: markers.append(leaf))

    def step(state, batch, n, **kwargs):
        new, outputs = jit_step(state, batch, n)
        return new, gyre.logs().add_loss("loss", outputs["loss"])

    train = jaxloop.TrainLoop(step)
    state = device_state()
    for _ in range(3):
        state, _ = train(state, [jnp.float32(x) for x in range(3)])
    assert markers == []
