"""``TensorBoardWriter``: TensorBoard event files, written with tensorboardX's protos and
``RecordWriter`` (no TensorFlow, no ``SummaryWriter`` thread); the blocks :func:`gyre.write_to`
hands over are encoded together (:class:`ScalarEvents`), byte for byte as tensorboardX would.

Events of steps logging the same scalars differ only in a few bytes (wall time, step, each
number): one template event is serialized with tensorboardX's protos, and every step is
written by setting those bytes in a numpy row; the data's CRC follows from the template's by
linearity. A template is checked byte for byte against tensorboardX's framing first; if it
differs, :meth:`ScalarEvents.encode` returns ``None`` and the caller writes event by event.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from typing import Any

import numpy as np

from gyre.callbacks._wandb_logger import scalar_runs
from gyre.core._checks import path, require
from gyre.core._errors import keywords_checked
from gyre.core._history import Block
from gyre.loggers._writer import Writer

_MASK_DELTA = 0xA282EAD8
_TEMPLATES = 64  # events kept ready per writer, one per set of scalar names
_WALL = 1234567890.0625  # sentinel values whose encodings are found in the template
_STEPS = {0: 0, **{k: (1 << (7 * k - 1)) + 0x15 for k in range(1, 10)}}  # a step per varint length


def _masked(crc: Any) -> Any:
    """TFRecord's masked CRC, for a Python int or an array of uint32."""
    if isinstance(crc, np.ndarray):
        return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)
    crc &= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def varint_length(steps: np.ndarray) -> np.ndarray:
    """Bytes of each step's varint in a serialized event (0 for step 0, which proto3 omits)."""
    steps = np.asarray(steps, np.int64)
    length = (steps > 0).astype(np.int64)
    for k in range(1, 10):
        length += steps >= (1 << (7 * k))
    return length


def _find(data: bytes, piece: bytes) -> int | None:
    at = data.find(piece)
    return None if at < 0 or data.find(piece, at + 1) >= 0 else at


def _record(data: bytes, crc32c: Any) -> bytes:
    """``data`` framed as tensorboardX's RecordWriter frames it."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", _masked(crc32c(header))) + data + struct.pack("<I", _masked(crc32c(data)))


class _Template:
    """One serialized event and where its changing bytes are."""

    def __init__(self, data: bytes, wall: int, step: int, k: int, slots: list[int], crc32c: Any) -> None:
        self.data = np.frombuffer(data, np.uint8)
        self.wall, self.step, self.k, self.slots = wall, step, k, slots
        self.places = np.array(
            [*range(wall, wall + 8), *range(step, step + k), *(s + i for s in slots for i in range(4))], np.int64)
        size = len(data)
        self.header = np.frombuffer(_record(data, crc32c)[:12], np.uint8)  # the length and its masked CRC
        self.crc = crc32c(data)
        zeros = bytearray(size)
        base = crc32c(bytes(zeros))
        bits = np.zeros((len(self.places), 8), np.uint32)
        for j, place in enumerate(self.places.tolist()):
            for b in range(8):
                zeros[place] = 1 << b
                bits[j, b] = crc32c(bytes(zeros)) ^ base
            zeros[place] = 0
        self.table = np.zeros((len(self.places), 256), np.uint32)
        byte = np.arange(256)
        for b in range(8):
            self.table[:, (byte >> b) & 1 == 1] ^= bits[:, b : b + 1]

    def encode(self, steps: np.ndarray, dates: np.ndarray, values: np.ndarray) -> bytes:
        n, size = len(steps), len(self.data)
        out = np.empty((n, 12 + size + 4), np.uint8)
        out[:, :12] = self.header
        body = out[:, 12 : 12 + size]
        body[:] = self.data
        body[:, self.wall : self.wall + 8] = np.ascontiguousarray(dates, "<f8").view(np.uint8).reshape(n, 8)
        for i in range(self.k):
            more = 0x80 if i < self.k - 1 else 0
            body[:, self.step + i] = ((steps >> (7 * i)) & 0x7F) | more
        with np.errstate(over="ignore"):  # beyond float32's range: inf, as protobuf stores it
            numbers = np.ascontiguousarray(values, "<f4").view(np.uint8).reshape(n, -1)
        for j, slot in enumerate(self.slots):
            body[:, slot : slot + 4] = numbers[:, 4 * j : 4 * j + 4]
        delta = body[:, self.places] ^ self.data[self.places]
        crc = np.bitwise_xor.reduce(self.table[np.arange(len(self.places)), delta], axis=1) ^ np.uint32(self.crc)
        out[:, 12 + size :] = np.ascontiguousarray(_masked(crc.astype(np.uint32)), "<u4").view(np.uint8).reshape(n, 4)
        return out.tobytes()


class ScalarEvents:
    """Encodes runs of scalar events (see the module docs); one per event file writer."""

    def __init__(self, event: Any, crc32c: Any) -> None:
        self._event = event
        self._crc32c = crc32c
        self._templates: dict[tuple[tuple[str, ...], int], _Template | None] = {}

    def encode(self, names: tuple[str, ...], steps: np.ndarray, dates: np.ndarray, values: np.ndarray) -> bytes | None:
        """The records of one event per row (``values[i]`` for ``names`` at ``steps[i]``,
        wall time ``dates[i]``), in order; ``None`` when the template cannot be used."""
        steps = np.asarray(steps, np.int64)
        lengths = varint_length(steps)
        cuts = np.flatnonzero(lengths[1:] != lengths[:-1]) + 1
        parts = []
        for start, stop in zip([0, *cuts.tolist()], [*cuts.tolist(), len(steps)], strict=True):
            template = self._template(names, int(lengths[start]))
            if template is None:
                return None
            parts.append(template.encode(steps[start:stop], dates[start:stop], values[start:stop]))
        return b"".join(parts)

    def _serialize(self, names: tuple[str, ...], step: int, wall: float, numbers: list[float]) -> bytes:
        event = self._event(wall_time=wall, step=step)
        for name, number in zip(names, numbers, strict=True):
            event.summary.value.add(tag=name, simple_value=number)
        return event.SerializeToString()

    def _template(self, names: tuple[str, ...], k: int) -> _Template | None:
        key = (names, k)
        if key not in self._templates:
            if len(self._templates) >= _TEMPLATES:  # names that keep changing: start afresh
                self._templates.clear()
            self._templates[key] = self._build(names, k)
        return self._templates[key]

    def _build(self, names: tuple[str, ...], k: int) -> _Template | None:
        sentinels = [float(np.float32(1.0 + (i + 1) / 1024 + 1 / 3)) for i in range(len(names))]
        step = _STEPS[k]
        data = self._serialize(names, step, _WALL, sentinels)
        wall = _find(data, b"\x09" + struct.pack("<d", _WALL))
        at = _find(data, b"\x10" + _varint(step)) if k else 0
        slots = [_find(data, b"\x15" + struct.pack("<f", s)) for s in sentinels]
        if wall is None or at is None or None in slots:
            return None
        template = _Template(data, wall + 1, at + 1, k, [s + 1 for s in slots], self._crc32c)  # type: ignore[operator]
        return template if self._agrees(template, names, step) else None

    def _agrees(self, template: _Template, names: tuple[str, ...], step: int) -> bool:
        """Whether the template encodes two events as tensorboardX would serialize and frame them."""
        rng = np.random.default_rng(len(names))
        steps = np.array([step, step + 1 if step else 0], np.int64)  # one varint length
        dates = np.array([1.7e9 + 0.123, 1.7e9 + 98.5])
        values = rng.normal(size=(2, len(names))).astype(np.float32).astype(np.float64)
        mine = template.encode(steps, dates, values)
        theirs = b"".join(
            _record(self._serialize(names, int(s), float(d), v.tolist()), self._crc32c)
            for s, d, v in zip(steps, dates, values, strict=True))
        return mine == theirs


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


_FILES = itertools.count()  # two writers of one process never share an event file; padded, names sort in order


def _tensorflow_bins() -> list[float]:
    """TensorFlow's default histogram bucket edges (what SummaryWriter's bins='tensorflow' uses)."""
    edges, v = [], 1e-12
    while v < 1e20:
        edges.append(v)
        v *= 1.1
    return [-e for e in reversed(edges)] + [0.0] + edges


_TENSORFLOW_BINS = _tensorflow_bins()


class TensorBoardWriter(Writer):
    """Writes its own TensorBoard event file into ``logdir``, created if missing (``pip install
    'gyre[tensorboard]'``); events reach the disk at ``flush()``, ``close()`` and when the buffer fills.

    Raises:
        ImportError: tensorboardX is not installed.

    Example:
        >>> import gyre, os, tempfile
        >>> with tempfile.TemporaryDirectory() as logdir:
        ...     with gyre.TensorBoardWriter(logdir) as writer:
        ...         writer.write_scalars(0, {"loss": 1.0})
        ...         writer.write_texts(0, {"note": "first step"})
        ...     [name.startswith("events.out.tfevents") for name in os.listdir(logdir)]
        [True]
    """

    kinds = frozenset({"scalars", "histograms", "images", "texts", "hparams"})

    @keywords_checked  # log_dir= (torch's SummaryWriter) names logdir=
    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        self.logdir = path(logdir, "TensorBoardWriter needs a folder for its event files",
                           expected="a str or pathlib.Path, e.g. 'runs/tensorboard'",
                           fix="gyre.TensorBoardWriter('runs/tensorboard')")
        self._w: Any = None
        self._templates: dict[tuple[str, ...], tuple[Any, list[Any]]] = {}
        self._encoder: ScalarEvents | None = None  # made with the event file
        self._series: set[str] = set()  # the scalar names written: a curve write_hparams leaves alone
        super().__init__()

    def _open(self) -> None:
        require("tensorboardX", extra="tensorboard", who="TensorBoardWriter")
        from tensorboardX.crc32c import crc32c
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.record_writer import RecordWriter

        if "://" not in self.logdir:  # s3:// and gs:// folders are tensorboardX's to open
            os.makedirs(self.logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILES):06d}"
        self._w = RecordWriter(os.path.join(self.logdir, name))
        self._encoder = ScalarEvents(Event, crc32c)
        self._event(file_version="brain.Event:2")
        self._w.flush()

    def _event(self, **fields: Any) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self._w.write(Event(wall_time=time.time(), **fields).SerializeToString())

    def _scalars(self, step: int, values: dict[str, float]) -> None:  # one event per set of names, reused
        names = tuple(values)
        self._series.update(names)
        if names not in self._templates:
            from tensorboardX.proto.event_pb2 import Event

            if len(self._templates) >= _TEMPLATES:  # names that keep changing: start afresh
                self._templates.clear()
            event = Event()
            self._templates[names] = (event, [event.summary.value.add(tag=name) for name in names])
        event, slots = self._templates[names]
        event.step = step
        event.wall_time = time.time()
        for slot, value in zip(slots, values.values(), strict=True):
            slot.simple_value = float(value)
        self._w.write(event.SerializeToString())

    def _scalar_block(self, block: Block, keep: np.ndarray | None) -> None:
        # each event's wall time is its step's own (the history's clock), not the moment it is written
        out, encoder = getattr(self._w, "_writer", None), self._encoder  # the file under the framing
        for _, names, steps, dates, values in scalar_runs(block, keep):
            self._series.update(names)
            data = None if out is None or encoder is None else encoder.encode(names, steps, dates, values)
            if data is None:
                for step, row in zip(steps.tolist(), values.tolist(), strict=True):
                    self._scalars(step, dict(zip(names, row, strict=True)))
            else:
                out.write(data)

    def _histograms(self, step: int, arrays: dict[str, np.ndarray], num_buckets: int | None) -> None:
        from tensorboardX.summary import histogram

        for name, array in arrays.items():
            values = np.asarray(array, np.float64).ravel()
            self._event(step=step, summary=histogram(name, values, num_buckets or _TENSORFLOW_BINS))

    def _images(self, step: int, images: dict[str, np.ndarray]) -> None:
        from tensorboardX.summary import image

        for name, batch in images.items():
            self._event(step=step, summary=image(name, batch, dataformats="NHWC"))

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        from tensorboardX.summary import text

        for name, value in texts.items():
            self._event(step=step, summary=text(name, value))

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        from tensorboardX.summary import hparams

        metrics = metrics or {}
        for summary in hparams(params, metrics):
            self._event(summary=summary)
        # a metric with a curve already (fit's accuracy_test) is read from its last point; written
        # again at step 0 it put the final value at the curve's start
        if new := {k: v for k, v in metrics.items() if k not in self._series}:
            self._scalars(0, new)

    def _purge(self, step: int) -> None:
        # tensorboardX's SummaryWriter(purge_step=step): TensorBoard drops the events of earlier files
        # (and earlier in this one) at step or later when it reads this SessionLog START
        from tensorboardX.proto.event_pb2 import SessionLog

        self._event(step=step, session_log=SessionLog(status=SessionLog.START))

    def _flush(self) -> None:
        self._w.flush()

    def _close(self) -> None:
        self._w.close()

    def __repr__(self) -> str:
        return f"TensorBoardWriter({self.logdir!r})"
