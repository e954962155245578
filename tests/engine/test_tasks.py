"""gyre.engine._tasks: task tables compiled into Tasks, and the types the engine reads."""

import warnings

import pytest

import gyre
from gyre.core._clock import Elapsed
from gyre.engine._tasks import (
    EachStep,
    StepPoint,
    When,
    as_list,
    check_table,
    compile_tasks,
    is_chunk_safe,
    loop_end_hooks,
    warn_if_untrained,
)


def test_same_schedule_twice_keeps_both_entries():
    seen = []
    gyre.loop(None, range(2), {gyre.every(1): lambda: seen.append(1), gyre.every(1): lambda: seen.append(2)})  # noqa: F601
    assert seen == [1, 2, 1, 2]


def test_schedule_that_is_not_callable():
    with pytest.raises(TypeError, match="callable"):
        gyre.loop(None, range(3), {5: [gyre.noop]})


def test_unknown_named_schedule_string():
    with pytest.raises(TypeError, match="Did you mean 'on_train_step'"):
        gyre.loop(None, range(3), {"on_trian_step": [gyre.noop]})


def test_named_schedule_in_plain_loop():
    with pytest.raises(TypeError, match="train_loop"):
        gyre.loop(None, range(3), {gyre.on_train_step: [gyre.noop]})


def test_bad_tasks_table():
    with pytest.raises(TypeError, match="dict from schedules"):
        gyre.loop(None, range(3), [gyre.noop])


def test_schedules_that_fire_always_are_not_asked():
    class Counting(gyre.Schedule):
        fires_always = True

        def __call__(self, elapsed):
            raise AssertionError("a schedule that fires always is never called")

    seen = []
    gyre.loop(None, range(3), {Counting(): [lambda elapsed: seen.append(elapsed.steps)]})
    assert seen == [0, 1, 2]
    assert gyre.every(1).fires_always and gyre.always().fires_always
    assert not gyre.every(2).fires_always and not gyre.every(samples=1).fires_always


# -- the explicit types and the compiled table ---------------------------------------------------


def test_named_loop_points_fire_as_they_say_and_read_what_they_say():
    point = StepPoint("on_test_step")
    assert point(Elapsed(steps=9)) and point.fires_always and point.reads() == frozenset()
    assert repr(point) == "on_test_step" and not point.expects_state
    assert StepPoint("on_train_step", expects_state=True).expects_state
    last = When(lambda e: e.step_in_epoch == 2, "on_epoch_end", reads=("step_in_epoch",))
    assert [last(Elapsed(step_in_epoch=i)) for i in range(3)] == [False, False, True]
    assert last.reads() == {"step_in_epoch"} and repr(last) == "on_epoch_end" and not last.fires_always
    end = EachStep("on_train_batch_end")
    assert end.fires_always and end(Elapsed()) and end.reads() == frozenset()


def test_chunk_safe_objects_and_their_bound_methods():
    class Bar(gyre.ChunkSafe):
        def __call__(self):
            pass

        def draw(self):
            pass

    assert is_chunk_safe(Bar()) and is_chunk_safe(Bar().draw)
    assert not is_chunk_safe(print) and not is_chunk_safe(lambda: None)


def test_loop_elements_spread_into_a_table_under_their_default_schedule():
    class Quarterly(gyre.LoopElement):
        def default_schedule(self):
            return gyre.every(4)

        def __call__(self, elapsed):
            seen.append(elapsed.steps)

    seen = []
    element = Quarterly()
    table = {**element}
    assert [repr(k) for k in table] == ["every(steps=4)"] and table[list(table)[0]] == [element]
    gyre.loop(None, range(9), table)
    assert seen == [0, 4, 8]


def test_gyre_callback_calls_ciclos_way_and_normalises_its_return():
    calls = []

    def cb(state, batch, elapsed, loop_state):
        calls.append((state, batch, elapsed.steps, type(loop_state).__name__))

    wrapped = gyre.callback(cb)
    assert repr(wrapped).startswith("gyre.callback(") and wrapped.fn is cb
    state, _, _ = gyre.loop("S", ["a", "b"], {**wrapped})
    assert state == "S" and calls == [("S", "a", 0, "LoopState"), ("S", "b", 1, "LoopState")]
    with pytest.raises(TypeError, match="gyre.callback needs a function"):
        gyre.callback(3)


def test_as_list_and_check_table():
    assert as_list(None) == [] and as_list(len) == [len] and as_list((len, print)) == [len, print]
    assert check_table(None) == {}
    table = {gyre.every(1): len}
    assert check_table(table) is table
    with pytest.raises(TypeError, match="tasks of train_loop must be a dict"):
        check_table([len], "tasks of train_loop")


def test_compiled_tasks_drop_empty_entries_but_keep_stateful_schedules():
    stateful = gyre.every(samples=10)
    stateful(Elapsed())  # now it has a state worth keeping
    tasks = compile_tasks({gyre.every(2): [], stateful: None, gyre.every(3): print})
    assert [t.key for t in tasks] == [stateful, list(tasks)[-1].key]
    assert tasks[0].invokers == [] and repr(tasks[-1].schedule) == "every(steps=3)"


def test_loop_end_hooks_are_collected_once_per_object():
    class Bar:
        def __init__(self):
            self.ended = 0

        def __call__(self):
            pass

        def step(self):
            pass

        def on_loop_end(self):
            self.ended += 1

    bar = Bar()
    hooks = loop_end_hooks(compile_tasks({gyre.every(1): [bar, bar.step], gyre.every(2): bar}))
    assert len(hooks) == 1
    gyre.loop(None, range(2), {gyre.every(1): [bar, bar.step]})
    assert bar.ended == 1


def test_a_train_step_point_that_returns_no_state_warns_naming_it():
    def step(state):
        return gyre.logs().add_metric("x", 1)

    quiet = compile_tasks({StepPoint("on_test_step"): step})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_untrained(quiet)  # an evaluation returns no state: nothing to say
    tasks = compile_tasks({StepPoint("on_train_step", expects_state=True): step})
    with pytest.warns(gyre.LoopWarning, match=r"on_train_step callbacks \(.*step\) returned no state"):
        warn_if_untrained(tasks)
    tasks[0].invokers[0].returned_state = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_untrained(tasks)  # a state came back: silent
