"""``TrainerModule``: jax_trainer's trainer over gyre's engine, checkpoints and writers; users
subclass it and write a loss function. Its config (``TrainerModuleConfig``: the ``trainer`` keys
beyond every trainer's), and its parts built from the config sections through
:mod:`gyre.config`'s registries."""

from __future__ import annotations

import datetime
import importlib.util
import inspect
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
import yaml
from flax import nnx, struct
from jax.sharding import Mesh
from pydantic import Field, field_validator

from gyre.callbacks._store import Store
from gyre.config import (
    REGISTRIES,
    TRAINERS,
    RunLengthUnknown,
    build_optimizer,
    dump_config,
    learning_rate_of,
    load_config,
    model_kind,
    validate_component,
)
from gyre.config._jax_trainer import jax_trainer_component
from gyre.config._registry import register_trainer
from gyre.config._schema import TrainerConfig
from gyre.config._yaml import warn_changed_settings
from gyre.core._checks import instance, whole
from gyre.core._errors import describe, explain, suggest, warn
from gyre.core._train_state import TrainState
from gyre.engine._epochs import check_split, first_batch, training_data
from gyre.loggers import CSVWriter, TensorBoardWriter
from gyre.parallel import DataParallel, get_strategy
from gyre.trainer._callback import ModelCheckpoint, best_of, read_model, stored_config
from gyre.trainer._logger import PHASE_NAME, EpochMetricFiles, figure_image, write_embedding
from gyre.trainer._metrics import LogMetricMode, LogMode, MetricAccumulator, scalars_for_writers
from gyre.trainer._model import (
    NNX_REST,
    LinenModel,
    NNXModel,
    build_registered,
    count_params,
    forward_module,
    lazy_init_nnx,
    model_mode_of,
    write_tabulation,
)
from gyre.trainer._steps import EPOCH, LOSS_FUNCTION, WINDOW, StepBuilder, TrainingRun

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


def build_component(
    kind: str, section: Mapping[str, Any], where: str, extra_allowed: tuple[str, ...] = (), **supplied: Any
) -> Any:
    """The registered component of a config section, built from its checked keys and
    ``supplied``; what its constructor refuses gets a note naming the section ``where``."""
    kwargs = validate_component(kind, section, where=where, extra_allowed=extra_allowed)
    factory = REGISTRIES[kind].get(section["class_name"], where=f"{where}.class_name")
    try:
        return build_registered(factory, kwargs, **supplied)
    except (ValueError, TypeError) as err:
        err.add_note(f"(raised by {section['class_name']}, built from the config's {where})")
        raise


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
    if "logger" in options:  # logger={...} beside log_dir=...: the keywords go into it (not replaced by it)
        data["logger"] = options.pop("logger")
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

    section = jax_trainer_component(dict(section), "model")  # jax_trainer's name + hparams
    # a flax class is built by its own API (a given model_mode that contradicts it is the
    # trainer's explained error once built); a factory function by model_mode
    if (model_kind(section["class_name"]) or config.model_mode) == "nnx":
        return build_component("models", section, "model", ("rngs",), rngs=nnx.Rngs(config.seed))
    return build_component("models", section, "model", ("rngs",))


def wrap_model(config: Any, model: Any, mode: str) -> tuple[Any, Any]:
    """``(model wrapped by trainer.augmentation, trainer.preprocessing or None)``."""
    built = []
    for key in ("augmentation", "preprocessing"):
        section = getattr(config, key, None)
        if section is None:
            built.append(None)
            continue
        if not isinstance(section, Mapping) or not isinstance(section.get("class_name"), str):
            raise TypeError(explain(
                f"trainer.{key} must name a registered module",
                expected="{'class_name': 'GaussianNoise', ...} (a class registered with @gyre.config.register_model)",
                received=describe(section), fix=f"{key}: {{class_name: GaussianNoise, scale: 0.1}}"))
        supplied: dict[str, Any] = {}
        if key == "augmentation":
            supplied["wrapped_model"] = model
            if mode == "nnx":
                supplied["rngs"] = nnx.Rngs(config.seed, augmentation=config.augmentation_seed)
        built.append(build_component("models", dict(section), f"trainer.{key}", ("rngs", "wrapped_model"), **supplied))
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
        out.append(build_component("callbacks", section, f"trainer.callbacks.{name}"))
    return out


def check_one_checkpoint(callbacks: Sequence[Any]) -> None:
    """Refuses two ``ModelCheckpoint`` callbacks: both would save into ``<log_dir>/checkpoints``."""
    found = [cb for cb in callbacks if isinstance(cb, ModelCheckpoint)]
    if len(found) > 1:
        raise ValueError(explain(
            f"the trainer has {len(found)} ModelCheckpoint callbacks, which would all save into <log_dir>/checkpoints",
            expected="one ModelCheckpoint (it keeps the save_top_k best models by its monitor)",
            received=", ".join(f"ModelCheckpoint(monitor={cb.monitor!r}, mode={cb.mode!r})" for cb in found),
            fix="keep one in trainer.callbacks (and in callbacks=); raise its save_top_k to keep more models"))


def build_writer(config: Any, log_dir: Path) -> Any:
    """The writer of ``logger.tool_config`` (default TensorBoard, or CSV without tensorboardX)."""
    tool = config.logger.tool_config
    if tool is not None:
        section = dict(tool) if isinstance(tool, Mapping) else tool.model_dump()
        return build_component("loggers", section, "trainer.logger.tool_config", ("log_dir",), log_dir=str(log_dir))
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
    return DataParallel(data_axis="data").mesh


def strategy_of(config: Any) -> Any:
    """The strategy a trainer config asks for (see ``TrainerModule.strategy``)."""
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
    return DataParallel(mesh=Mesh(np.asarray(devices_of_every_process(devices, n)), ("data",)))


def devices_of_every_process(devices: list[Any], n: int) -> list[Any]:
    """``n`` of ``devices``, as many of each process's own (``devices[:n]`` would leave the
    later processes none of theirs: they could not feed their rows)."""
    processes = sorted({d.process_index for d in devices})
    if len(processes) == 1:
        return devices[:n]
    if n % len(processes):
        raise ValueError(explain(
            f"num_devices={n} cannot be shared evenly by the {len(processes)} processes",
            expected=f"a multiple of {len(processes)}: each process trains on num_devices / "
            f"{len(processes)} of its own devices", received=f"num_devices={n}",
            fix=f"set trainer.num_devices: {len(devices)} (every device of every process)"))
    return [d for p in processes for d in [d for d in devices if d.process_index == p][: n // len(processes)]]


INPUT_KEYS = ("input", "inputs", "x", "image", "images")
TARGET_KEYS = ("target", "targets", "label", "labels", "y")


def batch_part(batch: Any, keys: tuple[str, ...], position: int, what: str) -> Any:
    """One part of a batch (``what``: ``"input"`` or ``"target"``): the first of ``keys`` found as a
    dict key, attribute or namedtuple field, else the item at ``position``, else a ``TypeError``."""
    for key in keys:
        if isinstance(batch, Mapping):
            if key in batch:
                return batch[key]
        elif not isinstance(batch, (tuple, list)) and hasattr(batch, key):
            return getattr(batch, key)
        elif isinstance(batch, tuple) and key in getattr(batch, "_fields", ()):
            return getattr(batch, key)  # a namedtuple with named fields
    if isinstance(batch, (tuple, list)) and len(batch) > position:
        return batch[position]
    raise TypeError(explain(
        f"the trainer cannot find the model's {what} in a batch",
        expected=f"an (inputs, targets) tuple, a dict with {keys[0]!r} or {keys[2]!r}, or a batch with "
    f".{keys[0]} (jax_trainer's SupervisedBatch)",
        received=describe(batch), fix=f"override batch_to_{what}(self, batch) in your trainer to return the {what}"))


def _no_loss(trainer: Any, method: str) -> NotImplementedError:
    return NotImplementedError(explain(
        "the trainer has no loss function",
        expected=f"a subclass of gyre.TrainerModule defining {method}",
        received=f"{type(trainer).__name__} without it",
        fix="def loss_function(self, model, batch, train=True): ... return loss, {'acc': acc} (nnx), or "
        "def loss_function_linen(self, params, state, batch, rng, train=True): ... return loss, (mutable, metrics)"))


#: what the trainer passes to each user method, by position after ``self``
CALLS = {
    "loss_function": ("model", "batch", "train"),
    "loss_function_linen": ("params", "state", "batch", "rng", "train"),
    "batch_to_input": ("batch",),
}


def check_user_methods(trainer: Any, base: type, mode: str) -> None:
    """A ``TypeError`` when the loss function for ``mode`` or ``batch_to_input`` misfits."""
    name = LOSS_FUNCTION[mode]
    cls = type(trainer)
    if getattr(cls, name, None) is getattr(base, name, None):
        defined = [
            m for k in cls.__mro__ if k is not base and k is not object for m in vars(k)
            if m != name and callable(getattr(cls, m, None)) and not m.startswith("__")
        ]
        hint = suggest(name, defined)
        if hint:
            raise TypeError(
                explain(
                    f"{cls.__name__} defines no {name}.{hint}",
                    expected=f"a method {name}(self, {', '.join(CALLS[name])}=True)",
                    received=f"the methods {sorted(defined)}",
                    fix=f"rename it to {name}",
                )
            )
        return  # the base's own NotImplementedError explains it at the first step
    for method in (name, "batch_to_input"):
        fn = getattr(trainer, method)
        args = CALLS[method]
        # the loss function as the compiled step calls it: train by keyword
        positional, keywords = (args[:-1], {"train": True}) if method == name else (args, {})
        try:
            inspect.signature(fn).bind(*positional, **keywords)
        except TypeError as err:
            raise TypeError(
                explain(
                    f"{cls.__name__}.{method} cannot take the trainer's arguments ({', '.join(args)})",
                    expected=f"def {method}(self, {', '.join(args)}{'=True' if keywords else ''})",
                    received=f"def {method}{inspect.signature(fn)} ({err})",
                    fix=f"give {method} the parameters {', '.join(args)}",
                )
            ) from None
        except ValueError:  # no signature to read (a builtin): trust it
            pass


def check_batch(batch: Any) -> None:
    """Raises a ``TypeError`` when a batch is not a pytree of arrays."""
    for leaf in jax.tree_util.tree_leaves(batch):
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex, bool)):
            name = type(leaf).__name__
            raise TypeError(
                explain(
                    f"a batch holds a {name}, which JAX cannot put in a compiled step",
                    expected="a pytree of arrays: tuples, lists, dicts, or a class registered as a pytree",
                    received=f"a {name} leaf ({type(leaf).__module__}.{name})",
                    fix=f"register {name} as a pytree (@flax.struct.dataclass, or "
                    f"jax.tree_util.register_dataclass({name}, data_fields=[...], meta_fields=[])), "
                    "or use gyre.data.SupervisedBatch",
                )
            )


def named_loaders(loader: Any, phase: str) -> list[tuple[str, Any]]:
    """``[(mode, loader)]`` of a ``val_loader`` / ``test_loader`` argument: one loader is the
    ``phase``; a dict of several (the kpoeppel jax_trainer fork's ``{"val": v1, "ood": v2}``)
    names its first ``phase`` and the others ``<phase>_<name>`` (``val_ood/acc``); ``None``: none."""
    if loader is None:
        return []
    if not isinstance(loader, Mapping):
        return [(phase, _finite(loader, phase))]
    bad = [k for k, v in loader.items() if not isinstance(k, str) or not PHASE_NAME.match(f"{phase}_{k}")
           or hasattr(v, "shape") or not hasattr(v, "__iter__")]
    if not loader or bad:
        raise TypeError(explain(
            f"a dict given as the {phase} loader must map names to loaders",
            expected=f"{{'{phase}': loader, 'ood': other_loader}}: lowercase names (letters, digits, _), each "
            "an iterable of batches (the first is logged as '" + phase + "/...', the others as '"
            + phase + "_<name>/...')",
            received="an empty dict" if not loader else f"entries {bad[:3]!r} ({describe(loader[bad[0]])})",
            fix="pass one loader, or a dict of named loaders; a batch dict goes inside a list: [{'x': ..., 'y': ...}]"))
    return [(phase if i == 0 else f"{phase}_{name}", _finite(value, f"{phase} ({name!r})"))
            for i, (name, value) in enumerate(loader.items())]


def _reusable(loaders: list[tuple[str, Any]], validations: int) -> None:
    """Refuses a one-pass iterator as a loader read by more than one validation: the first uses it up."""
    for mode, loader in loaders if validations > 1 else ():
        if isinstance(loader, Iterator) and iter(loader) is loader:
            raise TypeError(explain(
                f"the {mode} loader is an iterator: the first of the run's {validations} validations would use it "
                "up, and the second would find no batch",
                expected="a loader read again at every validation: a list of batches, gyre.data.arrays(...)'s "
                "val, or a DataLoader", received=f"{type(loader).__name__} (iter(loader) is loader)",
                fix="pass list(...) of its batches, e.g. list(gyre.data.batches((x_val, y_val), 64, shuffle=False, "
                "epochs=1, drop_remainder=False))"))


def _finite(loader: Any, phase: str) -> Any:
    """``loader``, unless it repeats forever (``gyre.data.batches`` without ``epochs``, a training
    source), which an evaluation would read without end."""
    if hasattr(loader, "epoch_steps") and getattr(loader, "epochs", 0) is None:
        raise ValueError(explain(
            f"the {phase} loader repeats forever: an evaluation over it would never end",
            expected="a loader that ends: a list of batches, gyre.data.arrays(...)'s val or test, or "
            "a DataLoader", received=f"{type(loader).__name__} with epochs=None (endless)",
            fix="gyre.data.arrays((x, y), 64, validation=0.1) gives val batches; or a list: "
            "list(gyre.data.batches((x_val, y_val), 64, shuffle=False, epochs=1, drop_remainder=False))"))
    return loader


def host_values(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics with scalars as Python floats (one transfer for all), arrays as numpy."""
    host = jax.device_get(dict(metrics))
    return {k: float(v) if jnp.ndim(v) == 0 else v for k, v in host.items()}


class TrainerState(TrainState):
    """A :class:`gyre.TrainState` that names its strategy, where the engine places the next batches."""

    strategy: Any = struct.field(pytree_node=False, default=None)


@register_trainer
class TrainerModule:
    """The base trainer: subclass it, write ``loss_function`` (nnx) or
    ``loss_function_linen`` (linen), and call :meth:`train_model`.

    Args:
        trainer_config: the ``trainer`` section; ``None``: the defaults plus ``**options``.
        model_config: the ``model`` section, used when ``model`` is not given.
        optimizer_config: the ``optimizer`` section (or a float learning rate for Adam), used
            when ``optimizer`` is not given.
        exmp_input: an example batch: the model is initialised from it now (``init_model``).
        model: an ``nnx.Module`` instance or a ``linen.Module``.
        callbacks: trainer callbacks added to those of the config.
        config: the whole config, stored with every checkpoint for :meth:`load_from_checkpoint`;
            a :class:`gyre.config.TrainerConfig` without ``trainer_config`` is the trainer section.
        mesh: a ``jax.sharding.Mesh`` to train data-parallel on; ``None``: ``trainer.num_devices``.
        **options: trainer keys (``train_epochs=3``, ``log_dir=...``), overriding
            ``trainer_config``.

    Example:
        >>> import gyre, optax, numpy as np, tempfile
        >>> from flax import nnx
        >>> class Regression(gyre.TrainerModule):
        ...     def loss_function(self, model, batch, train=True):
        ...         x, y = batch
        ...         return ((model(x)[:, 0] - y) ** 2).mean(), {}
        >>> x = np.linspace(-1, 1, 64, dtype=np.float32)[:, None]
        >>> data = gyre.data.batches((x, 3 * x[:, 0]), 16, seed=0)
        >>> trainer = Regression(model=nnx.Linear(1, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.5),
        ...                      train_epochs=20, enable_progress_bar=False, log_dir=tempfile.mkdtemp())
        >>> result = trainer.train_model(data)
        >>> round(float(trainer.bind_model().kernel[0, 0]), 2)
        3.0
        >>> trainer.close_writer()
    """

    #: a registered trainer may name a subclass of gyre.config.TrainerConfig with its own keys
    config_class: ClassVar[Any] = TrainerModuleConfig
    _state: Any = None  # the state while no loop runs
    _elapsed: Any = None  # the last run's clock
    _run: Any = None  # the running train_model's TrainingRun (gyre.trainer._steps)

    def __init__(
        self,
        trainer_config: Any = None,
        model_config: Mapping[str, Any] | None = None,
        optimizer_config: Any = None,
        exmp_input: Any = None,
        *,
        model: Any = None,
        optimizer: Any = None,
        callbacks: Sequence[Any] = (),
        config: Any = None,
        mesh: Any = None,
        **options: Any,
    ) -> None:
        model_config, optimizer_config = plain_section(model_config), plain_section(optimizer_config)

        if trainer_config is None and isinstance(config, TrainerConfig):
            trainer_config, config = config, None  # the fork's TrainerModule(config=config.trainer, ...)
        self.config = trainer_config_of(type(self), trainer_config, options)
        self.full_config = config
        self.model_config = dict(model_config) if model_config is not None else None
        self.optimizer_config = optimizer_config
        self.model = model if model is not None else build_model(self.config, model_config)
        instance(optimizer, "TrainerModule's optimizer=", optax.GradientTransformation, none=True, kind="an optax optimizer",
                 expected="an optax optimizer object, e.g. optax.adamw(1e-3); a config section or a learning rate "
                 "goes in optimizer_config=",
                 fix="pass optimizer=optax.adamw(1e-3), or optimizer_config={'class_name': 'AdamW', 'learning_rate': 1e-3}")
        # a schedule that lasts "the run" is built when train_model knows the run's length
        self.optimizer = optimizer if optimizer is not None else build_optimizer_of(optimizer_config, deferred=True)
        mode = model_mode_of(self.model)
        given = set(options) | set(trainer_config if isinstance(trainer_config, Mapping)
                                   else getattr(trainer_config, "model_fields_set", ()))
        if mode != self.config.model_mode and "model_mode" in given:
            raise ValueError(explain(
                f"model_mode is {self.config.model_mode!r} but the model is a {mode} module",
                expected=f"model_mode={mode!r} for this model",
                received=f"model_mode={self.config.model_mode!r}, model {type(self.model).__name__}",
                fix=f"set trainer.model_mode: {mode}"))
        self.model_mode = mode
        self.model, self.preprocessing = wrap_model(self.config, self.model, mode)
        check_user_methods(self, TrainerModule, mode)
        # a linen augmentation is initialised and run as the fork does: its wrapped model
        # alone (the fork's apply_fn), the augmentation's own __call__ never called
        self._adapter: Any = NNXModel(self.model) if mode == "nnx" else LinenModel(forward_module(self.model))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.log_dir = Path(self.config.logger.log_dir or Path("runs", stamp))
        self.callbacks = build_callbacks(self.config) + list(callbacks)
        check_one_checkpoint(self.callbacks)
        self._specs: dict[str, Any] | None = None
        self._writer: Any = None
        self._files: Any = None
        self._compiled: dict[str, Any] = {}
        self._config_yaml: tuple[str, str] | None = None  # the last config.yaml written
        self._input_spec: dict[str, Any] | None = None  # the model input's shape and dtype, for checkpoints
        self.history: Any = None
        if mesh is not None:  # data parallel over the mesh's first axis
            instance(mesh, "the trainer's mesh", Mesh, kind="a jax.sharding.Mesh",
                     expected="jax.sharding.Mesh(np.asarray(jax.devices()), ('data',)), or None "
                     "(trainer.num_devices decides)",
                     fix="pass mesh=jax.sharding.Mesh(np.asarray(jax.devices()), ('data',)) or leave it out")
            self._strategy = DataParallel(mesh=mesh, data_axis=mesh.axis_names[0])
        for cb in self.callbacks:
            cb.bind(self)
        if exmp_input is not None:
            self.init_model(exmp_input)

    @property
    def trainer_config(self) -> Any:
        """The trainer's config (jax_trainer's name for :attr:`config`)."""
        return self.config

    # -- what a subclass writes ---------------------------------------------------------------

    def batch_to_input(self, batch: Any) -> Any:
        """The ``input`` / ``inputs`` / ``x`` / ``image`` entry or attribute of ``batch``, else its
        first element.

        Example:
            >>> import numpy as np
            >>> TrainerModule.batch_to_input(None, (np.zeros((2, 3)), np.zeros(2))).shape
            (2, 3)
        """
        return batch_part(batch, INPUT_KEYS, 0, "input")

    def batch_to_target(self, batch: Any) -> Any:
        """The ``target`` / ``targets`` / ``label`` / ``labels`` / ``y`` entry or attribute of
        ``batch``, else its second element.

        Example:
            >>> import numpy as np
            >>> TrainerModule.batch_to_target(None, {"image": np.zeros((2, 3)), "label": np.arange(2)})
            array([0, 1])
        """
        return batch_part(batch, TARGET_KEYS, 1, "target")

    def loss_function(self, model: Any, batch: Any, train: bool = True) -> Any:
        """nnx: ``loss`` or ``(loss, metrics)`` of ``batch``, to override.

        Metrics are values or ``{"value": v, "mode": ..., "log_freq": ..., "log_mode": ...,
        "count": ...}``. A loss function that also takes ``mask=None`` gets the last evaluation
        batch padded, ``mask`` marking its real rows (compute masked means).

        Example:
            >>> TrainerModule.loss_function(None, None, None)
            Traceback (most recent call last):
            NotImplementedError: ...
        """
        raise _no_loss(self, "loss_function(self, model, batch, train) (nnx)")

    def loss_function_linen(self, params: Any, state: Any, batch: Any, rng: jax.Array, train: bool = True) -> Any:
        """linen: ``loss`` or ``(loss, (mutable_variables, metrics))``; use
        :meth:`model_linen_apply` to run the model.

        Example:
            >>> TrainerModule.loss_function_linen(None, None, None, None, None)
            Traceback (most recent call last):
            NotImplementedError: ...
        """
        raise _no_loss(self, "loss_function_linen(self, params, state, batch, rng, train) (linen)")

    def model_linen_apply(self, params: Any, state: Any, input: Any, rng: jax.Array, train: bool = True) -> tuple[Any, Any]:  # noqa: A002
        """Runs the linen model: ``(outputs, mutable_variables)``; ``rng`` is the dropout key.

        Example:
            >>> import optax, jax.numpy as jnp
            >>> from gyre.trainer import ImgClassifierTrainer, SimpleClassifierLinen
            >>> t = ImgClassifierTrainer(model=SimpleClassifierLinen(c_hid=4), optimizer=optax.sgd(0.1), log_dir="unused")
            >>> state = t.init_model((jnp.ones((2, 64)), jnp.zeros(2, jnp.int32)))
            >>> t.model_linen_apply(state.params, state, jnp.ones((1, 64)), state.rng, train=False)[0].shape
            (1, 10)
        """
        sow = train and bool(getattr(self.config, "log_intermediates", False))
        return self._adapter.apply(params, state.model_state, input, rng, train=train, sow=sow)

    # -- the model and its state --------------------------------------------------------------

    def init_model(self, exmp_batch: Any) -> Any:
        """Builds the train state from an example batch.

        Example:
            >>> import optax, jax.numpy as jnp
            >>> from flax import nnx
            >>> from gyre.trainer import ImgClassifierTrainer, SimpleClassifier
            >>> t = ImgClassifierTrainer(model=SimpleClassifier(c_hid=4, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
            ...                          log_dir="unused")
            >>> int(t.init_model((jnp.ones((2, 64)), jnp.zeros(2, jnp.int32))).step)
            0
            >>> t.bind_model()(jnp.ones((1, 64))).shape
            (1, 10)
        """
        check_batch(exmp_batch)
        exmp_input = self.batch_to_input(exmp_batch)
        state = self._build_state(exmp_input)
        specs, shapes = self._builder.specs(state, exmp_batch, train=True)
        self._specs = specs
        concat = sorted(k for k, spec in specs.items() if spec.mode is LogMetricMode.CONCAT
                        and spec.log_mode in (LogMode.TRAIN, LogMode.ANY))
        if concat:  # (else dropped in silence: training keeps no per-example values)
            warn(explain(
                f"{self._builder.loss_name} returns the CONCAT metrics {concat} in training, where the trainer "
                "does not collect them: no training callback or writer gets them",
                expected="CONCAT metrics in evaluation, where callbacks get them joined over the loader",
                received=f"{concat} logged in training (log_mode 'any' or 'train')",
                fix="give them log_mode 'eval' (evaluation only), or a mode such as 'mean' to log them in training"))
        self.state = self.strategy.place_state(state.replace(
            extras={EPOCH: MetricAccumulator.init(specs, shapes), WINDOW: MetricAccumulator.init(specs, shapes)}
        ))
        if getattr(self.config, "tabulate_model", False):
            write_tabulation(self, exmp_input)
        return self.state

    def num_model_params(self) -> int:
        """The model's number of parameters.

        Example:
            >>> import optax
            >>> from flax import nnx
            >>> t = TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), log_dir="unused")
            >>> t.num_model_params()
            8
        """
        if self.state is not None:
            return count_params(self.state.params)
        if self.model_mode == "nnx":
            return count_params(self._adapter.initial()[0])
        self._require_state("num_model_params")  # a linen model has no parameters before init_model
        return 0

    def _build_state(self, exmp_input: Any) -> Any:
        """The train state before any metric is known (what evaluation and testing need)."""
        # a raw uint32 key: a typed key is rebuilt from the step's outputs on every call
        key = jax.random.PRNGKey(self.config.seed)
        if self.model_mode == "nnx":
            if exmp_input is not None and lazy_init_nnx(self.model, exmp_input):
                self._adapter = NNXModel(self.model)  # split again: the bridged layers have variables now
            # copies: the compiled step donates the state, which must not delete the module's arrays
            params, rest = jax.tree.map(jnp.copy, self._adapter.initial())
            model_state = {NNX_REST: rest}
        else:
            if exmp_input is None:
                raise ValueError(explain(
                    "a linen model needs an example input to be built",
                    expected="exmp_batch=<a batch>", received="none (and the checkpoint records no input shape)",
                    fix="pass exmp_batch=next(iter(test_loader))"))
            params, model_state = self._adapter.init(key, exmp_input)
        leaves = jax.tree_util.tree_leaves(exmp_input)
        if leaves:
            self._input_spec = {"shape": list(jnp.shape(leaves[0])), "dtype": str(jnp.result_type(leaves[0]))}
        strategy = self.strategy
        # the engine places batches ahead on the state's strategy; on one CPU device that
        # placement costs more than jit's own conversion of numpy batches, so it is left out
        ahead = strategy.compiles and (strategy.mesh is not None or jax.default_backend() != "cpu")
        state = TrainerState.create(params=params, tx=self.optimizer, rng=key, model_state=model_state,
                                    strategy=strategy if ahead else None)
        self._builder = StepBuilder(self, self._adapter)
        self.state = strategy.place_state(state.replace(extras={EPOCH: (), WINDOW: ()}))
        return self.state

    @property
    def strategy(self) -> Any:
        """How steps run: ``eager`` with ``debug``, ``jit`` on one device, else data parallel."""
        if getattr(self, "_strategy", None) is None:
            self._strategy = strategy_of(self.config)
        return self._strategy

    def bind_model(self) -> Any:
        """The trained model: the nnx module holding the state's parameters, or the bound linen
        module (example: :meth:`init_model`)."""
        self._require_state("bind_model")
        if self.model_mode == "nnx":
            return self._adapter.update_module(self.state.params, self.state.model_state[NNX_REST])
        return self._adapter.module.bind({"params": self.state.params, **dict(self.state.model_state)})

    def _require_state(self, what: str) -> None:
        if self.state is None:
            raise RuntimeError(explain(
                f"{what} needs a trained or initialised model",
                expected="train_model(...), init_model(batch) or load_from_checkpoint(...) first",
                received="a trainer whose state is not built yet",
                fix=f"call trainer.train_model(train_loader, val_loader) before {what}"))

    # -- what callbacks see: while train_model runs, views of its loop --------------------------

    @property
    def _loop(self) -> Any:
        return None if self._run is None else self._run.loop

    @property
    def state(self) -> Any:
        """The train state: the running loop's in :meth:`train_model`, else the last one."""
        loop = self._loop
        return self._state if loop is None else loop.state

    @state.setter
    def state(self, value: Any) -> None:
        loop = self._loop
        if loop is None:
            self._state = value
        else:
            loop.state = value

    @property
    def elapsed(self) -> Any:
        """The training clock (a :class:`gyre.Elapsed`), as :attr:`state` is found."""
        loop = self._loop
        return self._elapsed if loop is None else loop.elapsed

    @property
    def global_step(self) -> int:
        """Training steps completed."""
        loop = self._loop
        if loop is None:
            return 0 if self._elapsed is None else self._elapsed.steps
        clock = loop.elapsed  # the step in progress counts once it ran (not in an epoch's start hooks)
        return clock.steps + (clock.in_progress and not self._run.before_step)

    @property
    def _last_step(self) -> int:
        """The last trained step's index (``global_step - 1``, at least 0): the x-axis step of its
        scalars, its validation's, and of what a validation hook writes without ``step=``."""
        return max(self.global_step - 1, 0)

    def learning_rate(self) -> jax.Array | None:
        """The current learning rate (a device scalar) if the optimizer keeps it
        (``optax.inject_hyperparams``), else ``None``.

        Example:
            >>> import optax, jax.numpy as jnp
            >>> from flax import nnx
            >>> from gyre.trainer import ImgClassifierTrainer, SimpleClassifier
            >>> t = ImgClassifierTrainer(model=SimpleClassifier(c_hid=4, rngs=nnx.Rngs(0)),
            ...                          optimizer=optax.inject_hyperparams(optax.sgd)(learning_rate=0.25), log_dir="unused")
            >>> _ = t.init_model((jnp.ones((2, 64)), jnp.zeros(2, jnp.int32))); float(t.learning_rate())
            0.25
        """
        if self.state is None:
            return None
        rate = learning_rate_of(self.state.opt_state)
        # a copy (on the device, no host read): the state's own array is donated to the next step,
        # which deletes it while a writer's thread may still be about to read it
        return None if rate is None else jnp.array(rate, copy=True)

    @property
    def writer(self) -> Any:
        """The run's writer (``logger.tool_config``; TensorBoard by default)."""
        if self._writer is None:
            self._writer = build_writer(self.config, self.log_dir)
        return self._writer

    def close_writer(self) -> None:
        """Closes the run's writer if one was opened (``gyre fit`` does at the run's end; example:
        the class)."""
        if self._writer is not None:
            self._writer.close()

    def log_image(self, key: str, image: Any, step: int | None = None) -> None:
        """Sends an image (``(H, W)`` or ``(H, W, C)``, in [0, 1] or uint8) to the writer; ``step``
        defaults to the last trained step's index (``global_step - 1``, at least 0), where that
        step's and its validation's scalars are.

        Example:
            >>> import optax, tempfile, numpy as np
            >>> from flax import nnx
            >>> t = TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
            ...                   log_dir=tempfile.mkdtemp())
            >>> t.log_image("val/sample", np.zeros((8, 8, 3)))
        """
        self.writer.write_images(self._last_step if step is None else step, {key: image})

    def log_figure(self, key: str, figure: Any, step: int | None = None) -> None:
        """Sends a matplotlib figure to the writer as an image.

        Example:
            >>> import optax, tempfile
            >>> from flax import nnx
            >>> from matplotlib.figure import Figure
            >>> t = TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
            ...                   log_dir=tempfile.mkdtemp())
            >>> t.log_figure("val/curve", Figure(figsize=(2, 2), dpi=20))
        """
        self.log_image(key, figure_image(figure), step)

    def log_embedding(self, key: str, encodings: Any, step: int | None = None, metadata: Any = None,
                      images: Any = None) -> None:
        """Writes embeddings (optional labels and ``(N, H, W, C)`` pictures) for TensorBoard's
        projector; ``step`` defaults to the last trained step's index, as :meth:`log_image`'s.

        Example:
            >>> import optax, tempfile, numpy as np
            >>> from flax import nnx
            >>> t = TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
            ...                   log_dir=tempfile.mkdtemp())
            >>> t.log_embedding("val/features", np.eye(4), metadata=[0, 1, 0, 1])
            >>> (t.log_dir / "tensorboard" / "projector_config.pbtxt").is_file()
            True
        """
        if jax.process_index() == 0:
            write_embedding(self.log_dir / "tensorboard", key, self._last_step if step is None else step,
                            encodings, metadata, images)

    def stop_training(self, reason: str) -> None:
        """Asks the training to stop at the end of this epoch (early stopping).

        Example:
            >>> import optax
            >>> from flax import nnx
            >>> t = TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), log_dir="unused")
            >>> t.stop_training("patience ran out")
        """
        if self._run is not None:  # (a request outside a run is forgotten: each run starts afresh)
            self._run.stop_reason = reason or "stopped by a callback"

    # -- training, evaluation, testing --------------------------------------------------------

    def train_model(
        self, train_loader: Any, val_loader: Any = None, test_loader: Any = None, num_epochs: int | None = None
    ) -> dict[str, Any]:
        """Trains for ``num_epochs`` (default ``train_epochs``), validating every
        ``check_val_every_n_epoch``.

        A dict ``val_loader`` logs its first loader as ``val/...``, the others as
        ``val_<name>/...``. ``test_loader`` tests the best ``ModelCheckpoint`` (else the final
        model). Returns ``{"val": {...}, "test": {...}}`` as Python floats, and each
        validation's metrics under its epoch (``result[5]["val/acc"]``).

        Example: see the class.
        """
        epochs = whole(self.config.train_epochs if num_epochs is None else num_epochs, "train_model: num_epochs",
                       minimum=1, unit="epochs", expected="num_epochs=5 (or trainer.train_epochs in the config)",
                       fix="pass num_epochs=5")
        # the loader is checked first: an empty one or a generator gets its explanation, not a StopIteration
        data, epoch_steps = training_data(train_loader, epochs, getattr(self.config, "max_steps_per_epoch", None))
        if self.strategy.mesh is not None:  # a batch the devices cannot split: said before training
            check_split(self.strategy, train_loader, who="the trainer", name="train_loader", single="trainer.num_devices=1")
        if self.state is None:
            self.init_model(first_batch(train_loader))
        if self.optimizer is None:  # its schedule lasts the run: now its length is known
            self.optimizer = build_optimizer_of(self.optimizer_config, run_steps=epochs * epoch_steps)
            self.state = self.strategy.place_state(
                self.state.replace(tx=self.optimizer, opt_state=self.optimizer.init(self.state.params)))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._check_fresh()
        run = TrainingRun(self, named_loaders(val_loader, "val"))
        every = self.config.check_val_every_n_epoch
        _reusable(run.val_loaders, epochs // every if every else 0)
        named_loaders(test_loader, "test")  # a bad dict of test loaders is explained before training
        if "train" not in self._compiled:  # compiled once per trainer
            self._compiled["train"] = self.strategy.compile(self._builder.train_step(), donate=True)
        self._run = run
        try:
            self._state, self.history, self._elapsed = run.run(data, self._compiled["train"], epochs, epoch_steps)
        except BaseException as err:
            if run.loop is not None:  # the pair the loop handed back with its error (the loop's own clock
                state = getattr(err, "state", None)  # is the step in progress; None: donated arrays)
                self._state = run.loop.state if state is None else state
                self._elapsed = getattr(err, "elapsed", run.loop.elapsed)
            raise
        finally:
            self._run = None
        result: dict[Any, Any] = {e: host_values(m) for e, m in sorted(run.val_history.items())}  # result[5]["val/acc"]
        if run.val_history:
            result["val"] = result[max(run.val_history)]
        if test_loader is not None and self.history.stop_reason != "preempted":
            result["test"] = self._best_test_metrics(test_loader, self._elapsed.epochs)
        self.writer.flush()
        return result

    def _check_fresh(self) -> None:
        """Without ``resume``, ``log_dir`` must hold no run's checkpoints (a second ``train_model``
        call, or another run's folder): said in the trainer's words, not the checkpoint's."""
        taken = [n for n in ("resume", "checkpoints") if (self.log_dir / n).is_dir() and any((self.log_dir / n).iterdir())]
        if self.config.resume is None and taken:
            raise FileExistsError(explain(
                f"the trainer's log_dir {str(self.log_dir)!r} already holds a run ({', '.join(n + '/' for n in taken)})",
                expected="a new or empty log_dir, or resume='latest' to continue the run saved there",
                received=f"{', '.join(n + '/' for n in taken)} with checkpoints (an earlier train_model call, or another run)",
                fix="continue it: build the trainer with resume='latest' (trainer.resume: latest; train_model(num_epochs=N) "
                "then trains up to N epochs in all), or pass another log_dir"))

    def _best_test_metrics(self, test_loader: Any, epoch: int) -> dict[str, Any]:
        """The test metrics of the best ModelCheckpoint (else the final model): never chosen on the test set."""
        final = self.state
        checkpoints = [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]
        best = next((cb for cb in checkpoints if cb.best_step() is not None), None)
        if best is not None:
            self.state = best.restore_best(final)
        elif checkpoints:
            warn(checkpoints[0].none_saved())
        try:
            return self.test_model(test_loader, apply_callbacks=True, epoch_idx=epoch)
        finally:
            self.state = final

    def _store_config(self) -> None:
        """Writes ``config.yaml`` once the loop has started, i.e. after a resume was accepted (the
        last text is kept: YAML takes milliseconds per call)."""
        stored = stored_config(self)
        key = json.dumps(stored, default=repr)  # (a snapshot: the model's settings may be changed in place)
        if self._config_yaml is not None and self._config_yaml[0] == key:
            text = self._config_yaml[1]
        else:
            text = dump_config(self.full_config) if self.full_config is not None else yaml.safe_dump(stored, sort_keys=False)
        path = self.log_dir / "config.yaml"
        if self.config.resume is not None and path.is_file():
            warn_changed_settings(path, yaml.safe_load(text))
        path.write_text(text)
        self._config_yaml = key, text

    def eval_model(self, data_loader: Any, mode: str = "val", epoch_idx: int = 0) -> dict[str, Any]:
        """The metrics of one evaluation pass, named ``<mode>/<key>`` (device values).

        Scalars are also written to ``<log_dir>/metrics/<mode>_epoch_<epoch_idx:04d>.json`` and,
        as jax_trainer's logger writes them, to the run's writer, at the last trained step (the
        step of the validations' values; 0 before training).

        Example:
            >>> import optax, tempfile, jax.numpy as jnp
            >>> from flax import nnx
            >>> class T(TrainerModule):
            ...     def loss_function(self, model, batch, train=True):
            ...         return model(batch[0]).mean(), {"n": {"value": 1, "mode": "sum"}}
            >>> t = T(model=nnx.Linear(3, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), log_dir=tempfile.mkdtemp())
            >>> _ = t.init_model((jnp.ones((4, 3)),))
            >>> int(t.eval_model([(jnp.ones((4, 3)),)] * 3, mode="val")["val/n"])
            3
        """
        epoch = whole(epoch_idx, f"{mode}: epoch_idx", fix="pass epoch_idx=5, or leave it out (0)",
                      expected="the epoch the model was trained for, e.g. epoch_idx=5 (0: before training)")
        self._require_state("eval_model")
        metrics = self._builder.evaluate(data_loader, mode, self.state)
        files = self._epoch_files
        step = self._last_step  # the x-axis of every series
        scalars = scalars_for_writers(metrics, self._builder.eval_specs_cached)
        files.write(mode, epoch, step, scalars)
        files.flush()  # on disk when the call returns, as jax_trainer's logger writes it
        self.writer.write_scalars(step, scalars)
        return metrics

    def test_model(self, test_loader: Any, apply_callbacks: bool = False, epoch_idx: int = 0) -> dict[str, Any]:
        """:meth:`eval_model` with ``mode="test"``, as Python floats; ``apply_callbacks`` runs the
        test hooks.

        A dict of loaders logs as ``test/...`` then ``test_<name>/...``.

        Example: see :meth:`eval_model`.
        """
        self._require_state("test_model")
        loaders = named_loaders(test_loader, "test")
        if apply_callbacks:
            for cb in self.callbacks:
                cb.on_test_epoch_start(epoch_idx)
        metrics: dict[str, Any] = {}
        for mode, loader in loaders:
            metrics.update(self.eval_model(loader, mode=mode, epoch_idx=epoch_idx))
        if apply_callbacks:
            for cb in self.callbacks:
                cb.on_test_epoch_end(metrics, epoch_idx)
        return host_values(metrics)

    @classmethod
    def load_from_checkpoint(
        cls, path: str | os.PathLike[str], *, exmp_batch: Any = None, model: Any = None, optimizer: Any = None,
        exmp_input_file: str | os.PathLike[str] | None = None,
    ) -> TrainerModule:
        """A trainer rebuilt from a checkpoint and the config stored with it.

        ``path`` is a run folder (its best checkpoint), a ``checkpoints`` folder or one step's.
        Pass ``model=`` / ``optimizer=`` again when they were objects, not config sections.
        ``exmp_input_file`` is accepted and not read (gyre never unpickles).

        Example: see ``tests/trainer/test_trainer.py`` (it needs a trained run).
        """
        given = {k: v for k, v in (("model", model), ("optimizer", optimizer)) if v is not None}
        p = Path(path).expanduser().resolve()
        if (p / "checkpoints").is_dir():
            folder, step = p / "checkpoints", None
        elif p.name.isdigit() and p.parent.is_dir():
            folder, step = p.parent, int(p.name)
        elif p.is_dir():
            folder, step = p, None
        else:
            raise FileNotFoundError(explain(
                "load_from_checkpoint found no checkpoint there",
                expected="a run folder (holding checkpoints/), a checkpoints folder, or one step's folder",
                received=str(p), fix="pass the run folder that train_model wrote (trainer.log_dir)"))
        store = Store(str(folder), read_only=True)
        if step is None:  # the best model by the metric it was saved for
            steps = store.steps()
            if not steps:
                raise FileNotFoundError(explain(
                    "load_from_checkpoint found no model checkpoint",
                    expected="a folder written by ModelCheckpoint", received=f"{folder} holding no step",
                    fix="train with a ModelCheckpoint callback, or pass a run folder that has one"))
            metas = {s: store.read_record(s).get("meta", {}) for s in steps}
            mode = "min" if metas[steps[-1]].get("mode") == "min" else "max"
            best = best_of(mode, [(m.get("value"), s) for s, m in metas.items()])
            step = max(steps) if best is None else best  # no finite value: the newest
            meta = metas[step]
        else:
            meta = store.read_record(step).get("meta", {})
        trainer = _rebuild(cls, meta.get("config") or {}, given)
        if exmp_batch is None and meta.get("input"):
            exmp_batch = (np.zeros(meta["input"]["shape"], meta["input"]["dtype"]),)
        exmp_input = None if exmp_batch is None else trainer.batch_to_input(exmp_batch)
        trainer.state = read_model(store, step, trainer._build_state(exmp_input))
        return trainer

    # -- run-folder files ---------------------------------------------------------------------

    @property
    def _epoch_files(self) -> Any:
        if self._files is None:
            self._files = EpochMetricFiles(self.log_dir)
        return self._files


def _rebuild(cls: type, config: dict[str, Any], given: dict[str, Any]) -> Any:
    if all(k in config for k in ("trainer", "model", "optimizer", "dataset")):
        full = load_config(config)
        name = full.trainer.class_name
        trainer_cls = TRAINERS.get(name, where="trainer.class_name") if name in TRAINERS else cls
        return trainer_cls(full.trainer, full.model, full.optimizer, config=full, **given)
    name = config.get("trainer_class")
    trainer_cls = TRAINERS.get(name) if isinstance(name, str) and name in TRAINERS and cls.__name__ == "TrainerModule" else cls
    missing = [k for k in ("model", "optimizer") if config.get(k) is None and k not in given]
    if missing:
        raise TypeError(explain(
            f"this checkpoint cannot rebuild the trainer's {' and '.join(missing)}",
            expected="a trainer built from config sections (model_config=, optimizer_config= or a YAML "
            "config), whose sections the checkpoint stores",
            received=f"a checkpoint of a trainer given {' and '.join(f'{k}=<object>' for k in missing)} directly",
            fix="pass them again: load_from_checkpoint(path, "
            + ", ".join(f"{k}=..." for k in missing) + ")"))
    return trainer_cls(config.get("trainer"), config.get("model"), config.get("optimizer"), **given)
