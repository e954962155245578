import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import gyre


def run(values, es, *, state_fn=lambda state: state + 1):
    """A loop whose step i logs `values[i]` as loss and bumps the state; es runs every step."""
    values = list(values)

    def evaluate(state, elapsed):
        return gyre.logs().add_loss("loss", jnp.float32(values[elapsed.steps])).add_metric("acc", jnp.float32(values[elapsed.steps])), state_fn(state)

    return gyre.loop(0, range(len(values)), {gyre.every(1): [evaluate, es]}, on_end=es.on_train_end)


def test_stops_after_patience_evaluations_without_improvement():
    es = gyre.early_stopping("loss", patience=2)
    _, _, elapsed = run([3, 2, 2.5, 2.4, 1, 0], es)
    assert elapsed.steps == 4 and es.best == 2.0 and es.best_step == 1 and es.stopped_step == 3


def test_min_delta_absolute_and_relative():
    es = gyre.early_stopping("loss", patience=1, min_delta=0.5)
    _, _, elapsed = run([3, 2.6, 2, 1], es)
    assert elapsed.steps == 2  # 2.6 is not 0.5 better than 3
    es = gyre.early_stopping("loss", patience=1, min_delta=0.1, delta_mode="relative")
    _, _, elapsed = run([10, 9.5, 8, 1], es)
    assert elapsed.steps == 2  # 9.5 is not 10% better than 10


def test_max_and_auto_mode():
    es = gyre.early_stopping("acc", patience=1, mode="max")
    _, _, elapsed = run([0.1, 0.5, 0.4, 0.9], es)
    assert elapsed.steps == 3 and es.best == 0.5
    assert gyre.early_stopping("accuracy_test", patience=1, mode="auto").mode == "max"
    assert gyre.early_stopping("loss_test", patience=1, mode="auto").mode == "min"


def test_baseline_must_be_beaten():
    es = gyre.early_stopping("loss", patience=2, baseline=1.0)
    _, _, elapsed = run([3, 2, 1.5, 0.5], es)
    assert elapsed.steps == 2 and es.best == 1.0 and es.best_step is None


def test_initial_patience_is_a_warm_up():
    es = gyre.early_stopping("loss", patience=1, initial_patience=3)
    _, _, elapsed = run([1, 2, 3, 4, 5, 6], es)
    assert elapsed.steps == 4  # evaluations 2 and 3 are warm-up; the 4th stops


def test_restore_best_weights_when_stopping_and_when_loop_ends_normally():
    es = gyre.early_stopping("loss", patience=1, restore_best_weights=True)
    state, _, _ = run([3, 1, 2, 5], es, state_fn=lambda s: s + 10)
    assert state == 20
    es = gyre.early_stopping("loss", patience=10, restore_best_weights=True)
    state, _, elapsed = run([3, 1, 2, 5], es, state_fn=lambda s: s + 10)
    assert elapsed.steps == 4 and state == 20  # the loop ran out of data, still restored


def test_best_weights_survive_donation():
    import jax

    step = jax.jit(lambda s: s + 1, donate_argnums=0)
    es = gyre.early_stopping("loss", patience=5, restore_best_weights=True)
    values = [1.0, 2.0, 3.0]

    def evaluate(state, elapsed):
        return gyre.logs().add_loss("loss", values[elapsed.steps]), step(state)

    state, _, _ = gyre.loop(jnp.zeros(3), range(3), {gyre.every(1): [evaluate, es]}, on_end=es.on_train_end)
    assert state.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.filterwarnings("ignore:train_loop had no train step:gyre.LoopWarning")  # evaluation only, on purpose
def test_in_train_loop_on_epoch_end_with_test_metrics():
    losses = iter([5.0, 4.0, 4.5, 4.6, 1.0])

    def test_step(state, batch):
        return gyre.logs().add_loss("loss", next(losses))

    es = gyre.early_stopping("loss_test", patience=2)
    _, history, elapsed = gyre.train_loop(
        0, range(100), {gyre.on_test_step: test_step}, callbacks=[es], test_dataset=lambda: [0], epoch_duration=10,
    )
    assert elapsed.steps == 40 and history.collect("loss_test") == pytest.approx([5.0, 4.0, 4.5, 4.6])


def test_monitor_never_logged_is_explained():
    es = gyre.early_stopping("val_loss", patience=1)
    with pytest.raises(KeyError, match="val_loss") as err:
        run([1, 2], es)
    assert "losses.loss" in str(err.value) and "fix:" in str(err.value)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"monitor": "", "patience": 1}, "name of the value"),
        ({"monitor": "l", "patience": -1}, "patience"),
        ({"monitor": "l", "patience": 1, "mode": "up"}, "mode"),
        ({"monitor": "l", "patience": 1, "delta_mode": "pct"}, "delta_mode"),
        ({"monitor": "l", "patience": 1, "min_delta": -1}, "min_delta"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        gyre.early_stopping(**kwargs)


# -- arguments checked when it is made; errors at first use name the entry ------------------


@pytest.mark.parametrize("baseline", ["low", float("nan"), True, [0.5], jnp.ones(2)])
def test_bad_baseline_at_construction(baseline):
    with pytest.raises(ValueError) as info:
        gyre.early_stopping("loss", patience=2, baseline=baseline)
    lines = str(info.value).splitlines()
    assert lines[0] == "early_stopping's baseline must be a number or None"
    assert lines[2].startswith("  received: ") and lines[3].startswith("  fix: pass the monitored")


@pytest.mark.parametrize(
    "kwargs, error, first_line",
    [
        ({"patience": "3"}, ValueError, "early_stopping's patience must be a whole number >= 0"),
        ({"patience": 1.5}, ValueError, "early_stopping's patience must be a whole number >= 0"),
        ({"initial_patience": -1}, ValueError, "early_stopping's initial_patience must be a whole number >= 0"),
        ({"min_delta": "0.1"}, ValueError, "early_stopping's min_delta must be a number >= 0"),
        ({"min_delta": float("inf")}, ValueError, "early_stopping's min_delta must be a number >= 0"),
        ({"min_delta": True}, ValueError, "early_stopping's min_delta must be a number >= 0"),
        ({"mode": None}, ValueError, "early_stopping's mode must be 'min', 'max' or 'auto'"),
        ({"mode": ["min"]}, ValueError, "early_stopping's mode must be 'min', 'max' or 'auto'"),
        ({"delta_mode": None}, ValueError, "early_stopping's delta_mode must be 'absolute' or 'relative'"),
        ({"restore_best_weights": "yes"}, TypeError, "early_stopping's restore_best_weights must be True or False"),
        ({"monitor": 3}, TypeError, "early_stopping needs the name of the value to monitor"),
    ],
)
def test_each_argument_is_checked_at_construction(kwargs, error, first_line):
    arguments = {"monitor": "loss", "patience": 2, **kwargs}
    with pytest.raises(error) as info:
        gyre.early_stopping(**arguments)
    assert str(info.value).splitlines()[0] == first_line
    assert "  fix: " in str(info.value)


def test_numpy_and_jax_numbers_are_accepted():
    import numpy as np

    es = gyre.early_stopping("loss", patience=np.int64(2), initial_patience=jnp.array(1),
                             min_delta=np.float32(0.5), baseline=jnp.float32(2.5))
    assert (es.patience, es.initial_patience, es.min_delta, es.best) == (2, 1, 0.5, 2.5)
    assert type(es.patience) is int and type(es.best) is float
    run([3, 2, 1.8, 1.7, 1.6], es)  # improving means going below best - 0.5, from 2.5
    assert es.best == pytest.approx(1.8) and es.best_step == 2 and es.stopped_step == 4


def test_a_vector_monitor_names_the_entry_and_its_shape():
    es = gyre.early_stopping("per_class", patience=2)

    def step(state):
        return gyre.logs().add_metric("per_class", jnp.ones((3,))).add_loss("loss", jnp.float32(1))

    with pytest.raises(ValueError) as info:
        gyre.loop(0, range(2), {gyre.every(1): [step, es]})
    assert str(info.value).splitlines() == [
        "early_stopping monitors 'per_class', which is not a single number at step 0",
        "  expected: a scalar logged as 'per_class' (a loss or a metric averaged over the batch)",
        "  received: an array of shape (3,) (float32)",
        "  fix: log one number under 'per_class', e.g. logs.add_metric(name, values.mean()), "
        "or monitor another entry",
    ]


def test_a_value_holding_one_number_is_a_scalar():
    es = gyre.early_stopping("loss", patience=1)
    es(0, gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", jnp.ones((1, 1))))
    assert es.best == 1.0


def test_missing_monitor_prints_its_lines():
    es = gyre.early_stopping("val_loss", patience=1)
    with pytest.raises(KeyError) as info:
        es(0, gyre.Elapsed(steps=4), gyre.logs().add_loss("loss", 1.0))
    assert isinstance(info.value, gyre.core.ExplainedKeyError)
    assert str(info.value).splitlines() == [
        "early_stopping monitors 'val_loss', which was not logged at step 4",
        "  expected: an entry named 'val_loss' in the logs when early_stopping runs",
        "  received: entries ['losses.loss']",
        "  fix: monitor one of the received names (evaluation entries carry the test suffix, "
        "e.g. 'loss_test'), and run early stopping where it is logged (it registers itself "
        "on on_epoch_end, after evaluation)",
    ]


def test_patience_as_a_period_counts_the_clock_since_the_best_value():
    # ciclo's meaning: stop once `patience` has elapsed since the first evaluation or the last
    # improvement (here every 2 steps, so 2 evaluations without improvement)
    es = gyre.early_stopping("loss", patience=gyre.at(steps=4))
    evaluate_every_two = gyre.every(2)
    values = iter([3.0, 2.0, 2.5, 2.4, 2.6, 1.0])

    def evaluate(state):
        return gyre.logs().add_loss("loss", jnp.float32(next(values))), state

    _, _, elapsed = gyre.loop(0, range(20), {evaluate_every_two: [evaluate, es]})
    assert es.best == 2.0 and es.best_step == 2 and es.stopped_step == 6 and elapsed.steps == 7
    assert es.wait == 2  # evaluations are still counted


def test_a_period_patience_resumes_from_its_state_dict():
    es = gyre.early_stopping("loss", patience=gyre.at(steps=3))
    run([3, 2, 2.5], es)
    saved = es.state_dict()
    assert saved["since"]["steps"] == 1
    again = gyre.early_stopping("loss", patience=gyre.at(steps=3))
    again.load_state_dict(saved)
    assert again.since.steps == 1 and again.best == 2.0
    stop = []
    again(0, gyre.Elapsed(steps=4), gyre.logs().add_loss("loss", 2.9), loop=type("L", (), {"request_stop": lambda self, why: stop.append(why)})())
    assert stop and "did not improve for 3 steps (Period(steps=3))" in stop[0]


def test_the_mode_is_inferred_from_the_name_by_default_and_shown():
    es = gyre.early_stopping("acc", patience=1)  # no mode: an accuracy is maximised
    _, history, elapsed = run([0.1, 0.5, 0.6, 0.9, 0.2, 0.1], es)
    assert es.mode == "max" and elapsed.steps == 5 and es.best == pytest.approx(0.9)
    assert "mode='max'" in repr(es) and "inferred from the name" in repr(es)
    assert "mode 'max'" in history.stop_reason
    assert gyre.early_stopping("accuracy_test", patience=1).mode == "max"
    assert gyre.early_stopping("metrics.f1_test", patience=1).mode == "max"
    assert gyre.early_stopping("loss_test", patience=1).mode == "min"
    assert gyre.early_stopping("foo", patience=1).mode == "min"  # a name that implies nothing
    assert "inferred" not in repr(gyre.early_stopping("acc", patience=1, mode="min"))


def test_jaxloop_handler_infers_the_mode_by_the_same_rule():
    assert gyre.jaxloop.MetricMonitoringStopHandler("accuracy_test").mode == "max"
    assert gyre.jaxloop.MetricMonitoringStopHandler("loss_test").mode == "min"
    # a prefix before '/' is not part of the word (jaxloop's own endswith rule maximised it)
    assert gyre.jaxloop.MetricMonitoringStopHandler("eval/accuracy").mode == "max"
    assert gyre.early_stopping("val/acc", patience=1).mode == "max"


def test_a_restored_best_state_saves_again_before_the_loop_ends():
    """A run resumed from a checkpoint saves its early stopping again (the next checkpoint)
    before on_train_end gives the restored leaves their structure: the same leaves come back."""
    es = gyre.early_stopping("loss", patience=2, restore_best_weights=True)
    es.load_state_dict({"best": 0.5, "wait": 1, "best_leaves": [np.float32(1.0), np.float32(2.0)]})
    again = gyre.early_stopping("loss", patience=2, restore_best_weights=True)
    again.load_state_dict(es.state_dict())
    restored = again.on_train_end({"a": np.float32(0.0), "b": np.float32(0.0)})
    assert restored == {"a": 1.0, "b": 2.0}


def test_two_early_stoppings_reordered_on_resume_are_refused_instead_of_swapping_their_bests(tmp_path):
    """Two early stoppings are told apart in a checkpoint by their order; resumed in the other
    order, the one on the loss took the accuracy's best (0.75) and the other the loss's, in
    silence, and their stopping decisions followed the wrong values."""
    values = [3.0, 2.0, 0.5, 0.25, 0.6, 0.7, 0.8]

    def run(order, crash_at=None, resume=None):
        loss = gyre.early_stopping("loss", patience=10, mode="min")
        acc = gyre.early_stopping("acc", patience=10, mode="max")

        def crash(elapsed):
            if elapsed.steps == crash_at:
                raise RuntimeError("killed")

        def evaluate(state, elapsed):
            v = jnp.float32(values[elapsed.steps])
            return gyre.logs().add_loss("loss", v).add_metric("acc", 1 - v), state + 1

        stoppers = [loss, acc] if order == "loss first" else [acc, loss]
        gyre.loop(jnp.int32(0), range(len(values)), {gyre.every(1): [crash, evaluate, *stoppers],
                  gyre.every(2): gyre.checkpoint(tmp_path / "ckpt")}, stop=len(values), resume=resume,
                  data_resume="skip")
        return loss, acc

    with pytest.raises(RuntimeError, match="killed"):
        run("loss first", crash_at=5)
    with pytest.raises(ValueError, match=r"(?s)early_stopping\('acc', mode='max'\) was given the state of an early "
                       r"stopping on another value.*received: the state_dict\(\) of early_stopping\('loss', mode='min'\)"
                       r".*in its order"):
        run("acc first", resume="latest")
    loss, acc = run("loss first", resume="latest")  # the saved order resumes as before
    assert (loss.best, acc.best) == (0.25, 0.75)
    es = gyre.early_stopping("loss", patience=2)
    es.load_state_dict({"best": 0.5, "wait": 1})  # a state saved by an older gyre (no monitor) still loads
    assert es.best == 0.5


def test_a_baseline_with_a_shape_but_no_dtype_is_explained():
    class Shaped:
        shape = ()

    with pytest.raises(ValueError, match="baseline must be a number or None"):
        gyre.early_stopping("loss", patience=1, baseline=Shaped())


def test_restore_best_weights_gives_the_best_state_to_the_loop_it_stops_as_ciclo_does():
    # ciclo's early_stopping returns the best state when it stops the loop; gyre's returned the
    # last state there unless on_end=es.on_train_end was given, and only warned
    values = [3.0, 1.0, 2.0, 5.0, 0.5]

    def evaluate(state, elapsed):
        return gyre.logs().add_loss("loss", jnp.float32(values[elapsed.steps])), state + 10

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        es = gyre.early_stopping("loss", patience=1, restore_best_weights=True)
        state, _, elapsed = gyre.loop(0, range(5), {gyre.every(1): [evaluate, es]})
        assert (state, elapsed.steps, es.stopped_step) == (20, 3, 2)  # stopped at step 2, best of step 1
        es = gyre.early_stopping("loss", patience=1, restore_best_weights=True)
        state, _, _ = gyre.loop(0, range(5), {gyre.every(1): [evaluate, es]}, on_end=es.on_train_end)
        assert state == 20
        es = gyre.early_stopping("loss", patience=1, restore_best_weights=True)
        state, _, _ = gyre.train_loop(0, range(5), {gyre.on_train_step: evaluate}, callbacks=[es], epoch_duration=1)
        assert state == 20
    # a loop that ends before patience runs out has only on_train_end to give the best state back
    es = gyre.early_stopping("loss", patience=3, restore_best_weights=True)
    with pytest.warns(gyre.LoopWarning, match=r"kept the best state \(step 1\), but nothing gave it back"):
        state, _, _ = gyre.loop(0, range(3), {gyre.every(1): [evaluate, es]})
    assert state == 30  # the last state, as said


def test_an_early_stopping_reused_in_a_new_loop_starts_anew_and_a_continued_clock_goes_on():
    # the same object in a second loop from step 0 (a re-run) kept the first loop's best and
    # wait, and stopped the new run at its first evaluation
    values = [3, 2, 2.5, 2.4, 2.6, 1, 0.5, 0.4]
    es = gyre.early_stopping("loss", patience=2)
    for _ in range(2):
        _, _, elapsed = run(values, es)
        assert elapsed.steps == 4 and es.best == 2.0 and es.best_step == 1 and es.stopped_step == 3
    # a loop that continues the clock (elapsed=) continues the count
    es = gyre.early_stopping("loss", patience=3)

    def evaluate(state, elapsed):
        return gyre.logs().add_loss("loss", jnp.float32(values[elapsed.steps % 8])), state + 1

    _, _, elapsed = gyre.loop(0, range(3), {gyre.every(1): [evaluate, es]})
    assert (elapsed.steps, es.best, es.wait) == (3, 2.0, 1)
    _, _, elapsed = gyre.loop(0, range(8), {gyre.every(1): [evaluate, es]}, elapsed=elapsed)
    assert elapsed.steps == 5 and es.stopped_step == 4  # 2.4 and 2.6 after 2.5: three without improving
