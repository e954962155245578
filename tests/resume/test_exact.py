"""Exact resume through ``gyre.checkpoint`` in one process: a run stopped by an exception and
resumed with ``resume="latest"`` sees the same batches, evaluations and early-stopping
decisions as the run that never stopped."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre

X = np.arange(40, dtype=np.float32).reshape(20, 2)
Y = np.arange(20, dtype=np.int32)
EPOCH = 5  # 20 samples, batches of 4


class Crash(Exception):
    pass


@jax.jit
def train_step(state, batch):
    x, y = batch
    key = jax.random.fold_in(jax.random.key(0), state["n"])
    w = state["w"] * 0.5 + x.mean(0) + jax.random.normal(key, (2,)) * 0.01
    logs = gyre.logs().add_loss("loss", jnp.sum(w)).add_metric("first", y[0])
    return logs, {"w": w, "n": state["n"] + 1}


def _state():
    return {"w": jnp.zeros(2), "n": jnp.int32(0)}


def run(directory, *, crash_at=None, resume=None, scores=None, patience=10, stop=23):
    scores = scores or [1.0] * 10

    def test_step(state, batch):
        return gyre.logs().add_loss("score", scores[min(int(state["n"]) // EPOCH - 1, len(scores) - 1)])

    def crash(elapsed):
        if crash_at is not None and elapsed.steps == crash_at:
            raise Crash(elapsed.steps)

    stopper = gyre.early_stopping("score_test", patience=patience, mode="min")  # a score here is a loss
    tasks = {
        gyre.on_train_step: [crash, train_step],
        gyre.on_test_step: test_step,
        gyre.every(3): gyre.checkpoint(directory, keep=2),
    }
    return gyre.train_loop(
        _state(), gyre.data.batches((X, Y), 4, seed=1), tasks, callbacks=[stopper],
        test_dataset=lambda: [0], stop=stop, resume=resume,
    )


def _compare(a, b):
    (sa, ha, ea), (sb, hb, eb) = a, b
    assert ea.replace(time=0, date=0) == eb.replace(time=0, date=0)
    np.testing.assert_array_equal(np.asarray(sa["w"]), np.asarray(sb["w"]))
    keys = ("steps", "first", "loss")
    assert ha.collect(*keys) == hb.collect(*keys)
    assert ha.collect("steps", "score_test") == hb.collect("steps", "score_test")


@pytest.mark.parametrize("crash_at", [EPOCH, 2 * EPOCH + 2])  # an epoch boundary, mid-epoch
def test_a_resume_continues_with_exactly_the_next_batch(tmp_path, crash_at):
    whole = run(tmp_path / "whole")
    with pytest.raises(Crash) as info:
        run(tmp_path / "cut", crash_at=crash_at)
    assert info.value.elapsed.steps == crash_at  # the crash callback runs before the step
    assert int(info.value.state["n"]) == crash_at
    resumed = run(tmp_path / "cut", resume="latest")
    _compare(whole, resumed)


def test_early_stopping_two_evaluations_into_its_patience_stops_at_the_same_step(tmp_path):
    scores = [3.0, 2.0, 2.5, 2.6, 2.7, 2.8, 1.0]  # best at the 2nd evaluation, then none
    whole = run(tmp_path / "whole", scores=scores, patience=3, stop=60)
    assert whole[2].steps == 5 * EPOCH  # evaluations 3, 4, 5 did not improve
    with pytest.raises(Crash):  # after the 4th evaluation: 2 into its patience of 3
        run(tmp_path / "cut", scores=scores, patience=3, stop=60, crash_at=4 * EPOCH + 1)
    resumed = run(tmp_path / "cut", scores=scores, patience=3, stop=60, resume="latest")
    _compare(whole, resumed)
    assert resumed[1].stop_reason.startswith("early stopping")
