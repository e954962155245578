"""``resume=``: a loop continues from a checkpoint of its own as if it had never stopped."""

from __future__ import annotations

import os
from collections.abc import Sequence
from numbers import Integral
from typing import Any

from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain, warn
from gyre.core._history import History
from gyre.engine._elapse import check_stop
from gyre.engine._loop_state import LoopState
from gyre.engine._snapshot import (
    Checkpointer,
    Snapshot,
    chain_crc,
    load_history,
    load_state_dicts,
)

_WORDS = ("latest", "best")


def check_resume(resume: Any) -> Any:
    """``resume`` checked: ``None``, ``"latest"``, ``"best"``, a step (>= 0) or a path."""
    if resume is None or resume in _WORDS:
        return resume
    if isinstance(resume, Integral) and not isinstance(resume, bool) and resume >= 0:
        return int(resume)
    if isinstance(resume, os.PathLike) or (isinstance(resume, str) and os.sep in resume):
        return os.fspath(resume)
    raise ValueError(explain(
        "resume= names the checkpoint a loop continues from",
        expected="None (start afresh), 'latest', 'best', a saved step number, or the path "
        "of a checkpoint's step directory",
        received=describe(resume),
        fix="resume='latest' continues from the newest good checkpoint, or starts afresh "
        "when there is none"))


def _one_directory_each(found: Sequence[Checkpointer]) -> None:
    seen: dict[str, Checkpointer] = {}
    for each in found:
        directory = getattr(each, "directory", None)
        if directory is None:
            continue
        other = seen.setdefault(os.path.realpath(directory), each)
        if other is not each:
            raise ValueError(explain(
                "two checkpoints of one loop write to the same directory",
                expected="a directory of its own for each gyre.checkpoint", received=f"{other!r} and {each!r}",
                fix="give each its own directory (runs/exp1/latest, runs/exp1/best), or keep the latest and "
                "the best in one: gyre.checkpoint(directory, keep=3, keep_best=1, monitor='loss_test')"))


def find_checkpointer(found: Sequence[Checkpointer], resume: Any) -> Checkpointer | None:
    """The checkpoint (of a loop's ``found``) it resumes through, or ``None``; refuses two sharing a directory."""
    _one_directory_each(found)
    if resume is not None and not found:
        raise ValueError(explain(
            f"resume={resume!r} needs a checkpoint in the loop to resume from",
            expected="a gyre.checkpoint(directory) in the tasks (or callbacks=) of the loop",
            received="no checkpoint among the loop's callbacks",
            fix="add {gyre.every(500): gyre.checkpoint('runs/exp1/checkpoints')} to the "
            "tasks, or restore by hand with gyre.restore(directory, state)"))
    if resume == "latest" and len(found) > 1:
        newest = [-1 if (step := each.latest_step()) is None else step for each in found]
        return found[newest.index(max(newest))]
    if resume == "best":
        return next((each for each in found if getattr(each, "monitor", None) is not None), found[0])
    return found[0] if found else None


class PastStopError(ValueError):
    """``resume`` found a checkpoint already past the loop's ``stop``. A rung that works its
    ``stop`` out from its own arguments catches it to add a note in their terms."""

    def note_epochs(self, who: str, epochs: int, epoch_steps: int, fix: str) -> None:
        """Notes that ``who``'s stop is ``epochs`` epochs of ``epoch_steps`` batches, and ``fix``."""
        self.add_note(f"{who}: its stop is num_epochs x batches per epoch = {epochs} x {epoch_steps} = "
                      f"{epochs * epoch_steps} steps: {fix}")


def _past(stop: Any, snapshot: Snapshot, resume: Any) -> None:
    """Refuses a ``stop`` the checkpoint is already past (the loop would train nothing)."""
    period = check_stop(stop)
    clock = snapshot.elapsed
    past = [
        f"{name} {getattr(clock, name)} > {value}"
        for name, value in (period.items() if period is not None else ())
        if name in ("steps", "samples", "epochs") and getattr(clock, name) > value
    ]
    if past:
        raise PastStopError(explain(
            f"resume={resume!r} continues from step {snapshot.step}, which is past stop={stop!r}: "
            "the loop would train nothing and return the saved state",
            expected=f"a stop beyond the checkpoint's clock (step {clock.steps}, epoch {clock.epochs})",
            received=f"stop={stop!r} ({', '.join(past)})",
            fix=f"raise stop above {snapshot.step} steps to continue the run, or start a new "
            "run (resume=None) in a new checkpoint directory"))


def resume_from(
    checkpoint: Checkpointer, resume: Any, state: Any, history: History, elapsed: Elapsed | None,
    stop: Any = None,
) -> tuple[Any, History, Elapsed | None, Snapshot | None]:
    """Loads the snapshot ``resume`` names; returns the state, history, clock and the snapshot."""
    snapshot = checkpoint.load_snapshot(resume, state)
    if snapshot is None:
        return state, history, elapsed, None
    _past(stop, snapshot, resume)
    snapshot.source = checkpoint
    count = int(snapshot.meta.get("history", 0))
    loaded = load_history(checkpoint.read_file, count, f"the checkpoint of step {snapshot.step}")
    if len(history):
        warn(
            f"resume={resume!r}: the loop continues the history saved with step {snapshot.step} "
            f"({count} records); the {len(history)} records of the history= given are not used"
        )
    return snapshot.state, loaded, snapshot.elapsed, snapshot


def prepare(ls: LoopState, resumables: dict[str, Any], found: list[Checkpointer], resumed: Snapshot | None) -> None:
    """Tells the loop's checkpoints (``found``) their resumables and history files, lets them claim
    their directories before the first step, then hands a resumed loop's objects and data their state."""
    ls.resumables, ls.checkpoints = resumables, found
    source = None if resumed is None else resumed.source or next(iter(ls.checkpoints), None)
    for each in ls.checkpoints if resumed is not None else ():
        meta = resumed.meta if each is source else each.continue_from(resumed.step)
        if meta is not None:
            count = int(meta.get("history", 0))
            crc = meta.get("history_crc")  # absent from a checkpoint of an older gyre
            if crc is None:
                crc = chain_crc(each.read_file, count) or 0
            ls.history_saved[id(each)] = (count, int(crc))
    for each in ls.checkpoints:
        each.on_loop_start()  # another run's checkpoints are refused now, not at the first save
    if resumed is None:
        _warn_restored_by_hand(ls)
        return
    ls.resumed_step = int(resumed.step)
    meta = resumed.meta
    missing = load_state_dicts(ls.resumables, meta.get("resumables", {}), resumed.arrays.get("resumables", {}))
    if missing:
        warn(
            f"resuming from step {resumed.step}: nothing was saved for {missing} (the loop's "
            "callbacks differ from the saved run's), so they start afresh"
        )
    if ls.data is not None and meta.get("data") is not None:
        ls.data.load_state_dict(meta["data"])


def _warn_restored_by_hand(ls: LoopState) -> None:
    """A loop continuing the clock of a checkpoint restored by hand (``ckpt.restore``), whose data
    that saves its own position (gyre's batches, grain) starts elsewhere than the saved position:
    a warning, as the data position comes back only through ``resume=``."""
    for each in ls.checkpoints:
        snapshot = each.restored()
        saved = None if snapshot is None else snapshot.meta.get("data")
        if saved is None or saved.get("kind") == "count" or ls.data is None or snapshot.step != ls.elapsed.steps:
            continue  # (a list or a generator given again starts again: its position is not its own)
        now = ls.data.state_dict()
        if now.get("state") == saved.get("state"):
            continue
        warn(explain(
            f"the loop continues step {snapshot.step} of a checkpoint restored by hand, but its data starts "
            "elsewhere than where that run stopped: restore() brings back the state and the clock, not the "
            "data position (nor the callbacks' states and the history)",
            expected=f"the data at the saved position: {_position(saved)}", received=_position(now),
            fix="continue with resume='latest' (the checkpoint in the loop's table, the state as the structure) "
            "instead of restore(); data started afresh on purpose needs nothing"), UserWarning)
        return


def _position(data: dict[str, Any]) -> str:
    state = data.get("state")
    if isinstance(state, dict) and "position" in state:  # gyre's batches
        return f"{data.get('source')} at epoch {state.get('epoch', 0)}, batch {state['position']}"
    return f"{data.get('source')} at {state!r}"


def final_save(ls: LoopState, *, wait: bool) -> None:
    """Saves the end of the loop through each of its checkpoints, unless that step is saved."""
    ls.run_saves(wait=wait)
    step = int(ls.completed.steps)
    for checkpoint in ls.checkpoints:
        saved = checkpoint.saved_step()
        if saved is None or saved < step:
            checkpoint.save_snapshot(ls.snapshot(checkpoint), wait=wait)
