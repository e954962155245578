"""Tool loggers: ``trainer.logger.tool_config`` sections built into gyre writers, under
jax_trainer's names.

Each writes into ``save_dir`` (default: a folder of the run) ``/name/version``, empty parts left
out; ``version`` ``None`` with ``use_timestamp_version`` is the time now. ``log_dir`` is the
trainer's, never the config's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from gyre.config._components import lookup
from gyre.config._registry import register_logger
from gyre.config._schema import validate_tool_section
from gyre.config._tool_configs import timestamp
from gyre.core._checks import path
from gyre.loggers._mlflow import MLflowWriter
from gyre.loggers._plain_files import CSVWriter
from gyre.loggers._tensorboard import TensorBoardWriter
from gyre.loggers._wandb import WandbWriter
from gyre.loggers._writer import Writer


def _run_folder(log_dir: Any, who: str) -> str:
    return path(log_dir, f"{who} needs the run folder as log_dir",
                expected="a str or pathlib.Path (the trainer passes its run folder)",
                fix=f"call it as {who}(log_dir='runs/my_run', ...)")


def _version(version: str | None, use_timestamp_version: bool) -> str:
    if version:
        return version
    return timestamp() if use_timestamp_version else ""


def _folder(base: str, name: str, version: str) -> str:
    return os.path.join(base, *[part for part in (name, version) if part])


@register_logger("TensorboardToolLogger")
def tensorboard_tool_logger(
    *,
    log_dir: str | os.PathLike[str],
    name: str = "",
    save_dir: str | None = None,
    use_timestamp_version: bool = False,
    version: str | None = None,
) -> TensorBoardWriter:
    """A :class:`gyre.TensorBoardWriter` into ``save_dir/name/version`` (``save_dir`` default
    ``<log_dir>/tensorboard``)."""
    run = _run_folder(log_dir, "TensorboardToolLogger")
    base = save_dir if save_dir is not None else os.path.join(run, "tensorboard")
    return TensorBoardWriter(_folder(base, name, _version(version, use_timestamp_version)))


@register_logger("WandBToolLogger")
def wandb_tool_logger(
    *,
    log_dir: str | os.PathLike[str],
    name: str = "",
    save_dir: str | None = None,
    use_timestamp_version: bool = False,
    version: str | None = None,
    project: str | None = None,
    entity: str | None = None,
    mode: Literal["offline", "online", "disabled"] = "offline",
) -> WandbWriter:
    """A :class:`gyre.WandbWriter` (offline): ``name`` the run's name, ``version`` its id, files in
    ``save_dir`` (default ``log_dir``)."""
    run = _run_folder(log_dir, "WandBToolLogger")
    options: dict[str, Any] = {}
    run_id = _version(version, use_timestamp_version)
    if run_id:
        options["id"] = run_id
    if entity:
        options["entity"] = entity
    folder = save_dir if save_dir is not None else run
    return WandbWriter(project=project, run=name or None, mode=mode, dir=folder, **options)


@register_logger("MLflowToolLogger")
def mlflow_tool_logger(
    *,
    log_dir: str | os.PathLike[str],
    name: str = "",
    save_dir: str | None = None,
    use_timestamp_version: bool = False,
    version: str | None = None,
    tracking_uri: str | None = None,
) -> MLflowWriter:
    """A :class:`gyre.MLflowWriter`: ``name`` the experiment (``"gyre"``), ``version`` the run,
    store default ``<save_dir or log_dir>/mlruns``."""
    run = _run_folder(log_dir, "MLflowToolLogger")
    uri = tracking_uri if tracking_uri is not None else os.path.join(save_dir if save_dir is not None else run, "mlruns")
    return MLflowWriter(uri, experiment_name=name or "gyre", run_name=_version(version, use_timestamp_version) or None)


@register_logger("CSVToolLogger")
def csv_tool_logger(
    *,
    log_dir: str | os.PathLike[str],
    name: str = "",
    save_dir: str | None = None,
    use_timestamp_version: bool = False,
    version: str | None = None,
) -> CSVWriter:
    """A :class:`gyre.CSVWriter` of ``save_dir/name/version/metrics.csv`` (``save_dir`` default
    ``log_dir``)."""
    run = _run_folder(log_dir, "CSVToolLogger")
    folder = _folder(save_dir if save_dir is not None else run, name, _version(version, use_timestamp_version))
    os.makedirs(folder, exist_ok=True)
    return CSVWriter(os.path.join(folder, "metrics.csv"))


def build_tool_writer(
    section: Mapping[str, Any], *, log_dir: str | os.PathLike[str], where: str = "trainer.logger.tool_config"
) -> Writer:
    """Checks a ``tool_config`` section and builds its writer into the run folder ``log_dir``.

    Raises:
        ConfigError: an unknown ``class_name`` or key, a wrong type, or a ``log_dir`` key
            (the folder is the trainer's).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as run:
        ...     writer = build_tool_writer({"class_name": "CSVToolLogger"}, log_dir=run)
        ...     writer.close()
        >>> type(writer).__name__
        'CSVWriter'
    """
    checked = validate_tool_section(section, where=where)
    factory = lookup("loggers", checked.pop("class_name"), where)
    return factory(log_dir=log_dir, **checked)
