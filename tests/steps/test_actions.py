"""The checks on lists of jaxloop actions shared by Step and the action loops."""

import numpy as np
import pytest

from gyre import jaxloop
from gyre.steps._actions import check_actions, check_interval


class Every:
    """A duck-typed action: a callable with an interval."""

    def __init__(self, interval):
        self.interval = interval

    def __call__(self, state, outputs, **kwargs):
        pass


def test_a_list_of_actions_comes_back_as_a_list_and_none_is_empty():
    a, b = jaxloop.Action(interval=2), Every(np.int64(3))
    assert check_actions((a, b), "end_actions", "TrainLoop", "SummaryAction(writer)") == [a, b]
    assert check_actions(None, "end_actions", "TrainLoop", "SummaryAction(writer)") == []
    assert check_interval(np.int32(4), "Every") == 4


@pytest.mark.parametrize(
    ("actions", "error", "words"),
    [
        (jaxloop.Action(), TypeError, "must be a list of actions"),
        ("summary", TypeError, "must be a list of actions"),
        ({"a": jaxloop.Action()}, TypeError, "must be a list of actions"),
        (["summary"], TypeError, "is not callable"),
        ([print], TypeError, "is no interval"),
        ([Every(0)], ValueError, "Every's interval must be a positive whole number"),
        ([Every(True)], ValueError, "Every's interval must be a positive whole number"),
        ([Every(2.5)], ValueError, "received: float 2.5"),
    ],
)
def test_bad_action_lists_are_explained(actions, error, words):
    with pytest.raises(error, match=words) as info:
        check_actions(actions, "end_actions", "TrainLoop", "SummaryAction(writer)")
    assert "fix:" in str(info.value)
