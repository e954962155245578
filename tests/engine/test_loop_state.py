"""gyre.engine._loop_state: LoopState, and fold, the one place a callback's return is read."""

import numpy as np
import pytest

import gyre
from gyre.core._clock import Elapsed
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.engine._binding import bind
from gyre.engine._loop_state import LoopState, check_structure, fold, replace_state, run_callbacks


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


def test_a_step_returning_only_a_pair_state_is_explained_not_read_as_logs():
    """A step that forgets its logs and returns ``(params, opt_state)``: the params dict is not a
    dict of collections, so the pair's first value is not logs (not "collection 'b' ...")."""
    params = {"w": np.ones(2), "b": np.zeros(1)}
    with pytest.raises(TypeError, match="first value is not logs") as err:
        gyre.loop((params, 0), range(1), {gyre.every(1): lambda state: (state[0], state[1] + 1)})
    assert "dict {'w':" in str(err.value) and "return (None, state)" in str(err.value)


def test_metadata_and_loop_state():
    seen = []
    gyre.loop(1, range(1), {gyre.every(1): lambda loop: seen.append((loop.metadata, loop.state, loop.batch))}, metadata="m")
    assert seen == [("m", 1, 0)]


# -- LoopState, fold and run_callbacks, directly ----------------------------------------------------


def _loop_state(state=1):
    return LoopState(state, History(), Elapsed())


def test_stop_requests_and_ciclos_stop_iteration():
    ls = _loop_state()
    assert not ls.stop_iteration and ls.stop_reason == ""
    ls.stop_iteration = True
    assert ls.stop_requested and ls.stop_reason == "stop_iteration"
    ls.stop_iteration = False
    assert not ls.stop_requested
    ls.request_stop("enough")
    assert ls.stop_iteration and ls.stop_reason == "enough"


def test_completed_and_accumulated_logs():
    seen = {}

    def look(loop, elapsed):
        seen[elapsed.steps] = (loop.completed.steps, dict(loop.accumulated_logs.get("metrics", {})))
        return gyre.logs().add_metric(f"m{elapsed.steps}", elapsed.steps)

    gyre.loop(None, range(2), {gyre.every(1): look})
    # during step i the completed clock is i + 1; the logs so far include earlier steps'
    assert seen == {0: (1, {}), 1: (2, {"m0": 0})}


def test_fold_reads_each_return_kind():
    invoker = bind(lambda: None)
    logs = Logs()
    assert fold(Logs().add_metric("a", 1), logs, 4, invoker) == 4 and dict(logs.metrics) == {"a": 1}
    assert fold((None, 5), logs, 4, invoker) == 5
    assert fold((Logs().add_metric("b", 2), None), logs, 4, invoker) == 4
    assert fold(({"metrics": {"c": 3}}, 6), logs, 4, invoker) == 6
    assert dict(logs.metrics) == {"a": 1, "b": 2, "c": 3}
    grown = fold(replace_state([4, 4]), Logs(), 4, bind(lambda: None))
    assert grown == [4, 4]


def test_the_first_returned_state_is_checked_against_the_states_structure():
    invoker = bind(lambda: None)
    with pytest.raises(TypeError, match="structure differs from the state's") as err:
        fold({"loss": 1.0}, Logs(), {"params": 1.0}, invoker)
    text = str(err.value)
    assert "'params'" in text and "'loss'" in text and "gyre.replace_state" in text
    assert not invoker.returned_state
    assert fold({"params": 2.0}, Logs(), {"params": 1.0}, invoker) == {"params": 2.0}
    assert invoker.returned_state  # checked once: the step path does not pay for it again
    check_structure({"anything": 1}, None, invoker)  # a state not set yet takes any structure


def test_run_callbacks_folds_in_order_and_stops_after_a_stop_request():
    ls = _loop_state(1)
    ran = []

    def double(state):
        ran.append("double")
        return state * 2

    def stop(loop):
        ran.append("stop")
        loop.request_stop("now")
        return gyre.logs().add_metric("stopped", 1)

    logs = run_callbacks([bind(double), bind(stop), bind(lambda: ran.append("never"))], ls, Elapsed(steps=3), "b")
    assert ls.state == 2 and ran == ["double", "stop"] and dict(logs.metrics) == {"stopped": 1}
    assert ls.elapsed.steps == 3 and ls.batch == "b" and ls.logs is logs


def test_assigning_loop_state_is_the_same_as_returning_it():
    def assign(loop):
        loop.state = loop.state + 10

    def read(state):
        return gyre.logs().add_metric("seen", state)

    state, history, _ = gyre.loop(1, range(2), {gyre.every(1): [assign, read]})
    assert state == 21 and history.collect("seen") == [11, 21]


@pytest.mark.parametrize("reason", [5, None, gyre.at(steps=5)])
def test_request_stop_refuses_anything_but_a_reason(reason):
    def stopper(loop):
        loop.request_stop(reason)  # meant: stop at step 5? it stopped now, with 5 as the reason

    with pytest.raises(TypeError, match=r"(?s)request_stop takes a reason.*stops after the current "
                       r"step.*stop=5"):
        gyre.loop(0, range(10), {gyre.every(1): stopper})
