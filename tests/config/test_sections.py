"""The section helpers, through build_schedule: errors name the full dotted path, list the
target's parameters with their types, and name missing required keys."""

import pytest

from gyre.config import build_schedule


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


def test_unknown_key_lists_the_parameters_with_types():
    with pytest.raises(
        ValueError,
        match=r"unknown key 'decay_step' at sched \(CosineSchedule\)\. Did you mean 'decay_steps'\?",
    ) as info:
        build_schedule(
            {"class_name": "CosineSchedule", "init_value": 1.0, "decay_step": 4}, where="sched"
        )
    assert (
        "init_value (float, required), decay_steps (int | None, default None), alpha (float | None, default None)"
        in str(info.value)
    )


def test_missing_required_key():
    with pytest.raises(
        ValueError,
        match=r"missing required keys init_value, end_value at optimizer.learning_rate \(LinearSchedule\)",
    ):
        build_schedule({"class_name": "LinearSchedule", "steps": 4})
