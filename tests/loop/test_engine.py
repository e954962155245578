"""gyre.loop (gyre.loop._engine): a step runs the table in order, stop requests, start and end
callbacks, Ctrl-C."""

import pytest

import gyre
from tests.loop._helpers import record


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

    with pytest.warns(gyre.LoopWarning, match=r"interrupted \(Ctrl-C\) during step 1: the loop stopped after 2 steps"):
        _, _, elapsed = gyre.loop(None, range(5), {gyre.every(1): interrupt}, on_end=lambda loop: ended.append(loop.stop_reason))
    assert elapsed.steps == 2 and ended == ["KeyboardInterrupt"]
    with pytest.raises(KeyboardInterrupt):
        gyre.loop(None, range(5), {gyre.every(1): interrupt}, catch_keyboard_interrupt=False)


def test_bad_history():
    with pytest.raises(TypeError, match="gyre.History"):
        gyre.loop(None, range(3), {}, history=[])
