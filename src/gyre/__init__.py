"""gyre: training loops for JAX.

A loop is a table from schedules to callbacks, run by one small engine::

    state, history, elapsed = gyre.loop(state, batches, {gyre.every(1): [train_step]}, stop=1000)

See the README for the ladder of APIs built on it.
"""

from gyre import callbacks as callbacks
from gyre import data as data
from gyre import testing as testing
from gyre.callbacks.bars import keras_bar as keras_bar
from gyre.callbacks.bars import tqdm_bar as tqdm_bar
from gyre.callbacks.checkpoint import checkpoint as checkpoint
from gyre.callbacks.early_stopping import early_stopping as early_stopping
from gyre.callbacks.noop import noop as noop
from gyre.callbacks.wandb_logger import wandb_logger as wandb_logger
from gyre.core.clock import Elapsed as Elapsed
from gyre.core.clock import Period as Period
from gyre.core.clock import at as at
from gyre.core.errors import LoopWarning as LoopWarning
from gyre.core.history import History as History
from gyre.core.history import history as history
from gyre.core.hooks import NamedSchedule as NamedSchedule
from gyre.core.hooks import on_epoch_begin as on_epoch_begin
from gyre.core.hooks import on_epoch_end as on_epoch_end
from gyre.core.hooks import on_predict_batch_begin as on_predict_batch_begin
from gyre.core.hooks import on_predict_batch_end as on_predict_batch_end
from gyre.core.hooks import on_predict_begin as on_predict_begin
from gyre.core.hooks import on_predict_end as on_predict_end
from gyre.core.hooks import on_predict_step as on_predict_step
from gyre.core.hooks import on_reset_step as on_reset_step
from gyre.core.hooks import on_test_batch_begin as on_test_batch_begin
from gyre.core.hooks import on_test_batch_end as on_test_batch_end
from gyre.core.hooks import on_test_begin as on_test_begin
from gyre.core.hooks import on_test_end as on_test_end
from gyre.core.hooks import on_test_step as on_test_step
from gyre.core.hooks import on_train_batch_begin as on_train_batch_begin
from gyre.core.hooks import on_train_batch_end as on_train_batch_end
from gyre.core.hooks import on_train_begin as on_train_begin
from gyre.core.hooks import on_train_end as on_train_end
from gyre.core.hooks import on_train_step as on_train_step
from gyre.core.logs import Logs as Logs
from gyre.core.logs import logs as logs
from gyre.core.schedules import Schedule as Schedule
from gyre.core.schedules import after as after
from gyre.core.schedules import always as always
from gyre.core.schedules import as_schedule as as_schedule
from gyre.core.schedules import every as every
from gyre.core.schedules import never as never
from gyre.core.schedules import piecewise as piecewise
from gyre.core.state import TrainState as TrainState
from gyre.frameworks.flax_state import create_flax_state as create_flax_state
from gyre.loop.binding import inject as inject
from gyre.loop.elapse import elapse as elapse
from gyre.loop.engine import loop as loop
from gyre.loop.fuse import FusableStep as FusableStep
from gyre.loop.fuse import fuse as fuse
from gyre.loop.inner import InnerLoop as InnerLoop
from gyre.loop.inner import inner_loop as inner_loop
from gyre.loop.named import predict_loop as predict_loop
from gyre.loop.named import test_loop as test_loop
from gyre.loop.named import train_loop as train_loop
from gyre.loop.prefetch import prefetch_to_device as prefetch_to_device
from gyre.loop.state import LoopState as LoopState
from gyre.loop.state import replace_state as replace_state
from gyre.loop.tasks import ChunkSafe as ChunkSafe
from gyre.loop.tasks import LoopCallbackBase as LoopCallbackBase
from gyre.loop.tasks import LoopElement as LoopElement
from gyre.loop.tasks import callback as callback
from gyre.parallel import distributed as distributed
from gyre.parallel.partitioners import DataParallelPartitioner as DataParallelPartitioner
from gyre.parallel.partitioners import Partitioner as Partitioner
from gyre.parallel.partitioners import SingleDevicePartitioner as SingleDevicePartitioner
from gyre.parallel.partitioners import SPMDPartitioner as SPMDPartitioner
from gyre.parallel.strategies import FSDP as FSDP
from gyre.parallel.strategies import JIT as JIT
from gyre.parallel.strategies import SPMD as SPMD
from gyre.parallel.strategies import DataParallel as DataParallel
from gyre.parallel.strategies import Eager as Eager
from gyre.parallel.strategies import Jit as Jit
from gyre.parallel.strategies import Strategy as Strategy
from gyre.parallel.strategies import get_strategy as get_strategy
from gyre.parallel.strategies import register_strategy as register_strategy
from gyre.steps import managed as managed
from gyre.steps.precision import Policy as Policy
from gyre.steps.step import Step as Step

__version__ = "0.1.0"

__all__ = [
    "ChunkSafe",
    "DataParallel",
    "DataParallelPartitioner",
    "Eager",
    "Elapsed",
    "FSDP",
    "FusableStep",
    "History",
    "InnerLoop",
    "JIT",
    "Jit",
    "Logs",
    "LoopCallbackBase",
    "LoopElement",
    "LoopState",
    "LoopWarning",
    "NamedSchedule",
    "Partitioner",
    "Period",
    "Policy",
    "SPMD",
    "SPMDPartitioner",
    "Schedule",
    "SingleDevicePartitioner",
    "Step",
    "Strategy",
    "TrainState",
    "__version__",
    "after",
    "always",
    "as_schedule",
    "at",
    "callback",
    "callbacks",
    "checkpoint",
    "create_flax_state",
    "data",
    "distributed",
    "early_stopping",
    "elapse",
    "every",
    "fuse",
    "get_strategy",
    "history",
    "inject",
    "inner_loop",
    "keras_bar",
    "logs",
    "loop",
    "managed",
    "never",
    "noop",
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
    "predict_loop",
    "prefetch_to_device",
    "replace_state",
    "register_strategy",
    "test_loop",
    "testing",
    "tqdm_bar",
    "train_loop",
    "wandb_logger",
]
