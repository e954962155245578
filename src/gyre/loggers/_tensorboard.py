"""``TensorBoardWriter``: TensorBoard event files, written with tensorboardX (no TensorFlow)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gyre.core._errors import describe, explain
from gyre.loggers._writer import Writer, require


class TensorBoardWriter(Writer):
    """Writes TensorBoard event files into ``logdir`` (``pip install 'gyre[tensorboard]'``).

    Scalars, histograms, images, texts and hyperparameters (the HParams plugin's summaries,
    in the same event file) are written on the writer's thread; ``tensorboard --logdir
    <logdir>`` shows them.

    Args:
        logdir: the folder of the event files (created if missing).
        flush_secs: seconds between tensorboardX's own flushes to disk.

    Raises:
        ImportError: tensorboardX is not installed (the message names the extra).

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

    def __init__(self, logdir: str | os.PathLike[str], *, flush_secs: int = 30) -> None:
        if isinstance(logdir, bytes) or not isinstance(logdir, (str, os.PathLike)) or not os.fspath(logdir):
            raise TypeError(
                explain(
                    "TensorBoardWriter needs a folder for its event files",
                    expected="a str or pathlib.Path, e.g. 'runs/tensorboard'",
                    received=describe(logdir),
                    fix="gyre.TensorBoardWriter('runs/tensorboard')",
                )
            )
        self.logdir = os.fspath(logdir)
        self.flush_secs = flush_secs
        self._w: Any = None
        super().__init__()

    def _open(self) -> None:
        tbx = require("tensorboardX", extra="tensorboard", who="TensorBoardWriter")
        self._w = tbx.SummaryWriter(self.logdir, flush_secs=self.flush_secs)

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self._w.add_scalar(name, float(value), step)

    def _histograms(self, step: int, arrays: dict[str, np.ndarray], num_buckets: int | None) -> None:
        for name, array in arrays.items():
            self._w.add_histogram(name, np.asarray(array, np.float64).ravel(), step, bins=num_buckets or "tensorflow")

    def _images(self, step: int, images: dict[str, np.ndarray]) -> None:
        for name, batch in images.items():
            self._w.add_images(name, batch, step, dataformats="NHWC")

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        for name, text in texts.items():
            self._w.add_text(name, text, step)

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        from tensorboardX.summary import hparams

        metrics = metrics or {}
        experiment, start, end = hparams(params, metrics)
        events = self._w._get_file_writer()
        for summary in (experiment, start, end):
            events.add_summary(summary)
        for name, value in metrics.items():
            self._w.add_scalar(name, float(value), 0)

    def _flush(self) -> None:
        self._w.flush()

    def _close(self) -> None:
        self._w.close()

    def __repr__(self) -> str:
        return f"TensorBoardWriter({self.logdir!r})"
