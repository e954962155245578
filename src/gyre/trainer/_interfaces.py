"""The kpoeppel jax_trainer fork's model bases (``BaseModelNNX``, ``BaseModelLinen``): defining a
subclass registers it in :data:`gyre.config.MODELS` with its dataclass config (``config_class``,
a ``config`` annotation, or its ``__init__``'s), so ``model: {class_name: MyModel, ...}`` builds
``MyModel(MyModelConfig(**keys))``; a subclass named as a built-in model takes the name, warned."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from typing import Any, ClassVar

from flax import linen, nnx

from gyre.config._registry import MODELS, ConfigTyped
from gyre.core._errors import describe, explain

_REPLACED = ("the model name {name!r} was gyre's built-in {old}; it now builds {new} (a config's "
             "class_name: {name} names yours). Rename your class to keep both.")


def _annotation(owner: Any, annotations: dict[str, Any]) -> Any:
    try:
        return typing.get_type_hints(owner).get("config")
    except Exception:  # noqa: BLE001 (a forward reference: refused below as not a class)
        return annotations["config"]


def _own_config_class(cls: type) -> type | None:
    """The config class a subclass defines itself, or ``None`` (a base, or a class flax derives)."""
    init = vars(cls).get("__init__")
    if vars(cls).get("config_class") is not None:
        found = vars(cls)["config_class"]
    elif "config" in vars(cls).get("__annotations__", {}):
        found = _annotation(cls, vars(cls)["__annotations__"])
    elif "config" in getattr(init, "__annotations__", {}):
        found = _annotation(init, init.__annotations__)
        if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
            return None  # config: Any (a base's own __init__) names no config class
    else:
        return None
    if any(vars(base).get("config_class") is found for base in cls.__mro__[1:]):
        return None  # a copy of a registered class (flax's nn.vmap, nn.remat): its config is the original's
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise TypeError(explain(
            f"the model {cls.__name__}'s config must be a dataclass",
            expected="config_class = MyModelConfig (or config: MyModelConfig), a @dataclass of the model's keys",
            received=describe(found),
            fix=f"decorate the config class with @dataclasses.dataclass and set config_class = it (an "
            f"annotation that is a string cannot always be resolved), or derive {cls.__name__} from "
            "nnx.Module / linen.Module and register it with @gyre.config.register_model"))
    return found


def _register(cls: type) -> None:
    config = _own_config_class(cls)
    if config is None:
        return
    name = cls.__name__
    old = MODELS.get(name) if name in MODELS else None
    replace = old is not None and getattr(old, "__module__", "").startswith("gyre.")
    if replace and old is not cls:
        warnings.warn(_REPLACED.format(name=name, old=f"{old.__module__}.{old.__qualname__}",
                                       new=f"{cls.__module__}.{cls.__qualname__}"), stacklevel=3)
    MODELS.register(name, replace=replace)(cls)
    config.class_name = name  # type: ignore[attr-defined]
    cls.config_class = config  # type: ignore[attr-defined]
    cls.__wrapped__ = config  # type: ignore[attr-defined]  # a section's keys: the config's fields


class ModelBase(ConfigTyped):
    """The metaclass of the fork's bases: ``cfgtype`` joins the registered subclasses' configs."""

    def typed_configs(cls) -> list[type]:
        found = []
        for name in MODELS:
            model = MODELS.get(name)
            if isinstance(model, type) and issubclass(model, cls):
                config = vars(model).get("config_class")
                if config is not None and config not in found:
                    found.append(config)
        return found


class NNXBase(type(nnx.Module), ModelBase):  # type: ignore[misc]
    """:class:`ModelBase` for nnx modules (with nnx's own metaclass)."""


class RegistersSubclasses:
    """The mixin of the fork's bases: defining a subclass registers it with its typed config."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)


class BaseModelNNX(RegistersSubclasses, nnx.Module, metaclass=NNXBase):
    """The base of an nnx model built from its typed config: ``Model(config, rngs=...)``.

    Example:
        >>> import dataclasses
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> @dataclasses.dataclass
        ... class TinyNetConfig:
        ...     features: int = 2
        >>> class TinyNet(BaseModelNNX):
        ...     config_class = TinyNetConfig
        ...     def __init__(self, config: TinyNetConfig, rngs: nnx.Rngs):
        ...         super().__init__(config)
        ...         self.dense = nnx.Linear(3, config.features, rngs=rngs)
        ...     def __call__(self, x, train=True):
        ...         return self.dense(x)
        >>> TinyNetConfig.class_name, TinyNet.cfgtype is TinyNetConfig or TinyNetConfig in TinyNet.cfgtype.__args__
        ('TinyNet', True)
        >>> TinyNet(TinyNetConfig(4), rngs=nnx.Rngs(0))(jnp.ones((1, 3))).shape
        (1, 4)
    """

    config_class: ClassVar[type | None] = None

    def __init__(self, config: Any, **kwargs: Any) -> None:
        self.config = config


class BaseModelLinen(RegistersSubclasses, linen.Module, metaclass=ModelBase):
    """The base of a linen model built from its typed config, a ``config`` field of the model's
    dataclass.

    Example:
        >>> import dataclasses
        >>> import jax, jax.numpy as jnp
        >>> from flax import linen
        >>> @dataclasses.dataclass
        ... class TinyLinenConfig:
        ...     features: int = 2
        >>> class TinyLinen(BaseModelLinen):
        ...     config_class = TinyLinenConfig  # or the annotation alone, where it is not a string
        ...     config: TinyLinenConfig
        ...     @linen.compact
        ...     def __call__(self, x, train=True):
        ...         return linen.Dense(self.config.features)(x)
        >>> model = TinyLinen(TinyLinenConfig(4))
        >>> TinyLinenConfig.class_name, model.init(jax.random.key(0), jnp.ones((1, 3)))["params"]["Dense_0"]["kernel"].shape
        ('TinyLinen', (3, 4))
    """


def built_from_config(factory: Any) -> bool:
    """Whether a registered model is built from its typed config (it subclasses a fork's base)."""
    return isinstance(factory, type) and issubclass(factory, RegistersSubclasses)


def build_registered(factory: Any, keys: dict[str, Any], **supplied: Any) -> Any:
    """``Model(Config(**keys), **supplied)`` for the fork's bases, else
    ``factory(**keys, **supplied)``."""
    if not built_from_config(factory):
        return factory(**keys, **supplied)
    config = factory.config_class(**keys)
    if issubclass(factory, linen.Module):
        return factory(config=config, **supplied)
    return factory(config, **supplied)
