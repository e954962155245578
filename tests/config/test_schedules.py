"""Learning-rate schedules from config sections: exact values at every boundary, and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.config import SCHEDULES, build_schedule
from gyre.config._schedules import (
    ConcatSchedule,
    ConstantSchedule,
    CosineSchedule,
    ExponentialSchedule,
    LinearSchedule,
    WarmupCosineDecaySchedule,
)


def at(schedule, *steps):
    """The schedule's values at ``steps``, evaluated in one call on an int32 array."""
    return np.asarray(schedule(jnp.asarray(steps, dtype=jnp.int32)))


def f32(*values):
    return np.asarray(values, dtype=np.float32)


SEED = {  # seed file 003's optimizer.learning_rate, verbatim
    "class_name": "WarmupCosineDecaySchedule",
    "decay_factor": 0.1,
    "decay_steps": 1555,
    "init_value": 0.0,
    "peak_value": 0.001,
    "steps": 1755,
    "warmup_steps": 200,
}


# -- values ------------------------------------------------------------------------------------


def test_constant_everywhere_and_from_numbers():
    np.testing.assert_array_equal(at(ConstantSchedule(value=0.5), 0, 1, 10**6), f32(0.5, 0.5, 0.5))
    np.testing.assert_array_equal(at(build_schedule(3), 0, 7), f32(3.0, 3.0))
    # PyYAML reads 1e-3 as a string: it is still a float here
    np.testing.assert_array_equal(at(build_schedule("1e-3"), 0, 9), f32(1e-3, 1e-3))


def test_linear_at_start_last_step_end_and_past():
    s = LinearSchedule(init_value=1.0, end_value=0.0, steps=4)
    np.testing.assert_array_equal(at(s, 0, 1, 3, 4, 5, 1000), f32(1.0, 0.75, 0.25, 0.0, 0.0, 0.0))


def test_cosine_exact_at_start_and_decay_end():
    s = CosineSchedule(init_value=1.0, decay_steps=4, alpha=0.5)
    np.testing.assert_array_equal(at(s, 0, 4, 5, 99), f32(1.0, 0.5, 0.5, 0.5))
    middle = 1.0 - 0.5 * (1.0 - 0.5 * (1.0 + np.cos(np.pi / 4)))
    np.testing.assert_allclose(at(s, 1, 2), [middle, 0.75], rtol=1e-6)


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
    s = ExponentialSchedule(init_value=1.0, decay_rate=0.5, steps=3)
    np.testing.assert_array_equal(at(s, 2, 3, 4, 100), f32(0.25, 0.125, 0.125, 0.125))


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


def test_concat_boundaries_are_cumulative():
    s = build_schedule(
        {
            "class_name": "ConcatSchedule",
            "schedules": [
                {"class_name": "Linear", "init_value": 0.0, "end_value": 1.0, "steps": 4},
                {"class_name": "LinearSchedule", "init_value": 1.0, "end_value": 0.25, "steps": 6},
                0.125,
            ],
            "boundaries": [4, 10],
        }
    )
    # each boundary -1, at, +1: the next schedule starts at its own step 0
    np.testing.assert_array_equal(
        at(s, 0, 3, 4, 5, 9, 10, 11, 10**5), f32(0.0, 0.75, 1.0, 0.875, 0.375, 0.125, 0.125, 0.125)
    )


def test_concat_takes_built_schedules_and_numbers():
    s = ConcatSchedule(
        schedules=[LinearSchedule(init_value=0.0, end_value=1.0, steps=2), 0.5], boundaries=[2]
    )
    np.testing.assert_array_equal(at(s, 0, 1, 2, 3), f32(0.0, 0.5, 0.5, 0.5))


def test_short_and_long_names_are_the_same_schedule():
    for short in ("Constant", "Cosine", "Linear", "Exponential", "Concat", "WarmupCosineDecay"):
        assert SCHEDULES.get(short) is SCHEDULES.get(short + "Schedule")
    a = build_schedule({"class_name": "Cosine", "init_value": 1.0, "decay_steps": 4})
    b = build_schedule({"class_name": "CosineSchedule", "init_value": 1.0, "decay_steps": 4})
    np.testing.assert_array_equal(at(a, 0, 1, 2, 3, 4), at(b, 0, 1, 2, 3, 4))


def test_schedule_jits_and_a_built_schedule_passes_through():
    s = build_schedule(SEED)
    assert build_schedule(s) is s
    assert float(jax.jit(s)(jnp.int32(1755))) == float(np.float32(1e-4))


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


@pytest.mark.parametrize(
    "keys, match",
    [
        (
            {"schedules": [0.1, 0.2], "boundaries": [5, 9]},
            r"needs one boundary between each two schedules",
        ),
        (
            {"schedules": [0.1, 0.2, 0.3], "boundaries": [5]},
            r"expected: 2 boundaries for 3 schedules",
        ),
        (
            {"schedules": [0.1, 0.2, 0.3], "boundaries": [5, 5]},
            r"must be strictly increasing \(they are cumulative",
        ),
        ({"schedules": [0.1, 0.2, 0.3], "boundaries": [9, 5]}, r"must be strictly increasing"),
        (
            {"schedules": [0.1, 0.2], "boundaries": [0]},
            r"boundaries\[0\] must be a whole number >= 1",
        ),
        ({"schedules": [], "boundaries": []}, r"schedules must be a non-empty list"),
        ({"schedules": 0.1, "boundaries": []}, r"schedules must be a non-empty list"),
        ({"schedules": [0.1, 0.2], "boundaries": 5}, r"boundaries must be a list of ints"),
    ],
)
def test_bad_concat(keys, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build_schedule({"class_name": "ConcatSchedule", **keys})


def test_nested_error_names_the_full_path():
    section = {
        "class_name": "Concat",
        "schedules": [0.1, {"class_name": "Cosin"}],
        "boundaries": [5],
    }
    with pytest.raises(
        KeyError,
        match=r"optimizer\.learning_rate\.schedules\[1\]\.class_name.*Did you mean 'Cosine'",
    ):
        build_schedule(section)
    section["schedules"][1] = {"class_name": "Cosine", "init_value": 1.0, "decay_steps": -4}
    with pytest.raises(
        ValueError, match=r"optimizer\.learning_rate\.schedules\[1\]\.decay_steps must be"
    ):
        build_schedule(section)


def test_unknown_class_name_lists_the_registered_ones():
    with pytest.raises(
        KeyError,
        match=r"unknown schedules name 'Cosin'.*ConcatSchedule, Constant, ConstantSchedule, Cosine",
    ):
        build_schedule({"class_name": "Cosin", "init_value": 1.0}, where="optimizer.learning_rate")


def test_unknown_key_lists_the_parameters_with_types():
    with pytest.raises(
        ValueError,
        match=r"unknown key 'decay_step' at sched \(CosineSchedule\)\. Did you mean 'decay_steps'\?",
    ) as info:
        build_schedule(
            {"class_name": "CosineSchedule", "init_value": 1.0, "decay_step": 4}, where="sched"
        )
    assert (
        "init_value (float, required), decay_steps (int, required), alpha (float, default 0.0)"
        in str(info.value)
    )


def test_missing_required_key():
    with pytest.raises(
        ValueError,
        match=r"missing required keys init_value, steps at optimizer.learning_rate \(LinearSchedule\)",
    ):
        build_schedule({"class_name": "LinearSchedule", "end_value": 0.0})


@pytest.mark.parametrize("value", [True, [0.1, 0.2], None, {"init_value": 1.0}])
def test_not_a_number_nor_a_section(value):
    match = (
        r"has no class_name"
        if isinstance(value, dict)
        else r"optimizer.learning_rate must be a number or a schedule section"
    )
    with pytest.raises((TypeError, ValueError), match=match):
        build_schedule(value)
