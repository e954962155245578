"""Pure building blocks of gyre: the clock, schedules, named points, logs, the history, device
metrics (``gyre.core.metrics``, public) and the training state. ``gyre`` re-exports them.

Example:
    >>> from gyre import core
    >>> s = core.every(2)
    >>> [i for i in range(5) if s(core.Elapsed(steps=i))]
    [0, 2, 4]
"""

from gyre.core import metrics as metrics  # noqa: I001 - the public module first
from gyre.core._clock import BatchSizeFn as BatchSizeFn
from gyre.core._clock import Elapsed as Elapsed
from gyre.core._clock import Period as Period
from gyre.core._clock import at as at
from gyre.core._clock import infer_batch_size as infer_batch_size
from gyre.core._errors import ExplainedKeyError as ExplainedKeyError
from gyre.core._errors import LoopWarning as LoopWarning
from gyre.core._history import History as History
from gyre.core._history import Block as Block
from gyre.core._history import Record as Record
from gyre.core._history import history as history
from gyre.core._hooks import ALL_HOOKS as ALL_HOOKS
from gyre.core._hooks import PREDICT_HOOKS as PREDICT_HOOKS
from gyre.core._hooks import TEST_HOOKS as TEST_HOOKS
from gyre.core._hooks import TRAIN_HOOKS as TRAIN_HOOKS
from gyre.core._hooks import NamedSchedule as NamedSchedule
from gyre.core._hooks import on_epoch_begin as on_epoch_begin
from gyre.core._hooks import on_epoch_end as on_epoch_end
from gyre.core._hooks import on_predict_batch_begin as on_predict_batch_begin
from gyre.core._hooks import on_predict_batch_end as on_predict_batch_end
from gyre.core._hooks import on_predict_begin as on_predict_begin
from gyre.core._hooks import on_predict_end as on_predict_end
from gyre.core._hooks import on_predict_step as on_predict_step
from gyre.core._hooks import on_reset_step as on_reset_step
from gyre.core._hooks import on_test_batch_begin as on_test_batch_begin
from gyre.core._hooks import on_test_batch_end as on_test_batch_end
from gyre.core._hooks import on_test_begin as on_test_begin
from gyre.core._hooks import on_test_end as on_test_end
from gyre.core._hooks import on_test_step as on_test_step
from gyre.core._hooks import on_train_batch_begin as on_train_batch_begin
from gyre.core._hooks import on_train_batch_end as on_train_batch_end
from gyre.core._hooks import on_train_begin as on_train_begin
from gyre.core._hooks import on_train_end as on_train_end
from gyre.core._hooks import on_train_step as on_train_step
from gyre.core._logs import COLLECTIONS as COLLECTIONS
from gyre.core._logs import Collection as Collection
from gyre.core._logs import Logs as Logs
from gyre.core._logs import logs as logs
from gyre.core._placement import place as place
from gyre.core._placement import place_leaf as place_leaf
from gyre.core._schedules import Every as Every
from gyre.core._schedules import Piecewise as Piecewise
from gyre.core._schedules import Schedule as Schedule
from gyre.core._schedules import after as after
from gyre.core._schedules import always as always
from gyre.core._schedules import as_schedule as as_schedule
from gyre.core._schedules import every as every
from gyre.core._schedules import never as never
from gyre.core._schedules import piecewise as piecewise
from gyre.core._lr_schedule import lr_schedule as lr_schedule
from gyre.core._train_state import TrainState as TrainState

__all__ = [
    "ALL_HOOKS",
    "BatchSizeFn",
    "Block",
    "COLLECTIONS",
    "Collection",
    "Elapsed",
    "Every",
    "ExplainedKeyError",
    "History",
    "Logs",
    "LoopWarning",
    "NamedSchedule",
    "PREDICT_HOOKS",
    "Period",
    "Piecewise",
    "Record",
    "Schedule",
    "TEST_HOOKS",
    "TRAIN_HOOKS",
    "TrainState",
    "after",
    "always",
    "as_schedule",
    "at",
    "every",
    "history",
    "infer_batch_size",
    "logs",
    "metrics",
    "never",
    "on_epoch_begin",
    "on_epoch_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
    "on_predict_begin",
    "on_predict_end",
    "on_predict_step",
    "on_reset_step",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_step",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_train_begin",
    "on_train_end",
    "on_train_step",
    "piecewise",
    "lr_schedule",
    "place",
    "place_leaf",
]
