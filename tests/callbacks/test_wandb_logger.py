"""wandb_logger: every step's scalar entries reach the run, in step order, without host syncs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre


class FakeRun:
    """What the logger needs of a wandb run: log(data, step=)."""

    def __init__(self):
        self.calls = []

    def log(self, data, step):
        self.calls.append((step, dict(data)))


@jax.jit
def _step(state, batch):
    loss = jnp.mean((batch - state) ** 2)
    return gyre.logs().add_loss("loss", loss).add_metric("pred", state * jnp.ones(3)), state + 0.5


def test_every_step_reaches_the_run_in_order_with_its_step():
    run = FakeRun()
    data = [jnp.full((4,), float(i)) for i in range(7)]
    _, history, _ = gyre.loop(jnp.float32(0.0), data, {gyre.every(1): _step, **gyre.wandb_logger(run, interval=0)})
    assert [step for step, _ in run.calls] == list(range(7))
    assert [data["loss"] for _, data in run.calls] == pytest.approx(history.collect("loss"))
    assert all("pred" not in data for _, data in run.calls)  # arrays are left out


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_evaluation_entries_and_a_shared_name_in_a_named_loop():
    run = FakeRun()

    def train(state, batch):
        return gyre.logs().add_loss("loss", 1.0).add_metric("loss", 2.0), state

    def test(state, batch):
        return gyre.logs().add_metric("accuracy", 0.75)

    gyre.train_loop(
        0, range(4), {gyre.on_train_step: train, gyre.on_test_step: test},
        callbacks=[gyre.wandb_logger(run)], test_dataset=lambda: range(2), epoch_duration=2, stop=4,
    )
    steps = [step for step, _ in run.calls]
    assert steps == [0, 1, 2, 3]
    first, second = run.calls[0][1], run.calls[1][1]
    assert first == {"loss": 1.0, "metrics.loss": 2.0}  # ciclo's rule for a shared name
    assert second["accuracy_test"] == 0.75  # the evaluation after the epoch's last step


def test_fused_steps_are_each_logged():
    run = FakeRun()
    data = [jnp.full((4,), float(i)) for i in range(8)]
    gyre.loop(jnp.float32(0.0), data, {gyre.every(1): _step, **gyre.wandb_logger(run, interval=0)}, steps_per_call=4)
    assert [step for step, _ in run.calls] == list(range(8))


def test_by_hand_it_keeps_its_own_history_until_flushed():
    run = FakeRun()
    logger = gyre.wandb_logger(run, interval=3600)
    for elapsed, x in gyre.elapse([1.0, 2.0, 3.0]):
        logger(elapsed, gyre.logs().add_metric("x", jnp.float32(x)))
    logger.flush()
    assert run.calls == [(0, {"x": 1.0}), (1, {"x": 2.0}), (2, {"x": 3.0})]
    assert logger.sent == 3


def test_the_loop_never_waits_for_the_device(sync_detector):
    run = FakeRun()
    state = jnp.float32(0.0)
    data = [jnp.full((4,), float(i)) for i in range(50)]
    jax.block_until_ready(_step(state, data[0]))  # compiled before the detector
    with jax.transfer_guard_device_to_host("disallow"):
        gyre.loop(state, data, {gyre.every(1): _step, **gyre.wandb_logger(run, interval=0)},
                  on_end=sync_detector.end)
    assert sync_detector.stalls == []
    assert [step for step, _ in run.calls] == list(range(50))


def test_a_run_without_log_is_refused():
    with pytest.raises(TypeError) as info:
        gyre.wandb_logger("my-project")
    text = str(info.value)
    assert text.splitlines()[0] == "wandb_logger needs a W&B run"
    assert "received: str" in text and "wandb.init" in text


@pytest.mark.parametrize("interval", [-1, "1s", float("nan"), True])
def test_a_bad_interval_is_refused(interval):
    with pytest.raises(ValueError, match="wandb_logger's interval must be a number of seconds >= 0"):
        gyre.wandb_logger(FakeRun(), interval=interval)


def test_rows_skip_arrays_and_non_numbers():
    from gyre.callbacks._wandb_logger import scalar_rows

    h = gyre.history([{"metrics": {"a": 1, "v": np.ones(2)}, "outputs": {"s": "text"}}])
    assert list(scalar_rows(h.read(0, wait=True))) == [(0, {"a": 1.0})]


def test_only_real_scalars_are_numbers_for_wandb():
    from gyre.callbacks._wandb_logger import is_number

    assert [is_number(v) for v in (2, np.float32(0.5), np.ones(2), "1")] == [True, True, False, False]
