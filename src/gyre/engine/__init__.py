"""The engine: the loop language (``loop``, ``elapse``), the named loops, fused steps, inner
loops and prefetching. See ``README.md`` in this folder for how the pieces fit.

Example:
    >>> import gyre
    >>> gyre.loop(0, range(3), {gyre.every(1): lambda state, batch: state + batch})[0]
    3
"""

from gyre.core._errors import LoopWarning as LoopWarning
from gyre.engine._binding import StateMethod as StateMethod
from gyre.engine._binding import inject as inject
from gyre.engine._elapse import Elapse as Elapse
from gyre.engine._elapse import elapse as elapse
from gyre.engine._engine import loop as loop
from gyre.engine._fuse import FusableStep as FusableStep
from gyre.engine._fuse import fuse as fuse
from gyre.engine._inner import InnerLoop as InnerLoop
from gyre.engine._inner import aggregate as aggregate
from gyre.engine._inner import inner_loop as inner_loop
from gyre.engine._loop_state import LoopState as LoopState
from gyre.engine._loop_state import replace_state as replace_state
from gyre.engine._named import predict_loop as predict_loop
from gyre.engine._named import test_loop as test_loop
from gyre.engine._named import train_loop as train_loop
from gyre.engine._nan import NonFiniteError as NonFiniteError
from gyre.engine._prefetch import prefetch_to_device as prefetch_to_device
from gyre.engine._tasks import ChunkSafe as ChunkSafe
from gyre.engine._tasks import LoopCallbackBase as LoopCallbackBase
from gyre.engine._tasks import LoopElement as LoopElement
from gyre.engine._tasks import callback as callback

__all__ = [
    "ChunkSafe",
    "Elapse",
    "FusableStep",
    "InnerLoop",
    "LoopCallbackBase",
    "LoopElement",
    "LoopState",
    "LoopWarning",
    "NonFiniteError",
    "StateMethod",
    "aggregate",
    "callback",
    "elapse",
    "fuse",
    "inject",
    "inner_loop",
    "loop",
    "predict_loop",
    "prefetch_to_device",
    "replace_state",
    "test_loop",
    "train_loop",
]
