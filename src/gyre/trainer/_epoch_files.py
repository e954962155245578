"""``EpochMetricFiles``: jax_trainer's ``metrics/<phase>_epoch_NNNN.json`` files, written off the
training thread; each holds ``"epoch"``, ``"step"`` and the scalar metrics as floats."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from gyre.core._checks import path as folder_path
from gyre.core._checks import whole
from gyre.core._errors import describe, explain
from gyre.loggers import Writer
from gyre.trainer._metrics import is_scalar

PHASE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # a phase, or a named loader's mode (val_ood)
_RESERVED = ("epoch", "step")


def write_json(path: str, record: Any, **options: Any) -> None:
    """Writes ``record`` as JSON to ``path`` through a temporary file (no half-written file)."""
    with open(path + ".tmp", "w") as out:
        json.dump(record, out, **options)
    os.replace(path + ".tmp", path)


class EpochMetricFiles(Writer):
    """Writes ``<directory>/metrics/<phase>_epoch_NNNN.json``, one file per phase and epoch; see
    :meth:`flush`.

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
        directory = folder_path(directory, "EpochMetricFiles needs the run folder",
                                expected="a str or pathlib.Path, e.g. 'runs/digits'", fix="EpochMetricFiles('runs/digits')")
        self.directory = os.path.join(directory, "metrics")
        super().__init__()

    def path(self, phase: str, epoch: int) -> str:
        """The file of ``phase`` at ``epoch`` (numbered from 1; 0: before training)."""
        return os.path.join(self.directory, f"{phase}_epoch_{epoch:04d}.json")

    def write(self, phase: str, epoch: int, step: int, metrics: Mapping[str, Any]) -> None:
        """Queues the file of ``phase`` at ``epoch`` with ``step`` and the scalar ``metrics``; reads
        no device value.

        Raises:
            ValueError: a bad phase name, epoch or step, a metric that is not one number, or
                one named ``"epoch"`` or ``"step"``.
            WriterError: an earlier file failed on the writer's thread.
        """
        if not isinstance(phase, str) or not PHASE_NAME.match(phase):
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
        write_json(self.path(phase, int(epoch)), record)

    def __repr__(self) -> str:
        return f"EpochMetricFiles({os.path.dirname(self.directory)!r})"
