"""The phased schedules (exponential, warmup-cosine decay): exact values at every boundary, and
the errors of bad schedule values."""

import numpy as np
import pytest

from gyre.config import build_schedule
from gyre.config._schedules import ExponentialSchedule, WarmupCosineDecaySchedule
from tests.config.test_schedules import SEED, at, f32


def test_exponential_warmup_then_decay_rate():
    s = ExponentialSchedule(init_value=1.0, decay_rate=0.5, transition_steps=2, warmup_steps=4)
    # 0: start of warmup, 3: last warmup step, 4: warmup end = init_value, then halving every 2 steps
    np.testing.assert_array_equal(at(s, 0, 3, 4, 6, 8), f32(0.0, 0.75, 1.0, 0.5, 0.25))
    np.testing.assert_allclose(at(s, 5, 104), [2**-0.5, 0.5**50], rtol=1e-5)  # no total: goes on


def test_exponential_staircase_holds_between_transitions():
    s = ExponentialSchedule(init_value=1.0, decay_rate=0.5, transition_steps=2, staircase=True)
    np.testing.assert_array_equal(at(s, 0, 1, 2, 3, 4), f32(1.0, 1.0, 0.5, 0.5, 0.25))


def test_exponential_end_factor_and_cooldown_to_zero():
    s = ExponentialSchedule(
        init_value=1.0, end_factor=0.25, warmup_steps=2, cooldown_steps=4, steps=12
    )
    # warmup 0..2, decay 2..8 reaching 0.25 exactly, cooldown 8..12 linear to exactly 0, then 0
    np.testing.assert_array_equal(
        at(s, 0, 1, 2, 8, 9, 10, 11, 12, 13),
        f32(0.0, 0.5, 1.0, 0.25, 0.1875, 0.125, 0.0625, 0.0, 0.0),
    )
    np.testing.assert_allclose(at(s, 5), [0.5], rtol=1e-6)  # halfway through the decay: 0.25**0.5


def test_exponential_cooldown_starts_where_the_decay_is():
    # jax_trainer's cooldown started at lr * rate**steps whatever transition_steps was: a jump
    s = ExponentialSchedule(
        init_value=1.0, decay_rate=0.5, transition_steps=2, cooldown_steps=2, steps=10
    )
    np.testing.assert_array_equal(
        at(s, 0, 2, 8, 9, 10, 11), f32(1.0, 0.5, 0.0625, 0.03125, 0.0, 0.0)
    )
    np.testing.assert_allclose(at(s, 7), [0.5**3.5], rtol=1e-6)


def test_exponential_with_total_holds_its_last_value():
    s = ExponentialSchedule(init_value=1.0, decay_rate=0.5, transition_steps=1, steps=3)
    np.testing.assert_array_equal(at(s, 2, 3, 4, 100), f32(0.25, 0.125, 0.125, 0.125))


def test_exponential_steps_is_the_decay_period_as_in_the_fork():
    # the fork: init_value * decay_rate ** (step / steps); 0.1 * 0.1 ** 0.5 at step 50
    s = ExponentialSchedule(init_value=0.1, decay_rate=0.1, steps=100)
    np.testing.assert_allclose(at(s, 0, 50, 100), [0.1, 0.1 * 0.1**0.5, 0.01], rtol=1e-6)
    assert s.total_steps == 100
    # decay_rate left out is the fork's 0.1; end_value names the same end
    np.testing.assert_array_equal(at(ExponentialSchedule(init_value=0.1, steps=100), 50), at(s, 50))
    np.testing.assert_array_equal(
        at(ExponentialSchedule(init_value=0.1, end_value=0.01, steps=100), 0, 100), f32(0.1, 0.01))
    # with a warmup and a cooldown, the rate is reached where the decay ends
    w = ExponentialSchedule(init_value=1.0, decay_rate=0.25, warmup_steps=2, cooldown_steps=2, steps=8)
    np.testing.assert_allclose(at(w, 2, 4, 6, 7, 8), [1.0, 0.5, 0.25, 0.125, 0.0], rtol=1e-6)


def test_warmup_cosine_decay_seed_numbers_reach_end_at_total():
    s = build_schedule(SEED)
    last_warmup = np.float32(0.001) * (np.float32(199) / np.float32(200))
    np.testing.assert_array_equal(at(s, 0, 199, 200), f32(0.0, last_warmup, 0.001))
    np.testing.assert_array_equal(at(s, 1755, 1756, 10_000), f32(1e-4, 1e-4, 1e-4))
    # still decaying at 1555 (where optax's decay_steps, which counts the warmup, would end)
    assert at(s, 1555)[0] > at(s, 1754)[0] > np.float32(1e-4)
    np.testing.assert_allclose(at(s, 200 + 1555 // 2), [0.00055], rtol=1e-3)


def test_warmup_cosine_decay_small_exact():
    s = WarmupCosineDecaySchedule(
        init_value=0.0, peak_value=1.0, warmup_steps=4, decay_steps=4, decay_factor=0.5
    )
    np.testing.assert_array_equal(at(s, 0, 3, 4, 8, 9), f32(0.0, 0.75, 1.0, 0.5, 0.5))
    np.testing.assert_allclose(at(s, 6), [0.75], rtol=1e-6)


@pytest.mark.parametrize(
    "keys",
    [
        {"steps": 8},  # decay_steps = steps - warmup_steps
        {"decay_steps": 4},  # steps = warmup_steps + decay_steps
        {"steps": 8, "decay_steps": 4, "end_value": 0.5, "decay_factor": 0.5},  # agreeing
    ],
)
def test_warmup_cosine_decay_steps_or_decay_steps(keys):
    kw = {"peak_value": 1.0, "warmup_steps": 4, "end_value": 0.5} | keys
    s = WarmupCosineDecaySchedule(**kw)
    np.testing.assert_array_equal(at(s, 0, 4, 8, 9), f32(0.0, 1.0, 0.5, 0.5))
    np.testing.assert_allclose(
        at(s, 7), [1.0 - 0.5 * (1.0 - 0.5 * (1.0 + np.cos(0.75 * np.pi)))], rtol=1e-6
    )


def test_warmup_cosine_decay_defaults_end_to_a_tenth_of_peak_and_no_warmup():
    s = WarmupCosineDecaySchedule(peak_value=2.0, decay_steps=4)
    np.testing.assert_array_equal(at(s, 0, 4, 5), f32(2.0, 0.2, 0.2))


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section, match",
    [
        (
            {**SEED, "decay_steps": 1600},
            r"phases exceed its total: warmup_steps \+ decay_steps = 1800 > steps = 1755",
        ),
        ({**SEED, "decay_steps": 1000}, r"steps must equal warmup_steps \+ decay_steps"),
        ({**SEED, "steps": 200, "decay_steps": None}, r"phases exceed its total"),
        ({**SEED, "steps": None, "decay_steps": None}, r"needs steps or decay_steps"),
        ({**SEED, "end_value": 0.5}, r"end_value and decay_factor disagree"),
        (
            {**SEED, "warmup_steps": -1},
            r"optimizer.learning_rate.warmup_steps must be a whole number >= 0",
        ),
        ({**SEED, "steps": 17.5}, r"steps must be a whole number >= 1"),
        ({**SEED, "peak_value": "lots"}, r"peak_value must be a finite number"),
        ({**SEED, "peak_value": float("nan")}, r"peak_value must be a finite number"),
        (
            {
                "class_name": "Exponential",
                "init_value": 1.0,
                "decay_rate": 0.5,
                "warmup_steps": 6,
                "cooldown_steps": 5,
                "steps": 10,
            },
            r"phases exceed its total: warmup_steps \+ cooldown_steps = 11 > steps = 10",
        ),
        (
            {
                "class_name": "Exponential",
                "init_value": 1.0,
                "end_factor": 0.1,
                "warmup_steps": 5,
                "cooldown_steps": 5,
                "steps": 10,
            },
            r"the decay needs >= 1 step",
        ),
        (
            {
                "class_name": "Exponential",
                "init_value": 1.0,
                "decay_rate": 0.5,
                "end_factor": 0.1,
                "steps": 10,
            },
            r"exactly one of decay_rate and end_factor",
        ),
        (
            {"class_name": "Exponential", "init_value": 1.0},
            r"exactly one of decay_rate and end_factor",
        ),
        (
            {
                "class_name": "Exponential",
                "init_value": 1.0,
                "decay_rate": 0.5,
                "cooldown_steps": 2,
            },
            r"steps is required with cooldown_steps or end_factor",
        ),
        (
            {
                "class_name": "Exponential",
                "init_value": 1.0,
                "end_factor": 0.1,
                "steps": 9,
                "staircase": True,
            },
            r"staircase and transition_steps do not apply",
        ),
        (
            {"class_name": "Exponential", "init_value": 0.1, "decay_rate": 0.1, "end_value": 0.02, "steps": 100},
            r"end_value and decay_rate disagree: the decay ends at 0.01",
        ),
        (
            {"class_name": "Exponential", "init_value": 0.1, "end_factor": 0.1, "end_value": 0.02, "steps": 100},
            r"end_value and end_factor disagree",
        ),
        (
            {"class_name": "Exponential", "init_value": 0.1, "end_value": 0.0, "steps": 100},
            r"end_value must be a fraction of init_value",
        ),
        (
            {"class_name": "Exponential", "init_value": 1.0, "decay_rate": 0.0},
            r"decay_rate must be a finite number > 0",
        ),
        (
            {"class_name": "Exponential", "init_value": 1.0, "decay_rate": 0.5, "staircase": "yes"},
            r"staircase must be true or false",
        ),
        (
            {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": 0},
            r"steps must be a whole number >= 1",
        ),
        (
            {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": True},
            r"steps must be a whole number >= 1",
        ),
        (
            {"class_name": "Cosine", "init_value": 1.0, "decay_steps": 4, "exponent": 0},
            r"exponent must be a finite number > 0",
        ),
    ],
)
def test_bad_schedule_values(section, match):
    section = {k: v for k, v in section.items() if v is not None}
    with pytest.raises((ValueError, TypeError), match=match):
        build_schedule(section)


def test_an_exponential_schedule_that_needs_a_length_lasts_the_run_when_it_leaves_steps_out():
    # end_factor / end_value / cooldown_steps need a length: left out, it is the run's, as the
    # length of every other schedule (it was refused even where the trainer knew the run's)
    from gyre.config import OptimizerBuilder, load_config, run_length

    with run_length(12):
        s = build_schedule({"class_name": "Exponential", "init_value": 1.0, "end_factor": 0.25})
        c = build_schedule({"class_name": "Exponential", "init_value": 1.0, "decay_rate": 0.5, "cooldown_steps": 4})
    assert s.total_steps == c.total_steps == 12
    np.testing.assert_allclose(at(s, 0, 6, 12, 13), [1.0, 0.5, 0.25, 0.25], rtol=1e-6)
    np.testing.assert_allclose(at(c, 0, 8, 10, 12), [1.0, 0.5, 0.25, 0.0], rtol=1e-6)
    # a config is valid without it (the trainer builds the optimizer once the run's length is known)
    config = load_config({
        "trainer": {"train_epochs": 2}, "model": {"class_name": "SimpleClassifier"},
        "optimizer": {"class_name": "SGD", "learning_rate": {"class_name": "Exponential", "init_value": 0.1, "end_factor": 0.01}},
        "dataset": {"class_name": "DigitsDataset"}})
    assert config.optimizer["learning_rate"]["end_factor"] == 0.01
    # jax_trainer's exponential_decay with end_lr_factor: decay_steps defaults to the run's length
    _, schedule = OptimizerBuilder({"name": "sgd", "lr": 0.1, "scheduler": {
        "name": "exponential_decay", "end_lr_factor": 0.01}}).build_optimizer(num_epochs=2, num_train_steps_per_epoch=6)
    np.testing.assert_allclose(at(schedule, 0, 6, 12), [0.1, 0.01, 0.001], rtol=1e-5)
    # outside a run the length is still required
    with pytest.raises(ValueError, match="steps is required with cooldown_steps or end_factor"):
        build_schedule({"class_name": "Exponential", "init_value": 1.0, "end_factor": 0.25})
