"""``TensorBoardWriter``: TensorBoard event files, written with tensorboardX's protos and
``RecordWriter`` (no TensorFlow, no ``SummaryWriter`` thread); the blocks :func:`gyre.write_to`
hands over are encoded together (:mod:`gyre.loggers._tfrecord`), byte for byte as tensorboardX would.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from typing import Any

import numpy as np

from gyre.callbacks._wandb_logger import scalar_runs
from gyre.core._checks import path, require
from gyre.core._history import Block
from gyre.loggers._tfrecord import _TEMPLATES, ScalarEvents
from gyre.loggers._writer import Writer

_FILES = itertools.count()  # two writers of one process never share an event file


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

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        self.logdir = path(logdir, "TensorBoardWriter needs a folder for its event files",
                           expected="a str or pathlib.Path, e.g. 'runs/tensorboard'",
                           fix="gyre.TensorBoardWriter('runs/tensorboard')")
        self._w: Any = None
        self._templates: dict[tuple[str, ...], tuple[Any, list[Any]]] = {}
        self._encoder: ScalarEvents | None = None  # made with the event file
        super().__init__()

    def _open(self) -> None:
        require("tensorboardX", extra="tensorboard", who="TensorBoardWriter")
        from tensorboardX.crc32c import crc32c
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.record_writer import RecordWriter

        if "://" not in self.logdir:  # s3:// and gs:// folders are tensorboardX's to open
            os.makedirs(self.logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILES)}"
        self._w = RecordWriter(os.path.join(self.logdir, name))
        self._encoder = ScalarEvents(Event, crc32c)
        self._event(file_version="brain.Event:2")
        self._w.flush()

    def _event(self, **fields: Any) -> None:
        from tensorboardX.proto.event_pb2 import Event

        self._w.write(Event(wall_time=time.time(), **fields).SerializeToString())

    def _scalars(self, step: int, values: dict[str, float]) -> None:  # one event per set of names, reused
        names = tuple(values)
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
        if metrics:
            self._scalars(0, metrics)

    def _flush(self) -> None:
        self._w.flush()

    def _close(self) -> None:
        self._w.close()

    def __repr__(self) -> str:
        return f"TensorBoardWriter({self.logdir!r})"
