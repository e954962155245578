"""The one-formula schedules (constant, linear, cosine): exact values at every boundary, and
both names of each registered schedule."""

import numpy as np
import pytest

from gyre.config import SCHEDULES, build_schedule
from gyre.config._schedules import ConstantSchedule, CosineSchedule, LinearSchedule
from tests.config.test_schedules import at, f32


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


def test_short_and_long_names_are_the_same_schedule():
    for short in ("Constant", "Cosine", "Linear", "Exponential", "Concat", "WarmupCosineDecay"):
        assert SCHEDULES.get(short) is SCHEDULES.get(short + "Schedule")
    a = build_schedule({"class_name": "Cosine", "init_value": 1.0, "decay_steps": 4})
    b = build_schedule({"class_name": "CosineSchedule", "init_value": 1.0, "decay_steps": 4})
    np.testing.assert_array_equal(at(a, 0, 1, 2, 3, 4), at(b, 0, 1, 2, 3, 4))


def test_cosine_with_the_forks_keys():
    # steps is decay_steps, decay_factor is alpha (0.1 when left out with steps), end_value their product
    s = CosineSchedule(init_value=0.1, steps=100)
    np.testing.assert_allclose(at(s, 0, 100, 200), [0.1, 0.01, 0.01], rtol=1e-6)
    same = CosineSchedule(init_value=0.1, decay_steps=100, alpha=0.1)
    np.testing.assert_array_equal(at(s, 0, 30, 60, 100), at(same, 0, 30, 60, 100))
    np.testing.assert_array_equal(
        at(CosineSchedule(init_value=0.1, end_value=0.01, decay_factor=0.1, steps=100), 30), at(same, 30))
    assert float(CosineSchedule(init_value=1.0, decay_steps=4)(4)) == 0.0  # optax's alpha: 0


def test_constant_with_the_forks_keys():
    s = ConstantSchedule(init_value=0.1, end_value=0.1, steps=100)
    np.testing.assert_array_equal(at(s, 0, 100, 200), f32(0.1, 0.1, 0.1))
    assert s.total_steps == 100 and ConstantSchedule(value=0.1).total_steps is None


@pytest.mark.parametrize(
    "section, match",
    [
        ({"class_name": "Constant", "init_value": 0.1, "end_value": 0.2}, r"end_value of a constant must equal its value"),
        ({"class_name": "Constant", "value": 0.1, "init_value": 0.2}, r"value and init_value are two names of one setting"),
        ({"class_name": "Constant", "steps": 3}, r"needs its value"),
        ({"class_name": "Cosine", "init_value": 0.1, "steps": 100, "decay_steps": 90}, r"decay_steps and steps are two names"),
        ({"class_name": "Cosine", "init_value": 0.1, "steps": 100, "end_value": 0.02, "decay_factor": 0.1},
         r"end_value and decay_factor disagree"),
    ],
)
def test_bad_fork_keys(section, match):
    with pytest.raises(ValueError, match=match):
        build_schedule(section)
