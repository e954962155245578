"""The host-side collector of the CONCAT metrics' values, which grow with the steps and so
cannot live in the step's fixed-shape carry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._errors import explain
from gyre.trainer._accumulator import Values
from gyre.trainer._metric_names import _missing
from gyre.trainer._modes import LogMetricMode, MetricSpec


class ConcatCollector:
    """Keeps CONCAT metrics' per-step device arrays; :meth:`compute` concatenates them."""

    def __init__(self, specs: Mapping[str, MetricSpec]) -> None:
        self.keys = tuple(k for k, s in specs.items() if s.mode is LogMetricMode.CONCAT)
        self._parts: dict[str, list[tuple[Any, bool]]] = {k: [] for k in self.keys}

    @staticmethod
    def select(specs: Mapping[str, MetricSpec], values: Values) -> dict[str, Any]:
        """The CONCAT metrics' values, for a compiled step to return (jittable)."""
        return {k: values[k][0] for k, s in specs.items() if s.mode is LogMetricMode.CONCAT}

    def _add(self, values: Mapping[str, Any], stacked: bool) -> None:
        for key in self.keys:
            if key not in values:
                raise _missing(key, "value")
            value = values[key]
            if isinstance(value, tuple):
                value = value[0]
            self._parts[key].append((value, stacked))

    def add(self, values: Mapping[str, Any]) -> None:
        """Keeps one step's CONCAT values (arrays, or ``(value, count)`` pairs)."""
        self._add(values, stacked=False)

    def add_stacked(self, values: Mapping[str, Any]) -> None:
        """Keeps the CONCAT values of several fused steps (leading axis: the steps)."""
        self._add(values, stacked=True)

    def compute(self) -> dict[str, jax.Array]:
        """Every CONCAT metric's rows so far, one device array each (of one shape)."""
        out = {}
        for key, parts in self._parts.items():
            rows = [_rows(v, stacked) for v, stacked in parts]
            if not rows:
                out[key] = jnp.zeros((0,), jnp.float32)
                continue
            shapes = {tuple(np.shape(r)[1:]) for r in rows}
            if len(shapes) > 1:
                raise ValueError(explain(
                    f"CONCAT metric {key!r} has rows of different shapes",
                    expected="values of one shape after the first axis", received=f"rows of shapes {sorted(shapes)}",
                    fix="log values of one shape per metric (pad or reduce them first)"))
            out[key] = rows[0] if len(rows) == 1 else jnp.concatenate(rows)
        return out

    def reset(self) -> None:
        """Forgets every value (at the start of an epoch or a window)."""
        self._parts = {k: [] for k in self.keys}


def _rows(value: Any, stacked: bool) -> jax.Array:
    value = jnp.asarray(value)
    if not stacked:
        return jnp.atleast_1d(value)
    if value.ndim <= 1:
        return value
    return value.reshape((value.shape[0] * value.shape[1],) + value.shape[2:])
