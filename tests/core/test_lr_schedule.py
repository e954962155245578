"""gyre.lr_schedule: exact values at the start, the end of the warmup, the middle of the
decay and the last step (eager and jitted), agreement with the cosine formula elsewhere,
use inside optax, and its errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre

# (base_lr, steps_per_epoch, epochs, warmup_epochs): each has an even decay length
# D = T - 1 - W, so its middle W + D / 2 is a step.
CONFIGS = [(1e-3, 5, 4, 1), (0.1, 3, 7, 2), (0.3, 1, 100, 5), (0.7, 5, 9, 0), (2, 7, 4, 1)]


def points(steps_per_epoch, epochs, warmup_epochs):
    total, warm = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    decay = total - 1 - warm
    assert decay % 2 == 0
    return 0, warm, warm + decay // 2, total - 1


def reference(base_lr, steps_per_epoch, epochs, warmup_epochs, steps):
    """The schedule in float64, written out independently."""
    total, warm = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    s = np.asarray(steps, np.float64)
    rising = base_lr * s / max(warm, 1)
    falling = base_lr * 0.5 * (1 + np.cos(np.pi * (s - warm) / (total - 1 - warm)))
    return np.where(s < warm, rising, falling)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_exact_values_at_start_end_of_warmup_middle_and_last_step(config):
    base_lr, *counts = config
    lr = gyre.lr_schedule(base_lr, *counts)
    start, warm, middle, last = points(*counts)
    peak = np.float32(base_lr)
    expected = [peak if warm == 0 else np.float32(0.0), peak, peak / 2, np.float32(0.0)]
    eager = [lr(s) for s in (start, warm, middle, last)]
    jitted = jax.jit(jax.vmap(lr))(jnp.array([start, warm, middle, last], jnp.int32))  # traced steps
    for got in (eager, list(jitted)):
        assert [np.asarray(v).dtype for v in got] == [np.float32] * 4
        assert [np.float32(v) for v in got] == expected  # bit for bit
    assert np.float32(lr(np.int64(middle))) == peak / 2  # a numpy step


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_follows_warmup_and_cosine_at_every_step(config):
    base_lr, *counts = config
    lr = gyre.lr_schedule(base_lr, *counts)
    total = counts[0] * counts[1]
    got = np.asarray(jax.vmap(lr)(jnp.arange(total)), np.float64)
    np.testing.assert_allclose(got, reference(base_lr, *counts, np.arange(total)), rtol=0, atol=3e-7 * base_lr)
    warm = counts[0] * counts[2]
    assert (np.diff(got[: warm + 1]) > 0).all() and (np.diff(got[warm:]) < 0).all()


def test_the_last_step_is_the_runs_last_update_not_one_past_it():
    lr = gyre.lr_schedule(0.1, steps_per_epoch=5, epochs=4, warmup_epochs=1)
    # optax's warmup_cosine_decay_schedule reaches end_value at decay_steps: T - 1 here
    same = optax.warmup_cosine_decay_schedule(0.0, 0.1, warmup_steps=5, decay_steps=19, end_value=0.0)
    steps = jnp.arange(20)
    np.testing.assert_allclose(jax.vmap(lr)(steps), jax.vmap(same)(steps), rtol=0, atol=1e-8)
    assert float(lr(18)) > 0 and float(lr(19)) == 0.0
    # past the end (and before the start) the rate is 0, never negative or rising again
    assert [float(lr(s)) for s in (-3, 20, 25, 10_000)] == [0.0] * 4


def test_no_warmup_starts_at_base_lr_and_numpy_counts_are_accepted():
    lr = gyre.lr_schedule(np.float32(0.5), np.int64(4), epochs=np.int32(3), warmup_epochs=np.int64(0))
    assert [float(lr(s)) for s in (0, 11)] == [0.5, 0.0]
    # the decay's middle, 5.5, falls between two steps: they straddle base_lr / 2 symmetrically
    below, above = float(lr(np.int32(5))), float(lr(np.int32(6)))
    assert above < 0.25 < below and below + above == pytest.approx(0.5, abs=1e-7)
    assert "base_lr=0.5, steps_per_epoch=4, epochs=3, warmup_epochs=0" in lr.__name__


def test_drives_inject_hyperparams_sgd_exactly():
    lr = gyre.lr_schedule(0.1, steps_per_epoch=3, epochs=4, warmup_epochs=1)  # 12 steps, decay 3..11
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
    params = jnp.zeros(())
    opt_state = tx.init(params)

    @jax.jit
    def update(params, opt_state):
        updates, opt_state = tx.update(jnp.ones(()), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    used, expected = [], np.float32(0.0)
    for step in range(12):
        params, opt_state = update(params, opt_state)
        used.append(np.float32(opt_state.hyperparams["learning_rate"]))
        expected = np.float32(expected - np.float32(lr(step)))
    assert used == [np.float32(lr(s)) for s in range(12)]
    assert used[0] == 0.0 and used[3] == np.float32(0.1) and used[7] == np.float32(0.05) and used[11] == 0.0
    assert np.float32(params) == expected  # w = -sum of the rates, in float32 order


def test_a_train_state_built_as_seed_004_writes_it_logs_the_scheduled_rate():
    lr_fn = gyre.lr_schedule(base_lr=1e-3, steps_per_epoch=2, epochs=3, warmup_epochs=1)
    state = gyre.TrainState.create(
        apply_fn=None, params={"w": jnp.ones(2)}, batch_stats={"mean": jnp.zeros(2)},
        tx=optax.inject_hyperparams(optax.adam)(lr_fn),
    )
    rates = []
    for _ in range(3):
        state = state.apply_gradients(grads={"w": jnp.ones(2)})
        rates.append(np.float32(state.opt_state.hyperparams["learning_rate"]))
    assert rates == [0.0, np.float32(5e-4), np.float32(1e-3)]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"base_lr": 0.0}, ValueError, "base_lr= must be positive and finite"),
        ({"base_lr": -1e-3}, ValueError, "base_lr= must be positive and finite"),
        ({"base_lr": float("nan")}, ValueError, "base_lr= must be positive and finite"),
        ({"base_lr": float("inf")}, ValueError, "base_lr= must be positive and finite"),
        ({"base_lr": "1e-3"}, TypeError, "base_lr= must be a number"),
        ({"base_lr": True}, TypeError, "base_lr= must be a number"),
        ({"base_lr": np.ones(2)}, TypeError, "base_lr= must be a number"),
        ({"steps_per_epoch": 0}, ValueError, "steps_per_epoch=0 is not positive"),
        ({"steps_per_epoch": 10.0}, TypeError, "steps_per_epoch= must be a whole number of steps"),
        ({"steps_per_epoch": None}, TypeError, "steps_per_epoch= must be a whole number of steps"),
        ({"epochs": 0}, ValueError, "epochs=0 is not positive"),
        ({"epochs": -2}, ValueError, "epochs=-2 is not positive"),
        ({"epochs": 100.0}, TypeError, "epochs= must be a whole number of epochs"),
        ({"warmup_epochs": -1}, ValueError, "warmup_epochs=-1 is negative"),
        ({"warmup_epochs": 0.5}, TypeError, "warmup_epochs= must be a whole number of epochs"),
        ({"warmup_epochs": 10}, ValueError, "warmup_epochs=10 leaves no epoch for the decay"),
        ({"warmup_epochs": 12}, ValueError, "warmup_epochs=12 leaves no epoch for the decay"),
        ({"steps_per_epoch": 1, "warmup_epochs": 9}, ValueError, "the warmup ends at the last step"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_bad_arguments_are_explained(kwargs, error, match):
    arguments = {"base_lr": 1e-3, "steps_per_epoch": 4, "epochs": 10, "warmup_epochs": 2, **kwargs}
    with pytest.raises(error, match=match) as info:
        gyre.lr_schedule(**arguments)
    text = str(info.value)
    assert "expected:" in text and "received:" in text and "fix:" in text
