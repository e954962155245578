"""Looking inside the model, as the kpoeppel jax_trainer fork does: per-tensor ``min`` / ``max`` /
``mean`` / ``std`` of parameters, gradients and sown values while it trains, named by path
(``conv1.kernel_mean``, ``conv1.kernel.grad_std``), the model's summary files, and the fork's
parameter helpers for flax nnx modules.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen, nnx

from gyre.config._transforms import parameter_path
from gyre.core._checks import instance
from gyre.steps._step import count_params

STATS = ("min", "max", "mean", "std")


def tree_stats(tree: Any, suffix: str = "") -> dict[str, jax.Array]:
    """The statistics of every array leaf of ``tree``, its path then ``suffix`` (jittable)."""
    out: dict[str, jax.Array] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not hasattr(leaf, "dtype") or not jnp.issubdtype(leaf.dtype, jnp.number):
            continue
        name = parameter_path(path).replace("/", ".") + suffix
        value = jnp.asarray(leaf, jnp.float32)
        if value.size == 1:
            out[f"{name}_val"] = value.reshape(())
        else:
            out.update({f"{name}_{op}": getattr(jnp, op)(value) for op in STATS})
    return out


def _nnx_table(model: Any) -> str:
    """Each nnx submodule's path, class and parameter count (``nnx.tabulate`` fails on bridges)."""
    rows = []
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Module):
            name = ".".join(str(p) for p in path) or "(model)"
            count = count_params(nnx.state(node, nnx.Param))
            rows.append((name, type(node).__name__, count))
    width = max(len(r[0]) for r in rows)
    kind = max(len(r[1]) for r in rows)
    lines = [f"{'module'.ljust(width)}  {'class'.ljust(kind)}  params"]
    lines += [f"{n.ljust(width)}  {c.ljust(kind)}  {k}" for n, c, k in sorted(rows)]
    return "\n".join(lines) + "\n"


def write_tabulation(trainer: Any, exmp_input: Any) -> None:
    """Writes the model's summary (``model.txt``) and its parameters (``params.txt``) into the
    trainer's run folder (process 0 only)."""
    if jax.process_index() != 0:
        return
    state = trainer.state
    lines = [f"{parameter_path(p)}: {tuple(np.shape(x))} {jnp.result_type(x)}"
             for p, x in jax.tree_util.tree_flatten_with_path(state.params)[0]]
    lines.append(f"total: {count_params(state.params)} parameters")
    if trainer.model_mode == "nnx":
        table = _nnx_table(trainer.bind_model())
    else:
        try:
            table = linen.tabulate(trainer.model, jax.random.key(0), depth=3)(exmp_input)
        except Exception as err:  # a summary must never stop a run: the file says why it is short
            table = f"(flax could not tabulate this model: {type(err).__name__}: {err})\n{trainer.model!r}"
    os.makedirs(trainer.log_dir, exist_ok=True)
    (trainer.log_dir / "model.txt").write_text(str(table))
    (trainer.log_dir / "params.txt").write_text("\n".join(lines) + "\n")


def _nnx_module(module: Any, who: str) -> None:
    instance(module, "module", nnx.Module, problem=f"{who} takes a flax nnx module",
             expected="an nnx.Module (e.g. nnx.Linear(2, 3, rngs=nnx.Rngs(0)))",
             fix="pass the model object; for linen parameters use gyre.trainer's count of a params pytree")


def module_named_params(module: Any, recursive: bool = False) -> Iterator[tuple[str, Any]]:
    """The ``(name, nnx.Param)`` pairs of ``module``'s attributes; ``recursive``: submodules' first,
    as ``<sub>.<param>``.

    Example:
        >>> from flax import nnx
        >>> [name for name, _ in module_named_params(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))]
        ['bias', 'kernel']
    """
    _nnx_module(module, "module_named_params")
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
    _nnx_module(module, "count_parameters")
    return count_params(nnx.state(module, nnx.Param))
