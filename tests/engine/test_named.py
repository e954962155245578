import numpy as np
import pytest

import gyre


class Recorder:
    """Records every named point it is registered on, with the step index."""

    def __init__(self, hooks):
        self.events = []
        for hook in hooks:
            setattr(self, hook, self._make(hook))

    def _make(self, hook):
        def method(elapsed):
            self.events.append((hook, elapsed.steps))

        return method


TRAIN = ["on_train_begin", "on_epoch_begin", "on_train_step", "on_epoch_end", "on_train_batch_end", "on_train_end"]


# a table that records hooks and trains nothing, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_train_loop_hook_order_and_epoch_boundaries():
    rec = Recorder(TRAIN + ["on_test_begin", "on_test_step", "on_test_end"])
    gyre.train_loop(0, range(4), callbacks=[rec], test_dataset=lambda: ["t"], epoch_duration=2)
    assert rec.events == [
        ("on_train_begin", 0),
        ("on_epoch_begin", 0), ("on_train_step", 0), ("on_train_batch_end", 0),
        ("on_train_step", 1),
        ("on_test_begin", 0), ("on_test_step", 0), ("on_test_end", 1),
        ("on_epoch_end", 1), ("on_train_batch_end", 1),
        ("on_epoch_begin", 2), ("on_train_step", 2), ("on_train_batch_end", 2),
        ("on_train_step", 3),
        ("on_test_begin", 0), ("on_test_step", 0), ("on_test_end", 1),
        ("on_epoch_end", 3), ("on_train_batch_end", 3),
        ("on_train_end", 4),
    ]


@pytest.mark.filterwarnings("ignore:train_loop had no train step:gyre.LoopWarning")  # evaluation only, on purpose
def test_on_epoch_end_fires_after_last_step_of_each_epoch_only():
    seen = []
    gyre.train_loop(0, range(9), {gyre.on_epoch_end: lambda elapsed: seen.append(elapsed.steps)}, epoch_duration=3)
    assert seen == [2, 5, 8]


# a table that records hooks and trains nothing, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_clock_tasks_run_between_step_and_batch_end():
    order = []
    gyre.train_loop(
        0, range(2),
        {
            gyre.on_train_batch_end: lambda: order.append("end"),
            gyre.every(1): lambda: order.append("every"),
            gyre.on_train_step: lambda: order.append("step"),
        },
    )
    assert order == ["step", "every", "end"] * 2


def test_test_metrics_come_back_suffixed_and_weighted():
    def train_step(state, batch):
        return gyre.logs().add_loss("loss", float(batch)), state + 1

    def test_step(state, batch):
        correct, x = batch
        return gyre.logs().add_metric("accuracy", correct / x.shape[0])

    # test batches of 4 samples (all right) and 2 samples (none right): 4/6 over samples
    test = [(4, np.zeros(4)), (0, np.zeros(2))]
    state, history, elapsed = gyre.train_loop(
        0, range(4), {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
        test_dataset=lambda: test, epoch_duration=2, test_name="val",
    )
    assert state == 4 and elapsed.epochs == 2
    steps, acc = history.collect("steps", "accuracy_val")
    assert steps == [1, 3]
    assert acc == pytest.approx([4 / 6, 4 / 6])
    assert history.collect("loss") == [0.0, 1.0, 2.0, 3.0]


def test_evaluation_does_not_change_training_state_and_test_dataset_is_refreshed():
    calls = []

    def factory():
        calls.append(1)
        return iter([1, 2])

    def test_step(state, batch):
        return gyre.logs().add_metric("s", batch), state + 100

    state, history, _ = gyre.train_loop(
        0, range(4), {gyre.on_train_step: lambda state: state + 1, gyre.on_test_step: test_step},
        test_dataset=factory, epoch_duration=2,
    )
    assert state == 4 and len(calls) == 2
    assert history.collect("s_test") == [1.5, 1.5]


@pytest.mark.filterwarnings("ignore:train_loop had no train step:gyre.LoopWarning")  # evaluation only, on purpose
def test_test_duration_limits_evaluation():
    seen = []
    gyre.train_loop(
        0, range(2), {gyre.on_test_step: lambda batch: seen.append(batch)},
        test_dataset=lambda: range(10), epoch_duration=2, test_duration=3,
    )
    assert seen == [0, 1, 2]


class CounterState:
    """A state whose methods register themselves on the named points."""

    def __init__(self, n=0, resets=0):
        self.n, self.resets = n, resets

    def train_step(self, batch):
        return gyre.logs().add_metric("n", self.n), CounterState(self.n + 1, self.resets)

    def test_step(self, batch):
        return gyre.logs().add_metric("value", self.n)

    def reset_step(self):
        return CounterState(self.n, self.resets + 1)

    def on_epoch_end(self, elapsed):
        return gyre.logs().add_metric("epoch_end", elapsed.steps)


def test_state_methods_register_themselves():
    state, history, _ = gyre.train_loop(CounterState(), range(4), test_dataset=lambda: [0], epoch_duration=2)
    assert state.n == 4
    assert state.resets == 2  # reset at the start of each training epoch
    assert history.collect("value_test") == [2.0, 4.0]
    assert history.collect("epoch_end") == [1, 3]
    _, history, _ = gyre.test_loop(CounterState(n=7), [0, 0])
    assert history.collect("value") == [7, 7]


# a table that records hooks and trains nothing, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_explicit_tasks_win_over_state_methods():
    calls = []
    state, _, _ = gyre.train_loop(CounterState(), range(3), {gyre.on_train_step: lambda state: calls.append(1)})
    assert state.n == 0 and len(calls) == 3


# a table that records hooks and trains nothing, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_string_keys_for_named_schedules():
    seen = []
    gyre.train_loop(0, range(2), {"on_train_step": lambda elapsed: seen.append(elapsed.steps)})
    assert seen == [0, 1]


def test_predict_loop_collects_outputs():
    rec = Recorder(["on_predict_begin", "on_predict_batch_end", "on_predict_end"])
    _, history, _ = gyre.predict_loop(
        None, [1, 2, 3], {gyre.on_predict_step: lambda batch: gyre.logs().add_output("y", batch * 2)}, callbacks=[rec]
    )
    assert history.collect("y") == [2, 4, 6]
    assert rec.events == [
        ("on_predict_begin", 0), ("on_predict_batch_end", 0), ("on_predict_batch_end", 1),
        ("on_predict_batch_end", 2), ("on_predict_end", 3),
    ]


def test_test_loop_hooks():
    rec = Recorder(["on_test_begin", "on_test_step", "on_test_batch_end", "on_test_end", "on_reset_step"])
    gyre.test_loop(None, [0, 1], callbacks=[rec])
    assert rec.events == [
        ("on_reset_step", 0), ("on_test_begin", 0), ("on_test_step", 0), ("on_test_batch_end", 0),
        ("on_test_step", 1), ("on_test_batch_end", 1), ("on_test_end", 2),
    ]


# -- bad input ------------------------------------------------------------------------------


def test_unknown_named_schedule():
    with pytest.raises(ValueError, match="Did you mean 'on_epoch_end'"):
        gyre.train_loop(0, range(2), {"on_epoch_ends": [gyre.noop]})
    with pytest.raises(ValueError, match="unknown named schedule 'on_train_step' for test_loop"):
        gyre.test_loop(0, range(2), {gyre.on_train_step: [gyre.noop]})


def test_callback_object_matching_no_hook_is_an_error():
    with pytest.raises(TypeError, match="matches no named schedule"):
        gyre.train_loop(0, range(2), callbacks=[lambda state: state])


def test_epoch_hooks_need_an_epoch_length():
    with pytest.raises(ValueError, match="epoch_duration"):
        gyre.train_loop(0, iter(range(3)), {gyre.on_test_step: lambda: None}, test_dataset=lambda: [0])


def test_test_dataset_iterator_is_rejected():
    with pytest.raises(TypeError, match="fresh dataset"):
        gyre.train_loop(0, range(2), test_dataset=iter([1, 2]), epoch_duration=1)


def test_bad_aggregation():
    with pytest.raises(ValueError, match="unknown aggregation"):
        gyre.train_loop(0, range(2), test_dataset=lambda: [0], epoch_duration=1, test_aggregation="median")


def _train(state, batch):
    return state + 1


def _test(state, batch):
    return gyre.logs().add_metric("score", state)


def test_a_test_step_without_a_test_dataset_is_refused():
    with pytest.raises(ValueError, match=r"(?s)train_loop got a test step but no test_dataset.*"
                       r"fix: pass test_dataset="):
        gyre.train_loop(0, range(2), {gyre.on_train_step: _train, gyre.on_test_step: _test})
    # a state class's test_step method is not a request to evaluate
    class State(int):
        def test_step(self, batch):
            return gyre.logs()
    gyre.train_loop(State(0), range(2), {gyre.on_train_step: lambda state: state})


def test_a_train_loop_with_nothing_to_train_says_so():
    with pytest.warns(gyre.LoopWarning, match=r"(?s)train_loop had no train step: it ran over the "
                      r"data and trained nothing.*on_epoch_end.*fix: ") as caught:
        gyre.train_loop(0, range(2), {gyre.on_epoch_end: lambda: None}, epoch_duration=1)
    assert caught[0].filename == __file__
    gyre.train_loop(0, range(2), {gyre.every(1): _train})  # ciclo's form: a clock-scheduled step


def test_an_evaluation_that_sees_no_batch_is_refused():
    with pytest.raises(ValueError, match=r"(?s)the evaluation at the end of epoch 0 ran on no batch.*"
                       r"test_dataset returned an empty dataset"):
        gyre.train_loop(0, range(4), {gyre.on_train_step: _train, gyre.on_test_step: _test},
                        test_dataset=lambda: [], epoch_duration=2)


def test_lightnings_start_hooks_are_pointed_at_gyres_begin_hooks():
    # was: on_train_batch_start -> "Did you mean 'on_train_batch_end'?", on_epoch_start -> 'on_loop_start'
    for name, meant in (("on_train_batch_start", "on_train_batch_begin"), ("on_epoch_start", "on_epoch_begin")):
        callbacks = type("Callbacks", (), {"on_train_step": lambda self, state: state, name: lambda self: None})
        with pytest.raises(ValueError, match=rf"(?s){name}' that is no named point.*Did you mean '{meant}'\? "
                           r"\(Lightning's on_\.\.\._start is on_\.\.\._begin here"):
            gyre.train_loop(0, range(2), callbacks=[callbacks()])


def test_a_callback_object_with_a_misspelt_hook_beside_a_good_one_is_refused():
    class Callbacks:
        def on_train_step(self, state):
            return state + 1

        def on_epoch_ned(self, elapsed):  # never called, silently
            raise AssertionError

    with pytest.raises(ValueError, match=r"(?s)callback Callbacks of train_loop has a method "
                       r"'on_epoch_ned' that is no named point.*Did you mean 'on_epoch_end'\?"):
        gyre.train_loop(0, range(2), callbacks=[Callbacks()], epoch_duration=1)
    # the hooks of other loops and the engine's are known: an object may serve several loops
    class Bar(Callbacks):
        on_epoch_ned = None
        on_test_batch_end = on_predict_batch_end = on_loop_end = on_loop_start = lambda self: None
        on_ready = 3  # not a method

    gyre.predict_loop(0, range(2), callbacks=[Bar()])


def test_a_predict_step_that_changes_the_state_warns_once_naming_it():
    def predict_step(state, batch):  # updates a running statistic while predicting
        return gyre.logs().add_output("y", batch * 2), {"n": state["n"] + 1}

    with pytest.warns(gyre.LoopWarning, match=r"(?s)predict_loop.s on_predict_step \(.*predict_step\) "
                      r"returned a changed state.*Return only the logs") as caught:
        state, history, _ = gyre.predict_loop({"n": np.int32(0)}, [1, 2, 3], {gyre.on_predict_step: predict_step})
    assert len([w for w in caught if w.category is gyre.LoopWarning]) == 1
    assert int(state["n"]) == 3 and history.collect("outputs.y") == [2, 4, 6]


def test_a_predict_step_that_returns_the_state_unchanged_stays_quiet():
    import warnings

    import jax

    @jax.jit
    def predict_step(state, batch):  # ciclo's form: (logs, state), the state as it came
        return gyre.logs().add_output("y", batch * state["w"]), state

    with warnings.catch_warnings():
        warnings.simplefilter("error", gyre.LoopWarning)
        gyre.predict_loop({"w": np.float32(2)}, [np.float32(1)] * 2, {gyre.on_predict_step: predict_step})
