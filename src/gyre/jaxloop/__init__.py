"""``gyre.jaxloop``: jaxloop's vocabulary (steps, inner loops with actions, an outer loop with
evaluations) on gyre's engine, so jaxloop code ports by changing imports (docs/migration/jaxloop.md)::

    from gyre import jaxloop
    train_loop = jaxloop.TrainLoop(train_step, end_actions=[summary_action, ckpt_action])
    outer_loop = jaxloop.OuterLoop(train_loop=train_loop, eval_loops=[eval_loop])

``jaxloop.Step`` is :class:`gyre.Step`, ``jaxloop.Partitioner`` :class:`gyre.Partitioner`;
jaxloop's ``types`` are here too
(``from gyre import jaxloop as types``).
"""

from typing import Any

import jax

from gyre.core import TrainState as TrainState
from gyre.jaxloop._action_loop import ActionLoop as ActionLoop
from gyre.jaxloop._action_loop import EvalLoop as EvalLoop
from gyre.jaxloop._action_loop import TrainLoop as TrainLoop
from gyre.jaxloop._actions import Action as Action
from gyre.jaxloop._actions import CheckpointAction as CheckpointAction
from gyre.jaxloop._actions import LocalFileStepNumberWriter as LocalFileStepNumberWriter
from gyre.jaxloop._actions import MetricType as MetricType
from gyre.jaxloop._actions import MetricWithMetadata as MetricWithMetadata
from gyre.jaxloop._actions import StepNumberAction as StepNumberAction
from gyre.jaxloop._actions import StepNumberWriter as StepNumberWriter
from gyre.jaxloop._actions import SummaryAction as SummaryAction
from gyre.jaxloop._loop import Loop as Loop
from gyre.jaxloop._loop import reduce_outputs as reduce_outputs
from gyre.jaxloop._outer_loop import STOP_FILE_NAME as STOP_FILE_NAME
from gyre.jaxloop._outer_loop import STOP_FILE_NAME as _STOP_FILE_NAME  # noqa: F401 (jaxloop's spelling)
from gyre.jaxloop._outer_loop import STOP_LOOP as STOP_LOOP
from gyre.jaxloop._outer_loop import OuterLoop as OuterLoop
from gyre.jaxloop._specs import CheckpointSpec as CheckpointSpec
from gyre.jaxloop._specs import EvalContext as EvalContext
from gyre.jaxloop._specs import EvalSpec as EvalSpec
from gyre.jaxloop._stat_loop import STAT_BEGIN_TIME as STAT_BEGIN_TIME
from gyre.jaxloop._stat_loop import STAT_EXAMPLES_PER_SEC as STAT_EXAMPLES_PER_SEC
from gyre.jaxloop._stat_loop import STAT_INIT_TIME as STAT_INIT_TIME
from gyre.jaxloop._stat_loop import STAT_LIFE_TIME_SECS as STAT_LIFE_TIME_SECS
from gyre.jaxloop._stat_loop import STAT_LOOP_TIME_SECS as STAT_LOOP_TIME_SECS
from gyre.jaxloop._stat_loop import STAT_NUM_FLOPS as STAT_NUM_FLOPS
from gyre.jaxloop._stat_loop import STAT_NUM_PARAMS as STAT_NUM_PARAMS
from gyre.jaxloop._stat_loop import STAT_PREFIX as STAT_PREFIX
from gyre.jaxloop._stat_loop import STAT_STEPS_PER_SEC as STAT_STEPS_PER_SEC
from gyre.jaxloop._stat_loop import StatLoop as StatLoop
from gyre.jaxloop._stopping import EarlyStoppingAction as EarlyStoppingAction
from gyre.jaxloop._stopping import MetricMonitoringStopHandler as MetricMonitoringStopHandler
from gyre.jaxloop._stopping import StopTrainingError as StopTrainingError
from gyre.parallel import DataParallelPartitioner as DataParallelPartitioner
from gyre.parallel import Partitioner as Partitioner
from gyre.parallel import SingleDevicePartitioner as SingleDevicePartitioner
from gyre.parallel import SPMDPartitioner as SPMDPartitioner
from gyre.steps import Step as Step

Batch = Any
"""A batch: any pytree of arrays (jaxloop's ``types.Batch``)."""
Output = dict[str, Any]
"""A step's or a loop's outputs (jaxloop's ``types.Output``)."""
PRNGType = jax.Array | dict[str, jax.Array]
"""A step's ``base_prng``: a key, or a dict of keys (jaxloop's ``types.PRNGType``)."""

__all__ = [
    "STAT_BEGIN_TIME",
    "STAT_EXAMPLES_PER_SEC",
    "STAT_INIT_TIME",
    "STAT_LIFE_TIME_SECS",
    "STAT_LOOP_TIME_SECS",
    "STAT_NUM_FLOPS",
    "STAT_NUM_PARAMS",
    "STAT_PREFIX",
    "STAT_STEPS_PER_SEC",
    "STOP_FILE_NAME",
    "STOP_LOOP",
    "Action",
    "Batch",
    "ActionLoop",
    "CheckpointAction",
    "CheckpointSpec",
    "DataParallelPartitioner",
    "EarlyStoppingAction",
    "EvalContext",
    "EvalLoop",
    "EvalSpec",
    "LocalFileStepNumberWriter",
    "Loop",
    "MetricMonitoringStopHandler",
    "MetricType",
    "MetricWithMetadata",
    "OuterLoop",
    "Output",
    "PRNGType",
    "Partitioner",
    "SPMDPartitioner",
    "SingleDevicePartitioner",
    "StatLoop",
    "Step",
    "StepNumberAction",
    "StepNumberWriter",
    "StopTrainingError",
    "SummaryAction",
    "TrainLoop",
    "TrainState",
    "reduce_outputs",
]
