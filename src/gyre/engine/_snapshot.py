"""What a checkpoint of a running loop holds, and the protocol the engine uses to save and
resume through a checkpoint callback.

The loop layer cannot import the callbacks layer above it, so the engine knows a checkpoint
only through :class:`Checkpointer`: a :class:`~gyre.LoopElement` with ``save_snapshot`` and
``load_snapshot``. ``gyre.checkpoint`` is the one implementation; its storage (orbax, the
checksums, the fallback to an older good checkpoint) lives in ``gyre.callbacks``.

A :class:`Snapshot` is everything a run needs to continue bit for bit: the state (arrays,
through orbax), the completed clock, and ``meta``, a JSON-able dict holding the state of every
stateful schedule and callback of the task table, the data position and how many history
records belong to the checkpoint. Arrays found in a callback's ``state_dict`` (early
stopping's best weights) travel in ``arrays``, also through orbax: nothing is pickled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gyre.core._clock import Elapsed
from gyre.engine._tasks import LoopElement


@dataclass
class Snapshot:
    """One saved point of a run.

    Attributes:
        step: the checkpoint's number: the completed steps (``elapsed.steps``).
        state: the state (any pytree of arrays).
        elapsed: the clock once the step completed.
        meta: JSON-able values: ``{"resumables": {...}, "data": ..., "history": n, ...}``.
        arrays: pytrees of arrays that are not the state, by name (``{}`` when none).
        metrics: the monitored value by name, for best-k ranking (``None`` when none).
        files: append-only files to write under the checkpoint directory before the step is
            saved, by relative path (``{"history/000120.json": b"..."}``): the history's new
            records, so a save never grows with the run's length. Written atomically (a
            temporary name, then a rename), by process 0 only; never rotated out.
        source: the checkpointer a loop resumed it through (set by the loop; never saved).
    """

    step: int
    state: Any
    elapsed: Elapsed
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    source: Any = field(default=None, repr=False, compare=False)


class Checkpointer(LoopElement):
    """A task-table element the engine saves and resumes through (``gyre.checkpoint``).

    The engine calls :meth:`save_snapshot` when a loop ends (its data, its ``stop``, a stop
    request, a preemption) unless that step is already saved, and :meth:`load_snapshot` when
    the loop is given ``resume=``.
    """

    def on_loop_start(self) -> None:
        """Called before the loop's first step, after any resume: a checkpointer checks here
        what it will write to (``gyre.checkpoint`` refuses another run's checkpoints), so a
        run fails before training rather than at its first save. The default does nothing."""

    def poll(self) -> None:
        """Called after every step (every chunk when fused) while the loop runs: raises the
        failure of a background save that has finished failing, without waiting for one still
        running, so a failed save stops training at once rather than at the next save. The
        default does nothing."""

    def latest_step(self) -> int | None:
        """The newest step in its storage, or ``None``: a loop with several checkpointers
        resumes ``"latest"`` through the one holding the newest step. The default: ``None``."""
        return None

    def continue_from(self, step: int) -> dict[str, Any] | None:
        """Called when the loop resumed at ``step`` through another checkpointer (a latest
        and a best checkpoint in one loop): this one continues the same run, from its own
        newest checkpoint up to ``step``; returns that checkpoint's ``meta`` (``None`` when it
        has none). The default does nothing and returns ``None``."""
        return None

    def save_snapshot(self, snapshot: Snapshot, *, wait: bool = False) -> None:  # pragma: no cover
        """Saves ``snapshot`` (asynchronously unless ``wait``); skips a step already saved."""
        raise NotImplementedError

    def saved_step(self) -> int | None:  # pragma: no cover
        """The newest step saved (or being saved) by this object, or ``None``."""
        raise NotImplementedError

    def load_snapshot(self, resume: Any, target_state: Any) -> Snapshot | None:  # pragma: no cover
        """The snapshot ``resume`` names (``"latest"``, ``"best"``, a step, a path), restored
        into the structure of ``target_state``; ``None`` when ``"latest"`` finds nothing."""
        raise NotImplementedError

    def read_file(self, name: str) -> bytes | None:  # pragma: no cover
        """The content of a file written from :attr:`Snapshot.files`, or ``None`` if absent."""
        raise NotImplementedError

    def list_files(self, folder: str) -> list[str]:  # pragma: no cover
        """The names (relative paths) of the files under ``folder`` written from snapshots."""
        raise NotImplementedError

    def wait_until_finished(self) -> None:  # pragma: no cover
        """Blocks until every save started so far is on disk (raises a failed one)."""
        raise NotImplementedError
