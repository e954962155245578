"""The kpoeppel jax_trainer fork's ``Logger``: step and epoch bookkeeping of a hand-written
training loop, over :func:`~gyre.trainer.update_metrics`, the ``tool_config`` writer and
:class:`~gyre.trainer.EpochMetricFiles`. Unlike the fork, ``config.log_dir`` wins over the
writer's folder, and ``log_image`` / ``log_embedding`` pass their step, mode and postfix on.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from gyre.config._schema import LoggerConfig
from gyre.config._tools import TensorboardConfig, build_tool_writer
from gyre.core._checks import instance
from gyre.core._errors import describe, explain
from gyre.trainer._epoch_files import EpochMetricFiles, write_json
from gyre.trainer._metrics import LogFreq, get_metrics
from gyre.trainer._tool_logger import ToolLoggerInterface

LOGGER = logging.getLogger(__name__)
_MODE = re.compile(r"^(train|(val|test)[a-z0-9_]*)$")


class LoggingModeError(ValueError, AssertionError):
    """An unknown logging mode: a ``ValueError``, and an ``AssertionError`` as the fork's
    ``assert``."""


def _scalar(value: Any) -> Any:
    """A one-element array as a Python number; other arrays ``None``; anything else as is."""
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return np.asarray(jax.device_get(value)).item() if np.size(value) == 1 else None
    return value


class Logger:
    """Step and epoch logging of a training loop, as the fork's ``Logger``.

    ``config`` is a :class:`~gyre.config.LoggerConfig` (or its mapping) whose ``tool_config``
    (default TensorBoard) picks the writer.

    Example:
        >>> import tempfile
        >>> from gyre.config import LoggerConfig, TensorboardConfig
        >>> from gyre.trainer import update_metrics
        >>> run = tempfile.mkdtemp()
        >>> logger = Logger(LoggerConfig(log_dir=run, tool_config=TensorboardConfig(version="0")), {})
        >>> logger.start_epoch(1)
        >>> metrics = update_metrics(None, {"loss": 0.5}, train=True, batch_size=8)
        >>> metrics = logger.log_step(metrics)
        >>> metrics, final = logger.end_epoch(metrics, save_metrics=True)
        >>> final["train/loss"], sorted(os.listdir(os.path.join(run, "metrics")))
        (0.5, ['train_epoch_0001.json'])
        >>> logger.finalize("success")
    """

    def __init__(self, config: LoggerConfig | Mapping[str, Any], full_config: Any) -> None:
        if isinstance(config, Mapping):
            config = LoggerConfig.model_validate(dict(config))
        instance(config, "config", LoggerConfig, problem="Logger takes a LoggerConfig",
                 expected="gyre.config.LoggerConfig(...) or its mapping",
                 fix="Logger(LoggerConfig(log_steps_every=50, tool_config=TensorboardConfig()), full_config)")
        self.config = config
        self.full_config = full_config
        tool = config.tool_config if config.tool_config is not None else TensorboardConfig()
        writer = build_tool_writer(dict(tool), log_dir=config.log_dir or os.getcwd())
        self.logger = ToolLoggerInterface(writer, tool)  # a typed config stays one: .config.save_dir
        self.logging_mode = "train"
        self.step_metrics = self._get_new_metrics_dict()
        self.step_count = 0
        self.full_step_counter = 0
        self.log_steps_every = config.log_steps_every
        self.epoch_metrics: dict[str, Any] = self._get_new_metrics_dict()
        self.epoch_idx = 0
        self.epoch_element_count = 0
        self.epoch_step_count = 0
        self.epoch_log_prefix = ""
        self.epoch_start_time: float | None = None
        self._files: EpochMetricFiles | None = None

    def _get_new_metrics_dict(self) -> defaultdict[str, dict[str, Any]]:
        return defaultdict(lambda: {"value": 0, "mode": "mean"})

    @property
    def log_dir(self) -> str:
        """``config.log_dir``, else the writer's folder, else the current folder."""
        return self.config.log_dir or self.logger.log_dir or os.getcwd()

    def log_metrics(self, metrics: Mapping[str, Any], step: int, log_postfix: str = "") -> None:
        """Writes the scalar ``metrics`` at ``step``, keys suffixed ``_<log_postfix>`` if given."""
        chosen = {}
        for key, value in metrics.items():
            value = _scalar(value)
            if value is not None:
                chosen[f"{key}_{log_postfix}" if log_postfix else key] = value
        if chosen:
            self.logger.log_metrics(chosen, step=step)

    def log_scalar(self, metric_key: str, metric_value: Any, step: int, log_postfix: str = "") -> None:
        """Writes one scalar (see :meth:`log_metrics`)."""
        self.log_metrics({metric_key: metric_value}, step, log_postfix)

    def finalize(self, status: str) -> None:
        """Closes the writer and the metric files."""
        if self._files is not None:
            self._files.close()
        self.logger.finalize(status)

    def start_epoch(self, epoch: int, mode: str = "train") -> None:
        """Starts epoch ``epoch`` of ``mode``: ``"train"``, or ``"val..."`` or ``"test..."``."""
        if not isinstance(mode, str) or not _MODE.match(mode):
            raise LoggingModeError(explain(
                "Logger.start_epoch: unknown logging mode",
                expected="'train', or a lowercase name starting with 'val' or 'test'", received=describe(mode),
                fix="logger.start_epoch(epoch, mode='val')"))
        self.logging_mode = mode
        self.epoch_idx = epoch
        self._reset_epoch_metrics()

    def log_step(self, metrics: Mapping[str, Any]) -> Any:
        """Counts a step; every ``log_steps_every`` steps writes and resets the step entries."""
        self.epoch_step_count += 1
        if self.logging_mode == "train" and self.log_steps_every > 0:
            self.step_count += 1
            self.full_step_counter += 1
            if self.step_count >= self.log_steps_every:
                metrics, step_metrics = get_metrics(metrics, log_freq=LogFreq.STEP, reset_metrics=True)
                self.log_metrics(self._finalize_metrics(step_metrics), step=self.full_step_counter, log_postfix="step")
                self._reset_step_metrics()
        return metrics

    def _reset_step_metrics(self) -> None:  # the fork's name: its tests call it
        self.step_count = 0

    def _reset_epoch_metrics(self) -> None:
        self.epoch_metrics = {}
        self.epoch_step_count = 0
        self.epoch_start_time = time.time()

    def log_epoch_scalar(self, key: str, value: Any) -> None:
        """Adds a scalar to the current epoch's metrics (written at :meth:`end_epoch`)."""
        self.epoch_metrics[key] = value

    def _finalize_metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        final = {}
        for key, value in metrics.items():
            scalar = _scalar(value)
            final[key if "/" in key else f"{self.logging_mode}/{key}"] = value if scalar is None else scalar
        return final

    def end_epoch(self, metrics: Mapping[str, Any], save_metrics: bool = False) -> tuple[Any, dict[str, Any]]:
        """Writes the epoch's metrics (and with ``save_metrics``
        ``metrics/<mode>_epoch_NNNN.json``).

        Returns ``metrics`` with the epoch entries reset, and the epoch's metrics by logged name.
        """
        self.log_epoch_scalar("time", time.time() - (self.epoch_start_time or time.time()))
        metrics, epoch_metrics = get_metrics(metrics, log_freq=LogFreq.EPOCH, reset_metrics=True)
        epoch_metrics.update(self.epoch_metrics)
        final = self._finalize_metrics(epoch_metrics)
        self.log_metrics(final, step=self.epoch_idx, log_postfix="epoch" if self.logging_mode == "train" else "")
        if save_metrics:
            self._epoch_file(final)
        if self.logging_mode == "train" and 0 < self.epoch_step_count < self.log_steps_every:
            metrics, _ = get_metrics(metrics, log_freq=LogFreq.STEP, reset_metrics=True)
            self._reset_step_metrics()
        self._reset_epoch_metrics()
        return metrics, final

    def _epoch_file(self, final: Mapping[str, Any]) -> None:
        if self._files is None:
            self._files = EpochMetricFiles(self.log_dir)
        scalars = {k: v for k, v in final.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._files.write(self.logging_mode, self.epoch_idx, self.full_step_counter, scalars)
        self._files.flush()

    def save_metrics(self, filename: str, metrics: Mapping[str, Any]) -> None:
        """Writes the numbers, strings and booleans of ``metrics`` to
        ``<log_dir>/metrics/<filename>.json``."""
        if not isinstance(filename, str) or not filename or os.sep in filename:
            raise ValueError(explain(
                "Logger.save_metrics: the file's name",
                expected="a name without folders or suffix, e.g. 'val_best'", received=describe(filename),
                fix="logger.save_metrics('val_best', metrics)"))
        kept = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
        folder = os.path.join(self.log_dir, "metrics")
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, f"{filename}.json"), kept, indent=4)

    def log_image(
        self, key: str, image: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes an image (HWC) at ``step`` (default: the global step)."""
        self.logger.log_image(key=key, image=np.asarray(jax.device_get(image)),
                              **self._at(step, log_postfix, logging_mode))

    def log_figure(
        self, key: str, figure: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes a matplotlib figure at ``step`` (default: the global step)."""
        self.logger.log_figure(key, figure=figure, **self._at(step, log_postfix, logging_mode))

    def log_embedding(
        self, key: str, encodings: Any, step: int | None = None, metadata: Any = None, images: Any = None,
        log_postfix: str = "", logging_mode: str | None = None,
    ) -> None:
        """Writes an embedding for TensorBoard's projector (see :class:`ToolLoggerInterface`)."""
        self.logger.log_embedding(key, encodings=encodings, metadata=metadata, label_img=images,
                                  **self._at(step, log_postfix, logging_mode))

    def _at(self, step: int | None, log_postfix: str, logging_mode: str | None) -> dict[str, Any]:
        """Where a media call writes: ``step`` and ``logging_mode`` default to the logger's own."""
        return {"step": self.full_step_counter if step is None else step, "log_postfix": log_postfix,
                "logging_mode": self.logging_mode if logging_mode is None else logging_mode}
