"""The kpoeppel jax_trainer fork's parameter helpers for flax nnx modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gyre.core._checks import instance
from gyre.trainer._inspection import count_params


def _module(module: Any, who: str) -> Any:
    from flax import nnx

    instance(module, "module", nnx.Module, problem=f"{who} takes a flax nnx module",
             expected="an nnx.Module (e.g. nnx.Linear(2, 3, rngs=nnx.Rngs(0)))",
             fix="pass the model object; for linen parameters use gyre.trainer's count of a params pytree")
    return nnx


def module_named_params(module: Any, recursive: bool = False) -> Iterator[tuple[str, Any]]:
    """The ``(name, nnx.Param)`` pairs of ``module``'s attributes; ``recursive``: submodules' first,
    as ``<sub>.<param>``.

    Example:
        >>> from flax import nnx
        >>> [name for name, _ in module_named_params(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))]
        ['bias', 'kernel']
    """
    nnx = _module(module, "module_named_params")
    attributes = sorted(vars(module).items())
    if recursive:
        for child_name, child in attributes:
            if isinstance(child, nnx.Module):
                for name, param in module_named_params(child, recursive=True):
                    yield f"{child_name}.{name}", param
    for name, value in attributes:
        if isinstance(value, nnx.Param) and value.get_value() is not None:
            yield name, value


def count_parameters(module: Any) -> int:
    """The number of parameter elements in an nnx module (every ``nnx.Param`` of its graph, unlike
    the fork).

    Example:
        >>> from flax import nnx
        >>> count_parameters(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
        9
    """
    nnx = _module(module, "count_parameters")
    return count_params(nnx.state(module, nnx.Param))
