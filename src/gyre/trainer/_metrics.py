"""Metric modes on device: the accumulator a compiled step carries, the host-side collector of
CONCAT values, and the names metrics are logged under.

The accumulator (:class:`MetricAccumulator`, and MEAN's counts) lives in
:mod:`gyre.trainer._accumulator`, the CONCAT collector (:class:`ConcatCollector`) in
:mod:`gyre.trainer._concat`, the names and their routing by phase and frequency
(:func:`metric_names`) in :mod:`gyre.trainer._metric_names`; this module is their one import
point.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from gyre.trainer._modes import parse_metrics
    >>> out = {"loss": jnp.float32(2.0), "worst": {"value": jnp.float32(-3.0), "mode": "max"}}
    >>> specs, values = parse_metrics(out, where="a loss")
    >>> acc = MetricAccumulator.init(specs, values)
    >>> update = jax.jit(lambda acc, values: acc.update(specs, values, 4))
    >>> acc = update(acc, values)
    >>> acc = update(acc, {"loss": (jnp.float32(1.0), None), "worst": (jnp.float32(-5.0), None)})
    >>> named = name_metrics(acc.compute(), specs, "train", "epoch")
    >>> {k: v.tolist() for k, v in named.items()}
    {'train/loss_epoch': 1.5, 'train/worst_epoch': -3.0}
"""

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
