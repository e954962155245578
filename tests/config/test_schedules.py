"""Building learning-rate schedules from config values: ConcatSchedule's cumulative boundaries,
built schedules passed through, and the errors of build_schedule. The schedules themselves are
tested in test_simple_schedules.py and test_phased_schedules.py, the section helpers in
test_sections.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.config import build_schedule
from gyre.config._schedules import ConcatSchedule, LinearSchedule


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



def test_a_listed_schedule_that_leaves_its_length_out_lasts_its_part_of_the_run():
    # up to the next boundary; the last one to the run's end (or to the Concat's steps). The
    # last one lasted the whole run after its boundary (a 12-step run: a cosine of 12 steps from
    # step 3, cut at 75%, with a warning telling to leave out the length that was left out)
    from gyre.config import run_length

    cosine = {"class_name": "Cosine", "init_value": 1.0}
    with run_length(12):
        last = build_schedule({"class_name": "Concat", "schedules": [0.5, cosine], "boundaries": [3]})
        first = build_schedule({"class_name": "Concat", "schedules": [cosine, 0.25], "boundaries": [6]})
    assert last.total_steps == 12
    np.testing.assert_allclose(at(last, 2, 3, 7, 11, 12), [0.5, 1.0, 0.5 + 0.5 * np.cos(np.pi * 4 / 9), 0.5 - 0.5 * np.cos(np.pi / 9), 0.0],
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(at(first, 0, 3, 5, 6), [1.0, 0.5, 0.5 - 0.5 * np.cos(np.pi / 6), 0.25], rtol=1e-5)
    declared = build_schedule({"class_name": "Concat", "schedules": [0.5, cosine], "boundaries": [3], "steps": 7})
    assert declared.total_steps == 7
    np.testing.assert_allclose(at(declared, 3, 5, 7), [1.0, 0.5, 0.0], atol=1e-7)


def linear(a, b, n):
    return {"class_name": "LinearSchedule", "init_value": a, "end_value": b, "steps": n}


def test_concat_named_form_joins_where_each_schedule_ends():
    # the fork's form: names -> sections with their own steps, which add up to steps
    s = build_schedule({
        "class_name": "ConcatSchedule", "init_value": 0.1, "end_value": 0.01, "steps": 100,
        "schedules": {"constant": {"class_name": "ConstantSchedule", "init_value": 0.1, "end_value": 0.1, "steps": 50},
                      "linear": linear(0.1, 0.01, 50)},
    })
    np.testing.assert_allclose(at(s, 0, 49, 50, 75, 100, 500), [0.1, 0.1, 0.1, 0.055, 0.01, 0.01], rtol=1e-6)
    assert s.total_steps == 100


def test_concat_named_form_steps_default_to_the_sum_and_numbers_need_none():
    s = build_schedule({"class_name": "Concat", "schedules": {"up": linear(0.0, 1.0, 4), "down": linear(1.0, 0.5, 2)}})
    assert s.total_steps == 6
    np.testing.assert_array_equal(at(s, 2, 4, 5, 6), f32(0.5, 1.0, 0.75, 0.5))


def test_concat_refuses_a_jump_only_when_checking_continuity():
    parts = {"up": linear(0.0, 1.0, 4), "down": linear(0.5, 0.0, 4)}
    with pytest.raises(ValueError, match=r"jumps at step 4: up ends at 1.0, down starts at 0.5") as caught:
        build_schedule({"class_name": "ConcatSchedule", "schedules": parts})
    assert "check_continuity: false" in str(caught.value)
    s = build_schedule({"class_name": "ConcatSchedule", "schedules": parts, "check_continuity": False})
    np.testing.assert_array_equal(at(s, 3, 4, 8), f32(0.75, 0.5, 0.0))
    # the list form checks only when asked
    listed = {"class_name": "ConcatSchedule", "schedules": [linear(0.0, 1.0, 4), 0.5], "boundaries": [4]}
    np.testing.assert_array_equal(at(build_schedule(listed), 4), f32(0.5))
    with pytest.raises(ValueError, match=r"jumps at step 4: schedules\[0\] ends at 1.0, schedules\[1\] starts at 0.5"):
        build_schedule({**listed, "check_continuity": True})


@pytest.mark.parametrize(
    "keys, match",
    [
        ({"init_value": 0.2}, r"jumps at step 0: init_value is 0.2 but up starts elsewhere"),
        ({"end_value": 0.5}, r"jumps at its end: end_value is 0.5 but down ends at 0.0"),
        ({"steps": 9}, r"(?s)steps must be the sum of the schedules' steps.*expected: steps: 8 \(up: 4 \+ down: 4\)"),
        ({"boundaries": [4]}, r"boundaries does not go with named schedules"),
        ({"schedules": {"up": linear(0.0, 1.0, 4), "flat": 1.0}}, r"schedules.flat needs steps"),
        ({"check_continuity": "yes"}, r"check_continuity must be true or false"),
    ],
)
def test_bad_named_concat(keys, match):
    section = {"class_name": "ConcatSchedule", "schedules": {"up": linear(0.0, 1.0, 4), "down": linear(1.0, 0.0, 4)}}
    with pytest.raises((ValueError, TypeError), match=match):
        build_schedule({**section, **keys})


def test_a_left_out_length_is_the_runs_and_else_an_error():
    s = build_schedule({"class_name": "Linear", "init_value": 1.0, "end_value": 0.0}, run_steps=10)
    assert s.total_steps == 10
    np.testing.assert_array_equal(at(s, 5, 10), f32(0.5, 0.0))
    seed = {k: v for k, v in SEED.items() if k not in ("steps", "decay_steps")}
    assert build_schedule(seed, run_steps=1755).total_steps == 1755
    with pytest.raises(ValueError, match=r"warmup_steps \(the decay needs >= 1 step\) = 201 > steps = 45 \(the run's length"
                                         r"(.|\n)*fix: train longer \(trainer.train_epochs"):
        build_schedule(seed, run_steps=45)
    with pytest.raises(ValueError, match=r"LinearSchedule\) needs steps: no run length is known"):
        build_schedule({"class_name": "Linear", "init_value": 1.0, "end_value": 0.0})
    # a ConcatSchedule's parts never take the run's length
    with pytest.raises(ValueError, match=r"needs steps: no run length"):
        build_schedule({"class_name": "Concat", "schedules": {"a": {"class_name": "Linear", "init_value": 1.0,
                                                                      "end_value": 0.0}}}, run_steps=10)


def test_schedule_jits_and_a_built_schedule_passes_through():
    s = build_schedule(SEED)
    assert build_schedule(s) is s
    assert float(jax.jit(s)(jnp.int32(1755))) == float(np.float32(1e-4))


# -- errors ------------------------------------------------------------------------------------

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
        ({"schedules": [], "boundaries": []}, r"schedules must be a non-empty mapping \(or list\)"),
        ({"schedules": 0.1, "boundaries": []}, r"schedules must be a non-empty mapping \(or list\)"),
        ({"schedules": [0.1, 0.2], "boundaries": 5}, r"boundaries must be a list of ints"),
    ],
)
def test_bad_concat(keys, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build_schedule({"class_name": "ConcatSchedule", **keys})


def test_unknown_class_name_lists_the_registered_ones():
    with pytest.raises(
        KeyError,
        match=r"unknown schedules name 'Cosin'.*ConcatSchedule, Constant, ConstantSchedule, Cosine",
    ):
        build_schedule({"class_name": "Cosin", "init_value": 1.0}, where="optimizer.learning_rate")


@pytest.mark.parametrize("value", [True, [0.1, 0.2], None, {"init_value": 1.0}])
def test_not_a_number_nor_a_section(value):
    match = (
        r"has no class_name"
        if isinstance(value, dict)
        else r"optimizer.learning_rate must be a number or a schedule section"
    )
    with pytest.raises((TypeError, ValueError), match=match):
        build_schedule(value)
