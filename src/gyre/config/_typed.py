"""The kpoeppel fork's schedule and optimizer classes: what a ``class_name`` section and
``Class(TypedConfig(...))`` both build.

A schedule instance is the ``optax.Schedule`` with ``config`` and ``total_steps``; an optimizer
instance is the ``optax.GradientTransformation`` with ``scheduler``, ``config`` and, for AdamW
and Lamb, ``weight_decay`` and ``weight_decay_mask``.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Mapping
from typing import Any, ClassVar

import optax

from gyre.config import _typed_configs as typed
from gyre.config._components import to_dict
from gyre.config._optim import _weight_decay
from gyre.config._registry import REGISTRIES, SCHEDULES, ConfigTyped
from gyre.config._schedules import build_schedule
from gyre.config._sections import check_keys, here, real
from gyre.config._transforms import Transform
from gyre.core._errors import describe, explain
from gyre.core._lr_schedule import total_steps


def _config_or_keys(cls: type, config: Any, keys: Mapping[str, Any]) -> None:
    """Checks that exactly one of a typed config and keys came, of the class's config type."""
    wanted = cls.config_class  # type: ignore[attr-defined]
    if config is not None and (keys or not isinstance(config, wanted)):
        raise TypeError(explain(
            f"{cls.__name__} takes a {wanted.__name__} or keyword arguments, not both",
            expected=f"{cls.__name__}({wanted.__name__}(...)) or {cls.__name__}(<keys of the section>)",
            received=f"{describe(config)} and keys {sorted(keys)}",
            fix=f"pass the fields in the {wanted.__name__}, or pass keys alone"))
    if config is None:
        check_keys(wanted.builder, cls.__name__, keys, where=here() or cls.__name__)


class ScheduleInterface(metaclass=ConfigTyped):
    """A learning-rate schedule of the fork's form: ``Schedule(config)`` or ``Schedule(**keys)``;
    ``cfgtype`` annotates a config field.

    Example:
        >>> s = LinearSchedule(typed.LinearScheduleConfig(init_value=1.0, end_value=0.0, steps=4))
        >>> float(s(2)), s.total_steps, isinstance(s, ScheduleInterface)
        (0.5, 4, True)
    """

    config_class: ClassVar[type[typed.BaseScheduleConfig]] = typed.BaseScheduleConfig

    def __init__(self, config: typed.BaseScheduleConfig | None = None, /, **keys: Any) -> None:
        _config_or_keys(type(self), config, keys)
        self.config: typed.BaseScheduleConfig | None = config
        self.keys: dict[str, Any] = config.keys() if config is not None else dict(keys)
        builder = self.config_class.builder
        self._schedule = config.built if config is not None else builder(**keys)  # type: ignore[misc]
        self.total_steps: int | None = total_steps(self._schedule)

    def __call__(self, count: Any) -> Any:
        """The learning rate at step ``count`` (a float32 array)."""
        return self._schedule(count)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config if self.config is not None else self.keys})"


def _component_class(interface: type, config_class: type[typed.TypedConfig]) -> Any:
    """The class named ``config_class.class_name`` over its builder, registered (a schedule under its
    short name too)."""
    name, config, schedule = config_class.class_name, config_class.__name__, interface is ScheduleInterface
    shows = ".total_steps\n        10" if schedule else ".scheduler\n        0.1"
    cls = type(name, (interface,), {
        "config_class": config_class,
        "__module__": "gyre.config",
        "__doc__": f"The {name}{'' if schedule else ' optimizer'} of a {config} or of a section's keys "
        f"(see gyre.config.{config}).\n\n"
        f"    Example:\n        >>> {name}({config}{_EXAMPLES.get(name, '(learning_rate=0.1)')}){shows}\n",
        "__wrapped__": config_class.builder,  # the section's keys (inspect.signature follows it)
    })
    REGISTRIES[config_class.registry].register(cls)
    if schedule:
        SCHEDULES.register(name.removesuffix("Schedule"))(cls)
    return cls


_EXAMPLES = {  # the generated schedule classes' examples (an optimizer's: learning_rate=0.1)
    "ConstantSchedule": "(init_value=0.1, steps=10)",
    "LinearSchedule": "(init_value=0.1, end_value=0.0, steps=10)",
    "CosineSchedule": "(init_value=0.1, steps=10)",
    "ExponentialSchedule": "(init_value=0.1, steps=10)",
    "ConcatSchedule": "(schedules={'a': ConstantScheduleConfig(init_value=0.1, steps=10)})",
    "WarmupCosineDecaySchedule": "(peak_value=0.1, warmup_steps=2, decay_steps=8)",
}

ConstantSchedule = _component_class(ScheduleInterface, typed.ConstantScheduleConfig)
LinearSchedule = _component_class(ScheduleInterface, typed.LinearScheduleConfig)
CosineSchedule = _component_class(ScheduleInterface, typed.CosineScheduleConfig)
ExponentialSchedule = _component_class(ScheduleInterface, typed.ExponentialScheduleConfig)
ConcatSchedule = _component_class(ScheduleInterface, typed.ConcatScheduleConfig)
WarmupCosineDecaySchedule = _component_class(ScheduleInterface, typed.WarmupCosineDecayScheduleConfig)


def _scheduler(rate: Any) -> Any:
    """The fork's ``optimizer.scheduler``: a number as a float, else the built schedule."""
    if isinstance(rate, typed.BaseScheduleConfig):
        return SCHEDULES.get(rate.class_name)(rate)  # type: ignore[arg-type]
    if isinstance(rate, (numbers.Real, str)) and not isinstance(rate, bool):
        return real("learning_rate", rate, minimum=0.0)
    return build_schedule(rate, where=here("learning_rate"))


class OptimizerInterface(optax.GradientTransformationExtraArgs, metaclass=ConfigTyped):
    """An optimizer of the fork's form: ``Optimizer(config)`` or ``Optimizer(**keys)``, with
    ``scheduler`` and ``config``.

    Example:
        >>> tx = SGD(typed.SGDConfig(learning_rate=0.5))
        >>> isinstance(tx, optax.GradientTransformation), tx.scheduler
        (True, 0.5)
    """

    config_class: ClassVar[type[typed.BaseOptimizerConfig]] = typed.BaseOptimizerConfig
    config: typed.BaseOptimizerConfig | None
    scheduler: Any

    def __new__(cls, config: Any = None, /, *rest: Any, **keys: Any) -> OptimizerInterface:
        if rest:  # (init, update): a copy, or the namedtuple's own rebuilding
            return super().__new__(cls, config, *rest)
        _config_or_keys(cls, config, keys)
        if config is not None:
            scheduler, tx = _scheduler(config.learning_rate), config.built
        else:
            scheduler = _scheduler(keys["learning_rate"])
            tx = cls.config_class.builder(**{**keys, "learning_rate": scheduler})  # type: ignore[misc]
        self = super().__new__(cls, tx.init, tx.update)
        self.config, self.scheduler = config, scheduler
        if "weight_decay" in inspect.signature(cls.config_class.builder).parameters:
            decay = getattr(config, "weight_decay", None) if config is not None else keys.get("weight_decay")
            decay = {"value": 0.0} if decay is None else decay  # AdamW's 0.0, Lamb's default section
            self.weight_decay, self.weight_decay_mask = _weight_decay(to_dict(decay))
        return self


SGD = _component_class(OptimizerInterface, typed.SGDConfig)
AdamW = _component_class(OptimizerInterface, typed.AdamWConfig)
Lamb = _component_class(OptimizerInterface, typed.LambConfig)

#: The fork's name of what a transform config builds: gyre's :class:`~gyre.config.Transform`.
GradientTransformInterface = Transform
