"""Component sections checked against the registered class or function their ``class_name`` names.

Values are checked strictly, as if read from JSON (``"3"`` is not an int, ``True`` not a
number; an int is a float, a list a tuple); a class with a pydantic ``config_class`` is checked
against that model. Every mistake is a :class:`ConfigError` naming its dotted path. The schedule,
transform and optimizer builders share the rest: the config path being built, sections called by
signature, values checked by path.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from gyre.config._registry import REGISTRIES, Registry
from gyre.core import _checks as checks
from gyre.core._checks import instance
from gyre.core._errors import describe, explain, suggest

_EMPTY = inspect.Parameter.empty
_NOT_FILLED = object()


class ConfigError(ValueError):
    """A mistake in a config: the message names the dotted path, what was expected, what
    came, and the fix. A config with several mistakes raises one ``ConfigError`` that
    explains each (``mistakes``: their explanations, in the config's order).

    Example:
        >>> err = ConfigError.of(["a is wrong", "b is wrong"])
        >>> len(err.mistakes), str(err).splitlines()[0]
        (2, '2 mistakes in the config (each explained below):')
    """

    __module__ = "gyre.config"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.mistakes: list[str] = [str(args[0])] if args else []

    @classmethod
    def of(cls, mistakes: Sequence[str]) -> ConfigError:
        """One error explaining every mistake (the first one alone when there is one)."""
        unique = list(dict.fromkeys(mistakes))
        if len(unique) == 1:
            return cls(unique[0])
        numbered = "\n\n".join(f"({i}) {m}" for i, m in enumerate(unique, 1))
        err = cls(f"{len(unique)} mistakes in the config (each explained below):\n\n{numbered}")
        err.mistakes = unique
        return err


# -- component sections: checked against the registered callable ------------------------------


def is_section(value: object) -> bool:
    """Whether ``value`` is a component section: a mapping with a ``class_name``."""
    return isinstance(value, Mapping) and "class_name" in value


def validate_component(
    kind: str, section: Mapping[str, Any], *, where: str, extra_allowed: Sequence[str] = ()
) -> dict[str, Any]:
    """Checks a component section and returns the keyword arguments to build it with.

    Required parameters must be given; plain-data defaults are filled in; nested sections are
    left to their own builders (:func:`validate_nested`) and returned as plain dicts.

    Args:
        kind: the registry, e.g. ``"callbacks"`` (a key of :data:`gyre.config.REGISTRIES`).
        section: the mapping read from the config.
        where: the section's dotted path, for messages.
        extra_allowed: names the caller supplies itself (an nnx model's ``rngs``): never
            required nor filled in, accepted even when not parameters.

    Returns:
        The checked keyword arguments (without ``class_name``), in signature order.

    Raises:
        ConfigError: an unknown ``class_name`` or key, a wrong type, a missing key.

    Example:
        >>> validate_component("loggers", {"class_name": "CSVToolLogger", "version": "0"},
        ...                    where="tool_config", extra_allowed=("log_dir",))
        {'name': '', 'save_dir': None, 'use_timestamp_version': False, 'version': '0'}
    """
    checked = check_section(kind, section, where=where, extra_allowed=extra_allowed)
    del checked["class_name"]
    return checked


def check_section(
    kind: str, section: Mapping[str, Any], *, where: str, extra_allowed: Sequence[str] = ()
) -> dict[str, Any]:
    """:func:`validate_component` keeping ``class_name``: the checked section as a config stores
    it."""
    if kind not in REGISTRIES:
        raise ValueError(explain(
            f"no registry of {kind!r}",
            expected=f"one of {', '.join(REGISTRIES)}", received=describe(kind),
            fix="pass the kind of component, e.g. validate_component('callbacks', ...)"))
    data = section_mapping(section, where)
    name = data.get("class_name")
    if not isinstance(name, str):
        known = ", ".join(REGISTRIES[kind]) or "(none yet)"
        raise ConfigError(explain(
            f"{where}.class_name is missing" if name is None else f"{where}.class_name is not a name",
            expected=f"class_name: one of the registered {kind}: {known}",
            received=describe(name) if "class_name" in data else f"the keys {', '.join(data) or '(none)'}",
            fix=f"add class_name: <name> to {where}"))
    target = lookup(kind, name, where)
    rest = {k: v for k, v in data.items() if k != "class_name"}
    model = getattr(target, "config_class", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return {"class_name": name, **_with_model(model, rest, where)}
    return {"class_name": name, **check_signature(kind, name, target, rest, where, tuple(extra_allowed))}


def validate_nested(kind: str, value: Any, *, where: str, extra_allowed: Sequence[str] = ()) -> Any:
    """Checks the sections a value holds (one, a list, or a mapping of them; ``class_name`` kept);
    any other value is returned as it is.

    Example:
        >>> [s["class_name"] for s in validate_nested("loggers", [{"class_name": "CSVToolLogger"}],
        ...                                           where="tools", extra_allowed=("log_dir",))]
        ['CSVToolLogger']
    """
    return each_section(value, where, lambda s, at: check_section(kind, s, where=at, extra_allowed=extra_allowed))


def each_section(value: Any, where: str, check: Callable[[Mapping[str, Any], str], Any]) -> Any:
    """``check(section, its dotted path)`` of a section, or of each in a list or a mapping of them;
    any other value as it is."""
    if is_section(value):
        return check(value, where)
    if list_of_sections(value):
        return [check(v, f"{where}.{i}") for i, v in enumerate(value)]
    if map_of_sections(value):
        return {k: check(v, f"{where}.{k}") for k, v in value.items()}
    return value


def section_mapping(value: Any, where: str) -> dict[str, Any]:
    """``value`` as a dict with string keys, or a :class:`ConfigError` naming ``where``."""
    instance(value, where or "the config", Mapping, kind="a mapping of keys to values",
             expected="a section of 'key: value' lines",
             fix=f"write {where or 'the config'} as a YAML mapping (indented 'key: value' lines)", error=ConfigError)
    for key in value:
        instance(key, "a key", str, problem=f"{where or 'the config'} has a key that is not a string",
                 expected="string keys", fix="quote the key, or correct the indentation", error=ConfigError)
    return dict(value)


def lookup(kind: str, name: str, where: str) -> Any:
    """The component registered as ``name``, or a :class:`ConfigError` listing the names."""
    try:
        return REGISTRIES[kind].get(name, where=f"{where}.class_name")
    except KeyError as err:
        raise ConfigError(err.args[0]) from None


def list_of_sections(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of sections."""
    return isinstance(value, (list, tuple)) and bool(value) and all(is_section(v) for v in value)


def map_of_sections(value: Any) -> bool:
    """Whether ``value`` is a non-empty mapping of names to sections."""
    return isinstance(value, Mapping) and bool(value) and all(is_section(v) for v in value.values())


def plain(value: Any) -> Any:
    """Mappings as dicts, sequences as lists (what JSON and YAML hold)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def to_dict(value: Any) -> Any:
    """An ``ml_collections.ConfigDict`` (a non-mapping with ``to_dict``) as its dict, else ``value``."""
    if not isinstance(value, Mapping) and callable(getattr(value, "to_dict", None)):
        return value.to_dict()
    return value


def _json(value: Any) -> str | None:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


def keyword_parameters(target: Any) -> tuple[list[inspect.Parameter], dict[str, Any], bool]:
    """The keyword parameters of a class's ``__init__`` or a function, their annotations, and
    whether it takes ``**kwargs``."""
    function = target
    skip = set()
    if inspect.isclass(target) and "__wrapped__" in vars(target):
        target = function = target.__wrapped__  # a class over a builder function takes its keys
    elif inspect.isclass(target) and target.__init__ is not object.__init__:
        function = target.__init__
        if any(c.__module__.startswith("flax.linen") for c in target.__mro__):
            skip.add("parent")  # set by flax itself
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # no signature (a builtin): any key goes to it
        return [], {}, True
    if function is not target:
        parameters = parameters[1:]  # self
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception:  # noqa: BLE001 (an annotation naming a type only imported for checkers)
        hints = {}
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p for p in parameters if p.kind in keyword and p.name not in skip]
    hints = {p.name: _EMPTY if isinstance(h := hints.get(p.name, p.annotation), str) else h for p in named}
    return named, hints, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def check_signature(
    kind: str, name: str, target: Any, data: dict[str, Any], where: str, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A section's keys checked against ``target``'s signature, as :func:`validate_component`
    does."""
    parameters, hints, takes_any = keyword_parameters(target)
    names = [p.name for p in parameters]
    out: dict[str, Any] = {}
    mistakes: list[str] = []
    for key, value in data.items():
        path = f"{where}.{key}"
        if key not in hints:
            if takes_any or key in extra:
                out[key] = plain(value)
                continue
            valid = ["class_name", *names]
            mistakes.append(explain(
                f"unknown key {path} for the {kind[:-1]} {name!r}." + suggest(key, valid),
                expected=f"a key of {name}: {', '.join(valid)}", received=f"{key}: {describe(value)}",
                fix=f"correct the spelling, or remove {key} from {where}"))
            continue
        if is_section(value) or list_of_sections(value) or map_of_sections(value):
            out[key] = plain(value)  # for the builder of its kind
        else:
            try:
                out[key] = check_value(hints[key], value, path=path, owner=f"the parameter {key} of {name}")
            except ConfigError as err:
                mistakes.extend(err.mistakes)
    missing = [p for p in parameters if p.default is _EMPTY and p.name not in data and p.name not in extra]
    if missing:
        keys = ", ".join(p.name for p in missing)
        mistakes.append(explain(
            f"missing required key{'s' if len(missing) > 1 else ''} {keys} in {where} ({kind[:-1]} {name!r})",
            expected=", ".join(f"{p.name}: {type_name(hints[p.name])}" for p in missing),
            received=f"the keys {', '.join(data) or '(none)'}",
            fix=f"add {missing[0].name}: <value> to {where}"))
    if mistakes:
        raise ConfigError.of(mistakes)
    for p in parameters:
        if p.name not in out and p.name not in extra and p.default is not _EMPTY:
            value = _default(hints[p.name], p.default)
            if value is not _NOT_FILLED:
                out[p.name] = value
    return {**{n: out[n] for n in names if n in out}, **{k: v for k, v in out.items() if k not in hints}}


def _default(annotation: Any, default: Any) -> Any:
    """A default as the config would hold it, or ``_NOT_FILLED`` when it is not plain data matching
    its annotation."""
    text = _json(default)
    if text is None or json.loads(text) != plain(default):
        return _NOT_FILLED
    adapter = _adapter(annotation)
    if adapter is None:
        return json.loads(text)
    try:
        return adapter.validate_json(text, strict=True)
    except ValidationError:
        return _NOT_FILLED


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    if annotation is _EMPTY or annotation is Any:
        return None
    try:
        return _cached_adapter(annotation)
    except TypeError:  # an unhashable annotation
        return _cached_adapter.__wrapped__(annotation)


@functools.lru_cache(maxsize=512)
def _cached_adapter(annotation: Any) -> TypeAdapter[Any] | None:
    for config in (ConfigDict(arbitrary_types_allowed=True), None):
        try:
            return TypeAdapter(annotation, config=config)
        except Exception:  # noqa: BLE001, S112 (a model type refuses a config; some types have no schema)
            continue
    return None


def check_value(annotation: Any, value: Any, *, path: str, owner: str = "the key") -> Any:
    """``value`` checked strictly, as if read from JSON, against ``annotation``: converted, or a
    :class:`ConfigError` naming ``path``."""
    adapter = _adapter(annotation)
    text = _json(value)
    if adapter is None:
        return plain(value) if text is None else json.loads(text)
    try:
        return adapter.validate_python(value, strict=True) if text is None else adapter.validate_json(text, strict=True)
    except ValidationError as err:
        errors = err.errors(include_url=False)
        detail = f" ({errors[0]['msg']})" if len(errors) == 1 else ""
        quote = str in _members(annotation) and isinstance(value, (bool, int, float))
        raise ConfigError(explain(
            f"{_problem(errors[0]['type'])} at {path}." + _literal_hint(annotation, value),
            expected=f"{type_name(annotation)}{detail}, for {owner}", received=describe(value),
            fix=_fix(path, annotation, errors[0])
            + (" (quote it: YAML reads it as a number or a boolean)" if quote else ""))) from None


def _fix(path: str, annotation: Any, error: Mapping[str, Any]) -> str:
    """How to mend a value pydantic refused: the bound it broke, else the type it needs."""
    if _problem(error["type"]) == "invalid value" and error["msg"].startswith("Input should be "):
        return f"set {path} to a value {error['msg'].removeprefix('Input should be ')}"
    return f"set {path} to a value of type {type_name(annotation)}"


def _problem(error_type: str) -> str:
    wrong_type = error_type.endswith("_type") or error_type.startswith(("int_", "float_", "bool_"))
    return "wrong type" if wrong_type else "invalid value"


def _members(annotation: Any) -> list[Any]:
    """The types of a union (through ``Annotated`` and ``Optional``), or the type itself."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _members(a)]
    return [annotation]


def _literal_hint(annotation: Any, value: Any) -> str:
    choices = [c for m in _members(annotation) if typing.get_origin(m) is Literal
               for c in typing.get_args(m) if isinstance(c, str)]
    return suggest(value, choices) if isinstance(value, str) and choices else ""


def type_name(annotation: Any) -> str:
    """A type annotation as an error message shows it."""
    origin = typing.get_origin(annotation)
    if annotation is _EMPTY or annotation is Any:
        return "any value"
    if annotation is None or annotation is type(None):
        return "None"
    if origin is Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and origin is None:
        return annotation.__name__
    text = repr(annotation).replace("typing.", "").replace("collections.abc.", "")
    return text if len(text) <= 100 else text[:97] + "..."


def _with_model(model: type[BaseModel], data: dict[str, Any], where: str) -> dict[str, Any]:
    text = _json(data)
    try:
        checked = model.model_validate(data, strict=True) if text is None else model.model_validate_json(text, strict=True)
    except ValidationError as err:
        raise from_pydantic(err, model, where) from None
    return checked.model_dump()


# -- pydantic's errors, explained ---------------------------------------------------------------


def from_pydantic(err: ValidationError, model: type[BaseModel], where: str) -> ConfigError:
    """A pydantic ``ValidationError`` as a :class:`ConfigError` naming the dotted path (our own
    errors pass through)."""
    mistakes: list[str] = []
    for error in err.errors(include_url=False):
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):
            mistakes.extend(cause.mistakes)
        elif isinstance(cause, (ValueError, TypeError, KeyError)) and "\n  fix: " in str(cause.args[0] if cause.args else ""):
            mistakes.append(str(cause.args[0]))  # explained by a builder: as it was
        else:
            mistakes.append(_explain_error(error, model, where))
    return ConfigError.of(mistakes)


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _walk(model: type[BaseModel], loc: Sequence[Any]) -> tuple[list[str], Any, type[BaseModel] | None]:
    """The leading parts of ``loc`` that name fields, the last one's annotation, and its model (or
    None)."""
    parts: list[str] = []
    annotation: Any = _EMPTY
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None or not isinstance(part, str) or part not in current.model_fields:
            break
        parts.append(part)
        annotation = current.model_fields[part].annotation
        current = _model_in(annotation)
    return parts, annotation, current


def _explain_error(error: Any, model: type[BaseModel], where: str) -> str:
    loc, kind, value = tuple(error["loc"]), error["type"], error.get("input")
    if kind == "extra_forbidden":
        parts, _, holder = _walk(model, loc[:-1])
        holder = holder or model
        key = str(loc[-1])
        valid = list(holder.model_fields)
        place = _join(where, *parts)
        return explain(
            f"unknown key {_join(place, key)} {'in ' + place if place else 'at the top level of the config'}."
            + suggest(key, valid),
            expected=f"a key of {place or 'the config'}: {', '.join(valid)}",
            received=f"{key}: {describe(value)}", fix=f"correct the spelling, or remove {key}")
    parts, annotation, _ = _walk(model, loc)
    path = _join(where, *parts)
    if kind == "missing":
        key = parts[-1] if parts else str(loc[-1]) if loc else "?"
        holder = _join(where, *parts[:-1]) or "the config"
        return explain(
            f"missing required key {path or key}",
            expected=f"{key}: {'a section' if typing.get_origin(annotation) is dict or _model_in(annotation) else type_name(annotation)}",
            received=f"no {key} in {holder}", fix=f"add {key} to {holder}")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return explain(
            f"{path or 'the config'} must be a mapping of keys to values",
            expected="a section of 'key: value' lines", received=describe(value),
            fix=f"write {path or 'the config'} as a YAML mapping")
    return explain(
        f"{_problem(kind)} at {path}." + _literal_hint(annotation, value),
        expected=f"{type_name(annotation)} ({error['msg']})", received=describe(value),
        fix=_fix(path, annotation, error))


# -- the schedule, transform and optimizer builders' sections and values ---------------------

_WHERE: ContextVar[str] = ContextVar("gyre_config_where", default="")
_RUN_STEPS: ContextVar[int | None] = ContextVar("gyre_config_run_steps", default=None)


# -- the builders' side: the config path being built, sections called by signature ------------


def here(key: str = "") -> str:
    """The dotted config path being built (``optimizer.learning_rate``), plus ``key``."""
    base = _WHERE.get()
    return f"{base}.{key}" if base and key else (base or key)


@contextlib.contextmanager
def at(where: str) -> Iterator[None]:
    """Within the block, :func:`here` names ``where`` (the section being built)."""
    token = _WHERE.set(where)
    try:
        yield
    finally:
        _WHERE.reset(token)


@contextlib.contextmanager
def run_length(steps: int | None) -> Iterator[None]:
    """Within the block, a schedule whose length is left out lasts ``steps`` (``None``: unknown).

    An optimizer built there warns when its schedule has another length.

    Example:
        >>> from gyre.config import build_schedule
        >>> with run_length(8):
        ...     s = build_schedule({"class_name": "Linear", "init_value": 1.0, "end_value": 0.0})
        >>> s.total_steps, float(s(4))
        (8, 0.5)
    """
    token = _RUN_STEPS.set(steps)
    try:
        yield
    finally:
        _RUN_STEPS.reset(token)


def run_steps() -> int | None:
    """The run's length set by :func:`run_length`, or ``None``."""
    return _RUN_STEPS.get()


class RunLengthUnknown(ValueError):
    """A schedule left its length out and no run length is known (see :func:`length`)."""

    __module__ = "gyre.config"  # its public path, in tracebacks and reprs


def length(key: str, value: object, *, name: str, keys: str = "") -> int:
    """A schedule's length: ``value`` (>= 1), else the run's (:func:`run_length`), else an error
    naming ``key``."""
    if value is not None:
        return whole(key, value, minimum=1)
    steps = run_steps()
    if steps is None:
        raise RunLengthUnknown(explain(
            f"{who(name)} needs {keys or key}: no run length is known to default to",
            expected=f"{key}: the schedule's number of steps (left out, it is the run's: epochs x batches per epoch, "
            "known when the trainer or gyre fit builds the optimizer)",
            received=f"no {key}",
            fix=f"write {key}: <steps>, or build it with build_optimizer(section, run_steps=<the run's steps>)"))
    return steps


def class_name_of(section: object, *, where: str, registry: Registry, also: str = "") -> str:
    """The ``class_name`` of a section; a non-mapping or a missing name is a clear error."""
    known = ", ".join(sorted(registry)) + also
    checks.instance(section, where, Mapping, kind="a section (a mapping with class_name)",
                    expected=f"a mapping with class_name one of: {known}",
                    fix=f"write e.g. {where}: {{class_name: {next(iter(registry), 'Name')}, ...}}")
    name = section.get("class_name")
    if not isinstance(name, str):
        raise ValueError(explain(
            f"{where} has no class_name (a string)",
            expected=f"class_name: one of {known}",
            received=describe(name) if "class_name" in section else f"keys {sorted(section)}",
            fix=f"add class_name to {where}"))
    return name


def call_section(
    target: Callable[..., Any], name: str, section: Mapping[str, Any], *, where: str
) -> Any:
    """Calls ``target`` with the section's keys after checking them against its signature; errors
    name ``where``."""
    kwargs = {k: v for k, v in section.items() if k != "class_name"}
    check_keys(target, name, kwargs, where=where)
    with at(where):
        return target(**kwargs)


def check_keys(
    target: Callable[..., Any], name: str, kwargs: Mapping[str, Any], *, where: str
) -> None:
    """Raises when ``kwargs`` has a key ``target`` does not take, or lacks a required one."""
    params, _, takes_any = keyword_parameters(target)
    known = [p.name for p in params]
    listing = ", ".join(_describe_parameter(p) for p in params)
    for key in kwargs:
        if not takes_any and key not in known:
            raise ValueError(explain(
                f"unknown key {key!r} at {where} ({name})." + suggest(str(key), known),
                expected=f"the keys of {name}: {listing}", received=f"{key}: {describe(kwargs[key])}",
                fix=f"remove {key!r} or spell it as one of the keys above"))
    missing = [p.name for p in params if p.default is p.empty and p.name not in kwargs]
    if missing:
        raise ValueError(explain(
            f"missing required key{'s' if len(missing) > 1 else ''} {', '.join(missing)} at {where} ({name})",
            expected=f"the keys of {name}: {listing}", received=f"keys {sorted(kwargs)}",
            fix=f"add {', '.join(f'{k}: ...' for k in missing)} to {where}"))


def _describe_parameter(p: inspect.Parameter) -> str:
    ann = "" if p.annotation is p.empty else p.annotation
    ann = ann if isinstance(ann, str) else type_name(ann)  # a string: under postponed annotations
    ann = "" if len(ann) > 60 else ann  # optax's own Union annotations: the name says enough
    default = "required" if p.default is p.empty else f"default {p.default!r}"
    return f"{p.name} ({ann + ', ' if ann else ''}{default})"


def who(name: str) -> str:
    """``where (name)`` while a section is being built, else ``name`` (for messages)."""
    return f"{here()} ({name})" if here() else name


# -- values -----------------------------------------------------------------------------------


def real(
    key: str, value: object, *, minimum: float | None = None, above: float | None = None
) -> float:
    """``value`` as a finite float (numeric strings such as ``"1e-3"`` too), within its bounds, else
    a clear error."""
    bound = f" >= {minimum}" if minimum is not None else f" > {above}" if above is not None else ""
    fix = f"write {key or here().rsplit('.', 1)[-1]}: <a number{bound}>"
    return checks.real(value, here(key), minimum=minimum, above=above, text=True, fix=fix)


def whole(key: str, value: object, *, minimum: int) -> int:
    """``value`` as a Python int of at least ``minimum`` (booleans and 2.5 are errors)."""
    return checks.whole(value, here(key), minimum=minimum, fix=f"write {key}: <an int >= {minimum}>")


def flag(key: str, value: object) -> bool:
    """``value`` when it is a bool; else a clear error (``"false"`` is not a bool)."""
    return checks.instance(value, here(key), bool, kind="true or false", expected="a bool",
                           fix=f"write {key}: true or {key}: false")
