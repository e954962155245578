"""What gyre.checkpoint accepts: each argument checked at construction, with the fix."""

import os

import numpy as np
import pytest

import gyre
from gyre.callbacks._checkpoint import check_directory, check_keep, check_monitor


def test_a_directory_is_made_absolute_and_may_not_exist_yet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_directory("runs/ckpts") == str(tmp_path / "runs" / "ckpts")
    assert check_directory(tmp_path) == str(tmp_path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("directory", [None, 3, b"bytes", ["a"]])
def test_a_directory_must_be_a_path(directory):
    with pytest.raises(TypeError, match="directory must be a path"):
        check_directory(directory)


def test_keep_and_keep_best():
    assert check_keep(3, 0, None) == (3, 0)
    assert check_keep(np.int64(1), np.int32(2), "loss") == (1, 2)


@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "2", None])
def test_keep_must_be_at_least_one(keep):
    with pytest.raises(ValueError) as info:
        check_keep(keep, 0, None)
    lines = str(info.value).splitlines()
    assert lines[0] == "checkpoint's keep must be a whole number >= 1"
    assert "the newest is what a run resumes from" in lines[1]


@pytest.mark.parametrize("keep_best", [-1, 0.5, "1", None])
def test_keep_best_must_be_a_whole_number(keep_best):
    with pytest.raises(ValueError, match="keep_best must be a whole number >= 0"):
        check_keep(1, keep_best, "loss")


def test_keep_best_needs_a_monitor():
    with pytest.raises(ValueError) as info:
        check_keep(3, 2, None)
    assert str(info.value).splitlines() == [
        "checkpoint's keep_best needs a monitored value to rank checkpoints by",
        "  expected: keep_best=2 together with monitor='loss_test' (and mode=)",
        "  received: keep_best=2 without monitor=",
        "  fix: gyre.checkpoint(directory, keep_best=2, monitor='loss_test', mode='min'), or leave keep_best=0",
    ]


@pytest.mark.parametrize("value", [1, None, "yes"])
def test_flags_are_booleans(value, tmp_path):
    with pytest.raises(TypeError) as info:
        gyre.checkpoint(tmp_path, overwrite=value)
    assert str(info.value).splitlines()[0] == "checkpoint's overwrite must be True or False"


def test_monitor_and_mode():
    check_monitor("loss_test", "min")
    check_monitor(None, "max")
    with pytest.raises(TypeError, match="monitor must be the name"):
        check_monitor("", "min")
    with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
        check_monitor("loss", "MIN")


def test_unwritable_parent_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(PermissionError, match="cannot be written"):
        check_directory(tmp_path / "x")
