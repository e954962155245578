"""jaxloop's checkpoint format: what an orbax ``CheckpointManager`` writes by itself.

jaxloop saves ``PyTreeSave(state)`` through the user's manager (step ``N`` is ``<dir>/N``, the
state its item ``default``) and reads it back with ``Step.restore_model``. gyre's own
checkpoints (:func:`gyre.checkpoint`) hold more (the clock, the data position, checksums),
and a directory of jaxloop's checkpoints has none of that: gyre's checkpoint lists none of
its steps. This module is how :class:`~gyre.jaxloop.CheckpointAction` and
:class:`~gyre.jaxloop.OuterLoop` write and read that format, so a jaxloop directory resumes
training and feeds continuous evaluation as it does in jaxloop.
"""

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
    """The complete steps an orbax ``CheckpointManager`` saved in ``directory``, oldest first
    (a save still under its temporary name is not one; no directory: none).
    """
    from orbax.checkpoint import utils

    if not os.path.isdir(os.fspath(directory)):
        return []
    return sorted(int(s) for s in utils.checkpoint_steps(os.fspath(directory)))


def save(manager: Any, step: int, state: Any, metrics: dict[str, float] | None) -> bool:
    """Saves ``state`` at ``step`` through ``manager`` as jaxloop does
    (``PyTreeSave(state)``, with ``metrics`` for a manager that ranks its checkpoints);
    returns whether the manager saved (``False``: its policy skipped the step).
    """
    import orbax.checkpoint as ocp

    return bool(manager.save(step, metrics=metrics, args=ocp.args.PyTreeSave(state)))


def host_metrics(reduced: dict[str, Any]) -> dict[str, float]:
    """The numbers among a loop's reduced outputs, as Python floats (what orbax's
    ``best_fn`` is given and what it writes as JSON).
    """
    return {k: float(v) for k, v in reduced.items() if np.ndim(v) == 0 and np.asarray(v).dtype != bool and numeric_dtype(np.asarray(v).dtype)}


def restore(step_obj: Any, state: Any, directory: str | os.PathLike[str], step: int, transforms: Any) -> Any:
    """Step ``step`` of ``directory`` read into ``state``'s structure and shardings: through
    ``step_obj.restore_model`` (a :class:`gyre.Step`: its ``chkpt_item_name``), else as the
    item ``default``.
    """
    restore_model = getattr(step_obj, "restore_model", None)
    if callable(restore_model):
        return restore_model(state, directory, step=step, transforms=transforms)
    return restore_pytree(state, directory, step, transforms=transforms)
