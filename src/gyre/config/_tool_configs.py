"""The kpoeppel fork's tool-logger configs: typed values of a ``tool_config`` section.

Each is a dataclass with the fork's fields and defaults and a read-only mapping (the section
it stands for). Unlike the fork, an empty ``save_dir`` means the run folder, and the timestamp
version is local time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, ClassVar

from gyre.core._checks import instance


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
