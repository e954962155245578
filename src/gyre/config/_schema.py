"""The strict config schema: pydantic models of the whole config, ``trainer`` and
``trainer.logger``; every mistake is a :class:`ConfigError`."""

from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from gyre.config._components import (
    ConfigError,
    RunLengthUnknown,
    check_section,
    check_signature,
    each_section,
    from_pydantic,
    is_section,
    lookup,
    plain,
    section_mapping,
)
from gyre.config._jax_trainer import (
    from_jax_trainer,
    is_jax_trainer_section,
    jax_trainer_component,
    jax_trainer_dataset,
)
from gyre.config._optim import optax_optimizer, unknown_optimizer
from gyre.config._registry import REGISTRIES
from gyre.config._schedules import build_schedule
from gyre.config._tools import TensorboardConfig, WandbConfig, tool_section, validate_tool_section
from gyre.core._errors import describe, explain, suggest

# -- the top-level schema ---------------------------------------------------------------------


@contextlib.contextmanager
def _explained(cls: type[_Section]) -> Iterator[None]:
    """Raises pydantic's ``ValidationError`` as the :class:`ConfigError` of ``cls``'s section."""
    try:
        yield
    except ValidationError as err:
        raise from_pydantic(err, cls, cls.section_path) from None


class _Section(BaseModel):
    """A strict section: unknown keys and wrong types are :class:`ConfigError`\\ s naming their
    dotted path."""

    model_config = ConfigDict(extra="forbid", strict=True)
    section_path: ClassVar[str] = ""

    def __init__(self, section: Mapping[str, Any] | None = None, /, **data: Any) -> None:
        # Section(mapping) as well as Section(**keys): how compoconf's parse_config builds a
        # class that is not a dataclass (the kpoeppel fork's FullConfig.trainer)
        if section is not None:
            if not isinstance(section, Mapping) or data:
                raise ConfigError(explain(
                    f"{type(self).__name__} takes a section mapping or keyword arguments, not both",
                    expected=f"{type(self).__name__}({{'train_epochs': 2}}) or {type(self).__name__}(train_epochs=2)",
                    received=f"{describe(section)}" + (f" and keys {sorted(data)}" if data else ""),
                    fix="pass the section's keys in the mapping, or pass keys alone"))
            data = dict(section)
        with _explained(type(self)):
            super().__init__(**data)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Validates ``obj`` (a mapping); mistakes are :class:`ConfigError`\\ s."""
        with _explained(cls):
            return super().model_validate(obj, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Validates JSON text; mistakes are :class:`ConfigError`\\ s."""
        with _explained(cls):
            return super().model_validate_json(json_data, **kwargs)


class LoggerConfig(_Section):
    """``trainer.logger``: where and how often the trainer logs.

    Attributes:
        log_dir: the run folder (default: chosen by the trainer; the string ``None`` is none; a
            leading ``~`` is the home folder, here and in ``base_log_dir``).
        log_steps_every: log step metrics every this many steps (0: per epoch only).
        tool_config: a writer section checked against ``LOGGERS``, or a typed
            :class:`~gyre.config.TensorboardConfig` / :class:`~gyre.config.WandbConfig`.
        log_file_verbosity: the level of ``<log_dir>/run.log``.
        stderrthreshold: the level from which records are also printed on stderr.
        base_log_dir: the folder of the run folders when ``log_dir`` is left out.
        tool: jax_trainer's short form of ``tool_config`` (``TensorBoard``, ``WandB``, ``MLflow``,
            ``CSV``); not with ``tool_config``.
        project_name: the W&B project of ``tool: WandB``.

    Example:
        >>> LoggerConfig(tool="WandB", project_name="cifar").tool_config["class_name"]
        'WandBToolLogger'
        >>> LoggerConfig(log_step_every=10)
        Traceback (most recent call last):
        gyre.config.ConfigError: unknown key trainer.logger.log_step_every ... Did you mean 'log_steps_every'?
        ...
    """

    section_path: ClassVar[str] = "trainer.logger"
    class_name: Literal["Logger"] = "Logger"
    log_dir: str | None = None
    log_steps_every: Annotated[int, Field(ge=0)] = 50
    tool_config: dict[str, Any] | TensorboardConfig | WandbConfig | None = None
    log_file_verbosity: Literal["debug", "info", "warning", "error"] = "info"
    stderrthreshold: Literal["debug", "info", "warning", "error"] = "warning"
    base_log_dir: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _jax_trainer_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if data.get("log_dir") == "None":
            data["log_dir"] = None
        for key in ("log_dir", "base_log_dir"):  # "~/runs/a" is the home's, not a folder named "~"
            if isinstance(data.get(key), str) and data[key].startswith("~"):
                data[key] = os.path.expanduser(data[key])
        if "tool" in data or "project_name" in data:
            data["tool_config"] = tool_section(data.pop("tool", "TensorBoard"), data.pop("project_name", None),
                                               data.get("tool_config"), where=cls.section_path)
        return data

    @field_validator("tool_config", mode="before")
    @classmethod
    def _tool(cls, value: Any) -> Any:
        if value is None:
            return None
        section = validate_tool_section(value, where=f"{cls.section_path}.tool_config")
        return value if isinstance(value, (TensorboardConfig, WandbConfig)) else section

    @field_serializer("tool_config")
    def _tool_section(self, value: Any) -> dict[str, Any] | None:
        return None if value is None else dict(value)


class _NamedSectionMeta(type(_Section)):  # type: ignore[misc]
    """Gives a trainer config class a ``class_name`` on the class (the trainer whose
    ``config_class`` it is), for compoconf."""

    def __getattr__(cls, name: str) -> Any:
        fields = cls.__dict__.get("__pydantic_fields__")
        if name != "class_name" or not fields or "class_name" not in fields:
            return super().__getattr__(name)  # type: ignore[misc]
        trainers = REGISTRIES["trainers"]
        named = [n for n in trainers if getattr(trainers.get(n), "config_class", None) is cls]
        return named[0] if named else fields["class_name"].default


class TrainerConfig(_Section, metaclass=_NamedSectionMeta):
    """``trainer``: what the trainer does; a trainer's ``config_class`` subclasses it to add keys.

    Attributes:
        class_name: the trainer, looked up in ``TRAINERS``.
        check_val_every_n_epoch: validate every this many epochs (0: never; then no best model is
            saved and the test scores the final model, with a warning).
        debug: run without jit.
        detect_nans: stop on a NaN or Inf loss or metric (default); ``false`` trains through them.
        model_mode: ``"nnx"`` or ``"linen"``.
        steps_per_call: training steps fused into one compiled call, or ``"auto"``: gyre measures
            the first steps and fuses 100 per call only when that measured faster.
        num_devices: devices for data parallelism (default: one device, no data parallelism).
        resume: ``"latest"`` resumes from the run's latest checkpoint.
        resume_every_minutes: minutes between checkpoints in ``<log_dir>/resume`` (one is also
            saved when training ends, stops or is preempted); ``0``: every epoch's end.
        callbacks: names to callback sections (``class_name`` defaults to the name).

    Example:
        >>> TrainerConfig(train_epochs=3).model_mode
        'nnx'
    """

    section_path: ClassVar[str] = "trainer"
    class_name: str = "TrainerModule"
    train_epochs: Annotated[int, Field(ge=1)] = 1
    check_val_every_n_epoch: Annotated[int, Field(ge=0)] = 1
    debug: bool = False
    enable_progress_bar: bool = True
    seed: int = 42
    log_grad_norm: bool = False
    detect_nans: bool = True
    model_mode: Literal["nnx", "linen"] = "nnx"
    steps_per_call: int | Literal["auto"] = 1
    num_devices: Annotated[int, Field(ge=1)] | None = None
    resume: Literal["latest"] | None = None
    resume_every_minutes: Annotated[float, Field(ge=0)] = 10.0
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    callbacks: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("steps_per_call", mode="before")
    @classmethod
    def _steps_per_call(cls, value: Any) -> Any:
        if isinstance(value, str) and value == "auto":
            return value
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
            return int(value)  # (a numpy integer too)
        raise ValueError("steps_per_call is a whole number >= 1, or 'auto'")

    @field_validator("logger", mode="before")
    @classmethod
    def _logger(cls, value: Any) -> Any:
        return LoggerConfig() if value is None else value

    @field_validator("callbacks", mode="before")
    @classmethod
    def _callbacks(cls, value: Any) -> Any:
        if value is None:
            return {}
        checked = {}
        for key, body in section_mapping(value, "trainer.callbacks").items():
            where = f"trainer.callbacks.{key}"
            body = {} if body is None else section_mapping(body, where)
            checked[key] = check_section("callbacks", {"class_name": key, **body}, where=where)
            _check_monitor_mode(checked[key], where)
        return checked


def _check_monitor_mode(section: dict[str, Any], where: str) -> None:
    """Refuses a checkpoint's or early stopping's mode that contradicts its monitor's name, as the
    callback does."""
    monitor, mode = section.get("monitor"), section.get("mode")
    if not (isinstance(monitor, str) and mode in ("min", "max")):
        return
    from gyre.callbacks._monitor import monitor_mode

    target = lookup("callbacks", section["class_name"], where)
    if getattr(target, "mode_from_monitor", False):  # the trainer's ModelCheckpoint and EarlyStopping
        try:
            monitor_mode(where, monitor, mode)
        except ValueError as err:
            raise ConfigError(str(err)) from None


def trainer_config_class(name: str) -> type[TrainerConfig]:
    """The ``config_class`` of the trainer registered as ``name``, else :class:`TrainerConfig`."""
    trainer = lookup("trainers", name, "trainer")
    config_class = getattr(trainer, "config_class", None)
    if config_class is None:
        return TrainerConfig
    if isinstance(config_class, type) and issubclass(config_class, TrainerConfig):
        return config_class
    raise ConfigError(explain(
        f"the trainer {name!r} has a config_class that is not a gyre TrainerConfig",
        expected="config_class = a subclass of gyre.config.TrainerConfig", received=describe(config_class),
        fix="derive the trainer's config class from gyre.config.TrainerConfig"))


_OPTIMIZER_PARTS = ("schedules", "transforms")


def _optimizer_part(section: Mapping[str, Any], where: str) -> Any:
    """A schedule or transform section inside an optimizer section, checked against its registry,
    and the sections inside it."""
    name = section["class_name"]
    kinds = [k for k in _OPTIMIZER_PARTS if isinstance(name, str) and name in REGISTRIES[k]]
    if not kinds:
        known = sorted({n for k in _OPTIMIZER_PARTS for n in REGISTRIES[k]})
        raise ConfigError(explain(
            f"unknown schedule or transform name {name!r} at {where}.class_name."
            + (suggest(name, known) if isinstance(name, str) else ""),
            expected=f"one of the registered schedules and transforms: {', '.join(known) or '(none yet)'}",
            received=describe(name),
            fix="use a registered name, or register your own with @gyre.config.register_schedule "
            "or @gyre.config.register_transform"))
    if len(kinds) > 1:
        return plain(section)  # both: the optimizer's builder decides
    checked = check_section(kinds[0], section, where=where)
    return {k: each_section(v, f"{where}.{k}", _optimizer_part) for k, v in checked.items()}


def validate_optimizer(section: Any, *, where: str = "optimizer") -> dict[str, Any]:
    """Checks an optimizer section (jax_trainer's form rewritten first) and the schedule and
    transform sections inside it."""
    data = section_mapping(section, where)
    if is_jax_trainer_section(data):
        data = from_jax_trainer(data, where=where)
    name = data.get("class_name")
    if isinstance(name, str) and name not in REGISTRIES["optimizers"]:
        function = optax_optimizer(name)
        if function is None:
            raise ConfigError(unknown_optimizer(name, where))
        rest = {k: v for k, v in data.items() if k != "class_name"}
        checked = {"class_name": name, **check_signature("optimizers", f"optax.{name}", function, rest, where, ("transforms",))}
    else:
        checked = check_section("optimizers", data, where=where)
    return {k: each_section(v, f"{where}.{k}", _optimizer_part) for k, v in checked.items()}


class Config(_Section):
    """A whole config: ``trainer``, ``model``, ``optimizer`` and ``dataset`` sections.

    ``model``, ``optimizer`` and ``dataset`` are checked against ``MODELS`` (``rngs`` is the
    trainer's), ``OPTIMIZERS`` and ``DATASETS``, and kept as dicts for their builders.

    Attributes:
        seed: the run's seed (Python's and numpy's in ``gyre fit``); left out, ``trainer.seed``;
            both given and different is an error.
        num_gpus: kept for jax_trainer's configs, not read (``trainer.num_devices`` picks the devices;
            ``gyre fit`` warns when ``num_gpus`` above 1 differs from it).

    Example:
        >>> from gyre.config import register_dataset, register_model, register_optimizer
        >>> @register_model("DocMLP")
        ... def doc_mlp(width: int = 32, *, rngs=None): ...
        >>> @register_optimizer("DocSGD")
        ... def doc_sgd(learning_rate: float, momentum: float = 0.0): ...
        >>> @register_dataset("DocDigits")
        ... def doc_digits(batch_size: int = 64): ...
        >>> config = Config(trainer=TrainerConfig(train_epochs=2),
        ...                 model={"class_name": "DocMLP"},
        ...                 optimizer={"class_name": "DocSGD", "learning_rate": 1},
        ...                 dataset={"class_name": "DocDigits"})
        >>> config.optimizer, config.model
        ({'class_name': 'DocSGD', 'learning_rate': 1.0, 'momentum': 0.0}, {'class_name': 'DocMLP', 'width': 32})
    """

    seed: int = 42
    num_gpus: Annotated[int, Field(ge=0)] = 1
    trainer: SerializeAsAny[TrainerConfig]
    model: dict[str, Any]
    optimizer: dict[str, Any]
    dataset: dict[str, Any]

    @model_validator(mode="before")
    @classmethod
    def _run_seed(cls, data: Any) -> Any:
        """The top-level ``seed`` and ``trainer.seed`` are one seed: either sets the other; both
        must agree."""
        trainer = data.get("trainer") if isinstance(data, Mapping) else None
        if isinstance(trainer, TrainerConfig):
            given = trainer.seed if "seed" in trainer.model_fields_set else None
        else:
            given = trainer.get("seed") if isinstance(trainer, Mapping) else None
        if given is None:
            if isinstance(trainer, Mapping) and "seed" in data:
                data = {**data, "trainer": {**trainer, "seed": data["seed"]}}
        elif "seed" not in data:
            data = {**data, "seed": given}
        elif data["seed"] != given and all(type(v) is int for v in (data["seed"], given)):  # else: wrong types
            raise ConfigError(explain(
                f"seed {data['seed']!r} and trainer.seed {given!r} disagree",
                expected="one seed: the top-level seed (the run's: the trainer's initial parameters "
                "and Python's and numpy's generators) or trainer.seed, or both equal",
                received=f"seed: {data['seed']!r} and trainer.seed: {given!r}",
                fix="keep one: remove trainer.seed from the config (seed sets it), or give both the "
                "same value (override both: seed=N trainer.seed=N)"))
        return data

    @field_validator("trainer", mode="before")
    @classmethod
    def _trainer(cls, value: Any) -> Any:
        if isinstance(value, TrainerConfig):
            return value
        section = jax_trainer_component(section_mapping(value, "trainer"), "trainer")
        return trainer_config_class(section.get("class_name", "TrainerModule"))(**section)

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        section = jax_trainer_component(section_mapping(value, "model"), "model")
        return check_section("models", section, where="model", extra_allowed=("rngs",))

    @field_validator("optimizer", mode="before")
    @classmethod
    def _optimizer(cls, value: Any) -> Any:
        checked = validate_optimizer(value)
        check_schedule(checked.get("learning_rate"))
        return checked

    @field_validator("dataset", mode="before")
    @classmethod
    def _dataset(cls, value: Any) -> Any:
        section = jax_trainer_dataset(section_mapping(value, "dataset"))  # jax_trainer's constructor
        return check_section("datasets", section, where="dataset")

    @model_validator(mode="after")
    def _model_mode(self) -> Config:
        if "model_mode" in self.trainer.model_fields_set:  # given: it must match the model
            check_model_mode(self.model["class_name"], self.trainer.model_mode)
            return self
        kind = model_kind(self.model["class_name"])  # left out: the registered class's API
        if kind is not None and kind != self.trainer.model_mode:
            self.trainer = self.trainer.model_copy(update={"model_mode": kind})
        return self


def check_schedule(rate: Any, where: str = "optimizer.learning_rate") -> None:
    """Builds a schedule section so its value mistakes are reported with the config's others (unless
    its length is the run's)."""
    if not is_section(rate):
        return
    try:
        build_schedule(rate, where=where)
    except RunLengthUnknown:
        pass
    except (ValueError, TypeError, KeyError) as err:
        text = str(err.args[0]) if err.args else ""
        if "\n  fix: " not in text:
            raise
        raise ConfigError(text) from None


def model_kind(name: str) -> Literal["nnx", "linen"] | None:
    """The flax API of the registered model ``name`` (``"linen"``, ``"nnx"``, else ``None``); the
    default ``model_mode``.

    Example:
        >>> import gyre.trainer  # registers SimpleCNN and SimpleCNNLinen
        >>> model_kind("SimpleCNNLinen"), model_kind("SimpleCNN")
        ('linen', 'nnx')
    """
    from flax import linen, nnx

    model = lookup("models", name, "model")
    if not isinstance(model, type):
        return None
    return "linen" if issubclass(model, linen.Module) else "nnx" if issubclass(model, nnx.Module) else None


def check_model_mode(name: str, mode: str) -> None:
    """Refuses a registered flax model class of the other API than ``trainer.model_mode``."""
    kind = model_kind(name)
    if kind is None or kind == mode:
        return
    raise ConfigError(explain(
        f"the model {name!r} is a flax.{kind} module, but trainer.model_mode is {mode!r}",
        expected=f"trainer.model_mode: {kind} for a flax.{kind} model (or no model_mode: the model's own)",
        received=f"model_mode: {mode}, model {name} (flax.{kind})",
        fix=f"write model_mode: {kind} in the trainer section, or leave model_mode out "
        f"(or override: trainer.model_mode={kind})"))
