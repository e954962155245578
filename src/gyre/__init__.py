"""gyre: training loops for JAX.

A loop is a table from schedules to callbacks, run by one small engine::

    state, history, elapsed = gyre.loop(state, batches, {gyre.every(1): [train_step]}, stop=1000)

See docs/index.md for the ladder of APIs built on it.
"""

from gyre import callbacks as callbacks
from gyre import config as config
from gyre import data as data
from gyre import jaxloop as jaxloop
from gyre import loggers as loggers
from gyre import testing as testing
from gyre import trainer as trainer
from gyre._version import __version__ as __version__
from gyre.callbacks import Checkpoint as Checkpoint
from gyre.callbacks import EarlyStopping as EarlyStopping
from gyre.callbacks import KerasBar as KerasBar
from gyre.callbacks import TqdmBar as TqdmBar
from gyre.callbacks import checkpoint as checkpoint
from gyre.callbacks import early_stopping as early_stopping
from gyre.callbacks import keras_bar as keras_bar
from gyre.callbacks import noop as noop
from gyre.callbacks import restore as restore
from gyre.callbacks import tqdm_bar as tqdm_bar
from gyre.callbacks import wandb_logger as wandb_logger
from gyre.core import Elapsed as Elapsed
from gyre.core import History as History
from gyre.core import Logs as Logs
from gyre.core import LoopWarning as LoopWarning
from gyre.core import NamedSchedule as NamedSchedule
from gyre.core import Period as Period
from gyre.core import Schedule as Schedule
from gyre.core import TrainState as TrainState
from gyre.core import after as after
from gyre.core import always as always
from gyre.core import as_schedule as as_schedule
from gyre.core import at as at
from gyre.core import every as every
from gyre.core import history as history
from gyre.core import logs as logs
from gyre.core import lr_schedule as lr_schedule
from gyre.core import never as never
from gyre.core import on_epoch_begin as on_epoch_begin
from gyre.core import on_epoch_end as on_epoch_end
from gyre.core import on_predict_batch_begin as on_predict_batch_begin
from gyre.core import on_predict_batch_end as on_predict_batch_end
from gyre.core import on_predict_begin as on_predict_begin
from gyre.core import on_predict_end as on_predict_end
from gyre.core import on_predict_step as on_predict_step
from gyre.core import on_reset_step as on_reset_step
from gyre.core import on_test_batch_begin as on_test_batch_begin
from gyre.core import on_test_batch_end as on_test_batch_end
from gyre.core import on_test_begin as on_test_begin
from gyre.core import on_test_end as on_test_end
from gyre.core import on_test_step as on_test_step
from gyre.core import on_train_batch_begin as on_train_batch_begin
from gyre.core import on_train_batch_end as on_train_batch_end
from gyre.core import on_train_begin as on_train_begin
from gyre.core import on_train_end as on_train_end
from gyre.core import on_train_step as on_train_step
from gyre.core import piecewise as piecewise
from gyre.engine import ChunkSafe as ChunkSafe
from gyre.engine import FusableStep as FusableStep
from gyre.engine import InnerLoop as InnerLoop
from gyre.engine import LoopCallbackBase as LoopCallbackBase
from gyre.engine import LoopElement as LoopElement
from gyre.engine import LoopState as LoopState
from gyre.engine import NonFiniteError as NonFiniteError
from gyre.engine import callback as callback
from gyre.engine import elapse as elapse
from gyre.engine import fuse as fuse
from gyre.engine import inject as inject
from gyre.engine import inner_loop as inner_loop
from gyre.engine import loop as loop
from gyre.engine import predict_loop as predict_loop
from gyre.engine import prefetch_to_device as prefetch_to_device
from gyre.engine import replace_state as replace_state
from gyre.engine import test_loop as test_loop
from gyre.engine import train_loop as train_loop
from gyre.fitting import fit as fit
from gyre.frameworks import FlaxState as FlaxState
from gyre.frameworks import create_flax_state as create_flax_state
from gyre.loggers import ConsoleWriter as ConsoleWriter
from gyre.loggers import CSVWriter as CSVWriter
from gyre.loggers import JSONLWriter as JSONLWriter
from gyre.loggers import MLflowWriter as MLflowWriter
from gyre.loggers import MultiWriter as MultiWriter
from gyre.loggers import TensorBoardWriter as TensorBoardWriter
from gyre.loggers import WandbWriter as WandbWriter
from gyre.loggers import Writer as Writer
from gyre.loggers import WriterError as WriterError
from gyre.loggers import write_to as write_to
from gyre.parallel import FSDP as FSDP
from gyre.parallel import JIT as JIT
from gyre.parallel import SPMD as SPMD
from gyre.parallel import DataParallel as DataParallel
from gyre.parallel import DataParallelPartitioner as DataParallelPartitioner
from gyre.parallel import Eager as Eager
from gyre.parallel import Jit as Jit
from gyre.parallel import Partitioner as Partitioner
from gyre.parallel import SingleDevicePartitioner as SingleDevicePartitioner
from gyre.parallel import SPMDPartitioner as SPMDPartitioner
from gyre.parallel import Strategy as Strategy
from gyre.parallel import distributed as distributed
from gyre.parallel import get_strategy as get_strategy
from gyre.parallel import register_strategy as register_strategy
from gyre.steps import ManagedState as ManagedState
from gyre.steps import ManagedStep as ManagedStep
from gyre.steps import MixedPrecision as MixedPrecision
from gyre.steps import Policy as Policy
from gyre.steps import Step as Step
from gyre.steps import managed as managed
from gyre.trainer import TrainerModule as TrainerModule

__all__ = [
    "CSVWriter",
    "Checkpoint",
    "ChunkSafe",
    "ConsoleWriter",
    "DataParallel",
    "DataParallelPartitioner",
    "Eager",
    "EarlyStopping",
    "Elapsed",
    "FSDP",
    "FlaxState",
    "FusableStep",
    "History",
    "InnerLoop",
    "JIT",
    "JSONLWriter",
    "Jit",
    "KerasBar",
    "Logs",
    "LoopCallbackBase",
    "LoopElement",
    "LoopState",
    "LoopWarning",
    "MLflowWriter",
    "ManagedState",
    "ManagedStep",
    "MixedPrecision",
    "MultiWriter",
    "NamedSchedule",
    "NonFiniteError",
    "Partitioner",
    "Period",
    "Policy",
    "SPMD",
    "SPMDPartitioner",
    "Schedule",
    "SingleDevicePartitioner",
    "Step",
    "Strategy",
    "TensorBoardWriter",
    "TqdmBar",
    "TrainState",
    "WandbWriter",
    "Writer",
    "WriterError",
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
    "jaxloop",
    "config",
    "trainer",
    "TrainerModule",
    "inner_loop",
    "keras_bar",
    "fit",
    "loggers",
    "logs",
    "loop",
    "lr_schedule",
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
    "register_strategy",
    "replace_state",
    "restore",
    "test_loop",
    "testing",
    "tqdm_bar",
    "train_loop",
    "wandb_logger",
    "write_to",
]
