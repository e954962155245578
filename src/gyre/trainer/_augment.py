"""Augmentation and preprocessing inside the compiled step, as the kpoeppel jax_trainer fork
does them on ``(inputs, targets)`` pairs: an augmentation wraps the model and changes each
training batch; a preprocessing module changes every batch. A linen augmentation holds no
variables: its wrapped model is initialised and run alone, as in the fork."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import linen, nnx

from gyre.config._registry import register_model
from gyre.core._checks import real
from gyre.core._errors import describe, explain
from gyre.trainer._interfaces import ModelBase, NNXBase, RegistersSubclasses, build_registered

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
# typed configs, built as Module(Config(**keys), ...) (gyre.trainer._interfaces)


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
    from gyre.trainer._setup import component

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
