"""The history in a checkpoint: appended JSON blocks of columns, so a save writes new records only.

Each save writes ``history/<first record, 12 digits>.json``; the checkpoint's meta holds its
record count and the chain's CRC-32, so blocks a dead run wrote later are never read. Numpy
columns are stored as base64 raw bytes (exact to the bit). Format 1 blocks are still read.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from gyre.core._clock import CLOCK_FIELDS, Elapsed
from gyre.core._errors import explain
from gyre.core._history import Block, History
from gyre.core._logs import Logs, put

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
