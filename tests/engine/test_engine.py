"""gyre.loop (gyre.engine._engine): a step runs the table in order, stop requests, start and end
callbacks, Ctrl-C."""

import os
import signal

import pytest

import gyre
from tests.engine._helpers import record


def test_tasks_run_in_table_order_and_list_order():
    order = []
    tasks = {
        gyre.every(1): [lambda: order.append("a"), lambda: order.append("b")],
        gyre.every(2): lambda: order.append("c"),
    }
    before = dict(tasks)
    gyre.loop(None, range(3), tasks)
    assert order == ["a", "b", "c", "a", "b", "a", "b", "c"]
    assert tasks == before  # the caller's dict is not mutated


def test_stop_request_skips_rest_of_step_keeps_logs_and_runs_on_end():
    ran_after, ended = [], []

    def stopper(elapsed, loop):
        if elapsed.steps == 2:
            loop.request_stop("done")
            return gyre.logs().add_metric("stopped", 1)
        return gyre.logs().add_metric("stopped", 0)

    pulled = []

    def data():
        for i in range(10):
            pulled.append(i)
            yield i

    _, history, elapsed = gyre.loop(
        None,
        data(),
        {gyre.every(1): [stopper, lambda elapsed: ran_after.append(elapsed.steps)], gyre.every(1) & gyre.always(): record(ran_after)},
        on_end=lambda loop: ended.append(loop.stop_reason),
    )
    assert elapsed.steps == 3  # the stopping step counts as completed
    assert ran_after == [0, 0, 1, 1]  # step 2's later callbacks were skipped
    assert history.collect("stopped") == [0, 0, 1]
    assert ended == ["done"]
    assert pulled == [0, 1, 2]  # no batch pulled after the stop


def test_on_start_and_on_end_logs():
    _, history, elapsed = gyre.loop(
        0, range(2), {}, on_start=lambda: gyre.logs().add_metric("start", 1),
        on_end=[lambda elapsed: gyre.logs().add_metric("end", elapsed.steps)],
    )
    assert history.collect("end") == [2]
    with pytest.raises(KeyError, match="'start'"):  # on_start logs are not committed
        history.collect("start")


def test_keyboard_interrupt_is_caught_and_on_end_runs():
    ended = []

    def interrupt(elapsed):
        if elapsed.steps == 1:
            raise KeyboardInterrupt

    # (step 1 did not complete: its only task raised, and the clock counts completed steps)
    with pytest.warns(gyre.LoopWarning, match=r"interrupted \(Ctrl-C\) during step 1: the loop stopped after 1 step "):
        _, _, elapsed = gyre.loop(None, range(5), {gyre.every(1): interrupt}, on_end=lambda loop: ended.append(loop.stop_reason))
    assert elapsed.steps == 1 and ended == ["KeyboardInterrupt"]
    with pytest.raises(KeyboardInterrupt):
        gyre.loop(None, range(5), {gyre.every(1): interrupt}, catch_keyboard_interrupt=False)



def test_a_second_ctrl_c_stops_at_once_instead_of_ending_the_loop_as_if_it_finished():
    def ctrl_c(elapsed):
        if elapsed.steps == 1:  # the first would end the loop at the step's end; the second
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt) as info:
        gyre.loop(None, range(5), {gyre.every(1): ctrl_c})
    assert info.value.__notes__[0].startswith("gyre: Ctrl-C after SIGINT stopped the loop at once, during step 1")


def test_two_ctrl_c_during_an_evaluation_raise_and_no_checkpoint_misses_its_evaluation(tmp_path):
    import jax.numpy as jnp

    evaluated = []

    def train_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.float32(batch)), state + 1

    def test_step(batch):
        evaluated.append(batch)
        if len(evaluated) in (6, 7):  # both during the evaluation of step 3
            os.kill(os.getpid(), signal.SIGINT)
        return gyre.logs().add_metric("acc", jnp.float32(batch))

    ckpt = gyre.checkpoint(str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        gyre.train_loop(
            jnp.int32(0), range(10), {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
            test_dataset=lambda: range(4), epoch_duration=2, callbacks=[ckpt],
        )
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [2]  # not step 4, made by a step whose evaluation was cut short
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_step_cut_short_by_a_caught_ctrl_c_is_not_saved(tmp_path):
    import jax.numpy as jnp

    def train_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.float32(batch)), state + 1

    def test_step(batch):  # a Ctrl-C with no handler of gyre's (several processes) raises
        if batch == 2:
            raise KeyboardInterrupt
        return gyre.logs().add_metric("acc", jnp.float32(batch))

    ckpt = gyre.checkpoint(str(tmp_path))
    test_data = iter([range(2), range(4)])  # the second evaluation (step 3) is cut short
    with pytest.warns(gyre.LoopWarning, match=r"during step 3: .* cut short, so no checkpoint saves it"):
        _, _, elapsed = gyre.train_loop(
            jnp.int32(0), range(10), {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
            test_dataset=lambda: next(test_data), epoch_duration=2, callbacks=[ckpt],
        )
    ckpt.wait_until_finished()
    assert elapsed.steps == 4 and ckpt.all_steps() == [2]  # step 4's evaluation would be missing

def test_bad_history():
    with pytest.raises(TypeError, match="gyre.History"):
        gyre.loop(None, range(3), {}, history=[])
