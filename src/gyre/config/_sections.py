"""Helpers the schedule, transform and optimizer builders share: the config path being built,
sections called by signature, values checked by path."""

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from gyre.config._components import keyword_parameters, type_name
from gyre.config._registry import Registry
from gyre.core import _checks as checks
from gyre.core._errors import describe, explain, suggest

_WHERE: ContextVar[str] = ContextVar("gyre_config_where", default="")
_RUN_STEPS: ContextVar[int | None] = ContextVar("gyre_config_run_steps", default=None)


# -- sections: shared by the schedule, transform and optimizer builders ------------------------


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
            fix=f"write {key}: <steps>, or build it with build_optimizer(section, total_steps=<the run's steps>)"))
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
