"""Registries: the only way a ``class_name`` in a config becomes a Python object (a config never
imports a dotted path)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar, Union, overload

from gyre.core._errors import describe, explain, suggest

T = TypeVar("T")

KINDS = ("trainers", "models", "callbacks", "optimizers", "schedules", "transforms", "datasets", "loggers")


def _concrete_configs(base: type) -> list[type]:
    """``base`` and its subclasses that name a component, in definition order."""
    found: list[type] = []
    pending = [base]
    while pending:
        cls = pending.pop(0)
        if cls not in found:
            found.append(cls)
            pending.extend(cls.__subclasses__())
    return [cls for cls in found if isinstance(getattr(cls, "class_name", None), str) and cls.class_name]


class ConfigTyped(type):
    """Metaclass giving an interface ``cfgtype``: the union of the config classes under its
    ``config_class`` (compoconf's)."""

    def typed_configs(cls) -> list[type]:
        """The config classes ``cfgtype`` joins; interfaces whose components bring their own configs
        override it."""
        base = getattr(cls, "config_class", None)
        return _concrete_configs(base) if isinstance(base, type) else []

    @property
    def cfgtype(cls) -> Any:
        """The config class of this interface's components, or the ``Union`` of them."""
        base = getattr(cls, "config_class", None)
        concrete = cls.typed_configs()
        if not concrete:
            raise TypeError(explain(
                f"{cls.__name__} has no typed config to annotate a field with",
                expected=f"{cls.__name__}.cfgtype needs {cls.__name__}.config_class: the base class of the typed "
                f"configs that build a {cls.__name__}, with at least one subclass that has a class_name",
                received=f"config_class = {describe(base)}",
                fix=f"set {cls.__name__}.config_class to a config class whose subclasses name components"))
        return concrete[0] if len(concrete) == 1 else Union[tuple(concrete)]  # noqa: UP007


class Registry:
    """Names to classes (or factory functions) for one kind of component.

    Args:
        kind: what it holds, e.g. ``"models"`` (used in error messages).

    Example:
        >>> models = Registry("models")
        >>> @models.register
        ... class MLP:
        ...     def __init__(self, width: int = 32):
        ...         self.width = width
        >>> models.get("MLP")(width=8).width
        8
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Any] = {}

    @overload
    def register(self, target: T, /) -> T: ...

    @overload
    def register(self, name: str | None = None, /, *, replace: bool = False) -> Callable[[T], T]: ...

    def register(self, target: Any = None, /, *, replace: bool = False) -> Any:
        """Registers under ``__name__`` or a given name; a different object under a taken name needs
        ``replace=True``."""
        named = target is None or isinstance(target, str)

        def decorate(obj: T) -> T:
            self._add(target if named and target else _name_of(obj, self.kind), obj, replace)
            return obj

        return decorate if named else decorate(target)

    def _add(self, name: str, obj: Any, replace: bool) -> None:
        if not callable(obj):
            raise TypeError(explain(
                f"only classes and functions can be registered as {self.kind}",
                expected="a class or a function that builds the component", received=describe(obj),
                fix=f"decorate the class: @gyre.config.register_{self.kind[:-1]}"))
        old = self._items.get(name)
        if old is not None and old is not obj and not replace and _qualname(old) != _qualname(obj):
            raise ValueError(explain(
                f"the name {name!r} is already registered among the {self.kind}",
                expected=f"a name not taken (taken: {', '.join(sorted(self._items))})",
                received=f"{_qualname(obj)}; the registered one is {_qualname(old)}",
                fix=f"register it under another name, e.g. @register_{self.kind[:-1]}('My{name}'), "
                "or pass replace=True to replace it on purpose"))
        self._items[name] = obj

    def get(self, name: str, *, where: str = "class_name") -> Any:
        """The component registered as ``name``; an unknown name is a ``KeyError`` listing the
        registered ones.

        Example:
            >>> r = Registry("schedules")
            >>> _ = r.register("Constant")(lambda value=1.0: value)
            >>> r.get("Constnat")
            Traceback (most recent call last):
            KeyError: "unknown schedules name 'Constnat' ..."
        """
        if not isinstance(name, str) or name not in self._items:
            known = sorted(self._items)
            raise KeyError(explain(
                f"unknown {self.kind} name {name!r} at {where}."
                + (suggest(name, known) if isinstance(name, str) else ""),
                expected=f"one of the registered {self.kind}: {', '.join(known) or '(none yet)'}",
                received=describe(name),
                fix=f"use a registered name, or register your own with @gyre.config.register_{self.kind[:-1]}"))
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(sorted(self._items))})"


def _name_of(obj: Any, kind: str) -> str:
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>":
        raise TypeError(explain(
            f"a registered {kind[:-1]} needs a name",
            expected="a class or a def function (its __name__ is the name)", received=describe(obj),
            fix="give the name: @registry.register('Name')"))
    return name


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


REGISTRIES: dict[str, Registry] = {kind: Registry(kind) for kind in KINDS}
TRAINERS = REGISTRIES["trainers"]
MODELS = REGISTRIES["models"]
CALLBACKS = REGISTRIES["callbacks"]
OPTIMIZERS = REGISTRIES["optimizers"]
SCHEDULES = REGISTRIES["schedules"]
TRANSFORMS = REGISTRIES["transforms"]
DATASETS = REGISTRIES["datasets"]
LOGGERS = REGISTRIES["loggers"]

register_trainer = TRAINERS.register
register_model = MODELS.register
register_callback = CALLBACKS.register
register_optimizer = OPTIMIZERS.register
register_schedule = SCHEDULES.register
register_transform = TRANSFORMS.register
register_dataset = DATASETS.register
register_logger = LOGGERS.register
