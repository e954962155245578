"""The one import point of the trainer's metric modes on device: the accumulator, the CONCAT
collector and the logged names."""

from gyre.trainer._accumulator import MONOIDS, MetricAccumulator, Values
from gyre.trainer._concat import ConcatCollector
from gyre.trainer._metric_names import (
    FREQS,
    PHASES,
    add_time,
    is_scalar,
    logged_name,
    metric_names,
    name_metrics,
    scalars_for_writers,
    select_specs,
    time_name,
)

__all__ = [
    "FREQS",
    "MONOIDS",
    "PHASES",
    "ConcatCollector",
    "MetricAccumulator",
    "Values",
    "add_time",
    "is_scalar",
    "logged_name",
    "metric_names",
    "name_metrics",
    "scalars_for_writers",
    "select_specs",
    "time_name",
]
