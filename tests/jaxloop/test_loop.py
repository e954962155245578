"""gyre.jaxloop's inner loops: Loop, StatLoop, ActionLoop, TrainLoop, EvalLoop, reduce_outputs."""

import collections
import os
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre import jaxloop
from tests.jaxloop._helpers import (
    Counting,
    Record,
    _Linear,
    add_step,
    device_state,
    fresh,
    jit_step,
)


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


def test_a_list_starts_again_at_each_call_and_num_steps_zero_is_refused():
    loop = jaxloop.Loop(add_step)
    batches = [1, 2, 3]
    state, outputs = loop(fresh(), batches, num_steps=2)
    state, outputs = loop(state, batches)
    assert outputs["batch"] == [1, 2, 3] and state == {"step": 5, "total": 9}
    data = Counting(range(3))
    with pytest.raises(ValueError, match=r"(?s)num_steps must be a whole number >= 1.*num_steps=None") as caught:
        loop(state, data, num_steps=0)  # was a silent no-op (jaxloop itself runs one step)
    assert "runs one step" in str(caught.value) and data.pulls == 0


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
    with pytest.raises(TypeError, match="TrainLoop's end_actions must hold actions: .* is no interval"):
        jaxloop.TrainLoop(add_step, end_actions=[print])
    with pytest.raises(TypeError, match="Step's begin_actions must hold actions"):
        _Linear(jax.random.key(0), nn.Dense(1), begin_actions=[print])

    class NoSuperInit(jaxloop.Action):
        def __init__(self, tag):
            self.tag = tag  # super().__init__(interval=...) was forgotten

        def __call__(self, state, outputs, **kwargs):
            pass

    with pytest.raises(TypeError, match="is no interval") as info:
        jaxloop.EvalLoop(add_step, begin_actions=[NoSuperInit("x")])
    assert "call super().__init__(interval=...)" in str(info.value)
    for owner, make in (("TrainLoop", lambda a: jaxloop.TrainLoop(add_step, end_actions=a)),
                        ("Step", lambda a: _Linear(jax.random.key(0), nn.Dense(1), end_actions=a))):
        with pytest.raises(TypeError, match=f"{owner}'s end_actions must be a list of actions") as info:
            make(Record([], "x"))
        assert "end_actions=[action]" in str(info.value)
    with pytest.raises(TypeError, match="is not callable"):
        jaxloop.TrainLoop(add_step, end_actions=["summary"])


def test_outputs_is_a_defaultdict_of_lists_like_jaxloop():
    _, outputs = jaxloop.Loop(add_step).run(fresh(), [1])
    assert isinstance(outputs, collections.defaultdict) and outputs["missing"] == []


def test_a_state_that_is_a_pair_stays_the_state():
    def step(state, batch, n, **kwargs):
        return (state[0] + batch, state[1]), {"b": batch}

    state, outputs = jaxloop.Loop(step)((0, "opt"), [1, 2, 3])
    assert state == (6, "opt") and outputs["b"] == [1, 2, 3]


# -- evaluation without recompiles ---------------------------------------------------------------




def test_overrides_and_steps_that_forget_to_return_are_explained():
    class NoBegin(jaxloop.Loop):
        def begin(self, state, dataset):
            self.began = True  # the return was forgotten

    class NoEnd(jaxloop.Loop):
        def end(self, state, outputs):
            outputs["extra"] = 1

    class NoUpdate(jaxloop.Loop):
        def update_outputs(self, loop_outputs, step_outputs):
            loop_outputs["n"].append(1)

    def no_return(state, batch, per_loop_step_number, **kwargs):
        outputs = {"loss": batch}  # noqa: F841 - the return was forgotten

    cases = [
        (NoBegin(add_step), "NoBegin.begin must return (state, dataset)", "return state, dataset"),
        (NoEnd(add_step), "NoEnd.end must return (state, outputs)", "return state, outputs"),
        (NoUpdate(add_step), "NoUpdate.update_outputs must return the loop's outputs", "return loop_outputs"),
        (jaxloop.Loop(no_return), "no_return must return", "return state, {'loss': loss}"),
    ]
    for loop, problem, fix in cases:
        with pytest.raises(TypeError, match=problem.replace("(", r"\(").replace(")", r"\)")) as info:
            loop(fresh(), [1, 2, 3])
        assert fix in str(info.value) and "a missing return gives None" in str(info.value)


@pytest.mark.parametrize("hooked", [False, True])
def test_a_step_that_returns_outputs_and_state_swapped_is_explained(hooked):
    # (outputs, state) read the state as outputs: a TrainState said it had no attribute
    # 'items', and a dict state got its keys as outputs
    class Hooked(jaxloop.Loop):
        def update_outputs(self, loop_outputs, step_outputs):
            return super().update_outputs(loop_outputs, step_outputs)

    def swapped(state, batch, per_loop_step_number, **kwargs):
        return {"loss": batch}, state

    def not_a_dict(state, batch, per_loop_step_number, **kwargs):
        return state, batch

    kind = Hooked if hooked else jaxloop.Loop
    state = gyre.TrainState.create(params={"w": jnp.zeros(2)})
    with pytest.raises(TypeError, match=r"swapped returned outputs that are not a dict: the pair looks swapped") as info:
        kind(swapped)(state, [1.0, 2.0])
    assert "return state, {'loss': loss} (the state first)" in str(info.value)
    assert info.value.state is state  # the last state a step returned, not the outputs
    with pytest.raises(TypeError, match=r"not_a_dict returned outputs that are not a dict\n"):
        kind(not_a_dict)(state, [1.0, 2.0])


def test_get_next_batch_and_run_one_step_are_the_per_batch_hooks_called_once_per_step():
    calls = []

    class Hooked(jaxloop.Loop):
        def _get_next_batch(self, dataset):
            batch = super()._get_next_batch(dataset)
            calls.append(("batch", batch))
            return batch

        def _run_one_step(self, state, dataset, loop_outputs, per_loop_step_number, **kwargs):
            state, loop_outputs = super()._run_one_step(state, dataset, loop_outputs, per_loop_step_number, **kwargs)
            calls.append(("step", per_loop_step_number))
            return state, loop_outputs

    data = Counting(range(10, 13))
    state, outputs = Hooked(add_step)(fresh(), data, num_steps=2)
    assert calls == [("batch", 10), ("step", 1), ("batch", 11), ("step", 2)] and data.pulls == 2
    calls.clear()
    state, outputs = Hooked(add_step)(state, data)  # until the data ends: the third pull raises
    assert calls == [("batch", 12), ("step", 1)] and outputs["batch"] == [12] and state["step"] == 3


def test_a_run_one_step_that_skips_batches_and_one_that_returns_nothing():
    class EveryOther(jaxloop.Loop):
        def _run_one_step(self, state, dataset, loop_outputs, per_loop_step_number, **kwargs):
            self._get_next_batch(dataset)  # dropped
            return super()._run_one_step(state, dataset, loop_outputs, per_loop_step_number, **kwargs)

    state, outputs = EveryOther(add_step)(fresh(), list(range(6)))
    assert outputs["batch"] == [1, 3, 5] and outputs["n"] == [1, 2, 3]

    class Forgets(jaxloop.Loop):
        def _run_one_step(self, *args, **kwargs):
            super()._run_one_step(*args, **kwargs)

    with pytest.raises(TypeError, match=r"Forgets\._run_one_step must return \(state, loop_outputs\)"):
        Forgets(add_step)(fresh(), [1, 2])


def test_log_num_flops_reaches_a_step_that_takes_it_at_the_first_step_only():
    seen = []

    def step(state, batch, n, log_num_flops=False):
        seen.append(log_num_flops)
        return state, {}

    jaxloop.Loop(step).run(0, [1, 2, 3], log_num_flops=True)
    assert seen == [True, False, False]
    jaxloop.Loop(add_step).run(fresh(), [1, 2], log_num_flops=True)  # a step without it: not passed


# -- issue 23: nothing silent ---------------------------------------------------------------


def _nan_at_third(state, batch, per_loop_step_number, **kwargs):
    state = state + jnp.where(per_loop_step_number == 3, jnp.nan, 1.0)  # diverges at the third step
    return state, {"loss": state * batch, "batch": batch}


@pytest.mark.parametrize("kind", [jaxloop.Loop, jaxloop.TrainLoop, jaxloop.EvalLoop])
def test_a_nan_output_raises_naming_the_step_and_ignore_keeps_the_old_behaviour(kind):
    with pytest.raises(gyre.NonFiniteError) as caught:
        kind(_nan_at_third)(0, range(5))
    assert (caught.value.step, caught.value.name) == (2, "loss")  # per_loop_step_number 3
    assert "per_loop_step_number 3" in str(caught.value)
    state, outputs = kind(_nan_at_third, nan_policy="ignore")(0, range(5))
    assert jnp.isnan(state) and jnp.isnan(outputs["loss"][2]) and len(outputs["loss"]) == 5
    with pytest.raises(ValueError, match="nan_policy"):
        kind(_nan_at_third, nan_policy="skip")


def _mean_step(state, batch, per_loop_step_number, **kwargs):
    return state, {"loss": jnp.mean(batch["x"])}


@pytest.mark.parametrize("kind", [jaxloop.Loop, jaxloop.EvalLoop])
def test_reduce_outputs_weights_the_steps_means_by_their_batch_sizes(kind):
    batches = [{"x": np.zeros(8, np.float32)}, {"x": np.full(1, 0.4, np.float32)}]  # 9 examples
    _, outputs = kind(_mean_step)(0, batches)
    assert float(jaxloop.reduce_outputs(outputs)["loss"]) == pytest.approx(0.4 / 9)  # was 0.2, unweighted
    assert outputs["loss"] == [outputs["loss"][0], outputs["loss"][1]]  # still a list of the step values


def test_a_batch_whose_leaves_disagree_on_their_rows_is_refused_unless_batch_size_fn_says():
    # time-major inputs (T=10, B=3, F) and labels (B,): the rows are not the leading dimension of all
    batches = [{"x": np.zeros((10, 3, 2), np.float32), "y": np.zeros(3, np.float32)}] * 2
    with pytest.raises(ValueError, match=r"(?s)leading dimension.*\(10, 3, 2\).*batch_size_fn="):
        jaxloop.EvalLoop(_mean_step)(0, batches)
    loop = jaxloop.EvalLoop(_mean_step, batch_size_fn=lambda batch: batch["y"].shape[0])
    _, outputs = loop(0, batches + [{"x": np.ones((10, 1, 2), np.float32), "y": np.zeros(1, np.float32)}])
    assert float(jaxloop.reduce_outputs(outputs)["loss"]) == pytest.approx(1 / 7)
    with pytest.raises(TypeError, match=r"(?s)batch_size_fn returned -3 as the samples.*a whole number >= 0"):
        jaxloop.EvalLoop(_mean_step, batch_size_fn=lambda batch: -3)(0, batches)
    with pytest.raises(TypeError, match=r"(?s)EvalLoop's batch_size_fn must be a function.*received: int 3"):
        jaxloop.EvalLoop(_mean_step, batch_size_fn=3)


# -- issue 24: one tight loop, SIGTERM at a step's end --------------------------------------------


class _HookedLoop(jaxloop.Loop):
    """A loop with an overridden per-batch hook: its steps run through the per-step hooks."""

    def _get_next_batch(self, dataset):
        return super()._get_next_batch(dataset)


def _sigterm_at_third(state, batch, per_loop_step_number, **kwargs):
    if per_loop_step_number == 3:
        os.kill(os.getpid(), signal.SIGTERM)
    return add_step(state, batch, per_loop_step_number)


@pytest.mark.parametrize("kind", [jaxloop.Loop, _HookedLoop])
def test_sigterm_ends_the_loop_after_the_step_it_arrived_during(kind):
    data = Counting(range(10))
    with pytest.warns(gyre.LoopWarning, match=r"preempted \(SIGTERM\) at per_loop_step_number 3"):
        state, outputs = kind(_sigterm_at_third)(fresh(), data)
    assert outputs["n"] == [1, 2, 3] and data.pulls == 3 and state == {"step": 3, "total": 3}
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone again
    state, outputs = kind(add_step)(state, data, num_steps=2)  # the next call runs on
    assert outputs["n"] == [1, 2] and state["step"] == 5


def test_a_loop_nested_in_gyre_loop_runs_to_its_end_and_the_outer_loop_stops():
    inner = []

    def evaluate(state):
        _, outputs = jaxloop.Loop(_sigterm_at_third)(fresh(), range(5))
        inner.append(outputs["n"])

    with pytest.warns(gyre.LoopWarning, match=r"preempted \(SIGTERM\) during step 0"):
        _, history, elapsed = gyre.loop(0, range(10), {gyre.every(1): evaluate})
    assert inner == [[1, 2, 3, 4, 5]] and history.stop_reason == "preempted" and elapsed.steps == 1


@pytest.mark.parametrize("kind", [jaxloop.Loop, _HookedLoop])
def test_a_failing_step_leaves_the_last_state_on_the_error(kind):
    def step(state, batch, per_loop_step_number, **kwargs):
        if per_loop_step_number == 3:
            raise RuntimeError("boom")
        return add_step(state, batch, per_loop_step_number)

    with pytest.raises(RuntimeError, match="boom") as caught:
        kind(step)(fresh(), range(5))
    assert caught.value.state == {"step": 2, "total": 1}


def test_the_tight_loop_and_the_hooks_compute_the_same():
    mask_step = jaxloop.EvalLoop(lambda s, b, n, mask=None, **kw: (s, {"x": b["x"].sum(), "m": mask}))
    batches = [{"x": np.ones((4, 2))}, {"x": np.ones((3, 2))}]

    class HookedEval(jaxloop.EvalLoop):
        def update_outputs(self, loop_outputs, step_outputs):
            return super().update_outputs(loop_outputs, step_outputs)

    _, tight = mask_step(0, batches)
    _, hooked = HookedEval(mask_step.step)(0, batches)
    assert tight.keys() == hooked.keys() and tight["x"].batch_sizes == hooked["x"].batch_sizes == [4, 3]
    assert [m.tolist() for m in tight["m"]] == [m.tolist() for m in hooked["m"]] == [[True] * 4, [True] * 3 + [False]]
