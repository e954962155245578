"""``EpochMetricFiles``: one JSON file of scalars per phase and epoch, as jax_trainer writes
them (``metrics/<phase>_epoch_NNNN.json``, epochs numbered from 1; epoch 0 is before any training), written off the training
thread.

Each file is one JSON object: ``"epoch"`` and ``"step"`` (the global step, the one x-axis of
every series) first, then the metrics as plain JSON floats (non-finite values as ``NaN`` /
``Infinity``, which Python's ``json`` reads). The values may be device arrays: they are moved
to the host on the writer's thread (:class:`gyre.Writer`'s machinery: one ``device_get`` per
file, errors raised at the next call). Files appear after :meth:`~gyre.Writer.flush`; each is
written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from gyre.core._checks import whole
from gyre.core._errors import describe, explain
from gyre.loggers import Writer
from gyre.trainer._metrics import is_scalar

_PHASE = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED = ("epoch", "step")


class EpochMetricFiles(Writer):
    """Writes ``<directory>/metrics/<phase>_epoch_NNNN.json``, one file per phase and epoch.

    Args:
        directory: the run folder; ``metrics/`` is made in it (on process 0 only).

    Example:
        >>> import json, os, tempfile, jax.numpy as jnp
        >>> with tempfile.TemporaryDirectory() as run:
        ...     files = EpochMetricFiles(run)
        ...     files.write("val", epoch=1, step=50, metrics={"val/acc": jnp.float32(0.75)})
        ...     files.flush()
        ...     print(open(files.path("val", 1)).read())
        ...     files.close()
        {"epoch": 1, "step": 50, "val/acc": 0.75}
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        if isinstance(directory, bytes) or not isinstance(directory, (str, os.PathLike)):
            raise TypeError(explain(
                "EpochMetricFiles needs the run folder",
                expected="a str or pathlib.Path, e.g. 'runs/digits'", received=describe(directory),
                fix="EpochMetricFiles('runs/digits')"))
        self.directory = os.path.join(os.fspath(directory), "metrics")
        super().__init__()

    def path(self, phase: str, epoch: int) -> str:
        """The file of ``phase`` at ``epoch`` (numbered from 1; 0: before training).

        Example:
            >>> import os, tempfile
            >>> with tempfile.TemporaryDirectory() as run, EpochMetricFiles(run) as files:
            ...     os.path.relpath(files.path("train", 3), run)
            'metrics/train_epoch_0003.json'
        """
        return os.path.join(self.directory, f"{phase}_epoch_{epoch:04d}.json")

    def write(self, phase: str, epoch: int, step: int, metrics: Mapping[str, Any]) -> None:
        """Queues the file of ``phase`` at ``epoch``: ``step`` and the scalar ``metrics``
        (numbers or 0-d arrays, by logged name; pass ``scalars_for_writers(...)``). Reads no
        device value; a file written again is replaced.

        Raises:
            ValueError: a bad phase name, a negative epoch (0: before training), a negative step, a metric that
                is not one number, or a metric named ``"epoch"`` or ``"step"``.
            WriterError: an earlier file failed on the writer's thread.

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as run, EpochMetricFiles(run) as files:
            ...     files.write("test", -1, 10, {"test/acc": 1.0})
            Traceback (most recent call last):
            ValueError: EpochMetricFiles.write: epoch must be a whole number >= 0
            ...
        """
        if not isinstance(phase, str) or not _PHASE.match(phase):
            raise ValueError(explain(
                "EpochMetricFiles.write: the phase names the file",
                expected="a lowercase name such as 'train', 'val' or 'test'", received=describe(phase),
                fix="write('val', epoch, step, metrics)"))
        epoch = whole(epoch, "EpochMetricFiles.write: epoch", device=True,
                      fix="pass epoch=1 (epochs are numbered from 1; 0 is before training)")
        step = whole(step, "EpochMetricFiles.write: step", device=True, fix="pass step=500 (the global step)")
        if not isinstance(metrics, Mapping) or not all(isinstance(k, str) for k in metrics):
            raise TypeError(explain(
                "EpochMetricFiles.write takes a dict of metrics",
                expected="a dict from names to numbers, e.g. {'val/acc': acc}", received=describe(metrics),
                fix="pass the epoch's metrics as a dict"))
        for name, value in metrics.items():
            if name in _RESERVED:
                raise ValueError(explain(
                    f"EpochMetricFiles.write: a metric is named {name!r}",
                    expected="metric names other than 'epoch' and 'step' (the file's own keys)",
                    received=f"{name!r}", fix="log the metric under its phase's name, e.g. 'val/acc'"))
            if not is_scalar(value):
                shape = f" (shape {np.shape(value)})" if hasattr(value, "shape") else ""
                raise ValueError(explain(
                    f"EpochMetricFiles.write: metric {name!r} is not one number",
                    expected="numbers or 0-d arrays only", received=describe(value) + shape,
                    fix="drop arrays and CONCAT metrics first: scalars_for_writers(metrics, specs)"))
        self._submit("epoch metrics", phase, epoch, step, dict(metrics))

    def _open(self) -> None:
        os.makedirs(self.directory, exist_ok=True)

    def _do(self, kind: str, args: tuple[Any, ...]) -> None:
        if kind != "epoch metrics":
            super()._do(kind, args)
            return
        phase, epoch, step, metrics = args
        epoch, step, values = jax.device_get((epoch, step, list(metrics.values())))
        record: dict[str, Any] = {"epoch": int(epoch), "step": int(step)}
        record.update((name, float(v)) for name, v in zip(metrics, values, strict=True))
        path = self.path(phase, int(epoch))
        temporary = path + ".tmp"
        with open(temporary, "w") as out:
            json.dump(record, out)
        os.replace(temporary, path)

    def __repr__(self) -> str:
        return f"EpochMetricFiles({os.path.dirname(self.directory)!r})"
