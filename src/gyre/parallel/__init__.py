"""Strategies on ``jax.sharding`` (eager, jit, data parallel, FSDP, SPMD), jaxloop's
partitioners over them, and multi-host set-up (``gyre.distributed``).

Example:
    >>> from gyre import parallel
    >>> parallel.get_strategy("data_parallel").name
    'data_parallel'
"""

from gyre.parallel import distributed as distributed
from gyre.parallel._partitioners import DataParallelPartitioner as DataParallelPartitioner
from gyre.parallel._partitioners import Partitioner as Partitioner
from gyre.parallel._partitioners import SingleDevicePartitioner as SingleDevicePartitioner
from gyre.parallel._partitioners import SPMDPartitioner as SPMDPartitioner
from gyre.parallel._registry import get_strategy as get_strategy
from gyre.parallel._registry import register_strategy as register_strategy
from gyre.parallel._strategies import FSDP as FSDP
from gyre.parallel._strategies import JIT as JIT
from gyre.parallel._strategies import SPMD as SPMD
from gyre.parallel._strategies import DataParallel as DataParallel
from gyre.parallel._strategies import Eager as Eager
from gyre.parallel._strategies import Jit as Jit
from gyre.parallel._strategy import Strategy as Strategy

__all__ = [
    "DataParallel",
    "DataParallelPartitioner",
    "Eager",
    "FSDP",
    "JIT",
    "Jit",
    "Partitioner",
    "SPMD",
    "SPMDPartitioner",
    "SingleDevicePartitioner",
    "Strategy",
    "distributed",
    "get_strategy",
    "register_strategy",
]
