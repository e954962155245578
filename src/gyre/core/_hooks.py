"""Named points of the predefined loops: ``NamedSchedule`` and the points each loop offers.

A named schedule is a task-table key of ``train_loop``, ``test_loop`` or ``predict_loop``; the
loop decides when it fires. ciclo's strings (``"on_train_step"``, ``"train_step"``) name the same.
"""

from __future__ import annotations

from typing import Any

from gyre.core._clock import Elapsed
from gyre.core._errors import explain
from gyre.core._schedules import Schedule


class NamedSchedule(Schedule):
    """A named point of a predefined loop (``on_train_step``, ``on_epoch_end``, ...).

    Example:
        >>> on_train_step = NamedSchedule("on_train_step")
        >>> on_train_step.name, on_train_step == "on_train_step"
        ('on_train_step', False)
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, elapsed: Elapsed) -> bool:
        raise TypeError(explain(
            f"the named schedule {self.name} was evaluated as a plain schedule",
            expected="named schedules as keys of train_loop/test_loop/predict_loop tasks",
            received=f"{self.name} used in gyre.loop or called directly",
            fix="use gyre.train_loop(...) or replace it with a clock schedule like gyre.every(1)"))

    def reads(self) -> frozenset[str]:
        return frozenset()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamedSchedule) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("NamedSchedule", self.name))

    def __repr__(self) -> str:
        return f"gyre.{self.name}"


TRAIN_HOOKS = (
    "on_train_begin", "on_epoch_begin", "on_reset_step", "on_train_batch_begin",
    "on_train_step", "on_epoch_end", "on_train_batch_end", "on_train_end",
)
TEST_HOOKS = (
    "on_test_begin", "on_reset_step", "on_test_batch_begin", "on_test_step",
    "on_test_batch_end", "on_test_end",
)
PREDICT_HOOKS = (
    "on_predict_begin", "on_predict_batch_begin", "on_predict_step", "on_predict_batch_end",
    "on_predict_end",
)
ALL_HOOKS = tuple(dict.fromkeys(TRAIN_HOOKS + TEST_HOOKS + PREDICT_HOOKS))

#: Short names (ciclo's, and methods a state class may define) for the ``on_`` points.
SHORT_NAMES = {
    "train_step": "on_train_step",
    "test_step": "on_test_step",
    "predict_step": "on_predict_step",
    "reset_step": "on_reset_step",
}


def hook_name(key: Any) -> str | None:
    """The named point a task-table key names (short names resolved), or ``None``."""
    name = key.name if isinstance(key, NamedSchedule) else key
    return SHORT_NAMES.get(name, name) if isinstance(name, str) else None


on_train_begin = NamedSchedule("on_train_begin")
on_epoch_begin = NamedSchedule("on_epoch_begin")
on_reset_step = NamedSchedule("on_reset_step")
on_train_batch_begin = NamedSchedule("on_train_batch_begin")
on_train_step = NamedSchedule("on_train_step")
on_epoch_end = NamedSchedule("on_epoch_end")
on_train_batch_end = NamedSchedule("on_train_batch_end")
on_train_end = NamedSchedule("on_train_end")
on_test_begin = NamedSchedule("on_test_begin")
on_test_batch_begin = NamedSchedule("on_test_batch_begin")
on_test_step = NamedSchedule("on_test_step")
on_test_batch_end = NamedSchedule("on_test_batch_end")
on_test_end = NamedSchedule("on_test_end")
on_predict_begin = NamedSchedule("on_predict_begin")
on_predict_batch_begin = NamedSchedule("on_predict_batch_begin")
on_predict_step = NamedSchedule("on_predict_step")
on_predict_batch_end = NamedSchedule("on_predict_batch_end")
on_predict_end = NamedSchedule("on_predict_end")
