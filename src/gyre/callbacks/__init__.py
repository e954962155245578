"""Ready-made callbacks: progress bars, checkpoints, early stopping, nested evaluation.

Each sits in a task table under any schedule, or in a named loop's ``callbacks=``, where it
registers itself where it belongs. Build them with the factories; the classes are for type hints.

Example:
    >>> import io
    >>> import gyre
    >>> bar = gyre.callbacks.keras_bar(total=3, file=io.StringIO())
    >>> isinstance(bar, gyre.callbacks.KerasBar)
    True
    >>> _ = gyre.loop(None, range(3), {gyre.every(1): [gyre.callbacks.noop, bar]})
"""

from gyre.callbacks._bars import KerasBar as KerasBar
from gyre.callbacks._bars import TqdmBar as TqdmBar
from gyre.callbacks._bars import keras_bar as keras_bar
from gyre.callbacks._bars import tqdm_bar as tqdm_bar
from gyre.callbacks._checkpoint import Checkpoint as Checkpoint
from gyre.callbacks._checkpoint import checkpoint as checkpoint
from gyre.callbacks._checkpoint import restore as restore
from gyre.callbacks._monitor import EarlyStopping as EarlyStopping
from gyre.callbacks._monitor import early_stopping as early_stopping
from gyre.callbacks._noop import NoOp as NoOp
from gyre.callbacks._noop import noop as noop
from gyre.callbacks._store import CheckpointError as CheckpointError
from gyre.callbacks._wandb_logger import WandbLogger as WandbLogger
from gyre.callbacks._wandb_logger import wandb_logger as wandb_logger
from gyre.engine._inner import InnerLoop as InnerLoop
from gyre.engine._inner import inner_loop as inner_loop

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "EarlyStopping",
    "InnerLoop",
    "KerasBar",
    "NoOp",
    "TqdmBar",
    "WandbLogger",
    "checkpoint",
    "early_stopping",
    "inner_loop",
    "keras_bar",
    "noop",
    "restore",
    "tqdm_bar",
    "wandb_logger",
]
