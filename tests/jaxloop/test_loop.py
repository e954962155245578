"""gyre.jaxloop's inner loops: Loop, StatLoop, ActionLoop, TrainLoop, EvalLoop, reduce_outputs."""

import collections

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import jaxloop
from tests.jaxloop._helpers import Counting, Record, add_step, device_state, fresh, jit_step


def test_num_steps_pulls_no_extra_batch_and_an_iterator_continues():
    data = Counting(range(10))
    loop = jaxloop.Loop(add_step)
    state, outputs = loop(fresh(), data, num_steps=3)
    assert data.pulls == 3 and outputs["batch"] == [0, 1, 2] and outputs["n"] == [1, 2, 3]
    state, outputs = loop(state, data, num_steps=4)
    assert data.pulls == 7 and outputs["batch"] == [3, 4, 5, 6] and outputs["n"] == [1, 2, 3, 4]
    state, outputs = loop(state, data)  # None: until the data ends
    assert data.pulls == 10 and outputs["batch"] == [7, 8, 9]
    assert state == {"step": 10, "total": 45}
    state, outputs = loop(state, data, num_steps=5)  # exhausted: nothing runs
    assert state["step"] == 10 and dict(outputs) == {}


def test_a_list_starts_again_at_each_call_and_num_steps_zero_runs_nothing():
    loop = jaxloop.Loop(add_step)
    batches = [1, 2, 3]
    state, outputs = loop(fresh(), batches, num_steps=2)
    state, outputs = loop(state, batches)
    assert outputs["batch"] == [1, 2, 3] and state == {"step": 5, "total": 9}
    data = Counting(range(3))
    assert loop(state, data, num_steps=0)[0] == state and data.pulls == 0


def test_outputs_stay_on_the_device_and_reduce_when_asked():
    loop = jaxloop.Loop(jit_step)
    state, outputs = loop(device_state(), [jnp.float32(x) for x in (1, 2, 3)])
    assert all(isinstance(v, jax.Array) for v in outputs["loss"]) and len(outputs["loss"]) == 3
    assert float(jaxloop.reduce_outputs(outputs)["loss"]) == pytest.approx((1 + 3 + 6) / 3)


def test_the_loop_reads_nothing_from_the_device_per_step():
    loop = jaxloop.Loop(jit_step)
    batches = [jnp.float32(x) for x in range(20)]
    state, _ = loop(device_state(), batches[:1])  # compile outside the guard
    with jax.transfer_guard_device_to_host("disallow"):
        state, outputs = loop(state, batches, num_steps=15)
    assert int(state["step"]) == 16 and len(outputs["loss"]) == 15


def test_reduce_outputs_merges_metrics_stacks_arrays_and_keeps_the_rest():
    from gyre.core.metrics import Mean

    outputs = {
        "acc": [Mean.from_value(jnp.float32(1.0), 3), Mean.from_value(jnp.float32(0.0), 1)],
        "vec": [jnp.ones(2), jnp.zeros(2)],
        "flag": True,
        "empty": [],
    }
    reduced = jaxloop.reduce_outputs(outputs)
    assert float(reduced["acc"]) == 0.75
    assert reduced["vec"].shape == (2, 2) and reduced["flag"] is True and reduced["empty"] is None


def test_return_state_from_step_false_keeps_the_input_state():
    state, outputs = jaxloop.Loop(add_step)(fresh(), [5, 6], return_state_from_step=False)
    assert state == fresh() and outputs["step"] == [1, 1]


def test_hooks_run_in_order_and_can_be_overridden():
    calls = []

    class Custom(jaxloop.Loop):
        def begin(self, state, dataset):
            calls.append("begin")
            return {"step": 100, "total": 0}, dataset

        def update_outputs(self, loop_outputs, step_outputs):
            calls.append("update")
            loop_outputs["sum"] = loop_outputs.get("sum", 0) + step_outputs["batch"]
            return loop_outputs

        def end(self, state, outputs):
            calls.append("end")
            return state, dict(outputs, done=True)

    state, outputs = Custom(add_step)(fresh(), [1, 2])
    assert calls == ["begin", "update", "update", "end"]
    assert state["step"] == 102 and outputs == {"sum": 3, "done": True}


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


class _Linear(gyre.Step):
    def run(self, state, batch):
        x, y = batch

        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), {"loss": loss}


def _linear_batches(n, size=4):
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(size, 3)).astype(np.float32), np.ones((size, 1), np.float32)) for _ in range(n)]


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


def test_default_stats_of_train_and_eval_loops():
    _, train = jaxloop.TrainLoop(add_step)(fresh(), [1])
    _, evals = jaxloop.EvalLoop(add_step)(fresh(), [1])
    assert jaxloop.STAT_STEPS_PER_SEC in train and jaxloop.STAT_LOOP_TIME_SECS not in train
    assert jaxloop.STAT_LOOP_TIME_SECS in evals and jaxloop.STAT_STEPS_PER_SEC not in evals


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="interval must be a positive whole number"):
        Record([], "x", interval=0)
    with pytest.raises(ValueError, match="interval must be a positive whole number"):
        Record([], "x", interval=-3)
    with pytest.raises(TypeError, match="needs a step"):
        jaxloop.Loop(None)
    with pytest.raises(TypeError, match="must be an iterator or an iterable"):
        jaxloop.Loop(add_step)(fresh(), 42)
    with pytest.raises(ValueError, match="num_steps must be a whole number"):
        jaxloop.Loop(add_step)(fresh(), [1], num_steps=-1)
    with pytest.raises(TypeError, match="end_actions must be a list of actions"):
        jaxloop.TrainLoop(add_step, end_actions=[print])
    with pytest.raises(TypeError, match="Step's begin_actions must hold actions"):
        _Linear(jax.random.key(0), nn.Dense(1), begin_actions=[print])


def test_outputs_is_a_defaultdict_of_lists_like_jaxloop():
    _, outputs = jaxloop.Loop(add_step).run(fresh(), [1])
    assert isinstance(outputs, collections.defaultdict) and outputs["missing"] == []


def test_a_state_that_is_a_pair_stays_the_state():
    def step(state, batch, n, **kwargs):
        return (state[0] + batch, state[1]), {"b": batch}

    state, outputs = jaxloop.Loop(step)((0, "opt"), [1, 2, 3])
    assert state == (6, "opt") and outputs["b"] == [1, 2, 3]


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


# -- evaluation without recompiles ---------------------------------------------------------------

_X = np.random.default_rng(0).normal(size=(1000, 4)).astype(np.float32)
_Y = np.random.default_rng(1).normal(size=(1000, 1)).astype(np.float32)
_TEST = [(_X[i : i + 64], _Y[i : i + 64]) for i in range(0, 1000, 64)]  # 15 of 64, one of 40


class _MaskedEval(gyre.Step):
    def run(self, state, batch, mask=None):
        from gyre.core.metrics import Mean

        x, y = batch
        errors = ((state.apply_fn({"params": state.params}, x) - y) ** 2)[:, 0]
        return state, {"mse": Mean.from_stacked(errors, mask), "rows": mask.sum()}


def _exact_mse(state):
    preds = nn.Dense(1).apply({"params": state.params}, _X)
    return float(np.mean((np.asarray(preds, np.float64) - _Y) ** 2))


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
