"""The NaN/Inf policy (gyre.engine._nan): raise at the step and entry that went non-finite,
before any checkpoint saves a state made from it, without a host sync per step; skip the
update in managed train steps; ignore."""

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from gyre.engine import _nan
from gyre.engine._ring import ROWS

# -- a cheap jitted step: the state adds its batch; the loss is the state ----------------------


@jax.jit
def add_step(state, batch):
    state = state + batch
    return gyre.logs().add_loss("loss", state).add_metric("seen", batch), state


def numbers(n, bad_at=None, bad=math.nan):
    return [np.float32(bad if i == bad_at else 1.0) for i in range(n)]


# -- raise -------------------------------------------------------------------------------------


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_raise_names_the_first_non_finite_step_and_entry(steps_per_call):
    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop(jnp.float32(0), numbers(12, bad_at=5), {gyre.every(1): add_step}, steps_per_call=steps_per_call)
    err = info.value
    assert (err.step, err.collection, err.name) == (5, "losses", "loss") and math.isnan(err.value)
    lines = str(err).splitlines()
    assert lines[0] == '"loss" is nan at step 5'
    assert "expected: finite losses and metrics (nan_policy='raise', the default)" in lines[1]
    assert "received: losses.loss = nan at step 5 (epochs=0, step_in_epoch=5, samples=5)" in lines[2]
    fix = lines[3]
    assert "lower the learning rate" in fix and "clip the gradients" in fix and "nan_policy='skip'" in fix
    assert isinstance(err, FloatingPointError)


def test_a_nan_at_the_first_step_points_at_the_data_not_at_a_divergence():
    # was: "the training diverged: lower the learning rate", for labels 1..10 of a 10-class model
    import optax

    def step(state, batch):
        x, labels = batch
        loss = optax.softmax_cross_entropy_with_integer_labels(x @ state, labels).mean()
        return gyre.logs().add_loss("loss", loss), state

    batch = (jnp.ones((4, 3)), jnp.array([1, 5, 9, 10]))  # 10 is outside the 10 classes
    with pytest.raises(gyre.NonFiniteError, match='"loss" is nan at step 0') as info:
        gyre.loop(jnp.zeros((3, 10)), [batch], {gyre.every(1): step})
    fix = str(info.value).splitlines()[3]
    assert "labels outside the model's classes" in fix and "NaN/Inf inputs" in fix and "nan_policy='skip'" in fix
    assert "diverged: lower the learning rate" not in fix


def test_raise_on_an_infinite_metric_says_how_to_keep_a_metric_that_may_be_nan():
    def step(state, batch):
        return gyre.logs().add_loss("loss", jnp.float32(1)).add_metric("ratio", jnp.float32(batch) / 0.0), state

    with pytest.raises(gyre.NonFiniteError, match=r'"ratio" is inf at step 0') as info:
        gyre.loop(0, [1.0], {gyre.every(1): step})
    assert info.value.collection == "metrics"
    assert "log it as an output (logs.add_output)" in str(info.value)


def test_the_first_bad_element_of_an_array_entry_is_reported():
    def step(state, batch):
        values = jnp.where(batch > 0, jnp.array([1.0, -jnp.inf, jnp.nan]), 0.0)
        return gyre.logs().add_metric("per_class", values), state

    with pytest.raises(gyre.NonFiniteError, match=r'"per_class" is -inf at step 1'):
        gyre.loop(0, [0.0, 1.0], {gyre.every(1): step})


def test_a_long_run_stops_soon_after_the_bad_step_without_waiting_for_its_end():
    pulled = []

    def data():
        for i in range(5000):
            pulled.append(i)
            yield np.float32(math.nan if i == 10 else 1.0)

    history = gyre.history(flush_every=16, lag=4)  # values reach the host every 16 steps
    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop(jnp.float32(0), data(), {gyre.every(1): add_step}, history=history)
    assert info.value.step == 10
    assert len(pulled) <= 2 * ROWS + 1  # sent after its block, read after the next: long before the end
    assert "the loop noticed it during step" in str(info.value)


def test_with_the_default_history_a_nan_is_noticed_within_one_block_not_at_the_runs_end():
    pulled = []

    def data():  # a run of 600 steps: longer than two blocks
        for i in range(600):
            pulled.append(i)
            yield np.float32(math.nan if i == 1 else 1.0)

    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop(jnp.float32(0), data(), {gyre.every(1): add_step})
    assert info.value.step == 1
    assert len(pulled) <= 2 * ROWS + 1  # sent after its block, read after the next
    assert "the loop noticed it during step" in str(info.value)


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_a_nan_in_a_slow_run_is_noticed_within_about_a_second_not_after_poll_every_steps(steps_per_call):
    pulled = []

    def data():  # 0.04 s a step: POLL_EVERY steps take 2.6 s
        for i in range(3 * _nan.POLL_EVERY):
            pulled.append(i)
            time.sleep(0.04)
            yield np.float32(math.nan if i == 2 else 1.0)

    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop(jnp.float32(0), data(), {gyre.every(1): add_step}, steps_per_call=steps_per_call)
    assert info.value.step == 2 and "the loop noticed it during step" in str(info.value)
    assert len(pulled) <= 40  # 1.6 s: sent within 0.5 s of the step, read 0.5 s later

def test_records_that_land_are_read_at_the_next_step():
    history = gyre.history()
    check = _nan.FiniteCheck(history, lambda: gyre.Elapsed(steps=3), start=0)
    history.commit(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", math.nan))
    check.poll()  # nothing on the host yet: the countdown runs
    history.flush()  # a writer's read lands the records
    with pytest.raises(gyre.NonFiniteError, match='"loss" is nan at step 0'):
        check.poll()


def test_a_landing_is_read_at_the_next_step_and_the_read_keeps_its_cadence():
    history = gyre.history()
    check = _nan.FiniteCheck(history, lambda: gyre.Elapsed(steps=3), start=0)
    history.commit(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 1.0))
    check.poll(_nan.POLL_EVERY - 2)
    assert check.position == 0 and check.countdown == 2  # nothing read between two polls
    history.flush()  # a writer's read lands the records: read at the next step
    check.poll()
    assert check.position == 1 and check.countdown == _nan.POLL_EVERY


def test_records_of_a_continued_history_are_not_checked_again():
    history = gyre.history()
    history.commit(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", math.nan))
    _, history, elapsed = gyre.loop(
        jnp.float32(0), numbers(3), {gyre.every(1): add_step}, history=history, elapsed=gyre.Elapsed(steps=1)
    )
    assert elapsed.steps == 4 and len(history) == 4


def test_stateful_metrics_and_outputs_are_not_checked():
    def step(state, batch):
        logs = gyre.logs().add_stateful_metric("precision", jnp.float32(math.nan)).add_output("y", jnp.float32(math.inf))
        return logs, state

    _, history, _ = gyre.loop(0, [1, 2], {gyre.every(1): step})
    assert len(history.collect("precision")) == 2


def test_an_evaluation_is_checked_through_the_entry_it_logs():
    def train_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.float32(1.0)), state + 1

    def test_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.float32(math.nan if state >= 4 else 0.5))

    with pytest.raises(gyre.NonFiniteError, match=r'"loss_test" is nan at step 3'):
        gyre.train_loop(
            0, range(9), {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
            test_dataset=lambda: [0, 1], epoch_duration=2,
        )


def test_predict_and_test_loops_check_their_losses_and_metrics():
    def step(state, batch):
        return gyre.logs().add_metric("score", jnp.float32(batch))

    data = [1.0, math.nan]
    with pytest.raises(gyre.NonFiniteError, match=r'"score" is nan at step 1'):
        gyre.test_loop(None, data, {gyre.on_test_step: step})
    with pytest.raises(gyre.NonFiniteError, match=r'"score" is nan at step 1'):
        gyre.predict_loop(None, data, {gyre.on_predict_step: step})
    _, history, _ = gyre.test_loop(None, data, {gyre.on_test_step: step}, nan_policy="ignore")
    assert math.isnan(history.collect("score")[1])


# -- no checkpoint after the first non-finite loss ----------------------------------------------


class Saver:
    """Saves what a checkpoint saves, through loop.snapshot() (which checks first)."""

    def __init__(self):
        self.saved = {}

    def __call__(self, loop):
        snapshot = loop.snapshot()
        self.saved[snapshot.step] = jax.device_get(snapshot.state)


@pytest.mark.parametrize(
    ("steps_per_call", "every", "bad_at", "saved"),
    [
        (1, 2, 4, [1, 3]),  # the save during the bad step itself: its logs are checked
        (4, 4, 2, [1]),  # fused: the bad step in the middle of the chunk before the save
        (3, 2, 3, [1, 3]),  # fused: the first step of the chunk
    ],
)
def test_no_snapshot_holds_a_state_made_after_the_first_non_finite_loss(steps_per_call, every, bad_at, saved):
    saver = Saver()  # every(k) saves during steps 0, k, 2k...: snapshots 1, k + 1, ...
    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop(
            jnp.float32(0), numbers(12, bad_at=bad_at), {gyre.every(1): add_step, gyre.every(every): saver},
            steps_per_call=steps_per_call,
        )
    assert info.value.step == bad_at
    assert sorted(saver.saved) == saved  # the first save after the bad step refused
    assert all(np.isfinite(state) for state in saver.saved.values())


def test_gyre_checkpoint_never_saves_or_rotates_after_the_first_non_finite_loss(tmp_path):
    @jax.jit
    def step(state, batch):
        state = {"w": state["w"] + batch}
        return gyre.logs().add_loss("loss", state["w"]), state

    ckpt = gyre.checkpoint(str(tmp_path), keep=2)
    with pytest.raises(gyre.NonFiniteError, match="at step 7"):
        gyre.train_loop(
            {"w": jnp.float32(0)}, numbers(12, bad_at=7), {gyre.on_train_step: step},
            callbacks=[ckpt], epoch_duration=2,
        )
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [4, 6]  # the save at the end of step 7 refused; 4 not rotated out
    state, elapsed = ckpt.restore({"w": jnp.float32(0)})
    assert elapsed.steps == 6 and np.isfinite(np.asarray(state["w"]))


def test_check_finite_is_a_no_op_under_ignore():
    saver = Saver()
    state, _, _ = gyre.loop(
        jnp.float32(0), numbers(6, bad_at=1), {gyre.every(1): add_step, gyre.every(2): saver}, nan_policy="ignore"
    )
    assert sorted(saver.saved) == [1, 3, 5] and math.isnan(float(state))


# -- ignore ------------------------------------------------------------------------------------


def test_ignore_trains_on_as_before():
    state, history, elapsed = gyre.loop(jnp.float32(0), numbers(6, bad_at=2), {gyre.every(1): add_step}, nan_policy="ignore")
    assert elapsed.steps == 6 and math.isnan(float(state))
    assert [math.isnan(v) for v in history.collect("loss")] == [False, False, True, True, True, True]


# -- skip --------------------------------------------------------------------------------------


def regression_data(n=10, bad_at=None):
    rng = np.random.default_rng(0)
    data = [(rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=8).astype(np.float32)) for _ in range(n)]
    if bad_at is not None:
        x, y = data[bad_at]
        data[bad_at] = (np.where(np.arange(3) == 1, np.nan, x).astype(np.float32), y)
    return data


@managed.train_step
def noisy_regression(state, batch):
    """A regression whose loss draws from the step's key (as dropout would)."""
    x, y = batch
    noise = 0.01 * jax.random.normal(state.step_key("noise"), y.shape)
    loss = jnp.mean((x @ state.params["w"] + noise - y) ** 2)
    return gyre.logs().add_loss("loss", loss), state


def regression_state(**kwargs):
    return managed.ManagedState.create(params={"w": jnp.zeros(3)}, tx=optax.adam(0.1), rng=1, **kwargs)


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_skip_trains_through_a_nan_batch_as_if_it_was_not_there(steps_per_call):
    table = {gyre.every(1): noisy_regression}
    bad = regression_data(bad_at=4)
    skipped, history, elapsed = gyre.loop(regression_state(), bad, table, nan_policy="skip", steps_per_call=steps_per_call)
    clean = regression_data()
    without, _, _ = gyre.loop(regression_state(), clean[:4] + clean[5:], table, steps_per_call=steps_per_call)
    assert int(skipped.skipped_steps) == 1 and elapsed.steps == 10
    assert int(skipped.step) == int(without.step) == 9  # state.step counts the updates applied
    for a, b in zip(jax.tree_util.tree_leaves((skipped.params, skipped.opt_state)),
                    jax.tree_util.tree_leaves((without.params, without.opt_state)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert history.collect("skipped_steps") == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert math.isnan(history.collect("loss")[4])  # the history shows what happened


def test_skip_gives_the_same_result_fused_and_step_by_step():
    table = {gyre.every(1): noisy_regression}
    one, h1, _ = gyre.loop(regression_state(), regression_data(bad_at=6), table, nan_policy="skip")
    four, h4, _ = gyre.loop(regression_state(), regression_data(bad_at=6), table, nan_policy="skip", steps_per_call=4)
    np.testing.assert_allclose(np.asarray(one.params["w"]), np.asarray(four.params["w"]), rtol=1e-6)
    assert h1.collect("skipped_steps") == h4.collect("skipped_steps")


def test_skipped_steps_survive_into_the_next_loop_and_a_first_skipped_step_is_not_an_error():
    table = {gyre.every(1): noisy_regression}
    state, _, elapsed = gyre.loop(regression_state(), regression_data(n=3, bad_at=2), table, nan_policy="skip")
    assert int(state.skipped_steps) == 1
    # the next loop's first step is skipped too: its count grows from the state's, 1 -> 2
    state, history, _ = gyre.loop(state, regression_data(n=3, bad_at=0), table, nan_policy="skip", elapsed=elapsed)
    assert int(state.skipped_steps) == 2 and history.collect("skipped_steps") == [2, 2, 2]


def test_a_step_built_to_skip_skips_under_raise_and_other_non_finite_values_still_raise():
    @managed.train_step(nan_policy="skip")
    def step(state, batch):
        x, y = batch
        loss = jnp.mean((x @ state.params["w"] - y) ** 2)
        ratio = jnp.where(jnp.isnan(x).any(), 1.0, jnp.float32(y[0] > 100) / jnp.float32(y[0] > 100))
        return gyre.logs().add_loss("loss", loss).add_metric("ratio", ratio), state

    data = regression_data(bad_at=2)
    with pytest.raises(gyre.NonFiniteError, match=r'"ratio" is nan at step 0'):
        gyre.loop(regression_state(), data, {gyre.every(1): step})
    data = [(x, y + 200.0) for x, y in data]  # ratio is 1 everywhere: only the skipped step is NaN
    state, history, _ = gyre.loop(regression_state(), data, {gyre.every(1): step})
    assert int(state.skipped_steps) == 1 and math.isnan(history.collect("loss")[2])


def test_skip_with_a_finite_loss_and_non_finite_gradients():
    @managed.train_step
    def step(state, batch):
        # sqrt(|w - b|) is 0 at w == b, its gradient is not finite there
        return gyre.logs().add_loss("loss", jnp.sum(jnp.sqrt(jnp.abs(state.params - batch)))), state

    state = managed.ManagedState.create(params=jnp.zeros(2), tx=optax.sgd(0.1))
    data = [np.zeros(2, np.float32), np.ones(2, np.float32)]
    state, history, _ = gyre.loop(state, data, {gyre.every(1): step}, nan_policy="skip")
    assert history.collect("skipped_steps") == [1, 1] and all(map(math.isfinite, history.collect("loss")))
    assert np.isfinite(np.asarray(state.params)).all()


def test_train_loop_skips_through_a_flax_state_method():
    import flax.linen as nn

    def mse(preds, labels):
        return jnp.mean((preds[:, 0] - labels) ** 2)

    state = gyre.create_flax_state(nn.Dense(1), inputs=jnp.zeros((1, 3)), tx=optax.sgd(0.1), losses={"mse": mse})
    state, history, _ = gyre.train_loop(state, regression_data(n=4, bad_at=1), nan_policy="skip")
    assert int(state.skipped_steps) == 1 and history.collect("skipped_steps")[-1] == 1
    assert all(np.isfinite(np.asarray(p)).all() for p in jax.tree_util.tree_leaves(state.params))


@pytest.mark.parametrize("bad_at", [2, 3])  # 2: saved at its end; 3: the last, by the final save
def test_skip_saves_a_checkpoint_on_the_skipped_step_and_at_the_end(tmp_path, bad_at):
    ckpt = gyre.checkpoint(str(tmp_path / str(bad_at)), keep=3)
    table = {gyre.every(1): noisy_regression, gyre.every(2): ckpt}  # saves after steps 0, 2 and the end
    state, _, elapsed = gyre.loop(regression_state(), regression_data(n=4, bad_at=bad_at), table, nan_policy="skip")
    ckpt.wait_until_finished()
    assert int(state.skipped_steps) == 1 and elapsed.steps == 4 and ckpt.all_steps() == [1, 3, 4]
    restored, _ = ckpt.restore(regression_state())
    assert int(restored.skipped_steps) == 1


def test_a_non_finite_value_under_skip_names_the_policy_in_force():
    @managed.train_step
    def step(state, batch):
        x, y = batch
        loss = jnp.mean((x @ state.params["w"] - y) ** 2)
        return gyre.logs().add_loss("loss", loss).add_metric("ratio", jnp.float32(0) / jnp.float32(0)), state

    with pytest.raises(gyre.NonFiniteError, match=r'"ratio" is nan at step 0') as info:
        gyre.loop(regression_state(), regression_data(n=2), {gyre.every(1): step}, nan_policy="skip")
    expected, fix = str(info.value).splitlines()[1:4:2]
    assert "nan_policy='skip'" in expected and "'raise'" not in expected and "the default" not in expected
    assert "pass nan_policy='skip'" not in fix and "not skipped" in fix


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda policy: gyre.loop(0, [1], {}, nan_policy=policy),
    lambda policy: gyre.train_loop(0, [1], nan_policy=policy),
    lambda policy: gyre.test_loop(0, [1], nan_policy=policy),
    lambda policy: gyre.predict_loop(0, [1], nan_policy=policy),
])
def test_a_misspelt_policy_is_explained(call):
    with pytest.raises(ValueError, match="must be one of 'raise', 'skip', 'ignore'") as info:
        call("rasie")
    message = str(info.value)
    assert "received: str 'rasie'" in message and "Did you mean 'raise'?" in message
    with pytest.raises(ValueError, match="received: NoneType None"):
        call(None)


def test_skip_without_a_step_that_can_skip_is_explained():
    with pytest.raises(ValueError, match="nan_policy='skip' needs a step that can drop a non-finite update") as info:
        gyre.loop(jnp.float32(0), numbers(2), {gyre.every(1): add_step}, nan_policy="skip")
    message = str(info.value)
    assert "@gyre.managed.train_step" in message and "optax.apply_if_finite" in message
    with pytest.raises(ValueError, match="an evaluation or prediction loop makes no update to skip"):
        gyre.test_loop(None, [1], {gyre.on_test_step: lambda batch: gyre.logs()}, nan_policy="skip")


def test_a_skipping_step_needs_a_counter_in_its_state():
    state = gyre.TrainState.create(params={"w": jnp.zeros(3)}, tx=optax.adam(0.1))
    with pytest.raises(TypeError, match="its state has no skipped_steps to count them in") as info:
        gyre.loop(state, regression_data(n=1), {gyre.every(1): noisy_regression}, nan_policy="skip")
    assert "skipped_steps=jnp.zeros((), jnp.int32)" in str(info.value)
    # in extras, as the message says, it works
    state = gyre.TrainState.create(params={"w": jnp.zeros(3)}, tx=optax.adam(0.1), skipped_steps=jnp.zeros((), jnp.int32))
    state, _, _ = gyre.loop(state, regression_data(n=3, bad_at=1), {gyre.every(1): noisy_regression}, nan_policy="skip")
    assert int(state.extras["skipped_steps"]) == 1


def test_finite_check_reads_nothing_between_saves_with_several_processes():
    history = gyre.history()
    check = _nan.FiniteCheck(history, lambda: gyre.Elapsed(steps=1), start=0, lagged=False)
    history.commit(gyre.Elapsed(), gyre.logs().add_loss("loss", math.nan))
    history.flush()
    for _ in range(2 * _nan.POLL_EVERY):
        check.poll()  # every process must stop at the same step: only check() reads
    with pytest.raises(gyre.NonFiniteError):
        check.check()


@pytest.mark.parametrize("steps_per_call", [1, 4])
@pytest.mark.parametrize("every", [14, 1000])
def test_the_error_hands_back_a_state_and_a_clock_that_belong_together(tmp_path, every, steps_per_call):
    # was: the state at the start of the last block with the clock after it (state after 29 steps,
    # elapsed.steps 42; after 1 step, 99 without a checkpoint): resuming from the pair skipped steps
    @jax.jit
    def step(state, batch):
        loss = jnp.where(state["n"] >= 40, jnp.nan, 1.0)
        return gyre.logs().add_loss("loss", loss), {"n": state["n"] + 1, "w": state["w"] * 1.0}

    ckpt = gyre.checkpoint(str(tmp_path / "ckpt"), keep=1)
    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop({"n": jnp.int32(0), "w": jnp.ones(3)}, range(100), {gyre.every(1): step, gyre.every(every): ckpt},
                  stop=100, steps_per_call=steps_per_call)
    err = info.value
    assert err.step == 40 and err.state is not None
    assert int(err.state["n"]) == err.elapsed.steps
    ckpt.close()
