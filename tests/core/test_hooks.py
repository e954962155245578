"""gyre.core._hooks: the named points of the predefined loops."""

import pytest

import gyre
from gyre.core import _hooks
from gyre.core._clock import Elapsed
from gyre.core._hooks import (
    ALL_HOOKS,
    PREDICT_HOOKS,
    SHORT_NAMES,
    TEST_HOOKS,
    TRAIN_HOOKS,
    NamedSchedule,
    hook_name,
)


def test_named_schedule_called_directly_is_explained():
    with pytest.raises(TypeError, match="train_loop"):
        gyre.on_train_step(Elapsed())


def test_the_explanation_names_the_point_and_the_fix():
    with pytest.raises(TypeError) as err:
        NamedSchedule("on_epoch_end")(Elapsed(steps=3))
    lines = str(err.value).splitlines()
    assert lines[0] == "the named schedule on_epoch_end was evaluated as a plain schedule"
    assert lines[-1].startswith("  fix: use gyre.train_loop(...)")


def test_named_schedules_are_equal_by_name_and_usable_as_keys():
    again = NamedSchedule("on_train_step")
    assert again == gyre.on_train_step and hash(again) == hash(gyre.on_train_step)
    assert again != NamedSchedule("on_test_step") and again != "on_train_step"
    assert {gyre.on_train_step: 1}[again] == 1
    assert repr(gyre.on_epoch_end) == "gyre.on_epoch_end"
    assert gyre.on_train_step.reads() == frozenset() and gyre.on_train_step.state_dict() == {}


def test_every_point_has_its_module_level_schedule():
    for name in ALL_HOOKS:
        point = getattr(_hooks, name)
        assert isinstance(point, NamedSchedule) and point.name == name
        assert getattr(gyre, name) is point
    assert len(ALL_HOOKS) == len(set(ALL_HOOKS))
    assert set(ALL_HOOKS) == set(TRAIN_HOOKS) | set(TEST_HOOKS) | set(PREDICT_HOOKS)
    assert "on_reset_step" in TRAIN_HOOKS and "on_reset_step" in TEST_HOOKS


def test_hook_name_resolves_schedules_strings_and_short_names():
    assert hook_name(gyre.on_test_end) == "on_test_end"
    assert hook_name("on_epoch_begin") == "on_epoch_begin"
    for short, full in SHORT_NAMES.items():
        assert hook_name(short) == full and full in ALL_HOOKS
    assert hook_name(gyre.every(2)) is None and hook_name(3) is None
