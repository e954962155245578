"""Turning user functions into compiled steps: the managed API (``gyre.managed``), jaxloop's
``Step``, and mixed precision.

Example:
    >>> from gyre import steps
    >>> steps.MixedPrecision("bfloat16").casts
    True
"""

from gyre.steps import managed as managed
from gyre.steps._precision import MixedPrecision as MixedPrecision
from gyre.steps._precision import Policy as Policy
from gyre.steps._precision import get_policy as get_policy
from gyre.steps._step import Step as Step
from gyre.steps._step import to_logs as to_logs
from gyre.steps._step import zeroed_batch as zeroed_batch
from gyre.steps.managed import ManagedState as ManagedState
from gyre.steps.managed import ManagedStep as ManagedStep

__all__ = [
    "ManagedState",
    "ManagedStep",
    "MixedPrecision",
    "Policy",
    "Step",
    "get_policy",
    "managed",
    "to_logs",
    "zeroed_batch",
]
