"""jaxloop's step number action: the step written to a file, atomically, in jaxloop's entry format."""

import re
import time

import pytest

from gyre import jaxloop
from tests.jaxloop._helpers import add_step, fresh


def test_step_number_action_writes_a_file(tmp_path):
    path = tmp_path / "sub" / "step.txt"
    action = jaxloop.StepNumberAction(jaxloop.LocalFileStepNumberWriter(path), interval=1)
    assert path.read_text() == ""  # created at construction: an empty file means "initialising"
    loop = jaxloop.TrainLoop(add_step, end_actions=[action])
    before = time.time() * 1000.0
    state, _ = loop(fresh(), [1, 1, 1])
    entry = re.fullmatch(r"timestamp_ms:([0-9.]+),step_number:3\n", path.read_text())
    assert entry and before <= float(entry.group(1)) <= time.time() * 1000.0
    loop(state, [1])
    assert path.read_text().endswith(",step_number:4\n") and path.read_text().count("\n") == 1
    with pytest.raises(TypeError, match="needs a step number writer"):
        jaxloop.StepNumberAction(object())
    with pytest.raises(TypeError, match="needs a file path"):
        jaxloop.LocalFileStepNumberWriter(3)



def test_writers_take_jaxloops_keyword_step_number(tmp_path):
    memory = jaxloop.StepNumberWriter()
    memory.write(step_number=5)
    assert memory.last == 5
    local = jaxloop.LocalFileStepNumberWriter(tmp_path / "s.txt")
    local.write(step_number=1)
    assert "step_number:1" in (tmp_path / "s.txt").read_text() and local.last == 1
