"""jaxloop's ActionLoop, TrainLoop and EvalLoop: loop and step action intervals, default statistics,
no per-step device reads, and the evaluation's padded batches."""


import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import jaxloop
from tests.jaxloop._helpers import (
    _TEST,
    _X,
    Record,
    _exact_mse,
    _Linear,
    _linear_batches,
    _MaskedEval,
    add_step,
    device_state,
    fresh,
    jit_step,
)


def test_loop_and_action_intervals_across_runs_and_a_manual_reset():
    log = []
    loop = jaxloop.ActionLoop(
        add_step, begin_actions=[Record(log, "begin", interval=2)], end_actions=[Record(log, "end", interval=3)]
    )
    state = fresh()
    for _ in range(6):
        state, _ = loop(state, [1])
    assert loop.loop_count == 6
    assert log == [("begin", 1, None), ("end", 3, None), ("begin", 3, None), ("begin", 5, None), ("end", 6, None)]
    log.clear()
    loop.loop_count = 0
    for _ in range(3):
        state, _ = loop(state, [1])
    assert loop.loop_count == 3 and log == [("begin", 7, None), ("end", 9, None)]
    with pytest.raises(ValueError, match="loop_count must be a whole number"):
        loop.loop_count = -1



def test_step_actions_run_on_the_one_based_per_loop_step_number():
    log = []
    step = _Linear(
        jax.random.key(0), nn.Dense(1), optimizer=optax.sgd(0.1), train=True,
        begin_actions=[Record(log, "b", interval=2)], end_actions=[Record(log, "e", interval=3)],
    )
    loop = jaxloop.TrainLoop(step)
    state, _ = loop(step.initialize_model((1, 3)), _linear_batches(7))
    assert log == [("b", 1, 2), ("e", 3, 3), ("b", 3, 4), ("b", 5, 6), ("e", 6, 6)]
    log.clear()
    loop(state, _linear_batches(3))  # the numbering starts at 1 again in each loop
    assert log == [("b", 8, 2), ("e", 10, 3)]
    assert step.compiled_count() == 1



def test_default_stats_of_train_and_eval_loops():
    _, train = jaxloop.TrainLoop(add_step)(fresh(), [1])
    _, evals = jaxloop.EvalLoop(add_step)(fresh(), [1])
    assert jaxloop.STAT_STEPS_PER_SEC in train and jaxloop.STAT_LOOP_TIME_SECS not in train
    assert jaxloop.STAT_LOOP_TIME_SECS in evals and jaxloop.STAT_STEPS_PER_SEC not in evals



def test_train_and_eval_loops_read_no_value_per_step_and_one_state_wait_per_loop():
    train = jaxloop.TrainLoop(jit_step)
    evals = jaxloop.EvalLoop(jit_step)
    batches = [jnp.float32(x) for x in range(10)]
    state, _ = train(device_state(), batches[:1])
    with jax.transfer_guard_device_to_host("disallow"):
        state, outputs = train(state, batches)
        _, eval_outputs = evals(state, batches, return_state_from_step=False)
    assert len(outputs["loss"]) == 10 and outputs[jaxloop.STAT_STEPS_PER_SEC] > 0
    assert eval_outputs[jaxloop.STAT_LOOP_TIME_SECS] > 0



@pytest.mark.parametrize("partitioner", [None, "data_parallel"])
def test_eval_loop_pads_for_a_step_whose_run_takes_mask(partitioner):
    step = _MaskedEval(jax.random.key(0), nn.Dense(1), partitioner=partitioner)
    state = step.initialize_model((1, 4))
    with gyre.testing.count_compilations() as compiled:
        _, outputs = jaxloop.EvalLoop(step)(state, iter(_TEST))
    assert step.compiled_count() == 1 and len(compiled.names) == 1, compiled.names
    assert [int(r) for r in outputs["rows"]] == [64] * 15 + [40]
    assert float(jaxloop.reduce_outputs(outputs)["mse"]) == pytest.approx(_exact_mse(state), abs=1e-6)



def test_eval_loop_keeps_a_step_without_mask_unpadded_and_train_loop_never_pads():
    seen = []

    def step(state, batch, n, **kwargs):
        seen.append((batch.shape, sorted(kwargs)))
        return state, {"sum": batch.sum(), "rows": batch.shape[0]}

    _, outputs = jaxloop.EvalLoop(step)(0, [_X[:64], _X[64:100]])
    assert seen == [((64, 4), []), ((36, 4), [])] and outputs["rows"] == [64, 36]
    mean = sum(float(s) for s in outputs["sum"]) / sum(outputs["rows"])
    assert mean == pytest.approx(float(_X[:100].astype(np.float64).sum(axis=1).mean()), abs=1e-6)

    def masked(state, batch, n, mask=None, **kwargs):
        seen.append((batch.shape, mask))
        return state, {}

    seen.clear()
    jaxloop.TrainLoop(masked)(0, [_X[:64], _X[64:100]])
    assert seen == [((64, 4), None), ((36, 4), None)]
    from gyre.jaxloop._loop import takes_mask

    assert takes_mask(masked) and not takes_mask(step)



def test_eval_loop_with_mask_reads_nothing_from_the_device_per_step():
    step = _MaskedEval(jax.random.key(0), nn.Dense(1))
    state = step.initialize_model((1, 4))
    loop = jaxloop.EvalLoop(step, stat_names=[])
    loop(state, _TEST[:1])  # compile outside the guard
    with jax.transfer_guard_device_to_host("disallow"):
        _, outputs = loop(state, _TEST)
    assert len(outputs["mse"]) == 16

