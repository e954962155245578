"""The history in a checkpoint: appended blocks of JSON, so a save costs its new records only.

Each save of a loop writes the records committed since its previous save as one file,
``history/<first record, 12 digits>.json``, and the checkpoint records how many records belong
to it. A resumed loop reads the chain of blocks from record 0 (each block names where the next
one starts) up to that count and truncates the last one: blocks a dead run wrote after its
last good checkpoint are never read, and are overwritten by the resumed run's own. The
checkpoint's meta also holds the running CRC-32 of the blocks it counts (:func:`chain_crc`),
checked before it is loaded.

Values keep their dtype and shape (``{"dtype": "float32", "shape": [], "data": 0.25}``);
Python numbers stay Python numbers. JSON holds NaN and infinities as ``NaN``/``Infinity``.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from gyre.core._clock import _FIELDS as CLOCK_FIELDS
from gyre.core._clock import Elapsed
from gyre.core._columns import Block, as_list
from gyre.core._errors import explain
from gyre.core._history import History, Record
from gyre.core._logs import Logs

FOLDER = "history"
FORMAT = 1


def block_name(start: int) -> str:
    """The file of the block whose first record is ``start``.

    Example:
        >>> block_name(120)
        'history/000000000120.json'
    """
    return f"{FOLDER}/{start:012d}.json"


_DTYPE_NAMES: dict[Any, str] = {}  # numpy's dtype.name costs microseconds; a save names thousands


def _dtype_name(dtype: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


def _encode_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        array = np.asarray(value)
        return {"dtype": _dtype_name(array.dtype), "shape": list(array.shape), "data": array.tolist()}
    raise TypeError(
        explain(
            "a history value cannot be saved in a checkpoint",
            expected="numbers, strings or arrays in the logs",
            received=f"a {type(value).__name__}",
            fix="log arrays or numbers (e.g. gyre.logs().add_metric(name, value))",
        )
    )


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return np.asarray(value["data"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])
    return value


def encode_block(records: Iterable[Record], start: int, stop: int) -> bytes:
    """Records ``start`` to ``stop - 1`` as one JSON block.

    Example:
        >>> h = History(); h.commit(Elapsed(steps=0), Logs().add_loss("loss", np.float32(0.5)))
        >>> json.loads(encode_block(h.records(0, 1), 0, 1))["records"][0]["logs"]
        {'losses': {'loss': {'dtype': 'float32', 'shape': [], 'data': 0.5}}}
    """
    rows = []
    for record in records:
        logs = {c: {n: _encode_value(v) for n, v in entries.items()} for c, entries in record.logs.items()}
        rows.append({"elapsed": record.elapsed.to_dict(), "batch_size": record.batch_size, "logs": logs})
    return _dumped(rows, start, stop)


def _dumped(rows: list[dict[str, Any]], start: int, stop: int) -> bytes:
    if len(rows) != stop - start:
        raise ValueError(f"history block {start}..{stop} holds {len(rows)} records")
    return json.dumps({"format": FORMAT, "start": start, "stop": stop, "records": rows}).encode()


def _encoded_column(column: Any, keep: np.ndarray) -> list[Any]:
    """The values of a host column at the rows ``keep``, encoded as :func:`_encode_value`
    encodes each of them, but a stacked column's dtype and shape once for all its rows."""
    if isinstance(column, np.ndarray):
        if column.ndim == 1 and column.dtype == np.float64:
            return column[keep].tolist()  # its rows are np.float64, a float: written as numbers
        dtype, shape = _dtype_name(column.dtype), list(column.shape[1:])
        return [{"dtype": dtype, "shape": shape, "data": data} for data in column[keep].tolist()]
    return [_encode_value(column[k]) for k in keep.tolist()]


def _rows(block: Block, first: int, last: int) -> list[dict[str, Any]]:
    """Records ``first`` to ``last - 1`` of a host block as the rows of a history file,
    built column by column (what :func:`encode_block` builds from records, a record at a time)."""
    logs: list[dict[str, Any]] = [{} for _ in range(last - first)]
    for shape, rows, columns in block.groups:
        keep = np.flatnonzero((rows >= first) & (rows < last))
        if not len(keep):
            continue
        values = iter([_encoded_column(column, keep) for column in columns])
        at = (rows[keep] - first).tolist()
        for collection, names in shape:
            entries = [(name, next(values)) for name in names]
            for j, i in enumerate(at):
                logs[i][collection] = {name: encoded[j] for name, encoded in entries}
    clocks = [as_list(column[first:last]) for column in block.clocks]
    sizes = as_list(block.batch_sizes[first:last])
    return [
        {"elapsed": dict(zip(CLOCK_FIELDS, clock, strict=True)), "batch_size": size, "logs": lg}
        for clock, size, lg in zip(zip(*clocks, strict=True), sizes, logs, strict=True)
    ]


def new_block(history: History, start: int) -> tuple[str, bytes] | None:
    """The block of the records after ``start`` (``None`` when there are none): the bytes
    :func:`encode_block` gives for those records, built from the history's host columns.

    Example:
        >>> h = History(); h.commit(Elapsed(steps=0), Logs().add_loss("loss", np.float32(0.5)))
        >>> name, data = new_block(h, 0)
        >>> name, data == encode_block(h.records(0, 1), 0, 1)
        ('history/000000000000.json', True)
    """
    stop = len(history)
    if stop <= start:
        return None
    rows = [row for block, first, last in history.host_slices(start, stop) for row in _rows(block, first, last)]
    return block_name(start), _dumped(rows, start, stop)


_HEADER = re.compile(rb'\{"format": \d+, "start": \d+, "stop": (\d+),')


def chain_crc(read: Callable[[str], bytes | None], count: int) -> int | None:
    """The running CRC-32 of the blocks holding the first ``count`` records, in their order
    (``zlib.crc32`` of their bytes, one after the other): what a checkpoint's meta holds as
    ``history_crc``; ``None`` when a block is missing or not one.

    Example:
        >>> h = History(); h.commit(Elapsed(steps=0), Logs().add_metric("m", 1))
        >>> name, data = new_block(h, 0)
        >>> chain_crc({name: data}.get, 1) == zlib.crc32(data), chain_crc({}.get, 1)
        (True, None)
    """
    crc, start = 0, 0
    while start < count:
        data = read(block_name(start))
        header = _HEADER.match(data) if data is not None else None
        if header is None or int(header.group(1)) <= start:
            return None
        crc, start = zlib.crc32(data, crc), int(header.group(1))
    return crc


def load_history(read: Callable[[str], bytes | None], count: int, where: str) -> History:
    """The first ``count`` records, read from the chain of blocks.

    Args:
        read: reads a file of the checkpoint directory (``None`` when absent).
        count: the records that belong to the checkpoint.
        where: the checkpoint, for messages.

    Example:
        >>> h = History()
        >>> for i in range(3):
        ...     h.commit(Elapsed(steps=i), Logs().add_metric("m", i))
        >>> files = dict([new_block(h, 0)])
        >>> load_history(files.get, 2, "ckpt").collect("m")
        [0, 1]
    """
    history = History()
    start = 0
    while start < count:
        data = read(block_name(start))
        if data is None:
            raise FileNotFoundError(
                explain(
                    f"the history of {where} is incomplete",
                    expected=f"{count} records in {FOLDER}/, in blocks from record 0",
                    received=f"no block starting at record {start}",
                    fix="resume from another checkpoint, or pass resume=None to start afresh",
                )
            )
        block = json.loads(data)
        for row in block["records"][: count - start]:
            logs = Logs()
            for collection, entries in row["logs"].items():
                for name, value in entries.items():
                    logs.add_entry(collection, name, _decode_value(value))
            history.commit(Elapsed.from_dict(row["elapsed"]), logs, batch_size=row["batch_size"])
        start = block["stop"]
    history.flush()
    return history
