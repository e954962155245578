"""The one-formula schedules (constant, linear, cosine): exact values at every boundary, and
both names of each registered schedule."""

import numpy as np

from gyre.config import SCHEDULES, build_schedule
from gyre.config._simple_schedules import ConstantSchedule, CosineSchedule, LinearSchedule
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
