"""The kpoeppel jax_trainer fork's ``ToolLoggerInterface``: its method names over one gyre
:class:`~gyre.loggers.Writer`; tags are ``<logging_mode>/<key><log_postfix>``, as the fork's."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from gyre.core._checks import instance
from gyre.loggers import Writer
from gyre.trainer._media import figure_image, write_embedding

LOGGER = logging.getLogger(__name__)


def _tag(key: str, log_postfix: str, logging_mode: str | None) -> str:
    return f"{logging_mode}/{key}{log_postfix}" if logging_mode else f"{key}{log_postfix}"


class ToolLoggerInterface:
    """The fork's tool-logger methods over a gyre writer; subclass it to change one.

    ``config`` is the ``tool_config`` section the writer was built from, kept for reading.

    Example:
        >>> import io, gyre
        >>> out = io.StringIO()
        >>> tool = ToolLoggerInterface(gyre.loggers.ConsoleWriter(out))
        >>> tool.log_metrics({"train/loss": 0.5}, step=3)
        >>> tool.finalize("success")
        >>> print(out.getvalue(), end="")
        step 3: train/loss=0.5
    """

    def __init__(self, writer: Writer, config: Mapping[str, Any] | None = None) -> None:
        instance(writer, "writer", Writer, problem="ToolLoggerInterface writes through a gyre writer",
                 expected="a gyre.loggers.Writer (TensorBoardWriter, WandbWriter, ...)",
                 fix="build one from a tool_config section: gyre.config.build_tool_writer(section, log_dir=...)")
        self.writer = writer
        self.config = config

    @property
    def log_dir(self) -> str | None:
        """The writer's folder (TensorBoard's event folder, W&B's ``dir``), or ``None``."""
        folder = getattr(self.writer, "logdir", None) or getattr(self.writer, "dir", None)
        return None if folder is None else os.fspath(folder)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Writes scalar metrics at ``step``."""
        self.writer.write_scalars(step, metrics)

    def log_image(
        self, key: str, image: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes one image (HWC) at ``step`` (``None``: 0)."""
        self.writer.write_images(step or 0, {_tag(key, log_postfix, logging_mode): np.asarray(image)})

    def log_figure(
        self, key: str, figure: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes a matplotlib figure, drawn as an image, at ``step`` (``None``: 0)."""
        self.writer.write_images(step or 0, {_tag(key, log_postfix, logging_mode): figure_image(figure)})

    def log_embedding(
        self, key: str, encodings: Any, metadata: Any = None, label_img: Any = None, step: int | None = None,
        log_postfix: str = "", logging_mode: str | None = None,
    ) -> None:
        """Writes an embedding for TensorBoard's projector in the writer's folder, if it has one."""
        folder = getattr(self.writer, "logdir", None)
        if folder is None:
            LOGGER.warning("Embedding logging is only implemented for TensorBoard (got %s).", type(self.writer).__name__)
            return
        write_embedding(folder, _tag(key, log_postfix, logging_mode), step or 0, encodings, metadata, label_img)

    def finalize(self, status: str) -> None:
        """Closes the writer (``status``, e.g. ``"success"``, is the fork's argument)."""
        self.writer.close()
