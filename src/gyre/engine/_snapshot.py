"""What a checkpoint of a running loop holds (:class:`Snapshot`), and :class:`Checkpointer`, the
protocol through which the engine saves and resumes (``gyre.checkpoint`` implements it).

Its ``meta["resumables"]``: the state of the table's objects with ``state_dict()`` and
``load_state_dict(d)`` (docs/concepts/checkpoints.md: "Resume after a crash"): JSON values and
arrays (arrays through orbax, nothing pickled), named by class and rank (``"EarlyStopping#2"``),
so a table built the same way finds them.

Its ``files``: the history as appended JSON blocks of columns, so a save writes new records only.
Each save writes ``history/<first record, 12 digits>.json``; the checkpoint's meta holds its
record count and the chain's CRC-32, so blocks a dead run wrote later are never read. Numpy
columns are stored as base64 raw bytes (exact to the bit). Format 1 blocks are still read.
"""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import numpy as np

from gyre.core._checks import instance
from gyre.core._clock import CLOCK_FIELDS, Elapsed
from gyre.core._errors import describe, explain
from gyre.core._history import Block, History
from gyre.core._host import to_python
from gyre.core._logs import Logs, put
from gyre.engine._binding import Invoker
from gyre.engine._tasks import LoopElement, Task


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

    def restored(self) -> Snapshot | None:
        """The snapshot a by-hand restore (not ``resume=``) loaded, or ``None``: a loop that
        continues its clock warns of the data position it does not bring back. The default: ``None``."""
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


# -- the objects whose state a checkpoint carries --------------------------------------------------

_ARRAY = "__gyre_array__"


def has_state(obj: Any) -> bool:
    """Whether ``obj`` has the ``state_dict``/``load_state_dict`` pair."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def owner_of(fn: Any) -> Any:
    """The object a callback belongs to: the instance behind a bound method, else itself."""
    owner = getattr(fn, "__self__", None)
    return fn if owner is None or isinstance(owner, type) else owner


def _candidates(tasks: Sequence[Task], extra: Iterable[Invoker]) -> Iterable[Any]:
    for task in tasks:
        if task.schedule is not None:
            yield task.schedule
        for invoker in task.invokers:
            yield owner_of(invoker.fn)
    for invoker in extra:
        yield owner_of(invoker.fn)


def table_objects(tasks: Sequence[Task], extra: Iterable[Invoker] = ()) -> tuple[dict[str, Any], list[Checkpointer]]:
    """The resumable objects of a table (and ``extra`` callbacks) by name, and its checkpoints,
    each once, in table order."""
    resumables: dict[str, Any] = {}
    checkpoints: list[Checkpointer] = []
    seen: set[int] = set()
    counts: dict[str, int] = {}
    for obj in _candidates(tasks, extra):
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Checkpointer):
            checkpoints.append(obj)
        elif has_state(obj):
            kind = type(obj).__name__
            counts[kind] = counts.get(kind, 0) + 1
            resumables[kind if counts[kind] == 1 else f"{kind}#{counts[kind]}"] = obj
    return resumables, checkpoints


# -- state dicts: JSON with arrays set aside -------------------------------------------------------


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (str, bytes))


def split_arrays(tree: Any, arrays: dict[str, Any], where: str) -> Any:
    """``tree`` with every array replaced by a reference into ``arrays``, so the rest is JSON."""
    if tree is None or isinstance(tree, (bool, str)):
        return tree
    if isinstance(tree, (Integral, Real)) and not _is_array(tree):
        return _json_number(tree, where)
    if isinstance(tree, np.generic):
        return _json_number(to_python(tree), where)
    if _is_array(tree):
        key = f"a{len(arrays)}"  # orbax item keys: plain names
        arrays[key] = tree
        return {_ARRAY: key}
    if isinstance(tree, Mapping):
        out = {}
        for key, value in tree.items():
            if not isinstance(key, str):
                _not_json(where, f"a key {describe(key)}")
            out[key] = split_arrays(value, arrays, f"{where}.{key}")
        return out
    if isinstance(tree, (list, tuple)):
        return [split_arrays(v, arrays, f"{where}.{i}") for i, v in enumerate(tree)]
    _not_json(where, describe(tree))


def _json_number(value: Any, where: str) -> Any:
    if isinstance(value, bool) or isinstance(value, Integral):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else {"__gyre_float__": repr(value)}


def _not_json(where: str, what: str) -> None:
    raise TypeError(explain(
        f"the state_dict value at {where} cannot be saved in a checkpoint",
        expected="JSON values (dicts with str keys, lists, str, numbers, bool, None) and arrays",
        received=what, fix="return plain values and arrays from state_dict(); flatten a pytree with "
        "jax.tree_util.tree_leaves and rebuild it in load_state_dict"))


def join_arrays(tree: Any, arrays: Mapping[str, Any]) -> Any:
    """The inverse of :func:`split_arrays`."""
    if isinstance(tree, Mapping):
        if set(tree) == {_ARRAY}:
            return arrays[tree[_ARRAY]]
        if set(tree) == {"__gyre_float__"}:
            return float(tree["__gyre_float__"])
        return {k: join_arrays(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [join_arrays(v, arrays) for v in tree]
    return tree


def state_dicts(objects: Mapping[str, Any], arrays: dict[str, Any]) -> dict[str, Any]:
    """The JSON side of every object's ``state_dict()``, arrays set aside into ``arrays``."""
    out = {}
    for name, obj in objects.items():
        values = instance(obj.state_dict(), f"{name}.state_dict()", Mapping, problem=f"{name}.state_dict() must "
                          "return a dict", expected="a dict of JSON values and arrays",
                          fix="return e.g. {'count': self.count} from state_dict()")
        out[name] = split_arrays(values, arrays, name)
    return out


def load_state_dicts(objects: Mapping[str, Any], saved: Mapping[str, Any], arrays: Mapping[str, Any]) -> list[str]:
    """Hands every object its saved ``state_dict``; returns the names with nothing saved."""
    missing = []
    for name, obj in objects.items():
        if name in saved:
            obj.load_state_dict(join_arrays(saved[name], arrays))
        else:
            missing.append(name)
    return missing


# -- the history's files ---------------------------------------------------------------------------

FOLDER = "history"
FORMAT = 2
_HEADER = re.compile(rb'\{"format": \d+, "start": \d+, "stop": (\d+),')


def block_name(start: int) -> str:
    """The file of the block whose first record is ``start``."""
    return f"{FOLDER}/{start:012d}.json"


def _encode_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        array = np.asarray(value)
        return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.tolist()}
    raise TypeError(explain(
        "a history value cannot be saved in a checkpoint",
        expected="numbers, strings or arrays in the logs", received=f"a {type(value).__name__}",
        fix="log arrays or numbers (e.g. gyre.logs().add_metric(name, value))"))


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return np.asarray(value["data"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])
    return value


def _decode_column(column: dict[str, Any]) -> Any:
    if "values" in column:
        return [_decode_value(v) for v in column["values"]]
    flat = np.frombuffer(base64.b64decode(column["bytes"]), dtype=np.dtype(column["dtype"]))
    return flat.reshape((-1, *column["shape"])).copy()


def _column_text(values: Any) -> str:
    """A column as JSON text; a numpy column's as base64 raw bytes, written without the encoder."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        data = base64.b64encode(np.ascontiguousarray(values).tobytes()).decode()
        return f'{{"dtype": {json.dumps(values.dtype.name)}, "shape": {json.dumps(list(values.shape[1:]))}, "bytes": "{data}"}}'
    return json.dumps({"values": [_encode_value(v) for v in values]})


def encode_block(block: Block, start: int) -> bytes:
    """A block of host columns as the history file of records ``start`` on (``json.dumps``'s text)."""
    clocks = ", ".join(f"{json.dumps(f)}: {_column_text(np.asarray(block.clocks[f]))}" for f in CLOCK_FIELDS)
    entries = ", ".join(
        f"[{json.dumps(c)}, {json.dumps(n)}, {json.dumps(None if len(rows) == block.count else rows.tolist())}, "
        f"{_column_text(values)}]"
        for (c, n), (rows, values) in block.entries.items()
    )
    orders = json.dumps([[i, [list(k) for k in keys]] for i, keys in (block.orders or {}).items()])
    return (
        f'{{"format": {FORMAT}, "start": {json.dumps(start)}, "stop": {json.dumps(start + block.count)}, '
        f'"clocks": {{{clocks}}}, "batch_sizes": {json.dumps(list(block.sizes))}, "entries": [{entries}], '
        f'"orders": {orders}}}'
    ).encode()


def new_block(history: History, start: int) -> tuple[str, bytes] | None:
    """The file of the records after ``start`` (``None`` when there are none)."""
    return None if len(history) <= start else (block_name(start), encode_block(history.read(start, wait=True), start))


def _decoded(data: dict[str, Any], keep: int) -> Block:
    """The first ``keep`` records of a history file (format 1 or 2) as a host block."""
    if data["format"] == 1:
        scratch = History()
        for row in data["records"][:keep]:
            logs = Logs()
            for collection, entries in row["logs"].items():
                for name, value in entries.items():
                    put(logs, collection, name, _decode_value(value))
            scratch.commit(Elapsed.from_dict(row["elapsed"]), logs, batch_size=row["batch_size"])
        return scratch.read(0, wait=True)
    count = data["stop"] - data["start"]
    return Block(
        count,
        {f: _decode_column(data["clocks"][f]) for f in CLOCK_FIELDS},
        {
            (c, n): (np.arange(count) if rows is None else np.asarray(rows, np.int64), _decode_column(column))
            for c, n, rows, column in data["entries"]
        },
        data["batch_sizes"],
        {i: tuple(map(tuple, keys)) for i, keys in data["orders"]} or None,
    ).take(0, keep)


def chain_crc(read: Callable[[str], bytes | None], count: int) -> int | None:
    """The running CRC-32 of the blocks holding the first ``count`` records, in their order:
    what a checkpoint's meta holds as ``history_crc``; ``None`` when a block is missing or not one."""
    crc, start = 0, 0
    while start < count:
        data = read(block_name(start))
        header = _HEADER.match(data) if data is not None else None
        if header is None or int(header.group(1)) <= start:
            return None
        crc, start = zlib.crc32(data, crc), int(header.group(1))
    return crc


def load_history(read: Callable[[str], bytes | None], count: int, where: str) -> History:
    """The first ``count`` records, read from the chain of blocks with ``read`` (a file of the
    checkpoint directory, ``None`` when absent); ``where`` names the checkpoint in messages."""
    history, start = History(), 0
    while start < count:
        data = read(block_name(start))
        if data is None:
            raise FileNotFoundError(
                explain(f"the history of {where} is incomplete", received=f"no block starting at record {start}",
                        expected=f"{count} records in {FOLDER}/, in blocks from record 0",
                        fix="resume from another checkpoint, or pass resume=None to start afresh")
            )
        block = json.loads(data)
        history.extend(_decoded(block, count - start))
        start = block["stop"]
    return history
