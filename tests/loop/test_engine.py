import itertools

import pytest

import gyre


def record(seen):
    def callback(elapsed):
        seen.append(elapsed.steps)

    return callback


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


def test_same_schedule_twice_keeps_both_entries():
    seen = []
    gyre.loop(None, range(2), {gyre.every(1): lambda: seen.append(1), gyre.every(1): lambda: seen.append(2)})  # noqa: F601
    assert seen == [1, 2, 1, 2]


def test_binding_by_name_and_by_position():
    got = {}

    def by_name(loop, logs, elapsed, batch, state):
        got["name"] = (state, batch, elapsed.steps, type(logs).__name__, type(loop).__name__)

    def by_position(s, b, e):
        got["pos"] = (s, b, e.steps)

    def with_default(batch, extra=7):
        got["default"] = (batch, extra)

    class Obj:
        def __call__(self, state, batch):
            got["obj"] = (state, batch)

    gyre.loop("S", ["B"], {gyre.every(1): [by_name, by_position, with_default, Obj()]})
    assert got == {
        "name": ("S", "B", 0, "Logs", "LoopState"),
        "pos": ("S", "B", 0),
        "default": ("B", 7),
        "obj": ("S", "B"),
    }


def test_return_normalisation():
    def logs_only():
        return gyre.logs().add_metric("a", 1)

    def new_state(state):
        return state + 1

    def pair_none_logs(state):
        return None, state * 10

    def pair_none_state():
        return gyre.logs().add_metric("b", 2), None

    def pair_dict_logs(state):
        return {"metrics": {"c": 3}}, state

    state, history, _ = gyre.loop(
        1, range(1), {gyre.every(1): [logs_only, new_state, pair_none_logs, pair_none_state, pair_dict_logs]}
    )
    assert state == 20
    assert dict(history[0].logs.metrics) == {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize("initial,falsy", [(5, 0), ({}, {}), ([], []), ("x", "")])
def test_falsy_state_in_pair_is_respected(initial, falsy):
    state, _, _ = gyre.loop(initial, range(1), {gyre.every(1): lambda: (None, falsy)})
    assert state is falsy  # taken as given, not read as "unchanged"


def test_empty_logs_in_pair_are_respected():
    state, history, _ = gyre.loop(5, range(1), {gyre.every(1): lambda state: ({}, state + 1)})
    assert state == 6 and len(history) == 0


def test_three_tuple_is_explained():
    with pytest.raises(TypeError, match="3-tuple") as err:
        gyre.loop(0, range(1), {gyre.every(1): lambda state: (None, state, 1)})
    assert "(logs, state)" in str(err.value) and "<lambda>" in str(err.value)


def test_pair_with_bad_logs_is_explained():
    with pytest.raises(TypeError, match="first value is not logs"):
        gyre.loop(0, range(1), {gyre.every(1): lambda: (3, 4)})


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


def test_stop_never_pulls_an_unused_batch():
    pulled = []

    def data():
        for i in itertools.count():
            pulled.append(i)
            yield i

    _, _, elapsed = gyre.loop(None, data(), {}, stop=4)
    assert elapsed.steps == 4 and pulled == [0, 1, 2, 3]
    _, _, elapsed = gyre.loop(None, range(100), {}, stop=gyre.at(samples=5))
    assert elapsed.samples == 5


def test_returned_elapsed_continues_without_repeating_steps():
    seen = []
    state, history, elapsed = gyre.loop(None, range(3), {gyre.every(1): [record(seen), lambda: gyre.logs().add_metric("m", 1)]})
    state, history, elapsed = gyre.loop(
        None, range(3), {gyre.every(1): [record(seen), lambda: gyre.logs().add_metric("m", 1)]},
        elapsed=elapsed, history=history, stop=gyre.at(steps=5),
    )
    assert seen == [0, 1, 2, 3, 4]
    assert elapsed.steps == 5 and history.collect("steps") == [0, 1, 2, 3, 4]


def test_epochs_from_len_and_epoch_duration():
    _, _, elapsed = gyre.loop(None, list(range(7)), {})
    assert (elapsed.epochs, elapsed.step_in_epoch) == (1, 0)
    _, _, elapsed = gyre.loop(None, iter(range(7)), {}, epoch_duration=3)
    assert (elapsed.epochs, elapsed.step_in_epoch) == (2, 1)


def test_samples_from_batch_size_fn():
    _, _, elapsed = gyre.loop(None, range(4), {}, batch_size_fn=lambda b: 10)
    assert elapsed.samples == 40


def test_time_schedule_with_injected_clock():
    ticks = iter([0.0] + [0.3 * i for i in range(1, 50)])
    seen = []
    gyre.loop(None, range(10), {gyre.every(time=1.0): record(seen)}, clock=lambda: next(ticks))
    # time at step start: 0, .3, .6, .9, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7
    assert seen == [0, 4, 7]


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

    _, _, elapsed = gyre.loop(None, range(5), {gyre.every(1): interrupt}, on_end=lambda loop: ended.append(loop.stop_reason))
    assert elapsed.steps == 2 and ended == ["KeyboardInterrupt"]
    with pytest.raises(KeyboardInterrupt):
        gyre.loop(None, range(5), {gyre.every(1): interrupt}, catch_keyboard_interrupt=False)


def test_metadata_and_loop_state():
    seen = []
    gyre.loop(1, range(1), {gyre.every(1): lambda loop: seen.append((loop.metadata, loop.state, loop.batch))}, metadata="m")
    assert seen == [("m", 1, 0)]


def test_elapse_manual_iteration():
    history = gyre.history()
    clocks = []
    for elapsed, batch in gyre.elapse(range(100), stop=4):
        logs = gyre.logs()
        logs.updates, _ = gyre.logs().add_metric("b", batch), None
        history.commit(elapsed, logs)
        clocks.append((elapsed.steps, elapsed.samples))
    assert clocks == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert history.collect("b") == [0, 1, 2, 3]


# -- bad input ------------------------------------------------------------------------------


def test_non_iterable_dataset():
    with pytest.raises(TypeError, match="not iterable") as err:
        gyre.loop(None, 42, {})
    assert "fix:" in str(err.value)


@pytest.mark.parametrize("stop", [0, -1, 2.5, True, "10"])
def test_bad_stop(stop):
    with pytest.raises(ValueError, match="stop="):
        gyre.loop(None, range(3), {}, stop=stop)


def test_schedule_that_is_not_callable():
    with pytest.raises(TypeError, match="callable"):
        gyre.loop(None, range(3), {5: [gyre.noop]})


def test_unknown_named_schedule_string():
    with pytest.raises(TypeError, match="Did you mean 'on_train_step'"):
        gyre.loop(None, range(3), {"on_trian_step": [gyre.noop]})


def test_named_schedule_in_plain_loop():
    with pytest.raises(TypeError, match="train_loop"):
        gyre.loop(None, range(3), {gyre.on_train_step: [gyre.noop]})


def test_callback_not_callable_and_unbindable():
    with pytest.raises(TypeError, match="callable"):
        gyre.loop(None, range(3), {gyre.every(1): [3]})
    with pytest.raises(TypeError, match="cannot bind"):
        gyre.loop(None, range(3), {gyre.every(1): [lambda a, b, c, d, e, f: None]})


def test_bad_tasks_history_elapsed():
    with pytest.raises(TypeError, match="dict from schedules"):
        gyre.loop(None, range(3), [gyre.noop])
    with pytest.raises(TypeError, match="gyre.History"):
        gyre.loop(None, range(3), {}, history=[])
    with pytest.raises(TypeError, match="gyre.Elapsed"):
        gyre.loop(None, range(3), {}, elapsed=5)
    with pytest.raises(ValueError, match="epoch_duration"):
        gyre.loop(None, range(3), {}, epoch_duration=0)


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
