"""gyre.jaxloop.OuterLoop: train loops with evaluations, resume alignment, stopping, and
continuous evaluation of checkpoints."""

import contextlib
import json
import os
import signal

import jax.numpy as jnp
import numpy as np
import pytest

import gyre.data
from gyre import jaxloop
from gyre.jaxloop import STOP_LOOP, EvalSpec
from tests.jaxloop._helpers import (
    Counting,
    FakeWriter,
    Record,
    add_step,
    device_state,
    fresh,
    jit_step,
)


def _ends(log):
    return [step for tag, step, _ in log if tag == "end"]


def eval_step(state, batch, n, **kwargs):
    """An evaluation that returns a changed state (which the outer loop must drop)."""
    return {"step": state["step"] + 1000, "total": -1}, {"seen": batch, "at": state["step"]}


def test_inner_loops_end_at_multiples_of_train_loop_steps_and_pull_exactly():
    log = []
    data = Counting(range(100))
    train = jaxloop.TrainLoop(add_step, end_actions=[Record(log, "end")])
    state, outputs = jaxloop.OuterLoop(train_loop=train)(
        fresh(), train_dataset=data, train_total_steps=10, train_loop_steps=3
    )
    assert _ends(log) == [3, 6, 9, 10] and data.pulls == 10 and state["step"] == 10
    assert outputs["batch"] == [9] and outputs[STOP_LOOP] is False and train.loop_count == 4


def test_evaluation_intervals_predicates_and_the_state_it_leaves_alone():
    contexts = []

    def every_other_after_4(ctx):
        contexts.append(ctx)
        return ctx.step >= 4

    evals = [jaxloop.EvalLoop(eval_step), jaxloop.EvalLoop(eval_step, name="test")]
    outer = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(add_step), eval_loops=evals)
    seen = []
    evals[0].end_actions.append(Record(seen, "eval"))
    evals[1].end_actions.append(Record(seen, "test"))
    state, outputs = outer(
        fresh(), train_dataset=iter(range(100)), train_total_steps=8, train_loop_steps=2,
        eval_specs=[EvalSpec(dataset=[7], eval_loop_interval=2), EvalSpec(dataset=[8, 9], should_eval_fn=every_other_after_4)],
    )
    assert state == {"step": 8, "total": sum(range(8))}  # evaluation never changed it
    # the eval loops' actions see the eval state (1000 added per eval batch), from the train
    # state at steps 4; 4 and 6; 8 and 8
    assert [(t, s) for t, s, _ in seen] == [("eval", 1004), ("test", 2004), ("test", 2006), ("eval", 1008), ("test", 2008)]
    assert [(c.step, c.loop_count, c.eval_count, c.eval_name, c.train_total_steps) for c in contexts] == [
        (2, 1, 0, "test", 8), (4, 2, 0, "test", 8), (6, 3, 1, "test", 8), (8, 4, 2, "test", 8)]
    assert contexts[0].train_outputs["batch"] == [0, 1]
    assert outputs["eval"]["seen"] == [7] and outputs["eval"]["at"] == [8]
    assert outputs["test"]["seen"] == [8, 9] and outputs["batch"] == [6, 7]
    assert outer.eval_names == ["eval", "test"]


def test_a_one_shot_dataset_iterator_continues_across_evaluations():
    it = Counting(range(5))
    evals = jaxloop.EvalLoop(eval_step)
    seen = []

    class Keep(jaxloop.Action):
        def __call__(self, state, outputs, **kwargs):
            seen.append(list(outputs["seen"]))

    evals.end_actions.append(Keep())
    outer = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(add_step), eval_loops=[evals])
    outer(fresh(), train_dataset=iter(range(100)), train_total_steps=4, train_loop_steps=1,
          eval_specs=[EvalSpec(dataset_iterator=it, num_steps=2)])
    assert seen == [[0, 1], [2, 3], [4], []] and it.pulls == 5


def test_a_resumable_iterator_as_dataset_is_read_from_where_it_was_at_every_evaluation():
    data = gyre.data.batches(np.arange(5), 2, shuffle=False, epochs=1, drop_remainder=False)
    next(data)  # the evaluations start from where the iterator is when first evaluated
    evals = jaxloop.EvalLoop(eval_step)
    seen = []

    class Keep(jaxloop.Action):
        def __call__(self, state, outputs, **kwargs):
            seen.append([b.tolist() for b in outputs["seen"]])

    evals.end_actions.append(Keep())
    outer = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(add_step), eval_loops=[evals])
    for _ in range(2):  # a second call of the same outer loop still starts from there
        outer(fresh(), train_dataset=iter(range(100)), train_total_steps=3, train_loop_steps=1,
              eval_specs=[EvalSpec(dataset=data)])
    assert seen == [[[2, 3], [4]]] * 6


def test_train_loop_steps_none_makes_one_pass_of_an_iterable_per_loop():
    log = []
    train = jaxloop.TrainLoop(add_step, end_actions=[Record(log, "end")])
    state, _ = jaxloop.OuterLoop(train_loop=train)(fresh(), train_dataset=[1, 2, 3], train_total_steps=7)
    assert _ends(log) == [3, 6, 7] and state["total"] == 13


def test_exhausted_train_data_ends_training_cleanly():
    log = []
    data = Counting(range(7))
    train = jaxloop.TrainLoop(add_step, end_actions=[Record(log, "end")])
    evals = jaxloop.EvalLoop(eval_step)
    state, outputs = jaxloop.OuterLoop(train_loop=train, eval_loops=[evals])(
        fresh(), train_dataset=data, train_total_steps=100, train_loop_steps=3, eval_specs=[EvalSpec(dataset=[0])]
    )
    assert _ends(log) == [3, 6, 7] and state["step"] == 7 and data.pulls == 7
    assert outputs["batch"] == [6] and outputs["eval"]["at"] == [7] and outputs[STOP_LOOP] is False
    # data that ends exactly at a loop's end: one empty loop notices, and training ends
    log.clear()
    state, outputs = jaxloop.OuterLoop(train_loop=train)(
        fresh(), train_dataset=iter(range(6)), train_total_steps=100, train_loop_steps=3
    )
    assert _ends(log) == [3, 6, 6] and state["step"] == 6 and outputs["batch"] == [3, 4, 5]


def _ckpt_state():
    return {"step": jnp.int32(0), "total": jnp.float32(0)}


def test_resume_continues_from_the_latest_checkpoint_with_aligned_loop_ends(tmp_path):
    directory = str(tmp_path / "ckpt")
    marker = os.path.join(directory, jaxloop.STOP_FILE_NAME)
    spec = jaxloop.CheckpointSpec(directory)
    marker_seen = []

    class Marker(jaxloop.Action):
        def __call__(self, state, outputs, **kwargs):
            marker_seen.append(os.path.exists(marker))

    def run(total, log):
        action = jaxloop.CheckpointAction(directory)
        train = jaxloop.TrainLoop(add_step, end_actions=[action, Record(log, "end"), Marker()])
        outer = jaxloop.OuterLoop(train_loop=train, checkpoint_spec=spec)
        state, outputs = outer(_ckpt_state(), train_dataset=iter(jnp.ones(100)), train_total_steps=total,
                               train_loop_steps=3)
        return state, outputs, train, action

    first = []
    state, _, train, action = run(5, first)  # "killed" after step 5
    assert _ends(first) == [3, 5] and action.checkpoint.all_steps() == [3, 5]
    assert os.path.exists(marker)
    second = []
    marker_seen.clear()
    with pytest.warns(gyre.LoopWarning, match="the training data .a generator. cannot save its position"):
        state, outputs, train, action = run(11, second)  # (the same ones again: the warning is moot here)
    assert _ends(second) == [6, 9, 11]  # the first loop after the resume ends at a multiple of 3
    assert marker_seen == [False, False, False] and os.path.exists(marker)  # removed while training
    assert int(state["step"]) == 11 and float(state["total"]) == 11.0
    assert train.loop_count == 4  # 5 // 3 = 1, then three loops
    assert action.checkpoint.all_steps() == [6, 9, 11]
    third = []
    state, outputs, _, _ = run(11, third)  # nothing left to do: no train loop runs
    assert third == [] and int(state["step"]) == 11 and outputs is None  # jaxloop's answer


def test_a_stop_flag_in_the_outputs_ends_training():
    def step(state, batch, n, **kwargs):
        state, outputs = add_step(state, batch, n)
        return state, dict(outputs, **{STOP_LOOP: state["step"] >= 5})

    log = []
    train = jaxloop.TrainLoop(step, end_actions=[Record(log, "end")])
    state, outputs = jaxloop.OuterLoop(train_loop=train)(
        fresh(), train_dataset=iter(range(100)), train_total_steps=20, train_loop_steps=2
    )
    assert _ends(log) == [2, 4, 6] and state["step"] == 6 and outputs[STOP_LOOP] is True

    class StopEval(jaxloop.EvalLoop):
        def end(self, state, outputs):
            state, outputs = super().end(state, outputs)
            outputs[STOP_LOOP] = True
            return state, outputs

    state, outputs = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(add_step), eval_loops=[StopEval(eval_step)])(
        fresh(), train_dataset=iter(range(100)), train_total_steps=20, train_loop_steps=2,
        eval_specs=[EvalSpec(dataset=[0], eval_loop_interval=2)],
    )
    assert state["step"] == 4 and outputs[STOP_LOOP] is True


def test_a_stop_training_error_is_handled(tmp_path):
    directory = str(tmp_path / "ckpt")
    writer = FakeWriter()
    action = jaxloop.CheckpointAction(directory)
    train = jaxloop.TrainLoop(lambda s, b, n: ({"step": s["step"] + 1, "total": s["total"] + b}, {"loss": b}),
                              end_actions=[jaxloop.SummaryAction(writer), action])
    early = jaxloop.EarlyStoppingAction(jaxloop.MetricMonitoringStopHandler("loss", patience=2, mode="min"))
    evals = jaxloop.EvalLoop(lambda s, b, n: (s, {"loss": s["total"]}), end_actions=[early])
    outer = jaxloop.OuterLoop(train_loop=train, eval_loops=[evals], checkpoint_spec=jaxloop.CheckpointSpec(directory))
    state, outputs = outer(_ckpt_state(), train_dataset=iter(jnp.ones(100)), train_total_steps=50,
                           train_loop_steps=2, eval_specs=[EvalSpec(dataset=[0])])
    # the eval loss is the running total: it grows, so patience 2 stops at the third evaluation
    assert int(state["step"]) == 6 and outputs[STOP_LOOP] is True
    assert action.checkpoint.all_steps() == [2, 4, 6]  # every save finished
    assert writer.closed == 1 and [c[1] for c in writer.calls] == [2, 4, 6]
    assert os.path.exists(os.path.join(directory, jaxloop.STOP_FILE_NAME))


@pytest.mark.parametrize("crash_at", [6, 8])  # before the best's patience ran out, and at the stop
def test_a_resumed_run_stops_where_the_uninterrupted_one_does(tmp_path, crash_at):
    # was: the early stopping's best and patience were not in the checkpoint, so a run crashed at
    # step 6 and resumed stopped at step 14 instead of 10 (and at 8: trained on instead of stopping)
    losses = {2: 3.0, 4: 1.0, 6: 2.0, 8: 0.5, 10: 0.9, 12: 0.8, 14: 0.7, 16: 0.6}

    class Crash(Exception):
        pass

    class CrashAt(jaxloop.Action):
        def __init__(self, step):
            super().__init__()
            self.step = step

        def __call__(self, state, outputs, **kwargs):
            if int(state["step"]) == self.step:
                raise Crash

    def run(directory, crash=None):
        actions = [jaxloop.CheckpointAction(directory), *([CrashAt(crash)] if crash else [])]
        train = jaxloop.TrainLoop(lambda s, b, n: ({"step": s["step"] + 1, "total": s["total"] + b.sum()}, {}),
                                  end_actions=actions)
        early = jaxloop.EarlyStoppingAction(jaxloop.MetricMonitoringStopHandler("loss", patience=2, mode="min"))
        evals = jaxloop.EvalLoop(lambda s, b, n: (s, {"loss": losses[int(s["step"])]}), end_actions=[early])
        outer = jaxloop.OuterLoop(train_loop=train, eval_loops=[evals], checkpoint_spec=jaxloop.CheckpointSpec(directory))
        state, outputs = outer(_ckpt_state(), train_dataset=gyre.data.batches(np.ones(40, np.float32), 1),
                               train_total_steps=16, train_loop_steps=2, eval_specs=[EvalSpec(dataset=[0])])
        return int(state["step"]), outputs[STOP_LOOP], early.handler.get_best_info()

    whole = run(str(tmp_path / "whole"))
    assert whole == (12, True, (0.5, 8))
    with pytest.raises(Crash):
        run(str(tmp_path / "crashed"), crash=crash_at)
    assert run(str(tmp_path / "crashed")) == whole
    assert run(str(tmp_path / "crashed")) == whole  # resumed at its stop: stops there again


@pytest.mark.parametrize("crash_at", [4, 5])  # between the save at 4 and its evaluation, and after it
def test_a_resumed_run_counts_and_makes_the_evaluations_of_the_uninterrupted_one(tmp_path, crash_at):
    # was: without early stopping, a crash between the save at a loop end and that loop's evaluation
    # lost the evaluation (no replay), and EvalContext.eval_count started again at 0 after a resume;
    # then a crash after the evaluation (at 5) replayed it: its summaries were written twice at step 4
    class Crash(Exception):
        pass

    def run(directory, crash=None):
        def step(s, b, n, **kwargs):
            if crash == 5 and int(s["step"]) == 4:
                raise Crash
            return {"step": s["step"] + 1, "total": s["total"] + b.sum()}, {}

        class CrashAt(jaxloop.Action):
            def __call__(self, state, outputs, **kwargs):
                if crash == 4 and int(state["step"]) == 4:
                    raise Crash

        def should_eval(ctx):
            counts.append((ctx.step, ctx.eval_count))
            return True

        train = jaxloop.TrainLoop(step, end_actions=[jaxloop.CheckpointAction(directory), CrashAt()])
        evals = jaxloop.EvalLoop(lambda s, b, n: (s, {"at": s["step"]}),
                                 end_actions=[Record(seen, "eval"), jaxloop.SummaryAction(writer)])
        outer = jaxloop.OuterLoop(train_loop=train, eval_loops=[evals], checkpoint_spec=jaxloop.CheckpointSpec(directory))
        outer(_ckpt_state(), train_dataset=gyre.data.batches(np.ones(40, np.float32), 1), train_total_steps=8,
              train_loop_steps=2, eval_specs=[EvalSpec(dataset=[0], should_eval_fn=should_eval)])

    counts, seen, writer = [], [], FakeWriter()
    run(str(tmp_path / "whole"))
    assert counts == [(2, 0), (4, 1), (6, 2), (8, 3)] and [s for _, s, _ in seen] == [2, 4, 6, 8]
    assert [step for _, step, values in writer.calls if "at" in values] == [2, 4, 6, 8]
    counts.clear()
    seen.clear()
    writer.calls.clear()
    with pytest.raises(Crash):
        run(str(tmp_path / "crashed"), crash=crash_at)
    run(str(tmp_path / "crashed"))
    # the resume runs the evaluation at 4 if the crash came before it (4), not again after it (5)
    assert counts == [(2, 0), (4, 1), (6, 2), (8, 3)] and [s for _, s, _ in seen] == [2, 4, 6, 8]
    assert [step for _, step, values in writer.calls if "at" in values] == [2, 4, 6, 8]


@pytest.mark.parametrize("crash_at", [4, 5])  # between the save at 4 and its evaluation, and after it
def test_a_resumed_run_keeps_the_rows_a_jsonl_writer_had_and_writes_each_once(tmp_path, crash_at):
    # was: SummaryAction never told its writer of the resume, so the resumed run's JSONLWriter, which
    # starts its file afresh, dropped the crashed run's rows of steps 2 and 4 (the file held 6 and 8)
    class Crash(Exception):
        pass

    def run(crash=None):
        def step(s, b, n, **kwargs):
            if crash == 5 and int(s["step"]) == 4:
                raise Crash
            return {"step": s["step"] + 1, "total": s["total"] + b.sum()}, {"loss": s["total"]}

        class CrashAt(jaxloop.Action):
            def __call__(self, state, outputs, **kwargs):
                if crash == 4 and int(state["step"]) == 4:
                    raise Crash

        directory = str(tmp_path / "ckpt")
        writer = gyre.JSONLWriter(str(tmp_path / "m.jsonl"))  # a new process: a new writer
        train = jaxloop.TrainLoop(step, end_actions=[jaxloop.CheckpointAction(directory), jaxloop.SummaryAction(writer),
                                                     CrashAt()])
        evals = jaxloop.EvalLoop(lambda s, b, n: (s, {"at": s["total"]}), end_actions=[jaxloop.SummaryAction(writer)])
        outer = jaxloop.OuterLoop(train_loop=train, eval_loops=[evals], checkpoint_spec=jaxloop.CheckpointSpec(directory))
        with contextlib.suppress(Crash):
            outer(_ckpt_state(), train_dataset=gyre.data.batches(np.ones(40, np.float32), 1), train_total_steps=8,
                  train_loop_steps=2, eval_specs=[EvalSpec(dataset=[0])])
        with open(tmp_path / "m.jsonl") as f:
            return [(r["step"], r.get("loss", r.get("at"))) for r in map(json.loads, f)]

    before = run(crash=crash_at)
    assert before == [(2, 0.5), (2, 2.0), (4, 2.5)] + ([(4, 4.0)] if crash_at == 5 else [])  # (the mean loss)
    assert run() == [(s, v) for t in (2, 4, 6, 8) for s, v in ((t, t - 1.5), (t, float(t)))]


def test_a_stop_training_error_from_a_train_action_returns_the_loop_state():
    class StopAt(jaxloop.Action):
        def __call__(self, state, outputs, **kwargs):
            if state["step"] >= 4:
                raise jaxloop.StopTrainingError("enough", best_step=4, best_metric=0.0)

    writer = FakeWriter()
    train = jaxloop.TrainLoop(add_step, end_actions=[StopAt(), jaxloop.SummaryAction(writer)])
    state, outputs = jaxloop.OuterLoop(train_loop=train)(
        fresh(), train_dataset=iter(range(100)), train_total_steps=20, train_loop_steps=2
    )
    assert state["step"] == 4 and outputs[STOP_LOOP] is True and writer.closed == 1


def test_a_stop_training_error_from_a_step_action_returns_the_last_state():
    class StopAtStep(jaxloop.Action):
        def __call__(self, state, outputs, **kwargs):
            if state["step"] >= 3:
                raise jaxloop.StopTrainingError("enough")

    class Stepper:  # a gyre.Step-like callable that runs its step-level end actions
        end_actions = [StopAtStep()]
        begin_actions = []

        def __call__(self, state, batch, n, **kwargs):
            state, outputs = add_step(state, batch, n)
            for action in self.end_actions:
                action(state, outputs, per_loop_step_number=n)
            return state, outputs

    state, outputs = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(Stepper()))(
        fresh(), train_dataset=iter(range(100)), train_total_steps=20, train_loop_steps=5
    )
    assert state["step"] == 2 and outputs[STOP_LOOP] is True  # the state before the stopped step


def test_writers_close_at_a_normal_end():
    writer = FakeWriter()
    train = jaxloop.TrainLoop(add_step, end_actions=[jaxloop.SummaryAction(writer, interval=2)])
    jaxloop.OuterLoop(train_loop=train)(fresh(), train_dataset=iter(range(10)), train_total_steps=6, train_loop_steps=2)
    assert [c[1] for c in writer.calls] == [4] and writer.closed == 1


def test_continuous_evaluation_of_two_checkpoints_then_the_marker(tmp_path):
    directory = str(tmp_path / "ckpt")
    writer_ckpt = jaxloop.CheckpointAction(directory)
    writer_ckpt({"step": jnp.int32(3), "total": jnp.float32(30)}, None)
    writer_ckpt.wait_until_finished()
    calls = []

    def stop_fn():
        calls.append(len(calls))
        if len(calls) == 2:  # a second checkpoint appears while the evaluator waits
            writer_ckpt({"step": jnp.int32(7), "total": jnp.float32(70)}, None)
            writer_ckpt.wait_until_finished()
        if len(calls) == 3:  # then training says it is done
            open(os.path.join(directory, jaxloop.STOP_FILE_NAME), "w").close()
            return True
        return False

    evaluated = []

    class Seen(jaxloop.Action):
        def __call__(self, state, outputs, **kwargs):
            evaluated.append((int(state["step"]), float(outputs["total"][0])))

    evals = jaxloop.EvalLoop(lambda s, b, n: (s, {"total": s["total"]}), end_actions=[Seen()])
    outer = jaxloop.OuterLoop(eval_loops=[evals], checkpoint_spec=jaxloop.CheckpointSpec(directory, iterate_stop_fn=stop_fn))
    state, outputs = outer(_ckpt_state(), eval_specs=[EvalSpec(dataset=[0])])
    assert evaluated == [(3, 30.0), (7, 70.0)] and outputs["checkpoint_steps"] == [3, 7]
    assert int(state["step"]) == 7 and len(calls) == 3
    writer_ckpt.close()

    # the default stop is the STOPPED marker: already there, so the evaluator reads what
    # exists and returns
    evaluated.clear()
    outer = jaxloop.OuterLoop(eval_loops=[evals], checkpoint_spec=jaxloop.CheckpointSpec(directory))
    outer(_ckpt_state(), eval_specs=[EvalSpec(dataset=[0])])
    assert evaluated == [(3, 30.0), (7, 70.0)]


def test_continuous_evaluation_waits_a_second_between_looks_at_least(tmp_path, monkeypatch):
    from gyre.jaxloop import _outer_loop

    slept, looks = [], []
    monkeypatch.setattr(_outer_loop.time, "sleep", slept.append)
    evals = jaxloop.EvalLoop(lambda s, b, n: (s, {"total": s["total"]}))
    for interval in (0, 5):
        slept.clear()
        looks.clear()
        spec = jaxloop.CheckpointSpec(str(tmp_path / "none"), iterate_interval_secs=interval,
                                      iterate_stop_fn=lambda: looks.append(1) or len(looks) > 3)
        jaxloop.OuterLoop(eval_loops=[evals], checkpoint_spec=spec)(_ckpt_state(), eval_specs=[EvalSpec(dataset=[0])])
        assert slept == [max(interval, _outer_loop.POLL_SECS)] * 3


def test_bad_input_is_explained():
    train = jaxloop.TrainLoop(add_step)
    evals = jaxloop.EvalLoop(eval_step)
    outer = jaxloop.OuterLoop(train_loop=train, eval_loops=[evals])
    with pytest.raises(ValueError, match="one EvalSpec per eval loop") as info:
        outer(fresh(), train_dataset=[1], train_total_steps=3, eval_specs=[])
    assert "expected: 1 eval spec" in str(info.value) and "received: 0 eval spec" in str(info.value)
    with pytest.raises(ValueError, match="needs train_dataset="):
        outer(fresh(), train_total_steps=3, eval_specs=[EvalSpec(dataset=[1])])
    for bad in (0, -5, None):
        with pytest.raises(ValueError, match="train_total_steps must be a positive whole number"):
            outer(fresh(), train_dataset=[1], train_total_steps=bad, eval_specs=[EvalSpec(dataset=[1])])
    with pytest.raises(ValueError, match="train_loop_steps must be a positive"):
        outer(fresh(), train_dataset=[1], train_total_steps=3, train_loop_steps=0, eval_specs=[EvalSpec(dataset=[1])])
    with pytest.raises(ValueError, match="nothing to run"):
        jaxloop.OuterLoop()
    with pytest.raises(ValueError, match="needs to know where"):
        jaxloop.OuterLoop(eval_loops=[evals])
    with pytest.raises(TypeError, match="must be gyre.jaxloop loops"):
        jaxloop.OuterLoop(train_loop=add_step)
    with pytest.raises(TypeError, match="eval_loops must be a list of loops") as info:
        jaxloop.OuterLoop(train_loop=train, eval_loops=evals)
    assert "eval_loops=[eval_loop]" in str(info.value)


def test_resume_continues_the_data_of_gyre_batches_at_the_next_batch(tmp_path):
    import numpy as np

    import gyre

    xs = np.arange(40, dtype=np.float32)

    def data():
        return gyre.data.batches(xs, 2, seed=3, epochs=None)  # shuffled, resumable

    def run(directory, total, seen):
        def step(state, batch, n, **kwargs):
            seen.append(batch.tolist())
            return {"step": state["step"] + 1, "total": state["total"] + batch.sum()}, {}

        train = jaxloop.TrainLoop(step, end_actions=[jaxloop.CheckpointAction(directory)])
        outer = jaxloop.OuterLoop(train_loop=train, checkpoint_spec=jaxloop.CheckpointSpec(directory))
        state, _ = outer(_ckpt_state(), train_dataset=data(), train_total_steps=total, train_loop_steps=3)
        return state

    straight = []
    expected = run(str(tmp_path / "a"), 11, straight)
    first, second = [], []
    run(str(tmp_path / "b"), 5, first)  # stopped after step 5
    resumed = run(str(tmp_path / "b"), 11, second)  # a fresh iterator, positioned from the checkpoint
    assert first + second == straight
    assert float(resumed["total"]) == float(expected["total"]) and int(resumed["step"]) == 11


def test_resume_says_when_the_training_data_cannot_continue_after_the_checkpoint(tmp_path):
    """A generator (jaxloop's guide feeds one) cannot be put back after the checkpoint: the
    resumed run trains on other batches than the uninterrupted one, so it says so, once; with
    gyre.data.batches it continues exactly and says nothing."""
    import warnings

    import gyre

    xs = np.arange(40, dtype=np.float32)

    def run(directory, total, data):
        def step(state, batch, n, **kwargs):
            return {"step": state["step"] + 1, "total": state["total"] + batch.sum()}, {}

        train = jaxloop.TrainLoop(step, end_actions=[jaxloop.CheckpointAction(directory)])
        outer = jaxloop.OuterLoop(train_loop=train, checkpoint_spec=jaxloop.CheckpointSpec(directory))
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            outer(_ckpt_state(), train_dataset=data(), train_total_steps=total, train_loop_steps=3)
        return [str(w.message) for w in said if "resuming from checkpoint" in str(w.message)]

    def generator():
        return (b for b in gyre.data.batches(xs, 2, seed=3))

    assert run(str(tmp_path / "a"), 5, generator) == []  # nothing to resume from
    said = run(str(tmp_path / "a"), 11, generator)
    assert len(said) == 1 and "resuming from checkpoint 5" in said[0] and "a generator" in said[0]
    assert "gyre.data.batches" in said[0]
    assert run(str(tmp_path / "b"), 5, lambda: gyre.data.batches(xs, 2, seed=3)) == []
    assert run(str(tmp_path / "b"), 11, lambda: gyre.data.batches(xs, 2, seed=3)) == []
    # checkpoints saved without a position (by the generator's run), resumed with gyre's batches
    said = run(str(tmp_path / "a"), 14, lambda: gyre.data.batches(xs, 2, seed=3))
    assert len(said) == 1 and "the checkpoint holds no data position" in said[0]
    assert run(str(tmp_path / "a"), 14, generator) == []  # a finished run: nothing trains, nothing to say


def test_the_outer_loop_reads_the_state_step_once_and_counts_the_rest(monkeypatch):
    from gyre.jaxloop import _outer_loop

    reads = []
    real = _outer_loop.state_step
    monkeypatch.setattr(_outer_loop, "state_step", lambda state: reads.append(1) or real(state))
    train = jaxloop.TrainLoop(jit_step)
    outer = jaxloop.OuterLoop(train_loop=train)
    batches = [jnp.float32(1)] * 50
    state, _ = outer(device_state(), train_dataset=iter(batches), train_total_steps=50, train_loop_steps=10)
    # once, where training starts (a resumed state's step); reading it after each inner loop
    # would wait for that loop's last step
    assert len(reads) == 1
    assert int(state["step"]) == 50 and train.loop_count == 5


def test_sigterm_stops_training_after_its_step_without_the_stopped_marker(tmp_path, caplog):
    directory = str(tmp_path / "ckpt")

    def step(state, batch, n, **kwargs):
        if int(state["step"]) == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return {"step": state["step"] + 1, "total": state["total"] + batch}, {"loss": batch * 1.0}

    evals = jaxloop.EvalLoop(eval_step)
    outer = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(step), eval_loops=[evals],
                              checkpoint_spec=jaxloop.CheckpointSpec(directory))
    with pytest.warns(gyre.LoopWarning, match="preempted"), caplog.at_level("WARNING", "gyre.jaxloop"):
        state, outputs = outer(_ckpt_state(), train_dataset=iter(range(100)), train_total_steps=20,
                               train_loop_steps=3, eval_specs=[EvalSpec(dataset=[0])])
    assert int(state["step"]) == 5 and outputs[STOP_LOOP] is True and outputs["eval"]["at"] == [3]
    assert "preempted at step 5" in caplog.text and "data ended" not in caplog.text
    assert not os.path.exists(os.path.join(directory, jaxloop.STOP_FILE_NAME))  # not done: resumable


def test_sigterm_saves_through_the_checkpoint_action_whatever_its_interval(tmp_path):
    """A preempted train loop saves the state it stopped at through its CheckpointAction,
    as gyre.loop's checkpoints do, even between two of the action's intervals: a rerun resumes
    from there instead of from the last interval's save."""
    directory = str(tmp_path / "ckpt")

    def step(state, batch, n, **kwargs):
        if int(state["step"]) == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return {"step": state["step"] + 1, "total": state["total"] + batch}, {"loss": batch * 1.0}

    action = jaxloop.CheckpointAction(directory, interval=10)
    outer = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(step, end_actions=[action]))
    with pytest.warns(gyre.LoopWarning, match="preempted"):
        state, _ = outer(_ckpt_state(), train_dataset=iter(range(100)), train_total_steps=20, train_loop_steps=3)
    action.close()
    assert int(state["step"]) == 5 and action.checkpoint.all_steps() == [5]
