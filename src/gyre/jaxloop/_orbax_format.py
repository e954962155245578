"""jaxloop's checkpoint format (a bare orbax ``CheckpointManager``'s), as ``CheckpointAction`` and ``OuterLoop`` use it."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gyre.core._host import numeric_dtype
from gyre.steps._restore import restore_pytree


def is_manager(obj: Any) -> bool:
    """Whether ``obj`` is an orbax ``CheckpointManager``."""
    from orbax.checkpoint import CheckpointManager

    return isinstance(obj, CheckpointManager)


def steps_in(directory: str | os.PathLike[str]) -> list[int]:
    """The complete steps an orbax manager saved in ``directory``, oldest first."""
    from orbax.checkpoint import utils

    if not os.path.isdir(os.fspath(directory)):
        return []
    return sorted(int(s) for s in utils.checkpoint_steps(os.fspath(directory)))


def save(manager: Any, step: int, state: Any, metrics: dict[str, float] | None) -> bool:
    """Saves ``state`` at ``step`` as jaxloop does; returns whether the manager saved."""
    import orbax.checkpoint as ocp

    return bool(manager.save(step, metrics=metrics, args=ocp.args.PyTreeSave(state)))


def host_metrics(reduced: dict[str, Any]) -> dict[str, float]:
    """The numbers among a loop's reduced outputs, as Python floats (for orbax's ``best_fn``)."""
    return {k: float(v) for k, v in reduced.items() if np.ndim(v) == 0 and np.asarray(v).dtype != bool and numeric_dtype(np.asarray(v).dtype)}


def restore(step_obj: Any, state: Any, directory: str | os.PathLike[str], step: int, transforms: Any) -> Any:
    """Step ``step`` of ``directory`` read into ``state``'s structure and shardings."""
    restore_model = getattr(step_obj, "restore_model", None)
    if callable(restore_model):
        return restore_model(state, directory, step=step, transforms=transforms)
    return restore_pytree(state, directory, step, transforms=transforms)
