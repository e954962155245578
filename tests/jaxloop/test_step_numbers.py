"""jaxloop's step number action: the step written to a file, atomically."""


import pytest

from gyre import jaxloop
from tests.jaxloop._helpers import add_step, fresh


def test_step_number_action_writes_a_file(tmp_path):
    path = tmp_path / "sub" / "step.txt"
    action = jaxloop.StepNumberAction(jaxloop.LocalFileStepNumberWriter(path), interval=1)
    loop = jaxloop.TrainLoop(add_step, end_actions=[action])
    state, _ = loop(fresh(), [1, 1, 1])
    assert path.read_text() == "3"
    loop(state, [1])
    assert path.read_text() == "4"
    with pytest.raises(TypeError, match="needs a step number writer"):
        jaxloop.StepNumberAction(object())
    with pytest.raises(TypeError, match="needs a file path"):
        jaxloop.LocalFileStepNumberWriter(3)

