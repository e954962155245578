"""Where ``gyre.checkpoint`` keeps its checkpoints, through orbax's ``CheckpointManager``.

Step ``N`` is ``<root>/N``: ``state/``, ``arrays/``, orbax's metadata and ``gyre/metadata``, the
checksummed JSON record (clock, meta, metrics, each leaf's path, shape, dtype and CRC-32 of its
bytes in C order; none for a leaf split over processes), compared around a restore. The files of
:attr:`Snapshot.files` lie beside the steps, written atomically by process 0 and listed in
``gyre-files.json`` so gyre deletes only what it wrote.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain
from gyre.core._host import fetch, to_python
from gyre.engine._snapshot import Snapshot, chain_crc
from gyre.parallel.distributed import is_main_process

Leaf = dict[str, Any]  # {"path": str, "shape": [int], "dtype": str, "crc32": int | None}


class Unreadable(Exception):
    """A checkpoint that must not be loaded: ``kind`` is ``"corrupt"`` or ``"fit"`` (another tree)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def leaf_path(path: tuple[Any, ...]) -> str:
    """A leaf's key path as ``"params/Dense_0/kernel"`` (dict and dataclass states alike)."""
    return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


def _is_key(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def leaf_type(x: Any, *, where: str = "state") -> tuple[tuple[int, ...], str]:
    """A leaf's ``(shape, dtype name)``; a Python number's dtype is its type's name."""
    if isinstance(x, (bool, int, float, complex)):
        return (), type(x).__name__
    if isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)):
        return tuple(int(n) for n in x.shape), str(x.dtype)
    raise TypeError(explain(
        f"a checkpoint saves arrays and numbers; the {where} holds something else",
        expected="a pytree whose leaves are jax or numpy arrays or Python numbers", received=describe(x),
        fix="keep other values out of the state (static fields of a flax struct, "
        "or the callback's JSON-able state_dict)"))


def _crc(host: Any) -> int:
    flat = np.ascontiguousarray(np.asarray(host)).reshape(-1)
    return zlib.crc32(flat.view(np.uint8)) if flat.size else 0


def _in_host_memory(x: Any) -> bool:
    """Whether ``x`` is held whole by this process's CPU devices (read in place)."""
    return isinstance(x, jax.Array) and x.is_fully_addressable and all(
        d.platform == "cpu" for d in x.sharding.device_set)


def _host_values(leaves: list[Any]) -> list[Any]:
    """The host values of ``leaves``, the ones not on the host in one transfer."""
    away = [x for x in leaves if not _in_host_memory(x)]
    fetched = iter(fetch(away) if away else ())
    return [np.asarray(x) if _in_host_memory(x) else next(fetched) for x in leaves]


def checksums(leaves: list[Any]) -> list[int | None]:
    """CRC-32 of each leaf's bytes; ``None`` for a leaf no process holds whole."""
    readable = [not (isinstance(x, jax.Array) and not x.is_fully_addressable) for x in leaves]
    raw = [jax.random.key_data(x) if _is_key(x) else x for x, ok in zip(leaves, readable, strict=True) if ok]
    host = iter(_host_values(raw))
    return [_crc(next(host)) if ok else None for ok in readable]


def describe_tree(tree: Any, *, with_checksums: bool, where: str = "state") -> list[Leaf]:
    """Every leaf of ``tree``: path, shape, dtype and (when asked) checksum."""
    leaves, paths, _ = _structure(tree)
    types = [leaf_type(x, where=where) for x in leaves]
    sums = checksums(leaves) if with_checksums else [None] * len(leaves)
    return [{"path": path, "shape": list(shape), "dtype": dtype, "crc32": crc}
            for path, (shape, dtype), crc in zip(paths, types, sums, strict=True)]


#: leaf paths and empty nodes by tree structure: a run saves one structure again and again
_STRUCTURES: dict[Any, tuple[list[str], list[str]]] = {}


def _structure(tree: Any) -> tuple[list[Any], list[str], list[str]]:
    """``tree``'s leaves, their paths and its empty nodes' paths, computed once per structure."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    try:
        known = _STRUCTURES.get(treedef)
    except TypeError:  # a node whose static data cannot be hashed: nothing is cached
        treedef, known = None, None
    if known is None:
        paths = [leaf_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
        flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_empty)[0]
        known = (paths, [leaf_path(p) for p, x in flat if _is_empty(x)])
        if treedef is not None:
            if len(_STRUCTURES) >= 64:
                _STRUCTURES.clear()
            _STRUCTURES[treedef] = known
    return leaves, known[0], known[1]


def _one_sided(kind: str, target: Any, saved: Any) -> list[str]:
    """The paths of ``target`` missing from ``saved`` and the other way round, as problems."""
    missing = [p for p in target if p not in saved]
    extra = [p for p in saved if p not in target]
    return ([f"{len(missing)} target {kind} not in the checkpoint ({_listed(missing)})"] if missing else []) + (
        [f"{len(extra)} saved {kind} not in the target ({_listed(extra)})"] if extra else [])


def _listed(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _is_empty(x: Any) -> bool:
    return x is None or (isinstance(x, (dict, list, tuple)) and not x)


def empty_nodes(tree: Any) -> list[str]:
    """The paths of ``tree``'s nodes that hold no leaf (``None``, ``{}``, ``EmptyState()``)."""
    return list(_structure(tree)[2])


def mismatch(
    saved: list[Leaf], target: Any, *, where: str = "state", saved_empty: list[str] | None = None
) -> str | None:
    """Why ``target`` cannot receive the saved leaves (never cast), or ``None``."""
    leaves, paths, empty = _structure(target)
    wanted = {p: leaf_type(x, where=where) for p, x in zip(paths, leaves, strict=True)}
    have = {d["path"]: (tuple(d["shape"]), d["dtype"]) for d in saved}
    problems = [] if saved_empty is None else _one_sided("nodes", empty, saved_empty)
    problems += _one_sided("leaves", wanted, have)
    hidden = 0
    for i, what in enumerate(("shape", "dtype")):
        differ = [p for p in wanted if p in have and have[p][i] != wanted[p][i]]
        problems += [f"{what} of {p or 'the state'}: saved {have[p][i]}, target {wanted[p][i]}" for p in differ[:3]]
        hidden += max(len(differ) - 3, 0)
    if hidden:
        problems.append(f"{hidden} more leaves of another shape or dtype")
    return "; ".join(problems) or None


def abstract(target: Any) -> Any:
    """The target as sharded ``jax.ShapeDtypeStruct`` (default: the first local device)."""
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def one(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, jax.ShapeDtypeStruct) and x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device)
        return x

    return jax.tree_util.tree_map(one, target)


def verify(saved: list[Leaf], restored: Any) -> None:
    """Raises :class:`Unreadable` when a restored leaf's checksum is not the saved one."""
    expected = {d["path"]: d.get("crc32") for d in saved}
    leaves, paths, _ = _structure(restored)
    checked = [(p, x) for p, x in zip(paths, leaves, strict=True) if expected.get(p) is not None]
    if not checked:
        return
    sums = checksums([x for _, x in checked])
    bad = [path for (path, _), crc in zip(checked, sums, strict=True) if crc is not None and crc != expected[path]]
    if bad:
        raise Unreadable(
            "corrupt",
            f"the values of {_listed(bad)} differ from those saved (checksum mismatch: the "
            "files were changed after the save)")


_STATUS = {
    "NOT_FOUND": "a file is missing",
    "OUT_OF_RANGE": "a file is truncated",
    "DATA_LOSS": "a file is damaged",
    "FAILED_PRECONDITION": "a file is damaged",
    "INVALID_ARGUMENT": "a file is damaged",
}


def _status_line(text: str, step_dir: str | None) -> str | None:
    status = re.match(r"([A-Z_]{4,}):", text)
    if not status:
        return None
    head = text.split("[tensorstore_spec")[0]
    files = re.findall(r'local file "([^"]+)"', head)
    where = files[-1] if files else ""
    if where.endswith("/"):  # the database, not a file: name the array read instead
        keys = re.findall(r'Error (?:reading|writing) "([^"/]+)/', head)
        where = f"array {keys[0]}" if keys else ""
    elif where and step_dir and where.startswith(step_dir.rstrip("/") + "/"):
        where = where[len(step_dir.rstrip("/")) + 1 :]
    meaning = _STATUS.get(status.group(1), status.group(1).lower().replace("_", " "))
    return f"{meaning} ({where})" if where else meaning


def reason(err: BaseException, step_dir: str | None = None) -> str:
    """One readable line for an error reading a checkpoint (a TensorStore status: its meaning and file)."""
    chain, seen = [err], {id(err)}
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and id(nxt) not in seen:
        chain.append(nxt)
        seen.add(id(nxt))
    for one in chain:
        line = _status_line(str(one).strip(), step_dir)
        if line is not None:
            return line
    text = str(err).strip()
    if not text:
        return type(err).__name__
    line = re.split(r"\s*(?:See full TensorStore details|\[tensorstore_spec)", text.splitlines()[0])[0]
    if len(line) > 160:
        line = line[:157] + "..."
    return f"{type(err).__name__}: {line}"


# -- the files beside the steps ----------------------------------------------------------------

MARKER = "gyre-files.json"
RESERVED = (".orbax-checkpoint-tmp", ".corrupt")  # in the names of steps' directories
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=-]*$")
_TEMPORARY = ".tmp-gyre-"


def check_file_name(name: Any) -> str:
    """A :attr:`Snapshot.files` name, checked: a relative path not taken for a step, temporary or marker."""
    parts = name.split("/") if isinstance(name, str) else []
    top = parts[0] if parts else ""
    if (
        not parts
        or not all(_PART.match(p) for p in parts)
        or top.isdigit()
        or top == MARKER
        or any(word in top for word in RESERVED)
        or _TEMPORARY in parts[-1]
    ):
        raise ValueError(explain(
            "a checkpoint file name must be a relative path of plain names",
            expected="'folder/name.json': letters, digits, '_', '-', '.', '=' per part, "
            "not starting with '.', and a first part that is not a step number",
            received=describe(name), fix="name the files of a Snapshot like 'history/000120.json'"))
    return name


def _write_atomically(path: str, data: bytes) -> None:
    temporary = f"{path}{_TEMPORARY}{os.getpid()}"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


class Files:
    """The files under a checkpoint directory ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, name: str) -> str:
        return os.path.join(self.root, *check_file_name(name).split("/"))

    def write(self, files: Mapping[str, bytes]) -> None:
        """Writes each file atomically (the caller writes on process 0 only)."""
        paths = {name: self._path(name) for name in files}  # every name checked before one is written
        for name, path in paths.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomically(path, bytes(files[name]))
        self._mark({name.split("/")[0] for name in paths})

    def _mark(self, names: set[str]) -> None:
        current = self.tops()
        tops = sorted(set(current) | names)
        if tops != current:
            os.makedirs(self.root, exist_ok=True)
            _write_atomically(os.path.join(self.root, MARKER), json.dumps({"names": tops}).encode())

    def tops(self) -> list[str]:
        """The top-level names of the files gyre wrote here."""
        try:
            with open(os.path.join(self.root, MARKER)) as f:
                names = json.load(f).get("names", [])
        except (OSError, ValueError, AttributeError):
            return []
        return sorted(n for n in names if isinstance(n, str) and _PART.match(n) and not n.isdigit())

    def read(self, name: str) -> bytes | None:
        """The content of file ``name``, or ``None`` when there is none."""
        try:
            with open(self._path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def list(self, folder: str) -> list[str]:
        """The files under ``folder`` (any depth), as sorted relative paths."""
        found = []
        for here, _, names in os.walk(self._path(folder.rstrip("/"))):
            for name in names:
                if _TEMPORARY not in name:
                    path = os.path.relpath(os.path.join(here, name), self.root)
                    found.append(path.replace(os.sep, "/"))
        return sorted(found)

    def delete(self) -> None:
        """Deletes every file gyre wrote here, and the marker."""
        for name in [*self.tops(), MARKER]:
            path = os.path.join(self.root, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)

    def copy_from(self, other: Files) -> None:
        """Copies ``other``'s files here (a run resumed from a checkpoint elsewhere)."""
        for name in other.tops():
            source = os.path.join(other.root, name)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(self.root, name), dirs_exist_ok=True)
            elif os.path.isfile(source):
                os.makedirs(self.root, exist_ok=True)
                shutil.copy2(source, os.path.join(self.root, name))
        self._mark(set(other.tops()))


# -- the store ------------------------------------------------------------------------------

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
        if "history_crc" not in meta:
            return
        crc = chain_crc(self.files.read, int(meta.get("history", 0)))
        if crc != meta["history_crc"]:
            raise Unreadable("corrupt", (
                "its history blocks (history/, beside the step directories) are missing: a step directory "
                "copied without them, or history/ deleted" if crc is None else
                "its history blocks (history/) differ from those saved (checksum mismatch: a file was "
                "changed after the save)") + "; gyre.restore(directory, target) still loads its state and clock")

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

    def read(self, step: int, target_state: Any, target_arrays: Any = None, *, history: bool = True) -> Snapshot:
        """Step ``step`` restored into ``target_state`` (and ``target_arrays``) and verified, else
        :class:`Unreadable`; ``history=False`` leaves the history blocks unchecked (nothing reads them)."""
        import orbax.checkpoint as ocp

        record = self.read_record(step)
        if problem := mismatch(record["state"], target_state, saved_empty=record.get("empty")):
            raise Unreadable("fit", f"its state does not fit the target: {problem}")
        has_arrays = record.get("arrays") is not None
        if has_arrays and target_arrays is not None:
            if problem := mismatch(record["arrays"], target_arrays, where="Snapshot.arrays"):
                raise Unreadable("fit", f"its Snapshot.arrays do not fit the target: {problem}")
        self._check_files(step, record)
        if history:
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
