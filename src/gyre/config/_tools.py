"""Tool loggers: ``trainer.logger.tool_config`` sections (or the fork's typed
:class:`TensorboardConfig` / :class:`WandbConfig`) built into gyre writers, under jax_trainer's names.

Each writes into ``save_dir`` (default: a folder of the run) ``/name/version``, empty parts left
out; ``version`` ``None`` with ``use_timestamp_version`` is the time now. ``log_dir`` is the
trainer's, never the config's. Unlike the fork, an empty ``save_dir`` of a typed config means the
run folder, and the timestamp version is local time.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal

from gyre.config._components import ConfigError, check_section, lookup, section_mapping
from gyre.config._registry import register_logger
from gyre.core._checks import instance, path
from gyre.core._errors import describe, explain, suggest
from gyre.loggers._mlflow import MLflowWriter
from gyre.loggers._plain_files import CSVWriter
from gyre.loggers._tensorboard import TensorBoardWriter
from gyre.loggers._wandb import WandbWriter
from gyre.loggers._writer import Writer


def timestamp() -> str:
    """The version of a run left without one: the local time to the millisecond."""
    return datetime.now().strftime("%Y%m%d_%H%M%S_%f")[:-3]


@dataclasses.dataclass
class _ToolConfig(Mapping):
    """What both configs share: the folder, the version and the mapping view."""

    class_name: ClassVar[str] = ""
    save_dir: str = ""
    version: str = ""
    use_timestamp_version: bool = True

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            kinds, wanted, example = (
                ((bool,), "bool", "False") if field.name == "use_timestamp_version"
                else ((str, type(None)), "str or None", "'my_run'") if field.default is None
                else ((str,), "str", "'my_run'"))
            instance(getattr(self, field.name), field.name, kinds, expected=wanted,
                     problem=f"{type(self).__name__}.{field.name} has the wrong type",
                     fix=f"{type(self).__name__}({field.name}={example})")
        if not self.version and self.use_timestamp_version:
            self.version = timestamp()

    def _section(self) -> dict[str, Any]:
        keys = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"class_name": self.class_name,
                **{k: v for k, v in keys.items() if v is not None and not (k == "save_dir" and not v)}}

    def __getitem__(self, key: str) -> Any:
        return self._section()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._section())

    def __len__(self) -> int:
        return len(self._section())


@dataclasses.dataclass(eq=True)
class TensorboardConfig(_ToolConfig):
    """The ``TensorboardToolLogger`` section: event files in ``save_dir/name/version``.

    Attributes:
        save_dir: the folder (``""``: the run folder's ``tensorboard/``).
        name: a subfolder (``""``: none).
        version: the run's subfolder (``""`` with ``use_timestamp_version``: the time now).

    Example:
        >>> config = TensorboardConfig(save_dir="logs", version="run1")
        >>> dict(config)
        {'class_name': 'TensorboardToolLogger', 'save_dir': 'logs', 'version': 'run1', 'use_timestamp_version': True, 'name': ''}
    """

    class_name: ClassVar[str] = "TensorboardToolLogger"
    name: str = ""


@dataclasses.dataclass(eq=True)
class WandbConfig(_ToolConfig):
    """The ``WandBToolLogger`` section: a W&B run (offline unless ``WANDB_MODE`` says otherwise).

    Attributes:
        save_dir: where W&B writes its ``wandb/`` folder (``""``: the run folder).
        version: the run's id (``""`` with ``use_timestamp_version``: the time now).
        entity: the W&B team or user.

    Example:
        >>> WandbConfig(project="digits", version="1")["project"]
        'digits'
    """

    class_name: ClassVar[str] = "WandBToolLogger"
    name: str | None = None
    project: str | None = None
    entity: str | None = None


def validate_tool_section(section: Any, *, where: str = "trainer.logger.tool_config") -> dict[str, Any]:
    """Checks a ``tool_config`` section against ``LOGGERS``; a ``log_dir`` key is an error (the
    trainer's)."""
    data = section_mapping(section, where)
    if "log_dir" in data:
        raise ConfigError(explain(
            f"{where}.log_dir is not a key of a tool logger",
            expected="the writer's folder from trainer.logger.log_dir (the run folder) or tool_config.save_dir",
            received=f"log_dir: {describe(data['log_dir'])}",
            fix=f"move it to trainer.logger.log_dir, or write it as {where}.save_dir"))
    return check_section("loggers", data, where=where, extra_allowed=("log_dir",))


_TOOLS = {"tensorboard": "TensorboardToolLogger", "wandb": "WandBToolLogger", "mlflow": "MLflowToolLogger",
          "csv": "CSVToolLogger"}


def tool_section(tool: Any, project_name: Any, tool_config: Any, *, where: str) -> dict[str, Any]:
    """The ``tool_config`` of jax_trainer's ``tool`` / ``project_name`` keys."""
    name = _TOOLS.get(tool.lower()) if isinstance(tool, str) else None
    if name is None or tool_config is not None:
        raise ConfigError(explain(
            f"{where}.tool must be one of {', '.join(['TensorBoard', 'WandB', 'MLflow', 'CSV'])}, without tool_config"
            if tool_config is None else f"{where} has both tool and tool_config",
            expected="tool: TensorBoard (jax_trainer's form), or tool_config: {class_name: TensorboardToolLogger, ...}",
            received=f"tool: {describe(tool)}" + ("" if tool_config is None else f", tool_config: {describe(tool_config)}"),
            fix="keep one of them" if tool_config is not None else "write tool: TensorBoard" + suggest(str(tool), ["TensorBoard", "WandB", "MLflow", "CSV"])))
    section = {"class_name": name}
    if name == "WandBToolLogger" and project_name is not None:
        section["project"] = project_name
    return section


def _run_folder(log_dir: Any, who: str) -> str:
    return path(log_dir, f"{who} needs the run folder as log_dir",
                expected="a str or pathlib.Path (the trainer passes its run folder)",
                fix=f"call it as {who}(log_dir='runs/my_run', ...)")


def _version(version: str | None, use_timestamp_version: bool) -> str:
    if version:
        return version
    return timestamp() if use_timestamp_version else ""


def _folder(base: str, name: str, version: str) -> str:
    # a leading ~ is the home folder (YAML leaves it as written), as in trainer.logger.log_dir
    return os.path.join(os.path.expanduser(base), *[part for part in (name, version) if part])


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
    folder = os.path.expanduser(save_dir) if save_dir is not None else run
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
