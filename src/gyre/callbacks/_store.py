"""Where ``gyre.checkpoint`` keeps its checkpoints, through orbax's ``CheckpointManager``.

Step ``N`` is ``<root>/N``: ``state/``, ``arrays/``, orbax's metadata and ``gyre/metadata``, the
checksummed JSON record (clock, meta, metrics, each leaf's path, shape, dtype and CRC-32).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from gyre.callbacks._integrity import (
    Unreadable,
    abstract,
    describe_tree,
    empty_nodes,
    mismatch,
    reason,
    verify,
)
from gyre.callbacks._snapshot_files import Files
from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain
from gyre.core._host import to_python
from gyre.engine._history_files import chain_crc
from gyre.engine._snapshot import Snapshot
from gyre.parallel.distributed import is_main_process

FORMAT = 2  # 2: the record holds its own CRC-32, and meta the CRC-32 of the history's blocks
RECORD_ITEM = "gyre"
RECORD_FILE = "metadata"  # the file name orbax's JsonCheckpointHandler writes
TEMPORARY = ".orbax-checkpoint-tmp"
SET_ASIDE = ".corrupt"


class CheckpointError(RuntimeError):
    """A checkpoint that could not be written (``step`` names it) or that cannot be loaded.

    Example:
        >>> err = CheckpointError("the save of step 3 failed", step=3)
        >>> err.step, isinstance(err, RuntimeError)
        (3, True)
    """

    __module__ = "gyre.callbacks"  # its public path, in tracebacks and reprs

    def __init__(self, message: str, *, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


def sync(name: str) -> None:
    """Waits for every process at the barrier ``name`` (nothing on one process)."""
    if jax.process_count() > 1:
        from orbax.checkpoint import multihost

        multihost.sync_global_processes(f"gyre_checkpoint:{name}")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return to_python(value)
    raise TypeError(f"{type(value).__name__} is not JSON-able")


def as_json(value: Any, *, what: str) -> Any:
    """``value`` through a JSON round trip, or a clear error naming ``what``."""
    try:
        return json.loads(json.dumps(value, default=_json_default))
    except (TypeError, ValueError) as err:
        raise TypeError(explain(
            f"a checkpoint's {what} must be JSON-able",
            expected="dicts, lists, strings, numbers, booleans and None",
            received=f"{describe(value, 120)} ({err})",
            fix="return JSON-able values from state_dict(); put arrays in Snapshot.arrays")) from err


def record_crc(record: dict[str, Any]) -> int:
    """CRC-32 of a record's JSON (keys sorted), its own ``crc32`` left out."""
    rest = {key: value for key, value in record.items() if key != "crc32"}
    return zlib.crc32(json.dumps(rest, sort_keys=True).encode())


def _read_json(path: str, rel: str) -> Any:
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        raise Unreadable("corrupt", f"{rel} is missing") from None
    if not text.strip():
        raise Unreadable("corrupt", f"{rel} is empty")
    try:
        return json.loads(text)
    except ValueError:
        raise Unreadable("corrupt", f"{rel} is not valid JSON (damaged)") from None


class Store:
    """The checkpoints of one directory, through orbax; ``read_only`` creates, saves and deletes
    nothing."""

    def __init__(
        self,
        root: str,
        *,
        keep: int = 1,
        keep_best: int = 0,
        score: Callable[[Any], float] | None = None,
        async_save: bool = True,
        read_only: bool = False,
    ) -> None:
        self.root = root
        self.keep, self.keep_best, self.score = keep, keep_best, score
        self.async_save, self.read_only = async_save, read_only
        self.pending: int | None = None  # the step being written in the background
        self.files = Files(root)
        self._unfinished: set[int] = set()  # steps whose save failed
        self._manager: Any = None

    @property
    def manager(self) -> Any:
        """orbax's ``CheckpointManager``, made on first use (orbax imports in a second)."""
        if self._manager is None:
            import orbax.checkpoint as ocp
            from orbax.checkpoint import checkpoint_managers as cm

            policies: list[Any] = [cm.LatestN(n=self.keep)]
            if self.score is not None and self.keep_best:
                # with LatestN beside BestN the newest always stays
                policies.append(
                    cm.BestN(get_metric_fn=self.score, reverse=False, n=self.keep_best,
                             keep_checkpoints_without_metrics=False))
            options = ocp.CheckpointManagerOptions(
                preservation_policy=cm.AnyPreservationPolicy(policies),
                best_fn=self.score,  # also makes orbax write the metrics beside each step
                best_mode="max",  # score is "higher is better"
                enable_async_checkpointing=self.async_save,
                create=not self.read_only,
                read_only=self.read_only)
            handlers = {
                "state": ocp.StandardCheckpointHandler(),
                "arrays": ocp.StandardCheckpointHandler(),
                RECORD_ITEM: ocp.JsonCheckpointHandler(),
            }
            self._manager = ocp.CheckpointManager(self.root, options=options, item_handlers=handlers)
        return self._manager

    # -- listing ---------------------------------------------------------------------------

    def step_dir(self, step: int) -> str:
        return os.path.join(self.root, str(step))

    def has_record(self, step: int) -> bool:
        """Whether step ``step``'s directory holds gyre's record (a finished save does)."""
        return os.path.isfile(os.path.join(self.step_dir(step), RECORD_ITEM, RECORD_FILE))

    def on_disk(self) -> list[int]:
        """Every step directory on disk, finished or not, in increasing order."""
        if not os.path.isdir(self.root):
            return []
        return sorted(int(n) for n in os.listdir(self.root) if n.isdigit() and os.path.isdir(self.step_dir(int(n))))

    def steps(self) -> list[int]:
        """The saved steps (and the one being saved), in increasing order."""
        return sorted(s for s in self.manager.all_steps() if self.has_record(s) or not os.path.isdir(self.step_dir(s)))

    def latest(self) -> int | None:
        """The newest of :meth:`steps`, or ``None``."""
        return max(self.steps(), default=None)

    def _recorded_metrics(self, step: int) -> Any:
        """The metrics of step ``step``'s record, else orbax's copy."""
        try:
            return self.read_record(step).get("metrics")
        except Unreadable:
            return self.manager.metrics(step)

    def ranked(self) -> list[int]:
        """The finished steps with a monitored value, best first."""
        assert self.score is not None
        scored = [(self.score(m), s) for s in self.on_disk() if self.has_record(s) and (m := self._recorded_metrics(s))]
        return [s for _, s in sorted(scored, key=lambda pair: (-pair[0], -pair[1]))]

    def best_step(self) -> int | None:
        return self.manager.best_step() if self.steps() else None

    # -- saving ----------------------------------------------------------------------------

    def record(self, snapshot: Snapshot, metrics: Mapping[str, float] | None, checksums: bool) -> dict[str, Any]:
        """The JSON record of a snapshot, with its own CRC-32."""
        record = {
            "format": FORMAT,
            "step": int(snapshot.step),
            "elapsed": as_json(snapshot.elapsed.to_dict(), what="clock"),
            "meta": as_json(snapshot.meta, what="Snapshot.meta"),
            "metrics": as_json(dict(metrics), what="metrics") if metrics else None,
            "state": describe_tree(snapshot.state, with_checksums=checksums),
            "empty": empty_nodes(snapshot.state),
            "arrays": describe_tree(snapshot.arrays, with_checksums=checksums, where="Snapshot.arrays")
            if snapshot.arrays else None,
            "processes": jax.process_count(),
        }
        record["crc32"] = record_crc(record)
        return record

    def save(
        self, snapshot: Snapshot, *, metrics: Mapping[str, float] | None, checksums: bool = True, wait: bool = False
    ) -> None:
        """Writes ``snapshot`` after its files (in the background unless ``wait``)."""
        import orbax.checkpoint as ocp

        step = int(snapshot.step)
        record = self.record(snapshot, metrics, checksums)
        items = {"state": ocp.args.StandardSave(_wrapped(snapshot.state)), RECORD_ITEM: ocp.args.JsonSave(record)}
        if snapshot.arrays:
            items["arrays"] = ocp.args.StandardSave(snapshot.arrays)
        self.wait()
        self._remove_unfinished()
        if snapshot.files and is_main_process():
            self.files.write(snapshot.files)
        try:
            self.manager.save(step, args=ocp.args.Composite(**items), metrics=record["metrics"], force=True)
        except Exception as err:
            self._failed(step, err)
        self.pending = step
        if wait:
            self.wait()

    def finished_pending(self) -> bool:
        """Whether a background save has ended (always ``False`` on several processes: waiting is collective)."""
        if self.pending is None or self._manager is None or jax.process_count() > 1:
            return False
        return not self._manager.is_saving_in_progress()

    def wait(self) -> None:
        """Blocks until the save in flight is on disk; raises :class:`CheckpointError` if it failed."""
        if self._manager is None or self.pending is None:  # nothing started since the last wait
            return
        step, self.pending = self.pending, None
        try:
            self._manager.wait_until_finished()
        except Exception as err:
            self._failed(step, err)

    def _failed(self, step: int | None, err: BaseException) -> None:
        if step is not None:
            self._unfinished.add(step)  # removed at the next save: orbax may still write there
        self.manager.reload()  # orbax forgot the steps it meant to delete after this save
        kept = self.steps()
        raise CheckpointError(explain(
            f"checkpoint: the save of step {step} to {self.root} failed",
            expected="the checkpoint written to disk",
            received=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": "),
            fix=(
                "free disk space or fix the directory (permissions, mount)"
                if isinstance(err, OSError)
                else "make the state a pytree of arrays and numbers (what orbax saves); "
                "keep other objects out of it or give them state_dict()/load_state_dict()")
            + f"; the checkpoints already on disk are intact ({kept}), so a run resumed from "
            "them loses only the steps since"), step=step) from err

    # -- reading ---------------------------------------------------------------------------

    def read_record(self, step: int) -> dict[str, Any]:
        """Step ``step``'s record; :class:`Unreadable` when missing or damaged."""
        path = os.path.join(self.step_dir(step), RECORD_ITEM, RECORD_FILE)
        if not os.path.isdir(self.step_dir(step)):
            raise Unreadable("corrupt", "the step directory is missing")
        if not os.listdir(self.step_dir(step)):
            raise Unreadable("corrupt", "the step directory is empty")
        record = _read_json(path, f"{RECORD_ITEM}/{RECORD_FILE}")
        if not isinstance(record, dict) or not isinstance(record.get("format"), int):
            raise Unreadable("corrupt", f"{RECORD_ITEM}/{RECORD_FILE} is not a gyre checkpoint record")
        if record["format"] > FORMAT:
            raise Unreadable("fit", f"it was written by a newer gyre (format {record['format']})")
        if record["format"] >= 2 and record.get("crc32") != record_crc(record):
            raise Unreadable("corrupt", f"{RECORD_ITEM}/{RECORD_FILE} differs from the one saved "
                             "(checksum mismatch: the file was changed after the save)")
        return record

    def _check_history(self, record: dict[str, Any]) -> None:
        """The history blocks the record counts must be those saved (their running CRC-32)."""
        meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
        if "history_crc" in meta and chain_crc(self.files.read, int(meta.get("history", 0))) != meta["history_crc"]:
            raise Unreadable("corrupt", "its history blocks (history/) are missing or differ from those "
                             "saved (checksum mismatch: a file was changed after the save)")

    def _check_files(self, step: int, record: dict[str, Any]) -> None:
        """orbax's metadata files must be present and parse (orbax would load an emptied one)."""
        items = ["state"] + (["arrays"] if record.get("arrays") else [])
        _read_json(os.path.join(self.step_dir(step), "_CHECKPOINT_METADATA"), "_CHECKPOINT_METADATA")
        for item in items:
            _read_json(os.path.join(self.step_dir(step), item, "_METADATA"), f"{item}/_METADATA")
            manifest = os.path.join(self.step_dir(step), item, "manifest.ocdbt")
            if os.path.isfile(manifest) and os.path.getsize(manifest) == 0:
                raise Unreadable("corrupt", f"{item}/manifest.ocdbt is empty")

    def _saved_tree(self, step: int, item: str) -> Any:
        """The abstract tree of a saved item, on the first local device (no target given)."""
        meta = self.manager.item_metadata(step)[item]
        tree = getattr(meta, "tree", meta)
        return abstract(jax.tree_util.tree_map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), tree))

    def read(self, step: int, target_state: Any, target_arrays: Any = None) -> Snapshot:
        """Step ``step`` restored into ``target_state`` (and ``target_arrays``) and verified, else :class:`Unreadable`."""
        import orbax.checkpoint as ocp

        record = self.read_record(step)
        if problem := mismatch(record["state"], target_state, saved_empty=record.get("empty")):
            raise Unreadable("fit", f"its state does not fit the target: {problem}")
        has_arrays = record.get("arrays") is not None
        if has_arrays and target_arrays is not None:
            if problem := mismatch(record["arrays"], target_arrays, where="Snapshot.arrays"):
                raise Unreadable("fit", f"its Snapshot.arrays do not fit the target: {problem}")
        self._check_files(step, record)
        self._check_history(record)
        try:
            items = {"state": ocp.args.StandardRestore(_wrapped(abstract(target_state)))}
            if has_arrays:
                into = abstract(target_arrays) if target_arrays is not None else self._saved_tree(step, "arrays")
                items["arrays"] = ocp.args.StandardRestore(into)
            restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as err:
            if "tree structures do not match" in str(err):  # a record older than "empty"
                raise Unreadable("fit", "its state's tree differs from the target's "
                                 f"({str(err).splitlines()[1].rstrip(':')} differs)") from err
            raise Unreadable("corrupt", reason(err, self.step_dir(step))) from err
        state = _unwrapped(restored["state"], target_state)
        verify(record["state"], state)
        arrays = restored["arrays"] if has_arrays else {}
        if has_arrays:
            verify(record["arrays"], arrays)
        return Snapshot(
            step=int(record["step"]),
            state=state,
            elapsed=Elapsed.from_dict(record["elapsed"]),
            meta=record.get("meta") or {},
            arrays=dict(arrays),
            metrics=record.get("metrics"))

    # -- housekeeping (process 0; the caller syncs) ----------------------------------------

    def _remove_unfinished(self) -> None:
        """Deletes what failed saves left (at every save and at :meth:`close`: their writers may still run)."""
        if self._unfinished and is_main_process():
            self.delete_temporaries({str(s) for s in self._unfinished})

    def set_aside(self, step: int, suffix: str = SET_ASIDE) -> str:
        """Renames step ``step``'s directory to ``N.corrupt`` (``-2``... if taken) and returns it."""
        target, n = f"{self.step_dir(step)}{suffix}", 1
        while os.path.exists(target):
            n += 1
            target = f"{self.step_dir(step)}{suffix}-{n}"
        os.replace(self.step_dir(step), target)
        return target

    def delete_steps(self, steps: list[int]) -> None:
        for step in steps:
            shutil.rmtree(self.step_dir(step), ignore_errors=True)

    def delete_temporaries(self, steps: set[str] | None = None) -> None:
        """Deletes unfinished saves' temporary directories (only those of ``steps`` when given)."""
        for name in sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []:
            if TEMPORARY in name and (steps is None or name.split(".")[0] in steps):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def reload(self) -> None:
        if self._manager is not None:
            self._manager.reload()

    def close(self) -> None:
        """Waits for the save in flight (raising its failure) and releases orbax."""
        if self._manager is not None:
            try:
                self.wait()
            finally:
                manager, self._manager = self._manager, None
                manager.close()
                self._remove_unfinished()


def _wrapped(tree: Any) -> Any:
    """``tree`` as orbax's ``StandardSave`` takes it: a bare array or number goes in a dict."""
    return {"value": tree} if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(tree)) else tree


def _unwrapped(restored: Any, target: Any) -> Any:
    """What :func:`_wrapped` wrapped, taken out again (``target`` says whether it was)."""
    return restored["value"] if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(target)) else restored
