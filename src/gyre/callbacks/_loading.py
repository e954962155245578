"""Which checkpoint a run continues from: ``resume=`` resolved to steps on disk, falling back past
checkpoints that must not be loaded."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

from gyre.callbacks._integrity import Unreadable
from gyre.callbacks._store import RECORD_FILE, RECORD_ITEM, CheckpointError, Store
from gyre.core._checks import path, whole
from gyre.core._clock import Elapsed
from gyre.core._errors import as_integer, describe, explain, warn
from gyre.engine._snapshot import Snapshot

Say = Callable[[int, Unreadable, bool], None]


def resolve(resume: Any) -> tuple[str, Any]:
    """``resume`` as ``("latest"|"best", None)``, ``("step", n)`` or ``("path", absolute path)``."""
    if resume in ("latest", "best"):
        return resume, None
    step = as_integer(resume)
    if step is not None and step >= 0:
        return "step", step
    if isinstance(resume, (str, os.PathLike)) and not isinstance(resume, bytes) and os.fspath(resume):
        return "path", os.path.abspath(os.path.expanduser(os.fspath(resume)))
    raise TypeError(explain(
        "resume= names the checkpoint to continue from",
        expected="'latest', 'best', a step number (120), a checkpoint's path "
        "('runs/exp1/checkpoints/120'), or None to start fresh",
        received=describe(resume), fix="resume='latest'"))


def step_of_path(path: str) -> tuple[str, int]:
    """``(root, step)`` of a checkpoint's directory, else a clear ``FileNotFoundError``."""
    name = os.path.basename(path.rstrip(os.sep))
    if name.isdigit() and os.path.isfile(os.path.join(path, RECORD_ITEM, RECORD_FILE)):
        return os.path.dirname(path.rstrip(os.sep)), int(name)
    raise FileNotFoundError(explain(
        "resume= names a path that is not a checkpoint",
        expected="the directory of one saved step, e.g. 'runs/exp1/checkpoints/120' "
        f"(holding {RECORD_ITEM}/{RECORD_FILE})",
        received=repr(path) + ("" if os.path.exists(path) else " (it does not exist)"),
        fix="pass a step directory of a checkpoint directory, or resume='latest'"))


def saying(root: str, warned: set[int]) -> Say:
    """A ``say(step, problem, more)`` that warns once per checkpoint, in one line."""

    def say(step: int, problem: Unreadable, more: bool) -> None:
        if step in warned:
            return
        warned.add(step)
        then = "; trying the previous one" if more else ""
        warn(f"checkpoint {os.path.join(root, str(step))} is not loaded: {problem.reason}{then}", UserWarning)

    return say


def does_not_fit(root: str, failures: Sequence[tuple[int, Unreadable]]) -> ValueError:
    """The error for a target no checkpoint fits (the newest failure first)."""
    received = "; ".join(f"step {s}: {e.reason}" for s, e in failures if e.kind == "fit")
    return ValueError(explain(
        f"the checkpoints in {root} do not fit target_state (they are not damaged: the "
        "state given has another tree)",
        expected="a target_state with the tree, leaves, shapes and dtypes of the saved "
        "state (a dtype is never cast)",
        received=received, fix="build target_state as the run that saved them built it (the same model, "
        "optimizer and state class, e.g. by running its init function again); to train "
        "another model, give it a new directory"))


def first_readable(
    store: Store, steps: Sequence[int], target_state: Any, target_arrays: Any, say: Say
) -> tuple[Snapshot, list[tuple[int, Unreadable]]]:
    """The first of ``steps`` that loads, with the failures before it; raises when none does."""
    failures: list[tuple[int, Unreadable]] = []
    for i, step in enumerate(steps):
        try:
            return store.read(step, target_state, target_arrays), failures
        except Unreadable as problem:
            say(step, problem, i + 1 < len(steps))
            failures.append((step, problem))
    if any(e.kind == "fit" for _, e in failures):
        raise does_not_fit(store.root, failures)
    raise CheckpointError(explain(
        f"no checkpoint in {store.root} can be loaded",
        expected="at least one intact checkpoint", received="; ".join(f"step {s}: {e.reason}" for s, e in failures),
        fix="restore the directory from a backup, or start over with a new directory or "
        "gyre.checkpoint(..., overwrite=True)"))


def one_step(store: Store, step: int, target_state: Any, target_arrays: Any) -> Snapshot:
    """Step ``step``, or an error saying why it cannot be loaded (no fallback)."""
    on_disk = store.on_disk()
    if step not in on_disk:
        raise FileNotFoundError(explain(
            f"no checkpoint for step {step} in {store.root}",
            expected=f"one of the saved steps {on_disk}", received=describe(step),
            fix="pass one of the saved steps, or 'latest' for the newest good one"))
    try:
        return store.read(step, target_state, target_arrays)
    except Unreadable as problem:
        if problem.kind == "fit":
            raise does_not_fit(store.root, [(step, problem)]) from None
        raise CheckpointError(explain(
            f"the checkpoint of step {step} in {store.root} cannot be loaded",
            expected="an intact checkpoint", received=problem.reason,
            fix=f"load another step (on disk: {on_disk}), or 'latest', which skips damaged checkpoints"), step=step) from None


def no_monitor(owner: str) -> ValueError:
    """The error for ``"best"`` without a monitor."""
    return ValueError(explain(
        f"{owner} 'best' needs a checkpoint that monitors a value",
        expected="gyre.checkpoint(directory, monitor='loss_test', mode='min')",
        received="a checkpoint without monitor=", fix="pass monitor= to gyre.checkpoint, or resume='latest'"))


def no_best(root: str, monitor: str) -> FileNotFoundError:
    """The error for ``"best"`` when no checkpoint has a monitored value."""
    return FileNotFoundError(explain(
        f"no checkpoint in {root} has a value of {monitor!r} to rank it by",
        expected=f"checkpoints saved where {monitor!r} was logged",
        received="checkpoints without metrics (saved at the end of a loop, or by another configuration)",
        fix="resume='latest', or pass the step to resume from"))


def as_step(step: Any) -> int:
    return whole(step, "step=", problem="step= must be a saved step number", fix="step=ckpt.latest_step()",
                 expected="an int >= 0 (one of ckpt.all_steps()), or None for the latest", error=TypeError)


def nothing_to_restore(directory: str) -> FileNotFoundError:
    return FileNotFoundError(explain(
        f"no checkpoint to restore in {directory}",
        expected="a directory holding at least one saved step",
        received="an empty directory (or one with only unfinished saves)",
        fix="check the directory, or start from a fresh state when there is nothing to "
        "resume: resume='latest' on the loop does both"))


def restore(directory: str | os.PathLike[str], target: Any, step: int | None = None) -> tuple[Any, Elapsed]:
    """Loads a checkpoint saved by :func:`checkpoint` into the structure of ``target``, writing nothing.

    Args:
        directory: the checkpoint directory, or one step's directory (``.../checkpoints/120``).
        target: concrete arrays or ``jax.ShapeDtypeStruct`` leaves with shardings, which the
            arrays get (any device count); a dtype is never cast.
        step: the step to load (default: the newest that loads, damaged or misfitting ones
            skipped with a warning).

    Returns:
        ``(state, elapsed)``.

    Example:
        >>> import tempfile, gyre, jax.numpy as jnp
        >>> tmp = tempfile.TemporaryDirectory()
        >>> with gyre.checkpoint(tmp.name) as ckpt:
        ...     ckpt(gyre.Elapsed(steps=3), {"w": jnp.full(2, 3.0)})
        >>> state, elapsed = gyre.restore(tmp.name, {"w": jnp.zeros(2)})
        >>> state["w"].tolist(), elapsed.steps
        ([3.0, 3.0], 3)
        >>> tmp.cleanup()
    """
    root = os.path.abspath(os.path.expanduser(path(
        directory, "gyre.restore's directory must be a path", fix="gyre.restore('runs/exp1/checkpoints', target)",
        expected="a str or os.PathLike naming a checkpoint directory")))
    if not os.path.isdir(root):
        raise nothing_to_restore(root)
    if step is None and os.path.basename(root).isdigit():
        with contextlib.suppress(FileNotFoundError):
            root, step = step_of_path(root)
    store = Store(root, read_only=True)
    try:
        if step is not None:
            snapshot = one_step(store, as_step(step), target, None)
        else:
            steps = store.on_disk()[::-1]
            if not steps:
                raise nothing_to_restore(root)
            snapshot, _ = first_readable(store, steps, target, None, saying(root, set()))
    finally:
        store.close()
    return snapshot.state, snapshot.elapsed
