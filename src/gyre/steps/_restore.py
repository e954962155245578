"""Reading jaxloop's checkpoints (a plain orbax ``CheckpointManager``: item ``<dir>/N/<item>``) onto
the shardings of a state you have."""

from __future__ import annotations

import logging
import os
from typing import Any

import jax

from gyre.core._errors import describe, explain

_log = logging.getLogger(__name__)


def latest_step(checkpoint_dir: str | os.PathLike[str]) -> int | None:
    """The newest complete step an orbax ``CheckpointManager`` saved in ``checkpoint_dir``, or
    ``None``."""
    from orbax.checkpoint import path as ocp_path

    if not os.path.isdir(os.fspath(checkpoint_dir)):
        return None
    found = ocp_path.step.latest_step_metadata(os.fspath(checkpoint_dir), ocp_path.step.standard_name_format())
    return None if found is None else int(found.step)


def restore_pytree(
    state: Any,
    checkpoint_dir: str | os.PathLike[str],
    step: int,
    *,
    item: str = "default",
    transforms: Any = None,
) -> Any:
    """Item ``item`` of step ``step``, restored with the structure, shapes, dtypes and shardings of
    ``state``.

    ``transforms`` default to reading every ``params`` leaf, as jaxloop does. A leaf the
    checkpoint lacks keeps ``state``'s value, with a warning. A missing item is a
    ``FileNotFoundError`` naming the items present.
    """
    import orbax.checkpoint as ocp
    from orbax.checkpoint import checkpoint_utils
    from orbax.checkpoint import path as ocp_path

    step_dir = ocp_path.step.build_step_path(os.fspath(checkpoint_dir), ocp_path.step.standard_name_format(), step)
    if not os.path.isdir(os.path.join(os.fspath(step_dir), item)):
        present = _items(os.fspath(step_dir))
        raise FileNotFoundError(explain(
            f"no checkpoint item {item!r} at step {step} in {os.fspath(checkpoint_dir)}",
            expected=f"a directory {os.fspath(step_dir)}/{item} written by an orbax CheckpointManager",
            received=f"items {present}" if present else f"no directory {os.fspath(step_dir)}",
            fix="pass the item name the state was saved under (Step(..., chkpt_item_name=...)), or another step"))
    restore_args = checkpoint_utils.construct_restore_args(state)
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, state)
    checkpointer = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
    transforms = transforms if transforms is not None else {r"params/.*": ocp.Transform()}
    read = ocp.args.PyTreeRestore(abstract, restore_args=restore_args, transforms=transforms)
    restored = checkpointer.restore(step_dir, args=ocp.args.Composite(**{item: read}))
    return _keep_missing(restored[item], state, step_dir)


def _keep_missing(restored: Any, state: Any, where: Any) -> Any:
    """Leaves the checkpoint lacks (orbax gives shape structs) keep ``state``'s values, with a
    warning."""
    missing: list[str] = []

    def pick(path: Any, new: Any, old: Any) -> Any:
        if isinstance(new, jax.ShapeDtypeStruct) and not isinstance(old, jax.ShapeDtypeStruct):
            missing.append(jax.tree_util.keystr(path))
            return old
        return new

    merged = jax.tree_util.tree_map_with_path(pick, restored, state)
    if missing:
        _log.warning(
            "restore: %d leaf(s) of the state are not in the checkpoint %s and keep their values: %s",
            len(missing), os.fspath(where), ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
    return merged


def check_item_name(name: Any) -> str:
    """``name`` if it is a usable orbax item name, else a ``ValueError``."""
    if isinstance(name, str) and name and "/" not in name and not name.startswith((".", "_")):
        return name
    raise ValueError(explain(
        "chkpt_item_name must name an orbax checkpoint item",
        expected="a non-empty name without '/' that does not start with '.' or '_' (jaxloop's default is 'default')",
        received=describe(name), fix="pass chkpt_item_name='default', or the name your CheckpointManager saved under"))


def _items(step_dir: str) -> list[str]:
    if not os.path.isdir(step_dir):
        return []
    return sorted(n for n in os.listdir(step_dir) if os.path.isdir(os.path.join(step_dir, n)) and not n.startswith("_"))
