"""The mistakes a new user makes with the engine: each one gets an error or a warning that
names the problem, what was received and the fix, never a silent wrong result."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre


def test_a_train_step_that_returns_no_state_warns_once_naming_it():
    def train_step(state, batch):  # forgot to return the state
        return gyre.logs().add_loss("loss", float(batch))

    with pytest.warns(gyre.LoopWarning, match=r"train_step\) returned no state.*trains nothing") as caught:
        state, _, _ = gyre.train_loop(0, range(5), {gyre.on_train_step: train_step})
    assert state == 0 and len([w for w in caught if w.category is gyre.LoopWarning]) == 1
    assert caught[0].filename == __file__  # attributed to the user's line, not gyre's


@pytest.mark.parametrize("steps_per_call", [1, 2])
def test_a_plain_loop_whose_step_logs_a_loss_and_returns_no_state_warns_once(steps_per_call):
    import jax

    @jax.jit
    def train_step(state, batch):  # forgot to return the state: the loop trained nothing
        return gyre.logs().add_loss("loss", batch * state["w"])

    data = [np.float32(1)] * 4
    with pytest.warns(gyre.LoopWarning, match=r"logged a loss \('loss'\).*train_step\) returned no "
                      r"state.*trains nothing.*gyre.test_loop") as caught:
        gyre.loop({"w": np.float32(2)}, data, {gyre.every(1): train_step}, steps_per_call=steps_per_call)
    assert len([w for w in caught if w.category is gyre.LoopWarning]) == 1
    assert caught[0].filename == __file__


def test_plain_loops_that_do_not_train_stay_quiet():
    import warnings

    trains = lambda state, batch: (gyre.logs().add_loss("loss", batch), state + 1)  # noqa: E731
    logs_only = lambda state, batch: gyre.logs().add_loss("loss", batch)  # noqa: E731
    metric_only = lambda state, batch: gyre.logs().add_metric("seen", batch)  # noqa: E731
    evaluations = []

    def evaluate(state):  # an evaluation nested in a callback: logs a loss, returns no state
        evaluations.append(gyre.loop(state, [1.0, 2.0], {gyre.every(1): logs_only})[1].collect("loss"))

    with warnings.catch_warnings():
        warnings.simplefilter("error", gyre.LoopWarning)
        assert gyre.loop(0, [1.0, 2.0], {gyre.every(1): trains})[0] == 2
        gyre.loop(0, [1.0, 2.0], {gyre.every(1): metric_only})  # no loss: not a training
        gyre.loop(None, [1.0, 2.0], {gyre.every(1): logs_only})  # no state to train
        gyre.loop(0, [1.0], {gyre.every(1): [trains, evaluate]})
        gyre.test_loop(0, [1.0, 2.0], {gyre.on_test_step: logs_only})
    assert evaluations == [[1.0, 2.0]]


def test_a_returned_value_of_another_structure_is_refused_naming_both():
    def log_metrics(state):
        return {"accuracy": 0.5}  # meant as logs: would silently become the state

    with pytest.raises(TypeError) as err:
        gyre.loop({"params": 1.0}, range(2), {gyre.every(1): log_metrics})
    text = str(err.value)
    assert "log_metrics returned a value whose structure differs" in text
    assert "'params'" in text and "'accuracy'" in text and "gyre.replace_state" in text


def test_replace_state_changes_the_structure_on_purpose():
    grow = lambda state: gyre.replace_state({**state, "ema": 0.0})  # noqa: E731
    state, _, _ = gyre.loop({"w": 1.0}, range(3), {gyre.every(1): grow})
    assert state == {"w": 1.0, "ema": 0.0}
    pair = lambda state: (gyre.logs().add_metric("n", 1), gyre.replace_state([state]))  # noqa: E731
    assert gyre.loop(1.0, range(1), {gyre.every(1): pair})[0] == [1.0]


def test_a_pair_in_swapped_order_is_explained():
    def step(state, batch):
        return state + batch, gyre.logs().add_loss("loss", 1.0)

    with pytest.raises(TypeError, match=r"returned \(state, logs\): the pair is \(logs, state\)") as err:
        gyre.loop(0.0, [1.0], {gyre.every(1): step})
    assert "swap them: return logs, state" in str(err.value)


def test_a_misspelt_parameter_name_is_refused_with_the_closest_name():
    def report(elapsed, log):
        pass

    with pytest.raises(TypeError) as err:
        gyre.loop(None, range(1), {gyre.every(1): report})
    text = str(err.value)
    assert "names some of its parameters after the loop's values" in text
    assert "'log': Did you mean 'logs'?" in text
    assert "would hand them the wrong values" in text


def test_ciclos_loop_state_name_binds_by_name():
    seen = []
    gyre.loop(7, range(2), {gyre.every(1): lambda state, batch, elapsed, loop_state: seen.append(
        (state, batch, elapsed.steps, loop_state.state))})
    assert seen == [(7, 0, 0, 7), (7, 1, 1, 7)]


@pytest.mark.parametrize("stop", [np.int64(3), np.int32(3), np.array(3)])
def test_numpy_integers_are_steps(stop):
    _, _, elapsed = gyre.loop(None, range(10), {}, stop=stop, epoch_duration=np.int64(2))
    assert (elapsed.steps, elapsed.epochs) == (3, 1)


def test_whole_arrays_as_the_dataset_point_to_batches():
    x, y = np.zeros((100, 4), np.float32), np.zeros(100, np.int32)
    with pytest.raises(TypeError) as err:
        gyre.loop(None, (x, y), {})
    assert "a Keras habit" in str(err.value) and "gyre.data.batches((X, Y), batch_size=32" in str(err.value)
    assert "(100, 4), (100,)" in str(err.value)
    gyre.loop(None, (x[:8], x[8:16]), {})  # two batches alike: a dataset of two batches


def test_epoch_timing_over_data_of_unknown_length_is_refused_at_the_start():
    endless = itertools.count()
    with pytest.raises(ValueError, match="counts epochs, and the loop cannot tell where an epoch ends"):
        gyre.loop(None, endless, {}, stop=gyre.at(epochs=2))
    with pytest.raises(ValueError, match=r"every\(epochs=1\).*cannot tell where an epoch ends"):
        gyre.loop(None, endless, {gyre.every(epochs=1): print}, stop=10)
    gyre.loop(None, endless, {gyre.every(epochs=1): lambda: None}, stop=4, epoch_duration=2)


def test_data_that_ends_before_stop_says_so_once():
    with pytest.warns(gyre.LoopWarning, match=r"the data ended after 46 steps, before stop=Period\(steps=1000\)"):
        _, _, elapsed = gyre.loop(None, range(46), {}, stop=1000)
    assert elapsed.steps == 46


def test_a_test_dataset_without_a_test_step_is_an_error():
    with pytest.raises(ValueError, match="test_dataset but no test step") as err:
        gyre.train_loop(0, range(4), {gyre.on_train_step: lambda state: state}, test_dataset=lambda: [1])
    assert "gyre.on_test_step: test_step" in str(err.value)


@pytest.mark.parametrize("duration", [0, -1, 2.5, "all"])
def test_test_duration_is_checked_at_construction(duration):
    with pytest.raises(ValueError, match="test_duration= must be a number of steps >= 1"):
        gyre.train_loop(0, range(4), {gyre.on_test_step: lambda: None}, test_dataset=lambda: [1],
                        epoch_duration=2, test_duration=duration)


def test_ctrl_c_says_once_where_the_loop_stopped():
    def interrupt(elapsed):
        if elapsed.steps == 3:
            raise KeyboardInterrupt

    with pytest.warns(gyre.LoopWarning, match=r"interrupted \(Ctrl-C\) during step 3: the loop stopped after 3 steps"):
        _, _, elapsed = gyre.loop(None, range(10), {gyre.every(1): interrupt})
    assert elapsed.steps == 3  # (step 3 did not complete)


def test_ctrl_c_from_a_task_before_a_compiled_step_says_that_step_did_not_run():
    # the block path has no step in progress while its tasks before the step run: was worded as if
    # the batch had been pulled when it raised
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", state), state + batch

    def interrupt(elapsed):
        if elapsed.steps == 3:
            raise KeyboardInterrupt

    with pytest.warns(gyre.LoopWarning, match=r"\(Ctrl-C\) before step 3 ran: the loop stopped after 3 steps"):
        state, _, elapsed = gyre.loop(jnp.float32(0), [jnp.float32(1)] * 10, {gyre.every(3): interrupt, gyre.every(1): step})
    assert (float(state), elapsed.steps) == (3.0, 3)


def test_ctrl_c_from_the_data_ends_every_steps_per_call_after_the_same_steps():
    # was: with steps_per_call=2 or 3, a KeyboardInterrupt raised while a fused chunk pulled its batches
    # dropped the batches it had pulled: 16 or 15 steps where step by step made 17
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", state), state + batch

    def data():
        for i in range(40):
            if i == 17:
                raise KeyboardInterrupt
            yield jnp.float32(1)

    # (and the warning named step 16, which had completed, as the step cut short at K = 1)
    said = r"before step 17 ran: the loop stopped after 17 steps and ran its end callbacks$"
    for steps_per_call in (1, 2, 3):
        with pytest.warns(gyre.LoopWarning, match=said):
            state, _, elapsed = gyre.loop(jnp.float32(0), data(), {gyre.every(1): step}, steps_per_call=steps_per_call)
        assert (float(state), elapsed.steps) == (17.0, 17), steps_per_call
    with pytest.warns(gyre.LoopWarning, match=said):  # the general path: a Python step
        state, _, elapsed = gyre.loop(0.0, data(), {gyre.every(1): lambda state, batch: state + float(batch)})
    assert (state, elapsed.steps) == (17.0, 17)


@pytest.mark.filterwarnings("ignore:steps_per_call=2 cannot fuse this table")  # (K=2: its step-by-step fallback)
@pytest.mark.parametrize("steps_per_call", [1, 2])
def test_ctrl_c_raised_before_the_step_leaves_the_clock_at_the_state(steps_per_call):
    # was: a KeyboardInterrupt from on_train_batch_begin at step 3 (no signal handler of gyre's saw it)
    # returned a state of 3 steps with elapsed.steps == 4, so a run continued from them skipped step 3
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", state), state + batch

    class Interrupt:
        def on_train_batch_begin(self, elapsed):
            if elapsed.steps == 3 and not done:
                done.append(1)
                raise KeyboardInterrupt

    done = []
    data = jnp.arange(1.0, 11.0)
    with pytest.warns(gyre.LoopWarning, match=r"during step 3: the loop stopped after 3 steps"):
        state, history, elapsed = gyre.train_loop(jnp.float32(0), list(data), {gyre.on_train_step: step},
                                                  callbacks=[Interrupt()], steps_per_call=steps_per_call)
    assert float(state) == 6.0 and elapsed.steps == 3 and history.collect("steps") == [0, 1, 2]
    state, history, elapsed = gyre.train_loop(state, list(data[elapsed.steps:]), {gyre.on_train_step: step},
                                              elapsed=elapsed, history=history)
    assert float(state) == float(data.sum()) and elapsed.steps == 10 and history.collect("steps") == list(range(10))


def test_ctrl_c_during_an_evaluation_is_not_swallowed_by_it():
    evaluated = []

    def test_step(state, batch, elapsed):
        if batch == 2 and len(evaluated) == 1:  # in the second evaluation, mid test set
            raise KeyboardInterrupt
        return gyre.logs().add_metric("score", float(batch))

    def train_step(state, batch):
        return gyre.logs().add_loss("loss", 1.0), state + 1

    with pytest.warns(gyre.LoopWarning, match="interrupted"):
        state, history, elapsed = gyre.train_loop(
            0, range(100), {gyre.on_train_step: train_step, gyre.on_test_step: test_step,
                            gyre.on_epoch_end: lambda: evaluated.append(1)},
            test_dataset=lambda: [0, 1, 2, 3], epoch_duration=5,
        )
    # training stopped at the second evaluation (the outer loop caught Ctrl-C), and that
    # evaluation reports nothing: a partial mean would look like a complete one
    assert elapsed.steps == 10 and state == 10
    assert history.collect("steps", "score_test") == ([4], [1.5])
    with pytest.raises(KeyboardInterrupt):  # the inner loop never catches it, even when asked to
        gyre.test_loop(0, [2], {gyre.on_test_step: lambda batch: (_ for _ in ()).throw(KeyboardInterrupt)},
                       catch_keyboard_interrupt=False)


def test_the_no_state_warning_holds_for_fused_steps_and_reruns():
    import jax

    @jax.jit
    def logs_only(state, batch):
        return gyre.logs().add_loss("loss", batch)

    @jax.jit
    def trains(state, batch):
        return gyre.logs().add_loss("loss", batch), state + batch

    data = [np.float32(1)] * 4
    for _ in range(2):  # the fused function is cached: the second run must say the same
        with pytest.warns(gyre.LoopWarning, match="returned no state"):
            gyre.train_loop(0.0, data, {gyre.on_train_step: logs_only}, steps_per_call=2)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", gyre.LoopWarning)
        for _ in range(2):
            state, _, _ = gyre.train_loop(0.0, data, {gyre.on_train_step: trains}, steps_per_call=2)
            assert float(state) == 4.0


@pytest.mark.parametrize("door", [gyre.loop, gyre.train_loop, gyre.test_loop, gyre.predict_loop])
def test_a_misspelt_keyword_of_a_loop_names_the_closest_one(door):
    with pytest.raises(TypeError, match=r"(?s)unexpected keyword argument 'stpo'.*did you mean stop=\?"):
        door(0, [1], stpo=3)
    with pytest.raises(TypeError, match=r"(?s)'num_epochs'.*use stop= \(gyre's name for num_epochs\)"):
        door(0, [1], num_epochs=3)


def test_elapse_given_the_loops_elapsed_keyword_names_initial():
    # a hand-written loop resumed as the loops are (elapsed=) got Python's bare TypeError
    with pytest.raises(TypeError, match=r"(?s)Elapse\(\) got an unexpected keyword argument 'elapsed'.*use initial="):
        gyre.elapse(range(3), stop=2, elapsed=None)
    with pytest.raises(TypeError, match=r"(?s)'stpo'.*did you mean stop=\?"):
        gyre.elapse(range(3), stpo=2)
    assert [e.steps for e, _ in gyre.elapse(range(9), stop=4, initial=gyre.Elapsed.create().replace(steps=2))] == [2, 3]


def test_a_misspelt_keyword_of_checkpoint_and_batches_names_the_closest_one(tmp_path):
    with pytest.raises(TypeError, match=r"(?s)'max_to_keep'.*use keep= \(gyre's name for max_to_keep\)"):
        gyre.checkpoint(tmp_path / "c", max_to_keep=2)
    with pytest.raises(TypeError, match=r"(?s)'batchsize'.*did you mean batch_size=\?"):
        gyre.data.batches(np.zeros((4, 1)), batchsize=2)
    with pytest.raises(TypeError, match=r"(?s)'drop_last'.*use drop_remainder="):
        gyre.data.batches(np.zeros((4, 1)), 2, drop_last=True)


@pytest.mark.filterwarnings("ignore:train_loop had no train step:gyre.LoopWarning")  # evaluation only, on purpose
@pytest.mark.parametrize("door", [gyre.loop, gyre.train_loop, gyre.test_loop])
@pytest.mark.parametrize("value", ["no", "False", 0, None])
def test_a_flag_given_anything_but_a_bool_is_refused(door, value):
    with pytest.raises(TypeError, match=r"(?s)catch_keyboard_interrupt must be True or False.*"
                       r"received: .*fix: pass catch_keyboard_interrupt=True or catch_keyboard_interrupt=False"):
        door(0, [1], catch_keyboard_interrupt=value)
    door(0, [1], catch_keyboard_interrupt=np.bool_(False))  # numpy's bool is a bool


@pytest.mark.parametrize("name", ["shuffle", "drop_remainder"])
def test_a_data_flag_given_a_string_is_refused(name):
    with pytest.raises(TypeError, match=rf"(?s){name} must be True or False.*str 'False'"):
        gyre.data.batches(np.zeros((4, 1)), 2, **{name: "False"})


@pytest.mark.parametrize("door", [gyre.loop, gyre.train_loop, gyre.test_loop, gyre.predict_loop])
def test_a_bare_array_or_a_dict_of_arrays_is_refused_as_a_dataset(door):
    import jax.numpy as jnp

    for array in (np.zeros((6, 2)), jnp.zeros((6, 2))):
        with pytest.raises(TypeError, match=r"(?s)the dataset is a single array of shape \(6, 2\).*"
                           r"gyre.data.batches\(x, batch_size="):
            door(0, array)
    with pytest.raises(TypeError, match=r"(?s)the dataset is a dict.*would iterate its keys.*"
                       r"received: a dict with keys \['x', 'y'\].*gyre.data.batches\(\(d\['x'\], d\['y'\]\)"):
        door(0, {"x": np.zeros((6, 2)), "y": np.zeros(6)})


def test_inner_loop_output_state_given_a_string_is_refused():
    with pytest.raises(TypeError, match=r"(?s)output_state must be True or False.*str 'no'"):
        gyre.inner_loop("test", lambda state: (state, gyre.History(), None), output_state="no")


@pytest.mark.parametrize("build, typo, fix", [
    (lambda: gyre.every(stpes=5), "stpes", "steps"),
    (lambda: gyre.after(step=5), "step", "steps"),
    (lambda: gyre.at(epoch=2), "epoch", "epochs"),
    (lambda: gyre.early_stopping("loss", patiance=3), "patiance", "patience"),
    (lambda: gyre.keras_bar(totl=5), "totl", "total"),
    (lambda: gyre.elapse([1], stpo=5), "stpo", "stop"),
    (lambda: gyre.inner_loop("val", lambda state: state, agregation="mean"), "agregation", "aggregation"),
    (lambda: gyre.jaxloop.EvalSpec(dataset=[1], num_step=3), "num_step", "num_steps"),
    (lambda: gyre.jaxloop.OuterLoop(train_loop=None, eval_loop=[]), "eval_loop", "eval_loops"),
    (lambda: gyre.trainer.EarlyStopping(monitr="val/loss"), "monitr", "monitor"),
    (lambda: gyre.trainer.ModelCheckpoint(save_topk=2), "save_topk", "save_top_k"),
])
def test_a_misspelt_keyword_of_a_schedule_or_callback_names_the_closest_one(build, typo, fix):
    # was: Python's bare "got an unexpected keyword argument", without the names it takes
    with pytest.raises(TypeError, match=rf"(?s)unexpected keyword argument '{typo}'.*did you mean {fix}=\?"):
        build()


def test_a_state_an_earlier_training_consumed_is_explained_by_the_loop_and_the_step():
    # was: XLA's "Buffer has been deleted or donated" from the first step (a re-run notebook cell),
    # and the loop's note blamed "the step that failed"
    import jax.numpy as jnp
    import optax

    from gyre import managed

    @managed.train_step
    def train_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.mean((batch @ state.params["w"]) ** 2)), state

    state = managed.ManagedState.create(params={"w": jnp.ones(3)}, tx=optax.sgd(0.1))
    data = [jnp.ones((4, 3))] * 2
    trained, _, _ = gyre.train_loop(state, data, {gyre.on_train_step: train_step})  # donates state
    with pytest.raises(ValueError, match=r"(?s)the loop got a state whose arrays were donated.*"
                       r"fix: continue from what the loop returned \(state, history, elapsed = gyre.loop"):
        gyre.train_loop(state, data, {gyre.on_train_step: train_step})
    _, newer = train_step(trained, data[0])
    with pytest.raises(ValueError, match=r"(?s)the step got a state whose arrays were donated.*"
                       r"logs, state = train_step\(state, batch\)"):
        train_step(trained, data[0])
    assert newer.step == 3


def test_a_state_whose_dict_mixes_key_types_is_explained_at_the_door():
    # was: JAX's bare "Comparator raised exception while sorting pytree dictionary keys" from the
    # loop's first look at the state, naming neither the dict nor its keys
    for state, where in (({0: jnp.zeros(2), "w": jnp.zeros(2)}, r"state with keys \[0, 'w'\]"),
                         ({"p": {1: 0.0, "b": 0.0}}, r"state\['p'\] with keys \[1, 'b'\]")):
        with pytest.raises(ValueError, match=rf"(?s)dict whose keys mix types.*received: {where}.*fix: make them one type"):
            gyre.loop(state, [1.0], {gyre.every(1): lambda state: state})
