"""What a checkpoint of a running loop holds (:class:`Snapshot`), and :class:`Checkpointer`, the
protocol through which the engine saves and resumes (``gyre.checkpoint`` implements it).
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
        step: the completed steps (``elapsed.steps``).
        state: the state (any pytree of arrays).
        elapsed: the clock once the step completed.
        meta: JSON-able values: ``{"resumables": {...}, "data": ..., "history": n, ...}``.
        arrays: pytrees of arrays that are not the state, by name (``{}`` when none).
        metrics: the monitored value by name, for best-k ranking (``None`` when none).
        files: append-only files to write under the checkpoint directory, by relative path
            (the history's new records); written atomically by process 0, never rotated out.
        source: the checkpointer a loop resumed it through (never saved).
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
    """A task-table element the engine saves through when a loop ends, and resumes through."""

    def on_loop_start(self) -> None:
        """Called before the first step, after any resume: check what will be written to."""

    def poll(self) -> None:
        """Called after every step or chunk: raises a finished save's failure, never waits."""

    def latest_step(self) -> int | None:
        """The newest step in its storage, or ``None``: a loop with several checkpointers
        resumes ``"latest"`` through the one holding the newest step. The default: ``None``."""
        return None

    def continue_from(self, step: int) -> dict[str, Any] | None:
        """After a resume at ``step`` through another checkpointer: the ``meta`` of this one's
        newest checkpoint up to ``step``, or ``None``."""
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
