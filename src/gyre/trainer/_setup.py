"""The trainer's config (``TrainerModuleConfig``: the ``trainer`` keys of :class:`gyre.TrainerModule`
beyond every trainer's), and building a trainer's parts from its config sections, through
:mod:`gyre.config`'s registries."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from flax import nnx
from pydantic import Field, field_validator

from gyre.config._jax_trainer import jax_trainer_component
from gyre.config._schema import TrainerConfig
from gyre.core._checks import instance
from gyre.core._errors import describe, explain
from gyre.trainer._model import build_registered

LOGGER_KEYS = ("log_dir", "log_steps_every", "tool_config", "log_file_verbosity")


class TrainerModuleConfig(TrainerConfig):
    """The keys of :class:`gyre.TrainerModule`'s ``trainer`` section.

    Attributes:
        seed_eval: the seed of the evaluation's random key; ``None``: the training seed's.
        max_steps_per_epoch: at most this many steps make an epoch (the next continues the
            loader); ``None``: the loader's whole pass.
        log_param_stats: log each parameter's min, max, mean and std every step.
        log_grad_stats: the same of each gradient; ``log_intermediates``: of each sown value.
        nan_keys: with ``detect_nans``, the training values whose NaN or Inf stops the run;
            ``None``: all of them.
        tabulate_model: write ``model.txt`` and ``params.txt`` into the run folder.
        augmentation: a registered module changing each training batch, e.g.
            ``{class_name: GaussianNoise, scale: 0.1}``; ``preprocessing``: every batch.

    Example:
        >>> TrainerModuleConfig(nan_keys=["train/loss"], seed_eval=0).nan_keys
        ('loss',)
    """

    seed_eval: int | None = None
    max_steps_per_epoch: Annotated[int, Field(ge=1)] | None = None
    log_param_stats: bool = False
    log_grad_stats: bool = False
    log_intermediates: bool = False
    nan_keys: tuple[str, ...] | None = None
    tabulate_model: bool = False
    augmentation: dict[str, Any] | None = None
    augmentation_seed: int = 44
    preprocessing: dict[str, Any] | None = None

    @field_validator("nan_keys", mode="before")
    @classmethod
    def _nan_keys(cls, value: object) -> object:
        if value is None:
            return None
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(k, str) and k for k in value):
            raise ValueError(explain(
                "trainer.nan_keys must be a list of training value names",
                expected="e.g. ['train/loss'] or ['loss', 'acc'] (null: every value)", received=describe(value),
                fix="nan_keys: [train/loss]"))
        return tuple(k.removeprefix("train/") for k in value)


def component(kind: str, section: Mapping[str, Any], where: str, extra_allowed: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """``(registered class, checked keyword arguments)`` of a component section."""
    from gyre.config import REGISTRIES, validate_component

    kwargs = validate_component(kind, section, where=where, extra_allowed=extra_allowed)
    return REGISTRIES[kind].get(section["class_name"], where=f"{where}.class_name"), kwargs


def trainer_config_of(cls: type, given: Any, options: Mapping[str, Any]) -> Any:
    """The validated trainer config: ``given`` with ``options`` on top (logger keys: ``logger``)."""
    config_class = getattr(cls, "config_class", None) or TrainerConfig
    given = plain_section(given)
    if given is None:
        data: dict[str, Any] = {}
    elif isinstance(given, Mapping):
        data = dict(given)
    elif hasattr(given, "model_dump"):
        data = given.model_dump(exclude_unset=False)
    else:
        raise TypeError(explain(
            "the trainer config must be a mapping or a gyre.config.TrainerConfig",
            expected="{'train_epochs': 5, ...} or the 'trainer' section of a loaded config",
            received=describe(given),
            fix="pass trainer_config=config.trainer, or keyword options (train_epochs=5)"))
    options = dict(options)
    moved = {k: options.pop(k) for k in LOGGER_KEYS if k in options}
    if moved:  # logger keys given as trainer keywords (log_dir=..., log_steps_every=...)
        logger = data.get("logger") or {}
        logger = dict(logger) if isinstance(logger, Mapping) else logger.model_dump()
        if moved.get("log_dir") is not None:
            moved["log_dir"] = str(moved["log_dir"])
        data["logger"] = {**logger, **moved}
    data.update(options)
    data.setdefault("train_epochs", 1)
    return config_class.model_validate(jax_trainer_component(data, "trainer"))


def plain_section(section: Any) -> Any:
    """An ``ml_collections.ConfigDict`` section as a plain dict, else the section as it is."""
    return section.to_dict() if callable(getattr(section, "to_dict", None)) else section


def build_model(config: Any, section: Mapping[str, Any] | None) -> Any:
    """The model of the ``model`` section; an nnx model gets ``rngs=nnx.Rngs(seed)``."""
    if section is None:
        raise TypeError(explain(
            "the trainer has no model",
            expected="model=<a flax module> or a model section with a registered class_name",
            received="neither",
            fix="TrainerModule(model=MyModel(rngs=nnx.Rngs(0)), optimizer=optax.adam(1e-3)), or a "
            "config with model: {class_name: MyModel, ...}"))
    from gyre.config import model_kind

    section = jax_trainer_component(dict(section), "model")  # jax_trainer's name + hparams
    factory, kwargs = component("models", section, "model", ("rngs",))
    # a flax class is built by its own API (a given model_mode that contradicts it is the
    # trainer's explained error once built); a factory function by model_mode
    if (model_kind(section["class_name"]) or config.model_mode) == "nnx":
        return build_registered(factory, kwargs, rngs=nnx.Rngs(config.seed))
    return build_registered(factory, kwargs)


def _section(config: Any, key: str) -> dict[str, Any] | None:
    section = getattr(config, key, None)
    if section is None:
        return None
    if not isinstance(section, Mapping) or not isinstance(section.get("class_name"), str):
        raise TypeError(explain(
            f"trainer.{key} must name a registered module",
            expected="{'class_name': 'GaussianNoise', ...} (a class registered with @gyre.config.register_model)",
            received=describe(section), fix=f"{key}: {{class_name: GaussianNoise, scale: 0.1}}"))
    return dict(section)


def wrap_model(config: Any, model: Any, mode: str) -> tuple[Any, Any]:
    """``(model wrapped by trainer.augmentation, trainer.preprocessing or None)``."""
    built = []
    for key in ("augmentation", "preprocessing"):
        section = _section(config, key)
        if section is None:
            built.append(None)
            continue
        cls, kwargs = component("models", section, f"trainer.{key}", ("rngs", "wrapped_model"))
        supplied: dict[str, Any] = {}
        if key == "augmentation":
            supplied["wrapped_model"] = model
            if mode == "nnx":
                supplied["rngs"] = nnx.Rngs(config.seed, augmentation=config.augmentation_seed)
        built.append(build_registered(cls, kwargs, **supplied))
    augmented, preprocessing = built
    return (augmented if augmented is not None else model), preprocessing


def build_optimizer_of(section: Any, *, run_steps: int | None = None, deferred: bool = False) -> Any:
    """The optimizer of the ``optimizer`` section (a float: Adam); ``deferred``: ``None`` if it
    needs the run's length."""
    if section is None:
        raise TypeError(explain(
            "the trainer has no optimizer",
            expected="optimizer=<an optax optimizer> or an optimizer section", received="neither",
            fix="TrainerModule(..., optimizer=optax.adam(1e-3)) or optimizer: {class_name: AdamW, learning_rate: 1e-3}"))
    from gyre.config import RunLengthUnknown, build_optimizer

    if isinstance(section, (int, float)) and not isinstance(section, bool):
        section = {"class_name": "Adam", "learning_rate": float(section)}
    try:  # run_steps None: the length set around the trainer (gyre fit's), if any
        return build_optimizer(section, where="optimizer", run_steps=run_steps)
    except RunLengthUnknown:
        if deferred:
            return None
        raise


def build_callbacks(config: Any) -> list[Any]:
    """The callbacks of ``trainer.callbacks``, in order (``class_name`` defaults to the name)."""
    out = []
    for name, section in (config.callbacks or {}).items():
        section = dict(section or {})
        section.setdefault("class_name", name)
        cls, kwargs = component("callbacks", section, f"trainer.callbacks.{name}")
        out.append(cls(**kwargs))
    return out


def build_writer(config: Any, log_dir: Path) -> Any:
    """The writer of ``logger.tool_config`` (default TensorBoard, or CSV without tensorboardX)."""
    from gyre.loggers import CSVWriter, TensorBoardWriter

    tool = config.logger.tool_config
    if tool is not None:
        section = dict(tool) if isinstance(tool, Mapping) else tool.model_dump()
        cls, kwargs = component("loggers", section, "trainer.logger.tool_config", ("log_dir",))
        return cls(**kwargs, log_dir=str(log_dir))
    if importlib.util.find_spec("tensorboardX") is not None:
        return TensorBoardWriter(log_dir / "tensorboard")
    return CSVWriter(log_dir / "metrics.csv")


def init_ddp_mesh() -> Any:
    """A one-axis ``("data",)`` mesh over every device, for the trainer's ``mesh=``.

    Example:
        >>> import jax
        >>> mesh = init_ddp_mesh()
        >>> mesh.axis_names, mesh.size == jax.device_count()
        (('data',), True)
    """
    from gyre.parallel import DataParallel

    return DataParallel(data_axis="data").mesh


def strategy_of_mesh(mesh: Any) -> Any:
    """Data parallelism over the trainer's ``mesh=``: batches split over its first axis."""
    from jax.sharding import Mesh

    from gyre.parallel import DataParallel

    instance(mesh, "the trainer's mesh", Mesh, kind="a jax.sharding.Mesh",
             expected="jax.sharding.Mesh(np.asarray(jax.devices()), ('data',)), or None (trainer.num_devices decides)",
             fix="pass mesh=jax.sharding.Mesh(np.asarray(jax.devices()), ('data',)) or leave it out")
    return DataParallel(mesh=mesh, data_axis=mesh.axis_names[0])


def strategy_of(config: Any) -> Any:
    """The strategy a trainer config asks for (see ``TrainerModule.strategy``)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from gyre.parallel import DataParallel, get_strategy

    if config.debug:
        return get_strategy("eager")
    n = config.num_devices
    if n is None or n == 1:
        return get_strategy("jit")
    devices = jax.devices()
    if n > len(devices):
        raise ValueError(explain(
            f"num_devices={n} but only {len(devices)} devices are visible",
            expected=f"num_devices between 1 and {len(devices)}", received=f"num_devices={n}",
            fix=f"set trainer.num_devices: {len(devices)} (or leave it out for one device)"))
    return DataParallel(mesh=Mesh(np.asarray(devices[:n]), ("data",)))
