"""The trainer's models. The kpoeppel fork's model bases (``BaseModelNNX``, ``BaseModelLinen``):
defining a subclass registers it in :data:`gyre.config.MODELS` with its dataclass config
(``config_class``, a ``config`` annotation, or its ``__init__``'s), so ``model: {class_name:
MyModel, ...}`` builds ``MyModel(MyModelConfig(**keys))``; a subclass named as a built-in model
takes the name, warned. Augmentation and preprocessing inside the compiled step, as the fork does
them on ``(inputs, targets)`` pairs: an augmentation wraps the model and changes each training
batch; a preprocessing module changes every batch; a linen augmentation holds no variables: its
wrapped model is initialised and run alone, as in the fork. The two model modes over the adapters
of :mod:`gyre.frameworks`: an nnx module's non-parameter state (batch statistics, rng counters)
lives in ``model_state[NNX_REST]``; a linen module's other collections in ``model_state``, its
step key ``fold_in(rng, step)``. Looking inside the model, as the fork does: per-tensor ``min`` /
``max`` / ``mean`` / ``std`` of parameters, gradients and sown values while it trains, named by
path (``conv1.kernel_mean``, ``conv1.kernel.grad_std``), the model's summary files, and the fork's
parameter helpers for nnx modules.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import typing
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen, nnx

from gyre.config._registry import MODELS, ConfigTyped, register_model
from gyre.config._transforms import parameter_path
from gyre.core._checks import instance, real
from gyre.core._errors import describe, explain
from gyre.frameworks._adapters import LinenAdapter, adapt, framework_of, init_linen
from gyre.steps._step import count_params

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


AUGMENTATION_STREAM = 7  # the constant a linen augmentation's key is folded with


class Augmentation(nnx.Module):
    """The base of an nnx augmentation: calls go to ``wrapped_model``; subclasses override
    :meth:`augment`.

    ``rngs`` gets an ``augmentation`` stream seeded by ``trainer.augmentation_seed``; draw
    from ``self.rngs.augmentation()``.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> aug = Augmentation(wrapped_model=nnx.Linear(2, 1, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(0))
        >>> aug(jnp.ones((3, 2))).shape, aug.augment((1, 2))
        ((3, 1), (1, 2))
    """

    def __init__(self, wrapped_model: nnx.Module, *, rngs: nnx.Rngs) -> None:
        self.wrapped_model = wrapped_model
        self.rngs = rngs

    def augment(self, batch: Any) -> Any:
        """The training batch (an ``(inputs, targets)`` pair), augmented; by default as it is."""
        return batch

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return self.wrapped_model(x, *args, **kwargs)


class AugmentationLinen(linen.Module):
    """The base of a linen augmentation; :meth:`augment` draws from
    ``self.make_rng("augmentation")``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import linen
        >>> aug = AugmentationLinen(wrapped_model=linen.Dense(1))
        >>> aug.apply(aug.init(jax.random.key(0), jnp.ones((3, 2))), jnp.ones((3, 2))).shape
        (3, 1)
    """

    wrapped_model: linen.Module

    def augment(self, batch: Any) -> Any:
        """The training batch (an ``(inputs, targets)`` pair), augmented; by default as it is."""
        return batch

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        return self.wrapped_model(x, *args, **kwargs)


def _scale(value: Any, who: str) -> float:
    """A noise deviation: a finite float >= 0 (a YAML string such as ``"1e-2"`` too)."""
    return real(value, f"{who}'s scale", minimum=0.0, text=True, fix="write scale: 0.1 (the noise's standard deviation)")


@register_model
class GaussianNoise(Augmentation):
    """Adds Gaussian noise of deviation ``scale`` to the inputs of each training batch.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> aug = GaussianNoise(scale=0.5, wrapped_model=nnx.Linear(2, 1, rngs=nnx.Rngs(0)),
        ...                     rngs=nnx.Rngs(0, augmentation=1))
        >>> x, y = aug.augment((jnp.zeros((4, 2)), jnp.arange(4)))
        >>> bool(jnp.all(x != 0)), y.tolist()
        (True, [0, 1, 2, 3])
    """

    def __init__(self, scale: float = 0.1, *, wrapped_model: nnx.Module, rngs: nnx.Rngs) -> None:
        super().__init__(wrapped_model, rngs=rngs)
        self.scale = _scale(scale, "GaussianNoise")

    def augment(self, batch: Any) -> Any:
        x, y = batch
        return x + self.scale * jax.random.normal(self.rngs.augmentation(), jnp.shape(x), jnp.result_type(x)), y


@register_model
class GaussianNoiseLinen(AugmentationLinen):
    """:class:`GaussianNoise` for linen models.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import linen
        >>> aug = GaussianNoiseLinen(wrapped_model=linen.Dense(1), scale=0.5)
        >>> x, _ = aug.apply({}, (jnp.zeros((4, 2)), None), method="augment", rngs={"augmentation": jax.random.key(0)})
        >>> bool(jnp.all(x != 0))
        True
    """

    scale: float = 0.1

    def __post_init__(self) -> None:
        _scale(self.scale, "GaussianNoiseLinen")
        super().__post_init__()

    def augment(self, batch: Any) -> Any:
        x, y = batch
        return x + self.scale * jax.random.normal(self.make_rng("augmentation"), jnp.shape(x), jnp.result_type(x)), y


# -- the kpoeppel fork's bases (jax_trainer.interfaces): subclasses registered with their
# typed configs, built as Module(Config(**keys), ...)


@dataclasses.dataclass
class BaseAugmentationNNXConfig:
    """The base of an augmentation's typed config; ``class_name`` is set when its augmentation is
    defined (example: :class:`BaseAugmentationNNX`)."""

    class_name: ClassVar[str | None] = None


@dataclasses.dataclass
class BaseAugmentationLinenConfig(BaseAugmentationNNXConfig):
    """:class:`BaseAugmentationNNXConfig` for linen augmentations (example: :class:`BaseAugmentationLinen`)."""


@dataclasses.dataclass
class BasePreprocessingNNXConfig:
    """The base of a preprocessing's typed config (example: :class:`BasePreprocessingNNX`)."""

    class_name: ClassVar[str | None] = None


@dataclasses.dataclass
class BasePreprocessingLinenConfig(BasePreprocessingNNXConfig):
    """:class:`BasePreprocessingNNXConfig` for linen preprocessing (example: :class:`BasePreprocessingLinen`)."""


class BaseAugmentationNNX(RegistersSubclasses, Augmentation, metaclass=NNXBase):
    """An nnx :class:`Augmentation` built from its typed config:
    ``Aug(config, wrapped_model=..., rngs=...)``.

    A subclass names its config (``config_class`` or a ``config`` annotation) and is registered.

    Example:
        >>> import dataclasses, jax.numpy as jnp
        >>> from flax import nnx
        >>> @dataclasses.dataclass
        ... class ShiftConfig(BaseAugmentationNNXConfig):
        ...     by: float = 1.0
        >>> class Shift(BaseAugmentationNNX):
        ...     config_class = ShiftConfig
        ...     def augment(self, batch):
        ...         return batch[0] + self.config.by, batch[1]
        >>> aug = Shift(ShiftConfig(2.0), wrapped_model=nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
        >>> ShiftConfig.class_name, aug.augment((jnp.zeros(2), None))[0].tolist()
        ('Shift', [2.0, 2.0])
    """

    def __init__(self, config: Any, wrapped_model: nnx.Module, rngs: nnx.Rngs | None = None, **kwargs: Any) -> None:
        self.config = config
        self.wrapped_model = wrapped_model
        if rngs is not None:
            self.rngs = rngs


class BaseAugmentationLinen(RegistersSubclasses, AugmentationLinen, metaclass=ModelBase):
    """A linen :class:`AugmentationLinen` built from its typed config; a subclass declares
    ``config: MyConfig``.

    Example:
        >>> import dataclasses
        >>> from flax import linen
        >>> @dataclasses.dataclass
        ... class FlipConfig(BaseAugmentationLinenConfig):
        ...     axis: int = 1
        >>> class Flip(BaseAugmentationLinen):
        ...     config_class = FlipConfig  # the annotation alone, where it is not a string
        ...     config: FlipConfig
        ...     def augment(self, batch):
        ...         return batch
        >>> FlipConfig.class_name, Flip(config=FlipConfig(), wrapped_model=linen.Dense(1)).config.axis
        ('Flip', 1)
    """


class BasePreprocessingNNX(RegistersSubclasses, nnx.Module, metaclass=NNXBase):
    """An nnx preprocessing built from its typed config; ``preprocess(batch)`` changes every batch.

    Example:
        >>> import dataclasses
        >>> @dataclasses.dataclass
        ... class ScaleConfig(BasePreprocessingNNXConfig):
        ...     factor: float = 2.0
        >>> class Scale(BasePreprocessingNNX):
        ...     config_class = ScaleConfig
        ...     def preprocess(self, batch):
        ...         return batch[0] * self.config.factor, batch[1]
        >>> Scale(ScaleConfig()).preprocess((1.5, 0))
        (3.0, 0)
    """

    def __init__(self, config: Any, **kwargs: Any) -> None:
        self.config = config

    def preprocess(self, batch: Any) -> Any:
        """The batch (an ``(inputs, targets)`` pair), preprocessed; by default as it is."""
        return batch


class BasePreprocessingLinen(RegistersSubclasses, linen.Module, metaclass=ModelBase):
    """A linen preprocessing built from its typed config; a subclass declares ``config: MyConfig``.

    Example:
        >>> import dataclasses
        >>> @dataclasses.dataclass
        ... class KeepConfig(BasePreprocessingLinenConfig):
        ...     pass
        >>> class Keep(BasePreprocessingLinen):
        ...     config_class = KeepConfig
        ...     config: KeepConfig
        >>> Keep(config=KeepConfig()).preprocess((1, 2))
        (1, 2)
    """

    def preprocess(self, batch: Any) -> Any:
        """The batch (an ``(inputs, targets)`` pair), preprocessed; by default as it is."""
        return batch

    def __call__(self, batch: Any) -> Any:
        return batch


def forward_module(model: Any) -> Any:
    """The linen module a trainer runs: a linen augmentation's wrapped model, else ``model``."""
    return model.wrapped_model if isinstance(model, AugmentationLinen) else model


def _takes_rng(method: Any) -> bool:
    """Whether a linen ``augment`` takes the fork's ``rng=`` keyword (named, or ``**kwargs``)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any((p.name == "rng" and p.kind is not p.POSITIONAL_ONLY) or p.kind is p.VAR_KEYWORD for p in params)


def augment_linen(module: Any, params: Any, pair: Any, key: jax.Array) -> Any:
    """``module.augment(pair)``, ``key`` its ``augmentation`` stream (and ``rng=`` if taken)."""
    kwargs = {"rng": {"augmentation": key}} if _takes_rng(type(module).augment) else {}
    return module.apply({"params": params}, pair, method="augment", rngs={"augmentation": key}, **kwargs)


def prepare(trainer: Any, model: Any, params: Any, batch: Any, rng: jax.Array, *, train: bool) -> Any:
    """The batch the loss function gets: preprocessed, and augmented in training."""
    config = trainer.config
    augmenting = train and getattr(config, "augmentation", None) is not None
    pre = trainer.preprocessing
    if pre is None and not augmenting:
        return batch
    pair = (trainer.batch_to_input(batch), trainer.batch_to_target(batch))
    if pre is not None:
        pair = pre.preprocess(pair) if isinstance(pre, nnx.Module) else pre.apply({}, pair, method="preprocess")
    if augmenting:
        if model is not None:
            pair = model.augment(pair)
        else:
            key = jax.random.fold_in(rng, AUGMENTATION_STREAM)
            pair = augment_linen(trainer.model, params, pair, key)
    return pair


NNX_REST = "nnx"  # the key of the nnx model's non-parameter state in TrainState.model_state
_FLAGS = ("train",)  # jax_trainer's name of the training flag


def model_mode_of(model: Any) -> str:
    """``"nnx"`` or ``"linen"`` for a flax module; an error for anything else."""
    mode = framework_of(model)
    if mode in ("nnx", "linen"):
        return mode
    raise TypeError(explain(
        "the trainer's model must be a flax module",
        expected="an nnx.Module instance (model_mode='nnx') or a linen.Module (model_mode='linen')",
        received=describe(model),
        fix="build the model with flax, e.g. nnx.Linear(64, 10, rngs=nnx.Rngs(0)), or register "
        "a model class with @gyre.config.register_model and name it in the config"))


def lazy_init_nnx(module: Any, exmp_input: Any) -> bool:
    """Initialises a module's uninitialised ``nnx.bridge.ToNNX`` layers by one call on
    ``exmp_input``; ``True`` if any."""
    pending = [
        node for _, node in nnx.iter_graph(module)
        if isinstance(node, nnx.bridge.ToNNX) and not any(isinstance(v, nnx.Variable) for v in vars(node).values())
    ]
    if not pending:
        return False
    try:
        nnx.bridge.lazy_init(module, exmp_input)
    except Exception as err:
        raise ValueError(explain(
            f"the model's bridged linen layers could not be initialised from the example input "
            f"({type(err).__name__}: {err})",
            expected="an example input the model can be called on (the input of a batch: model(input))",
            received=describe(exmp_input),
            fix="pass exmp_input=next(iter(train_loader)) (a batch whose input the model takes), or "
            "override batch_to_input(self, batch) to return the model's input")) from err
    return True


class NNXModel:
    """An nnx module split for compiled steps; its states travel as plain dicts."""

    mode = "nnx"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.adapter = adapt(module)[0]
        self._params, self._rest = self._split(module)

    def _split(self, module: Any) -> tuple[Any, Any]:
        """The module's parameters and the rest of its state, left in training mode."""
        module.train()
        return nnx.split(module, nnx.Param, ...)[1:]

    @staticmethod
    def _state(template: Any, pure: Any) -> Any:
        """An nnx ``State`` shaped as ``template`` holding ``pure``'s values."""
        state = jax.tree.map(lambda x: x, template)
        nnx.replace_by_pure_dict(state, pure)
        return state

    def initial(self) -> tuple[Any, Any]:
        """The parameters and the rest of the module's state, as plain dicts."""
        params, rest = self._split(self.module)
        return params.to_pure_dict(), rest.to_pure_dict()

    def merge(self, params: Any, rest: Any, *, train: bool) -> Any:
        """The module, rebuilt from its states, in training or evaluation mode."""
        return self.adapter.merge(self._state(self._params, params), self._state(self._rest, rest), training=train)

    def rest_of(self, module: Any) -> Any:
        """What a merged module holds besides its parameters, as a plain dict."""
        return nnx.split(module, nnx.Param, ...)[2].to_pure_dict()

    def update_module(self, params: Any, rest: Any) -> Any:
        """Writes trained states back into the user's module object and returns it."""
        nnx.update(self.module, self._state(self._params, params), self._state(self._rest, rest))
        return self.module


class LinenModel:
    """A linen module called through :class:`~gyre.frameworks.LinenAdapter`."""

    mode = "linen"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.adapter = LinenAdapter(module, rng_streams=("dropout",), collections=(), flags=_FLAGS)

    def init(self, key: jax.Array, exmp_input: Any) -> tuple[Any, dict[str, Any]]:
        """``(params, other collections)`` from ``module.init`` on an example input."""
        params_key, dropout_key = jax.random.split(key)
        keys = {"params": params_key, "dropout": dropout_key}
        return init_linen(self.module, exmp_input, keys, flags=_FLAGS, compiled=False)

    def apply(
        self, params: Any, model_state: Any, inputs: Any, rng: jax.Array | None, *, train: bool, sow: bool = False
    ) -> tuple[Any, Any]:
        """``(outputs, new mutable collections)``; with ``sow``, ``intermediates`` too."""
        rngs = {} if rng is None else {"dropout": rng}
        out, model_state, reported = self.adapter.apply_collect(params, model_state, inputs, training=train, rngs=rngs)
        if sow and "intermediates" in reported:
            model_state["intermediates"] = reported["intermediates"]
        return out, model_state


STATS = ("min", "max", "mean", "std")


def tree_stats(tree: Any, suffix: str = "") -> dict[str, jax.Array]:
    """The statistics of every array leaf of ``tree``, its path then ``suffix`` (jittable)."""
    out: dict[str, jax.Array] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not hasattr(leaf, "dtype") or not jnp.issubdtype(leaf.dtype, jnp.number):
            continue
        name = parameter_path(path).replace("/", ".") + suffix
        value = jnp.asarray(leaf, jnp.float32)
        if value.size == 1:
            out[f"{name}_val"] = value.reshape(())
        else:
            out.update({f"{name}_{op}": getattr(jnp, op)(value) for op in STATS})
    return out


def _nnx_table(model: Any) -> str:
    """Each nnx submodule's path, class and parameter count (``nnx.tabulate`` fails on bridges)."""
    rows = []
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Module):
            name = ".".join(str(p) for p in path) or "(model)"
            count = count_params(nnx.state(node, nnx.Param))
            rows.append((name, type(node).__name__, count))
    width = max(len(r[0]) for r in rows)
    kind = max(len(r[1]) for r in rows)
    lines = [f"{'module'.ljust(width)}  {'class'.ljust(kind)}  params"]
    lines += [f"{n.ljust(width)}  {c.ljust(kind)}  {k}" for n, c, k in sorted(rows)]
    return "\n".join(lines) + "\n"


def write_tabulation(trainer: Any, exmp_input: Any) -> None:
    """Writes the model's summary (``model.txt``) and its parameters (``params.txt``) into the
    trainer's run folder (process 0 only)."""
    if jax.process_index() != 0:
        return
    state = trainer.state
    lines = [f"{parameter_path(p)}: {tuple(np.shape(x))} {jnp.result_type(x)}"
             for p, x in jax.tree_util.tree_flatten_with_path(state.params)[0]]
    lines.append(f"total: {count_params(state.params)} parameters")
    if trainer.model_mode == "nnx":
        table = _nnx_table(trainer.bind_model())
    else:
        try:
            table = linen.tabulate(trainer.model, jax.random.key(0), depth=3)(exmp_input)
        except Exception as err:  # a summary must never stop a run: the file says why it is short
            table = f"(flax could not tabulate this model: {type(err).__name__}: {err})\n{trainer.model!r}"
    os.makedirs(trainer.log_dir, exist_ok=True)
    (trainer.log_dir / "model.txt").write_text(str(table))
    (trainer.log_dir / "params.txt").write_text("\n".join(lines) + "\n")


def _nnx_module(module: Any, who: str) -> None:
    instance(module, "module", nnx.Module, problem=f"{who} takes a flax nnx module",
             expected="an nnx.Module (e.g. nnx.Linear(2, 3, rngs=nnx.Rngs(0)))",
             fix="pass the model object; for linen parameters use gyre.trainer's count of a params pytree")


def module_named_params(module: Any, recursive: bool = False) -> Iterator[tuple[str, Any]]:
    """The ``(name, nnx.Param)`` pairs of ``module``'s attributes; ``recursive``: submodules' first,
    as ``<sub>.<param>``.

    Example:
        >>> from flax import nnx
        >>> [name for name, _ in module_named_params(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))]
        ['bias', 'kernel']
    """
    _nnx_module(module, "module_named_params")
    attributes = sorted(vars(module).items())
    if recursive:
        for child_name, child in attributes:
            if isinstance(child, nnx.Module):
                for name, param in module_named_params(child, recursive=True):
                    yield f"{child_name}.{name}", param
    for name, value in attributes:
        if isinstance(value, nnx.Param) and value.get_value() is not None:
            yield name, value


def count_parameters(module: Any) -> int:
    """The number of parameter elements in an nnx module (every ``nnx.Param`` of its graph, unlike
    the fork).

    Example:
        >>> from flax import nnx
        >>> count_parameters(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
        9
    """
    _nnx_module(module, "count_parameters")
    return count_params(nnx.state(module, nnx.Param))
