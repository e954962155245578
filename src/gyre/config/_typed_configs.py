"""Typed config values in the kpoeppel fork's form
(``SGDConfig(learning_rate=LinearScheduleConfig(...))``), and the classes they build.

Each ``XConfig`` is a frozen dataclass whose ``class_name`` is the registered ``X`` and whose
``to_dict()`` is the same YAML section; it is checked when made, by the registered builders.
Unlike the fork: a length left out is ``None`` (not ``-1``) under gyre's rule for left-out
lengths, ``ConcatScheduleConfig`` has no default ``schedules``, a warmup-cosine may have no
warmup, and ``WeightDecayConfig.before_optimizer`` left out is coupled decay in ``transforms``.

``X(XConfig(...))`` and ``X(**keys)`` build the same component: a schedule instance is the
``optax.Schedule`` with ``config`` and ``total_steps``; an optimizer instance is the
``optax.GradientTransformation`` with ``scheduler``, ``config`` and, for AdamW and Lamb,
``weight_decay`` and ``weight_decay_mask``.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Union

import optax

from gyre.config._components import ConfigError, check_keys, here, real, to_dict, whole
from gyre.config._optim import SGD as _sgd
from gyre.config._optim import AdamW as _adamw
from gyre.config._optim import Lamb as _lamb
from gyre.config._optim import _weight_decay as _decay_and_mask
from gyre.config._registry import REGISTRIES, SCHEDULES, ConfigTyped
from gyre.config._schedules import ConcatSchedule as _concat
from gyre.config._schedules import ConstantSchedule as _constant
from gyre.config._schedules import CosineSchedule as _cosine
from gyre.config._schedules import ExponentialSchedule as _exponential
from gyre.config._schedules import LinearSchedule as _linear
from gyre.config._schedules import WarmupCosineDecaySchedule as _warmup_cosine
from gyre.config._schedules import build_schedule, decayed_end
from gyre.config._transforms import DEFAULT_DECAY_REGEX, Transform
from gyre.config._transforms import GradClipNorm as _clip_norm
from gyre.config._transforms import GradClipValue as _clip_value
from gyre.config._transforms import WeightDecay as _weight_decay
from gyre.core._errors import describe, explain, suggest
from gyre.core._lr_schedule import total_steps


class TypedConfigError(ConfigError, AssertionError):
    """A mistake in a typed config value: a :class:`~gyre.config.ConfigError` that is also an
    ``AssertionError`` (the fork asserts).

    Example:
        >>> try:
        ...     LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=-1)
        ... except AssertionError as error:
        ...     print(isinstance(error, ValueError), str(error).splitlines()[0])
        True steps must be a whole number >= 0
    """

    __module__ = "gyre.config"


def checked(build: Callable[..., Any], **keys: Any) -> Any:
    """``build(**keys)``, its ``ValueError`` / ``TypeError`` raised as a
    :class:`TypedConfigError`."""
    try:
        return build(**keys)
    except (ValueError, TypeError) as error:
        raise TypedConfigError(str(error)) from None


def _plain(value: Any) -> Any:
    if isinstance(value, TypedConfig):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _KeywordsChecked(type):
    """Makes a misspelt or positional argument of a typed config one explained error."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        fields = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
        wrong = [k for k in kwargs if k not in fields]
        if args or wrong:
            raise TypedConfigError(explain(
                f"{cls.__name__} takes its fields as keywords"
                + (f": {wrong[0]!r} is not one of them." + suggest(wrong[0], fields) if wrong else ""),
                expected=f"keywords among: {', '.join(fields)}",
                received=f"{len(args)} positional argument(s), keywords {sorted(kwargs)}",
                fix=f"write {cls.__name__}({fields[0] if fields else 'name'}=...)"))
        return super().__call__(**kwargs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TypedConfig(metaclass=_KeywordsChecked):
    """Every typed config value has ``class_name``, ``to_dict()`` (its YAML section) and
    ``instantiate()``.

    Example:
        >>> GradClipValueConfig(max_delta=0.5).to_dict()
        {'class_name': 'GradClipValue', 'before_optimizer': True, 'max_delta': 0.5}
    """

    class_name: ClassVar[str | None] = None
    registry: ClassVar[str] = ""
    builder: ClassVar[Callable[..., Any] | None] = None
    built: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.builder is not None:
            object.__setattr__(self, "built", checked(type(self).builder, **self.keys()))  # type: ignore[misc]

    def keys(self) -> dict[str, Any]:
        """The builder's keyword arguments: the fields, nested configs as sections."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    def to_dict(self) -> dict[str, Any]:
        """The YAML section of this value: ``class_name`` and the fields."""
        return {"class_name": self.class_name, **self.keys()}

    def instantiate(self, interface: type | None = None) -> Any:
        """The component this value describes, built as ``class_name`` is registered; ``interface``
        is checked against it."""
        if self.class_name is None:
            raise TypedConfigError(explain(
                f"{type(self).__name__} is a base class: it builds nothing",
                expected="a concrete config, e.g. LinearScheduleConfig or SGDConfig", received=describe(self),
                fix="use the config of the component you want"))
        target = REGISTRIES[self.registry].get(self.class_name)
        built = target(self) if isinstance(target, type) else target(**self.keys())
        if interface is not None and not isinstance(built, interface):
            raise TypeError(explain(
                f"{self.class_name} is not a {interface.__name__}",
                expected=f"an interface {self.class_name} implements", received=interface.__name__,
                fix=f"call instantiate() without an argument, or with {type(built).__name__}"))
        return built


# -- schedules -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseScheduleConfig(TypedConfig):
    """The fields every schedule config has (builds nothing itself).

    Example:
        >>> BaseScheduleConfig(init_value=0.1, end_value=0.01, steps=100).steps
        100
    """

    registry: ClassVar[str] = "schedules"
    init_value: float = 1e-3
    end_value: float | None = 1e-3
    steps: int | None = None

    def __post_init__(self) -> None:
        for key, check, bounds in (("init_value", real, {}), ("end_value", real, {}), ("steps", whole, {"minimum": 0})):
            if getattr(self, key) is not None:
                checked(check, key=key, value=getattr(self, key), **bounds)
        super().__post_init__()

    def derive(self, key: str, value: Any) -> None:
        """Sets a derived default (the fork's ``__post_init__`` fills ``end_value`` so)."""
        object.__setattr__(self, key, value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConstantScheduleConfig(BaseScheduleConfig):
    """A constant; ``end_value`` left out is ``init_value`` (given, it must equal it).

    Example:
        >>> ConstantScheduleConfig(init_value=0.1, steps=10).end_value
        0.1
    """

    class_name: ClassVar[str] = "ConstantSchedule"
    builder: ClassVar[Callable[..., Any]] = _constant
    end_value: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.end_value is None:
            self.derive("end_value", self.init_value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearScheduleConfig(BaseScheduleConfig):
    """Linear from ``init_value`` to ``end_value`` over ``steps``.

    Example:
        >>> LinearScheduleConfig(init_value=1.0, end_value=0.0, steps=4).to_dict()["class_name"]
        'LinearSchedule'
    """

    class_name: ClassVar[str] = "LinearSchedule"
    builder: ClassVar[Callable[..., Any]] = _linear


@dataclasses.dataclass(frozen=True, kw_only=True)
class CosineScheduleConfig(BaseScheduleConfig):
    """Cosine decay to ``end_value = init_value * decay_factor`` over ``steps``.

    Example:
        >>> round(CosineScheduleConfig(init_value=0.1, steps=100).end_value, 6)
        0.01
    """

    class_name: ClassVar[str] = "CosineSchedule"
    builder: ClassVar[Callable[..., Any]] = _cosine
    end_value: float | None = None
    decay_factor: float = 0.1
    exponent: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.derive("end_value", decayed_end(self.class_name, self.init_value, self.decay_factor, self.end_value, 0.1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExponentialScheduleConfig(BaseScheduleConfig):
    """Exponential decay reaching ``init_value * decay_rate`` at ``steps``.

    Example:
        >>> round(ExponentialScheduleConfig(init_value=0.1, decay_rate=0.5, steps=10).end_value, 6)
        0.05
    """

    class_name: ClassVar[str] = "ExponentialSchedule"
    builder: ClassVar[Callable[..., Any]] = _exponential
    end_value: float | None = None
    decay_rate: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.end_value is None:
            self.derive("end_value", self.init_value * self.decay_rate)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConcatScheduleConfig(BaseScheduleConfig):
    """Named schedules one after another; ``steps`` left out is the sum of theirs.

    Example:
        >>> c = ConcatScheduleConfig(init_value=0.0, end_value=0.0, schedules={
        ...     "up": LinearScheduleConfig(init_value=0.0, end_value=1.0, steps=2),
        ...     "down": LinearScheduleConfig(init_value=1.0, end_value=0.0, steps=3)})
        >>> c.steps
        5
    """

    class_name: ClassVar[str] = "ConcatSchedule"
    builder: ClassVar[Callable[..., Any]] = _concat
    init_value: float | None = None  # type: ignore[assignment]
    end_value: float | None = None
    check_continuity: bool = True
    schedules: dict[str, ScheduleConfigs]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.derive("steps", self.built.total_steps)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarmupCosineDecayScheduleConfig(BaseScheduleConfig):
    """Linear warmup to ``peak_value``, then cosine decay to ``peak_value * decay_factor``; give two
    of ``steps``, ``warmup_steps``, ``decay_steps``.

    Example:
        >>> WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=20, decay_steps=80).steps
        100
    """

    class_name: ClassVar[str] = "WarmupCosineDecaySchedule"
    builder: ClassVar[Callable[..., Any]] = _warmup_cosine
    init_value: float = 0.0
    peak_value: float = 1e-3
    decay_factor: float = 0.1
    warmup_steps: int = 0
    decay_steps: int | None = None
    exponent: float = 1.0
    end_value: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.derive("steps", self.built.total_steps)
        self.derive("decay_steps", self.steps - self.warmup_steps)  # type: ignore[operator]
        self.derive("end_value", decayed_end(self.class_name, self.peak_value, self.decay_factor, self.end_value, 0.1))


#: Every schedule config, the annotation of a field that holds one (``learning_rate``,
#: ``schedules``): a parser that resolves a section by its ``class_name`` (compoconf's
#: ``parse_config``) finds each there; ``ScheduleInterface.cfgtype`` is the same union.
ScheduleConfigs = Union[  # noqa: UP007 (a runtime value, read by get_type_hints)
    ConstantScheduleConfig, LinearScheduleConfig, CosineScheduleConfig, ExponentialScheduleConfig,
    ConcatScheduleConfig, WarmupCosineDecayScheduleConfig,
]


# -- transforms ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradientTransformConfig(TypedConfig):
    """Where a transform goes: on the gradients before the optimizer (``True``) or on its updates
    after.

    Example:
        >>> GradientTransformConfig().before_optimizer
        True
    """

    registry: ClassVar[str] = "transforms"
    before_optimizer: bool | None = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class WeightDecayConfig(GradientTransformConfig):
    """Weight decay on the parameters whose path the regexes choose (see ``WeightDecay``).

    Example:
        >>> WeightDecayConfig(value=0.01).instantiate().mask({"bias": 0.0, "kernel": 0.0})
        {'bias': False, 'kernel': True}
    """

    class_name: ClassVar[str] = "WeightDecay"
    builder: ClassVar[Callable[..., Any]] = _weight_decay
    before_optimizer: bool | None = None
    value: float = 0.0
    mode: Literal["whitelist", "blacklist"] = "whitelist"
    parameter_regex_include: str = DEFAULT_DECAY_REGEX
    parameter_regex_exclude: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradClipNormConfig(GradientTransformConfig):
    """Clipping by global norm (``max_norm`` left out: the fork's 1e8).

    Example:
        >>> GradClipNormConfig(max_norm=1.0).instantiate().before_optimizer
        True
    """

    class_name: ClassVar[str] = "GradClipNorm"
    builder: ClassVar[Callable[..., Any]] = _clip_norm
    before_optimizer: bool = True
    max_norm: float = 1e8


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradClipValueConfig(GradientTransformConfig):
    """Clipping of each element to ``[-max_delta, max_delta]`` (left out: the fork's 1e8).

    Example:
        >>> GradClipValueConfig().max_delta
        100000000.0
    """

    class_name: ClassVar[str] = "GradClipValue"
    builder: ClassVar[Callable[..., Any]] = _clip_value
    before_optimizer: bool = True
    max_delta: float = 1e8


#: Every transform config (the annotation of ``transforms``' values; ``Transform.cfgtype``).
TransformConfigs = Union[WeightDecayConfig, GradClipNormConfig, GradClipValueConfig]  # noqa: UP007
Transform.config_class = GradientTransformConfig


# -- optimizers ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseOptimizerConfig(TypedConfig):
    """Every optimizer config's fields: ``learning_rate`` (number or schedule config),
    ``transforms``, ``log_learning_rate``.

    Example:
        >>> BaseOptimizerConfig(learning_rate=0.01).learning_rate
        0.01
    """

    registry: ClassVar[str] = "optimizers"
    learning_rate: float | ScheduleConfigs = 1e-3
    transforms: dict[str, TransformConfigs] = dataclasses.field(default_factory=dict)
    log_learning_rate: bool = True

    def __post_init__(self) -> None:
        rate = self.learning_rate
        if not isinstance(rate, (BaseScheduleConfig, numbers.Real, str)) or isinstance(rate, bool):
            raise TypedConfigError(explain(
                f"{type(self).__name__}.learning_rate must be a number or a schedule config",
                expected="e.g. 1e-3, or LinearScheduleConfig(init_value=1e-3, end_value=0.0, steps=1000)",
                received=describe(rate),
                fix="pass a float or one of the *ScheduleConfig values (a YAML section goes to build_optimizer)"))
        if not isinstance(rate, BaseScheduleConfig):
            object.__setattr__(self, "learning_rate", checked(real, key="learning_rate", value=rate, minimum=0.0))
        super().__post_init__()

    def keys(self) -> dict[str, Any]:
        rate = self.learning_rate  # a number, or a schedule config as its built schedule
        if isinstance(rate, BaseScheduleConfig):
            rate = rate.to_dict() if rate.built is None else rate.built
        return {**super().keys(), "learning_rate": rate}

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "learning_rate": _plain(self.learning_rate)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SGDConfig(BaseOptimizerConfig):
    """SGD; ``momentum`` left out keeps no momentum state.

    Example:
        >>> SGDConfig(learning_rate=0.01, momentum=0.9, nesterov=True).nesterov
        True
    """

    class_name: ClassVar[str] = "SGD"
    builder: ClassVar[Callable[..., Any]] = _sgd
    momentum: float | None = None
    nesterov: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdamWConfig(BaseOptimizerConfig):
    """AdamW; ``weight_decay`` a rate or a :class:`WeightDecayConfig` (its mask).

    Example:
        >>> AdamWConfig(learning_rate=0.01).weight_decay.value
        0.0
    """

    class_name: ClassVar[str] = "AdamW"
    builder: ClassVar[Callable[..., Any]] = _adamw
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float | WeightDecayConfig = dataclasses.field(default_factory=WeightDecayConfig)
    nesterov: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class LambConfig(BaseOptimizerConfig):
    """LAMB; the trust ratio applies where the weight decay's mask says.

    Example:
        >>> LambConfig(learning_rate=0.01).eps
        1e-06
    """

    class_name: ClassVar[str] = "Lamb"
    builder: ClassVar[Callable[..., Any]] = _lamb
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    eps_root: float = 0.0
    weight_decay: float | WeightDecayConfig = dataclasses.field(default_factory=WeightDecayConfig)


# -- the classes they build ------------------------------------------------------------------


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
        >>> s = LinearSchedule(LinearScheduleConfig(init_value=1.0, end_value=0.0, steps=4))
        >>> float(s(2)), s.total_steps, isinstance(s, ScheduleInterface)
        (0.5, 4, True)
    """

    config_class: ClassVar[type[BaseScheduleConfig]] = BaseScheduleConfig

    def __init__(self, config: BaseScheduleConfig | None = None, /, **keys: Any) -> None:
        _config_or_keys(type(self), config, keys)
        self.config: BaseScheduleConfig | None = config
        self.keys: dict[str, Any] = config.keys() if config is not None else dict(keys)
        builder = self.config_class.builder
        self._schedule = config.built if config is not None else builder(**keys)  # type: ignore[misc]
        self.total_steps: int | None = total_steps(self._schedule)

    def __call__(self, count: Any) -> Any:
        """The learning rate at step ``count`` (a float32 array)."""
        return self._schedule(count)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config if self.config is not None else self.keys})"


def _component_class(interface: type, config_class: type[TypedConfig]) -> Any:
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

ConstantSchedule = _component_class(ScheduleInterface, ConstantScheduleConfig)
LinearSchedule = _component_class(ScheduleInterface, LinearScheduleConfig)
CosineSchedule = _component_class(ScheduleInterface, CosineScheduleConfig)
ExponentialSchedule = _component_class(ScheduleInterface, ExponentialScheduleConfig)
ConcatSchedule = _component_class(ScheduleInterface, ConcatScheduleConfig)
WarmupCosineDecaySchedule = _component_class(ScheduleInterface, WarmupCosineDecayScheduleConfig)


def _scheduler(rate: Any) -> Any:
    """The fork's ``optimizer.scheduler``: a number as a float, else the built schedule."""
    if isinstance(rate, BaseScheduleConfig):
        return SCHEDULES.get(rate.class_name)(rate)  # type: ignore[arg-type]
    if isinstance(rate, (numbers.Real, str)) and not isinstance(rate, bool):
        return real("learning_rate", rate, minimum=0.0)
    return build_schedule(rate, where=here("learning_rate"))


class OptimizerInterface(optax.GradientTransformationExtraArgs, metaclass=ConfigTyped):
    """An optimizer of the fork's form: ``Optimizer(config)`` or ``Optimizer(**keys)``, with
    ``scheduler`` and ``config``.

    Example:
        >>> tx = SGD(SGDConfig(learning_rate=0.5))
        >>> isinstance(tx, optax.GradientTransformation), tx.scheduler
        (True, 0.5)
    """

    config_class: ClassVar[type[BaseOptimizerConfig]] = BaseOptimizerConfig
    config: BaseOptimizerConfig | None
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
            self.weight_decay, self.weight_decay_mask = _decay_and_mask(to_dict(decay))
        return self


SGD = _component_class(OptimizerInterface, SGDConfig)
AdamW = _component_class(OptimizerInterface, AdamWConfig)
Lamb = _component_class(OptimizerInterface, LambConfig)

#: The fork's name of what a transform config builds: gyre's :class:`~gyre.config.Transform`.
GradientTransformInterface = Transform
