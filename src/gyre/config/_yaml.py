"""Config files: YAML in (safely, with dotted overrides), the resolved config out.

Scalars follow YAML 1.2 (``1e-3`` is a float; only ``true``/``false`` are booleans; dates stay
strings); a key written twice, a self-holding document or one whose aliases expand past
:data:`MAX_NODES` values is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gyre.config._components import ConfigError, plain, section_mapping, to_dict
from gyre.config._schema import Config
from gyre.core._checks import instance
from gyre.core._errors import describe, explain, suggest, warn

_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_FLOAT_RE = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
#: the most values a document may expand to, its aliases copied out (a config holds hundreds)
MAX_NODES = 100_000


def _expanded_size(root: yaml.Node, where: str) -> int:
    """How many values ``root`` stands for with aliases copied out; a :class:`ConfigError` past
    :data:`MAX_NODES` or for a self-holding node."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise ConfigError(explain(
                f"the YAML of {where} holds itself (an alias inside its own anchor)",
                expected="a config of plain values, sections and lists",
                received=f"the anchor at line {node.start_mark.line + 1} used inside itself",
                fix="write the value out, or point the alias at another anchor"))
        open_nodes.add(id(node))
        children = node.value if isinstance(node, yaml.CollectionNode) else ()
        total = 1 + sum(size(c) for child in children for c in (child if isinstance(child, tuple) else (child,)))
        open_nodes.discard(id(node))
        if total > MAX_NODES:
            raise ConfigError(explain(
                f"the YAML of {where} expands to more than {MAX_NODES:,} values: aliases of aliases (*name) multiply",
                expected=f"a config of at most {MAX_NODES:,} values once its aliases are copied out",
                received=f"the value at line {node.start_mark.line + 1} alone expands to {total:,}",
                fix="write the config without nested aliases (a 'billion laughs' is not a config)"))
        sizes[id(node)] = total
        return total

    return size(root)


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2's floats and booleans, dates as strings, duplicate keys
    refused."""

    def construct_document(self, node: yaml.Node) -> Any:
        """The document, once its expanded size is known to be bounded (see the module)."""
        name = str(getattr(self, "name", ""))
        _expanded_size(node, name if name and not name.startswith("<") else "the text")
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping; a key written twice in it is an error naming both lines."""
        seen: dict[str, yaml.Mark] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        f"while reading a mapping (the first {key_node.value!r} is on line {seen[key_node.value].line + 1})",
                        node.start_mark,
                        f"found the key {key_node.value!r} twice",
                        key_node.start_mark,
                    )
                seen[key_node.value] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class ConfigDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` quoting every string YAML 1.1 or :class:`ConfigLoader` would read as
    another type."""


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag not in (_FLOAT, _BOOL, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(_BOOL, _BOOL_RE, list("tTfF"))
ConfigLoader.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))
ConfigDumper.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))


def _read(source: str | os.PathLike[str]) -> Any:
    path = os.fspath(source)
    if not os.path.isfile(path):
        raise FileNotFoundError(explain(
            f"no config file {path!r}" + (" (is it a folder?)" if os.path.isdir(path) else ""),
            expected="the path of a YAML file", received=describe(path),
            fix="check the path; YAML text goes through yaml.safe_load first: load_config(yaml.safe_load(text))"
            if "\n" in path
            else "check the path (relative paths start at the working directory)"))
    with open(path, encoding="utf-8") as stream:
        try:
            data = yaml.load(stream, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as err:
            raise ConfigError(explain(
                f"the config file {path!r} is not valid YAML",
                expected="YAML mappings of 'key: value' lines", received=str(err),
                fix="correct the YAML at the line shown")) from None
    if data is None:
        raise ConfigError(explain(
            f"the config file {path!r} is empty",
            expected="the sections trainer, model, optimizer and dataset", received="no YAML content",
            fix="write the config (see the seed example in gyre's docs)"))
    return data


def apply_override(data: dict[str, Any], override: str) -> None:
    """Sets one ``dotted.key=value`` override in ``data`` in place (the value read as YAML; missing
    sections created), or removes a key with ``~dotted.key`` (as Hydra does: ``key=null`` keeps a
    callback with its defaults).

    Example:
        >>> data = {"trainer": {"callbacks": {"LearningRateMonitor": None}}}
        >>> apply_override(data, "~trainer.callbacks.LearningRateMonitor")
        >>> data
        {'trainer': {'callbacks': {}}}
    """
    instance(override, "an override", str, kind="a 'dotted.key=value' string",
             expected="a str such as 'trainer.train_epochs=3'",
             fix="pass overrides as a list of strings", error=ConfigError)
    if override.startswith("~") and "=" not in override:
        _remove(data, override)
        return
    key, sep, text = override.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(explain(
            f"malformed override {override!r}",
            expected="dotted.key=value, e.g. trainer.train_epochs=3 (no empty part between dots)",
            received=describe(override), fix="write the full dotted path of the key, '=', then the value"))
    try:
        value = yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        raise ConfigError(explain(
            f"the value of the override {override!r} is not valid YAML",
            expected="a YAML value: 3, 1e-3, max, 'quoted text', [1, 2], {key: value}",
            received=str(err).replace("\n", " "),
            fix="quote the value, e.g. key='text: with colon'")) from None
    node = data
    for i, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            node[part] = {}
        path = ".".join(parts[: i + 1])
        whole = f"{path}=[...] (the whole list, in YAML)" if isinstance(node[part], list) else f"{path}={{key: value, ...}}"
        node = instance(node[part], path, dict, problem=f"the override {override!r} goes through {path}, which is not a section",
                        expected=f"{path} to be a mapping of keys", error=ConfigError,
                        fix=f"override the whole value instead: {whole}")
    node[parts[-1]] = value


def _remove(data: dict[str, Any], override: str) -> None:
    """Removes the key ``~dotted.key`` names, or explains why there is none."""
    parts = override[1:].strip().split(".")
    node: Any = data
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(parts[:i]) or "the config"
            held = sorted(node) if isinstance(node, dict) else []
            raise ConfigError(explain(
                f"the override {override!r} removes {'.'.join(parts)}, which the config does not hold",
                expected=f"a key of {where}: {held}" if held else f"a section at {where}",
                received=f"{part!r}{suggest(part, held)}",
                fix="check the dotted path against the config file"))
        if i == len(parts) - 1:
            del node[part]
        node = node[part] if i < len(parts) - 1 else None


def load_config(source: str | os.PathLike[str] | Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """Reads and validates a config: a YAML file or a mapping, then ``dotted.key=value`` overrides.

    Raises:
        FileNotFoundError: no such file.
        ConfigError: not YAML, not a mapping, a malformed override, or anything the schema refuses.

    Example:
        >>> data = {"trainer": {"train_epochs": 5},
        ...         "model": {"class_name": "SimpleClassifier", "c_hid": 32, "num_classes": 10},
        ...         "optimizer": {"class_name": "Adam", "learning_rate": 0.1},
        ...         "dataset": {"class_name": "DigitsDataset"}}
        >>> config = load_config(data, ["trainer.train_epochs=3", "optimizer.learning_rate=1e-3"])
        >>> config.trainer.train_epochs, config.optimizer["learning_rate"]
        (3, 0.001)
    """
    if isinstance(overrides, (str, bytes)):
        raise ConfigError(explain(
            "overrides must be a list of 'dotted.key=value' strings",
            expected="e.g. ['trainer.train_epochs=3']", received=describe(overrides),
            fix=f"wrap it in a list: [{overrides!r}]"))
    if not isinstance(source, Mapping):
        source = _read(instance(source, "source", (str, os.PathLike), problem="load_config reads a YAML file or a mapping",
                                expected="a str or pathlib.Path of a YAML file, or a dict",
                                fix="load_config('configs/digits.yaml')"))
    data = plain(section_mapping(source, ""))
    for override in overrides:
        apply_override(data, override)
    return Config.model_validate(data)


def config_to_dict(config: BaseModel) -> dict[str, Any]:
    """The resolved config (or a section) as plain data, defaults included, that :func:`load_config`
    reads back.

    Example:
        >>> from gyre.config import TrainerConfig
        >>> config_to_dict(TrainerConfig(train_epochs=2).logger)["log_steps_every"]
        50
    """
    instance(config, "config", BaseModel, problem="config_to_dict takes a validated config",
             expected="a gyre.config.Config (from load_config)", fix="config_to_dict(load_config(path))")
    return config.model_dump(mode="json")


def dump_config(config: BaseModel) -> str:
    """The resolved config as YAML text, in the schema's order.

    Example:
        >>> from gyre.config import LoggerConfig
        >>> print(dump_config(LoggerConfig(log_dir="runs/a")), end="")
        class_name: Logger
        log_dir: runs/a
        log_steps_every: 50
        tool_config: null
        log_file_verbosity: info
        stderrthreshold: warning
        base_log_dir: null
    """
    return yaml.dump(config_to_dict(config), Dumper=ConfigDumper, sort_keys=False, allow_unicode=True)


def flatten_configdict(cfg: Any, separation_mark: str = ".") -> dict[str, Any]:
    """A nested config as one flat dict keyed by paths joined with ``separation_mark``
    (jax_trainer's; lists kept whole).

    Example:
        >>> flatten_configdict({"a": 1, "b": {"c": 2, "d": {"e": 3}}}, separation_mark="/")
        {'a': 1, 'b/c': 2, 'b/d/e': 3}
    """
    if not isinstance(separation_mark, str) or not separation_mark:
        raise TypeError(explain(
            "separation_mark must be a non-empty string",
            expected="a str such as '.' or '/'", received=describe(separation_mark),
            fix="flatten_configdict(cfg, separation_mark='.')"))
    data = config_to_dict(cfg) if isinstance(cfg, BaseModel) else to_dict(cfg)
    if not isinstance(data, Mapping):
        raise TypeError(explain(
            "flatten_configdict takes a nested mapping",
            expected="a dict, an ml_collections.ConfigDict or a gyre.config.Config", received=describe(cfg),
            fix="flatten_configdict(config_to_dict(load_config(path)))"))
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) or (not isinstance(value, (str, bytes)) and callable(getattr(value, "to_dict", None))):
            inner = flatten_configdict(value, separation_mark)
            flat.update({f"{key}{separation_mark}{k}": v for k, v in inner.items()})
        else:
            flat[str(key)] = value
    return flat


#: The kpoeppel fork's name of :func:`flatten_configdict`.
flatten_dict = flatten_configdict


#: settings a resume may change without a word: the resume itself, the bar, the run folder's spelling
RESUME_FREE = ("trainer.resume", "trainer.enable_progress_bar", "trainer.logger.log_dir")


def changed_settings(before: str, after: Mapping[str, Any]) -> list[str]:
    """The settings of ``after`` that differ from the saved YAML ``before``, as ``"key old → new"``
    (:data:`RESUME_FREE` left out)."""
    try:
        old = yaml.load(before, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, ConfigError):
        return []
    if not isinstance(old, Mapping):
        return []
    old, new = flatten_configdict(old), flatten_configdict(after)

    def shown(flat: dict[str, Any], key: str) -> str:
        return repr(flat[key]) if key in flat else "(none)"

    return [
        f"{key} {shown(old, key)} → {shown(new, key)}"
        for key in [*new, *(k for k in old if k not in new)]
        if key not in RESUME_FREE and (key in old, old.get(key)) != (key in new, new.get(key))
    ]


def warn_changed_settings(path: str | os.PathLike[str], after: Mapping[str, Any]) -> None:
    """Warns (a :class:`~gyre.LoopWarning`) when a resumed run goes on with settings other than its
    saved config's."""
    changes = changed_settings(Path(path).read_text(encoding="utf-8"), after)
    if changes:
        warn(
            f"resuming the run in {Path(path).parent} with settings other than its config.yaml's: "
            f"{'; '.join(changes)}. The run goes on from its saved step with the new values, and "
            "config.yaml now records them; if they are not meant, stop the run (Ctrl-C saves it) "
            "and resume it with the old values given again"
        )
