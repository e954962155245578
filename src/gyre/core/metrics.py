"""PLACEHOLDER until the metrics branch lands (replaced whole by it): the reductions the engine
needs, with the agreed API (``from_stacked(values, counts).compute()``)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from gyre.core.errors import explain, suggest


class _Reduction:
    def __init__(self, value: Any) -> None:
        self.value = value

    def compute(self) -> Any:
        return self.value


class Mean(_Reduction):
    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Mean:
        values = jnp.asarray(values)
        if values.dtype.kind in "biu":
            values = values.astype(jnp.float32)
        if counts is None:
            return cls(jnp.mean(values, axis=0))
        w = jnp.asarray(counts, values.dtype).reshape((-1,) + (1,) * (values.ndim - 1))
        return cls(jnp.sum(values * w, axis=0) / jnp.sum(w))


class Sum(_Reduction):
    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Sum:
        return cls(jnp.sum(jnp.asarray(values), axis=0))


class Min(_Reduction):
    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Min:
        return cls(jnp.min(jnp.asarray(values), axis=0))


class Max(_Reduction):
    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Max:
        return cls(jnp.max(jnp.asarray(values), axis=0))


class Std(_Reduction):
    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Std:
        return cls(jnp.std(jnp.asarray(values, jnp.float32), axis=0))


REDUCTIONS: dict[str, type] = {"mean": Mean, "sum": Sum, "min": Min, "max": Max, "std": Std}


def get_reduction(name: str) -> type:
    if name not in REDUCTIONS:
        raise ValueError(
            explain(
                f"unknown reduction {name!r}",
                expected=f"one of {sorted(REDUCTIONS)}",
                received=repr(name),
                fix="use one of the expected names." + suggest(name, REDUCTIONS),
            )
        )
    return REDUCTIONS[name]
