"""gyre.engine._split: the step to fuse found in a table, the other tasks sorted around it."""

import jax
import numpy as np
import pytest

import gyre
from gyre.engine._split import split_tasks
from gyre.engine._tasks import StepPoint, compile_tasks
from tests.engine._helpers import add_step, assert_same_history, make_problem


def test_test_and_predict_loops_fuse_their_step():
    batches, init, _, test_step = make_problem(n_batches=5)
    params = init()
    _, h1, _ = gyre.test_loop(params, batches, {gyre.on_test_step: test_step})
    _, h3, e3 = gyre.test_loop(params, batches, {gyre.on_test_step: test_step}, steps_per_call=3)
    assert_same_history(h1, h3, "score")
    assert e3.steps == 5
    predict = jax.jit(lambda state, batch: gyre.logs().add_output("y", batch[0].sum(axis=1)))
    _, hp, _ = gyre.predict_loop(params, batches, {gyre.on_predict_step: predict}, steps_per_call=2)
    for got, (x, _) in zip(hp.collect("y"), batches, strict=True):
        np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-6)


def test_a_plain_function_cannot_be_fused():
    def step(state, batch):
        return None, state + batch

    with pytest.raises(TypeError, match="not a compiled step") as err:
        gyre.loop(0.0, [1.0] * 4, {gyre.every(1): step}, steps_per_call=2)
    assert "jax.jit" in str(err.value) and "received" in str(err.value)
    with pytest.raises(TypeError, match="must be a compiled step"):
        gyre.train_loop(0.0, [1.0] * 4, {gyre.on_train_step: step}, steps_per_call=2)


def test_a_table_with_two_steps_is_refused():
    with pytest.raises(ValueError, match="fuses one step"):
        gyre.loop(0.0, [1.0] * 4, {gyre.every(1): [add_step, add_step]}, steps_per_call=2)


# -- split_tasks, directly --------------------------------------------------------------------------


class Bar(gyre.ChunkSafe):
    def __call__(self, elapsed):
        pass


def _names(tasks):
    return [[i.name.split(".")[-1] for i in t.invokers] for t in tasks]


def test_tasks_are_sorted_before_and_after_the_step_and_bars_apart():
    def early():
        pass

    def same_task_after():
        pass

    def late():
        pass

    table = {
        gyre.every(2): early,
        gyre.every(1): [Bar(), add_step, same_task_after],
        gyre.every(3): late,
    }
    plan = split_tasks(compile_tasks(table), 4)
    assert plan.step.fn is add_step and plan.step_task.key is list(table)[1]
    assert _names(plan.before) == [["early"]]
    assert _names(plan.after) == [["same_task_after"], ["late"]]
    assert _names(plan.display) == [["Bar"]]  # a bar never cuts a chunk, wherever it sits


def test_the_callbacks_of_a_step_point_must_be_compiled_or_chunk_safe():
    point = StepPoint("on_train_step")
    plan = split_tasks(compile_tasks({point: [add_step, Bar()]}), 2)
    assert plan.step.fn is add_step and _names(plan.display) == [["Bar"]]
    with pytest.raises(TypeError, match="the on_train_step callback .* must be a compiled step"):
        split_tasks(compile_tasks({point: [add_step, lambda: None]}), 2)


def test_a_table_without_a_step_on_every_step_is_explained():
    with pytest.raises(ValueError, match="steps_per_call=4 found no step to fuse") as err:
        split_tasks(compile_tasks({gyre.every(2): add_step}), 4)  # compiled, but not every step
    assert "gyre.every(1)" in str(err.value)
