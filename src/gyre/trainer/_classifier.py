"""Ready-made image classification parts, registered under jax_trainer's config names: a
trainer, MLP and CNN models (nnx and linen), the embedded digits data set, and jax_trainer's
image data sets from local files (nothing is downloaded): ``MNISTDataset`` and
``CIFAR10Dataset``, giving :class:`gyre.data.SupervisedBatch` batches (float32 NHWC images,
normalised unless ``normalize=False``; int64 targets); :func:`build_dataset_module` is
phlippe/jax_trainer's entry point."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen, nnx
from jax.sharding import Mesh
from pydantic import Field

from gyre.config import DATASETS
from gyre.config._jax_trainer import jax_trainer_dataset
from gyre.config._registry import ConfigTyped, register_dataset, register_model, register_trainer
from gyre.core._checks import instance, whole
from gyre.core._errors import describe, explain
from gyre.data import (
    arrays,
    batches,
    cifar10,
    digits,
    mnist,
    process_share,
    stratified_split,
    supervised,
)
from gyre.trainer._callback import ConfusionMatrixCallback, confusion_matrix
from gyre.trainer._module import TrainerModule, TrainerModuleConfig, build_component, plain_section

#: a count of classes, units or layers (>= 1)
Count = Annotated[int, Field(ge=1)]
#: a dropout rate: a fraction in [0, 1) of the units zeroed while training
Rate = Annotated[float, Field(ge=0.0, lt=1.0)]

ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "silu": jax.nn.silu, "tanh": jnp.tanh}
#: an activation's name (a config's value is checked against these, naming its key)
Activation = Literal["relu", "gelu", "silu", "tanh"]


def activation(name: str) -> Any:
    """The activation function named ``name`` (relu, gelu, silu, tanh)."""
    if name not in ACTIVATIONS:
        raise ValueError(explain(
            f"unknown activation {name!r}",
            expected=f"one of {sorted(ACTIVATIONS)}", received=describe(name), fix="act_fn: gelu"))
    return ACTIVATIONS[name]


def classification_metrics(
    logits: jax.Array, labels: jax.Array, num_classes: int | None, mask: jax.Array | None = None,
    *, conf_matrix: bool | None = None,
) -> tuple[jax.Array, dict[str, Any]]:
    """Cross-entropy and accuracy, plus a summed confusion matrix when ``conf_matrix`` (default:
    when ``num_classes`` is given); ``mask`` marks the rows counted."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = logits.argmax(-1) == labels
    if mask is None:
        loss, acc = losses.mean(), correct.mean()
    else:
        real = jnp.maximum(jnp.asarray(mask).astype(jnp.int32).sum(), 1).astype(losses.dtype)
        loss = jnp.sum(jnp.where(mask, losses, 0)) / real
        acc = jnp.sum(jnp.where(mask, correct, False)) / real
    metrics: dict[str, Any] = {"acc": acc}
    if conf_matrix or (conf_matrix is None and num_classes):
        if num_classes and num_classes != logits.shape[-1]:  # the matrix would drop every pair outside it
            raise ValueError(explain(
                f"trainer.num_classes is {num_classes} but the model gives {logits.shape[-1]} logits per example",
                expected=f"num_classes equal to the model's classes ({logits.shape[-1]})",
                received=f"num_classes: {num_classes}, logits of shape {tuple(logits.shape)}",
                fix=f"set trainer.num_classes: {logits.shape[-1]} (or the model's num_classes: {num_classes})"))
        counted = labels if mask is None else jnp.where(mask, labels, -1)  # -1: not counted
        matrix = confusion_matrix(counted, logits.argmax(-1), num_classes or logits.shape[-1])
        metrics["conf_matrix"] = {"value": matrix, "mode": "sum", "log_freq": "epoch", "log_mode": "eval"}
    return loss, metrics


@register_trainer
class ImgClassifierTrainer(TrainerModule):
    """Classification of ``(images, labels)`` batches with nnx or linen models: cross-entropy and
    ``acc``.

    Validation and testing add ``conf_matrix`` when ``num_classes`` is set or a
    ``ConfusionMatrixCallback`` draws it.

    Example:
        >>> import gyre, optax, tempfile
        >>> from flax import nnx
        >>> (x, y), (xt, yt) = gyre.data.digits()
        >>> t = ImgClassifierTrainer(model=SimpleClassifier(c_hid=32, num_classes=10, rngs=nnx.Rngs(0)),
        ...     optimizer=optax.adam(1e-2), train_epochs=3, enable_progress_bar=False, log_dir=tempfile.mkdtemp())
        >>> out = t.train_model(gyre.data.batches((x, y), 64), [(xt, yt)])
        >>> out["val"]["val/acc"] > 0.85
        True
    """

    def loss_function(self, model: Any, batch: Any, train: bool = True, mask: Any = None) -> Any:
        x, y = self.batch_to_input(batch), self.batch_to_target(batch)
        return classification_metrics(model(x), y, self._num_classes(), mask, conf_matrix=self._conf_matrix(train))

    def loss_function_linen(
        self, params: Any, state: Any, batch: Any, rng: jax.Array, train: bool = True, mask: Any = None
    ) -> Any:
        x, y = self.batch_to_input(batch), self.batch_to_target(batch)
        logits, mutable = self.model_linen_apply(params, state, x, rng, train=train)
        loss, metrics = classification_metrics(logits, y, self._num_classes(), mask, conf_matrix=self._conf_matrix(train))
        return loss, (mutable, metrics)

    def _num_classes(self) -> int | None:
        return getattr(self.config, "num_classes", None)

    def _conf_matrix(self, train: bool) -> bool:
        """Whether to compute a confusion matrix (evaluation only)."""
        return not train and (bool(self._num_classes())
                              or any(isinstance(cb, ConfusionMatrixCallback) for cb in self.callbacks))


class ImgClassifierConfig(TrainerModuleConfig):
    """The trainer keys of :class:`ImgClassifierTrainer`: every trainer's and ``num_classes``.

    Example:
        >>> ImgClassifierConfig(num_classes=10).num_classes
        10
    """

    num_classes: Count | None = None


ImgClassifierTrainer.config_class = ImgClassifierConfig


class AugmentedImgClassifierTrainerConfig(ImgClassifierConfig):
    """The trainer keys of :class:`AugmentedImgClassifierTrainer` (:class:`ImgClassifierConfig`'s).

    Example:
        >>> AugmentedImgClassifierTrainerConfig.class_name
        'AugmentedImgClassifierTrainer'
    """


@register_trainer
class AugmentedImgClassifierTrainer(ImgClassifierTrainer):
    """The kpoeppel fork's name for :class:`ImgClassifierTrainer` with ``trainer.augmentation``.

    Example:
        >>> issubclass(AugmentedImgClassifierTrainer, ImgClassifierTrainer)
        True
    """

    config_class = AugmentedImgClassifierTrainerConfig


def _flat(x: jax.Array) -> jax.Array:
    return x.reshape(x.shape[0], -1)


@register_model
class SimpleClassifier(nnx.Module):
    """An MLP classifier (nnx) of ``num_layers`` hidden layers of ``c_hid`` units; inputs are
    flattened.

    Without ``input_dim`` the first layer is sized by the first input, which must come eagerly.

    Example:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> SimpleClassifier(c_hid=8, num_classes=3, rngs=nnx.Rngs(0))(jnp.ones((2, 64))).shape
        (2, 3)
        >>> model = SimpleClassifier(c_hid=8, rngs=nnx.Rngs(0))
        >>> model(jnp.ones((2, 4, 4, 3))).shape, model.hidden[0].kernel.shape
        ((2, 10), (48, 8))
    """

    def __init__(
        self, c_hid: Count = 64, num_classes: Count = 10, act_fn: Activation = "relu", batch_norm: bool = False,
        dropout: Rate = 0.0, num_layers: Count = 1, input_dim: Count | None = None, *, rngs: nnx.Rngs,
    ) -> None:
        self.act = activation(act_fn)
        self.input_dim = input_dim
        first = (nnx.bridge.ToNNX(linen.Dense(c_hid), rngs=rngs) if input_dim is None
                 else nnx.Linear(input_dim, c_hid, rngs=rngs))
        self.hidden = nnx.List([first] + [nnx.Linear(c_hid, c_hid, rngs=rngs) for _ in range(num_layers - 1)])
        self.norms = nnx.List([nnx.BatchNorm(c_hid, rngs=rngs) for _ in range(num_layers)]) if batch_norm else None
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else None
        self.out = nnx.Linear(c_hid, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = _flat(x)
        if self.input_dim is not None and x.shape[-1] != self.input_dim:
            raise ValueError(explain(
                f"SimpleClassifier takes {self.input_dim} input features (input_dim) per example",
                expected=f"inputs of {self.input_dim} values each (flattened), e.g. shape (batch, {self.input_dim})",
                received=f"{x.shape[-1]} values per example",
                fix=f"set input_dim: {x.shape[-1]} in the model section, or leave it out (sized by the input)"))
        first = self.hidden[0]
        if self.input_dim is None and not any(isinstance(v, nnx.Variable) for v in vars(first).values()):
            if isinstance(x, jax.core.Tracer):
                raise ValueError(explain(
                    "SimpleClassifier without input_dim is sized by its first input, which must come eagerly",
                    expected="one call outside jit first (or the trainer, which builds it from its example batch)",
                    received=f"a first call inside a traced function (input shape {x.shape})",
                    fix="call model(x) once before jit, or give input_dim"))
            nnx.bridge.lazy_init(first, x)
        for i, layer in enumerate(self.hidden):
            x = layer(x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = self.act(x)
            if self.dropout is not None:
                x = self.dropout(x)
        return self.out(x)


@register_model
class SimpleCNN(nnx.Module):
    """A small CNN classifier (nnx) for ``(N, H, W, C)`` images; flat inputs are read as
    ``image_size`` squares.

    Example:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> SimpleCNN(c_hid=4, num_classes=10, rngs=nnx.Rngs(0))(jnp.ones((2, 64))).shape
        (2, 10)
    """

    def __init__(
        self, c_hid: Count = 16, num_classes: Count = 10, act_fn: Activation = "relu", image_size: Count = 8,
        channels: Count = 1, dropout: Rate = 0.0, *, rngs: nnx.Rngs,
    ) -> None:
        self.act = activation(act_fn)
        self.image_size, self.channels = image_size, channels
        self.conv1 = nnx.Conv(channels, c_hid, (3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(c_hid, c_hid, (3, 3), strides=(2, 2), rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else None
        side = -(-image_size // 2)
        self.out = nnx.Linear(side * side * c_hid, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 2:
            x = x.reshape(x.shape[0], self.image_size, self.image_size, self.channels)
        x = self.act(self.conv2(self.act(self.conv1(x))))
        x = _flat(x)
        if self.dropout is not None:
            x = self.dropout(x)
        return self.out(x)


@register_model
class SimpleClassifierLinen(linen.Module):
    """:class:`SimpleClassifier` in linen (batch norm statistics in ``batch_stats``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> m = SimpleClassifierLinen(c_hid=8, num_classes=3)
        >>> v = m.init(jax.random.key(0), jnp.ones((2, 64)), train=False)
        >>> m.apply(v, jnp.ones((2, 64)), train=False).shape
        (2, 3)
    """

    c_hid: Count = 64
    num_classes: Count = 10
    act_fn: Activation = "relu"
    batch_norm: bool = False
    dropout: Rate = 0.0
    num_layers: Count = 1

    @linen.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = _flat(x)
        for _ in range(self.num_layers):
            x = linen.Dense(self.c_hid)(x)
            if self.batch_norm:
                x = linen.BatchNorm(use_running_average=not train)(x)
            x = activation(self.act_fn)(x)
            if self.dropout:
                x = linen.Dropout(self.dropout, deterministic=not train)(x)
        return linen.Dense(self.num_classes)(x)


@register_model
class SimpleCNNLinen(linen.Module):
    """:class:`SimpleCNN` in linen.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> m = SimpleCNNLinen(c_hid=4)
        >>> m.apply(m.init(jax.random.key(0), jnp.ones((2, 64))), jnp.ones((2, 64))).shape
        (2, 10)
    """

    c_hid: Count = 16
    num_classes: Count = 10
    act_fn: Activation = "relu"
    image_size: Count = 8
    channels: Count = 1
    dropout: Rate = 0.0

    @linen.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        if x.ndim == 2:
            x = x.reshape(x.shape[0], self.image_size, self.image_size, self.channels)
        act = activation(self.act_fn)
        x = act(linen.Conv(self.c_hid, (3, 3))(x))
        x = act(linen.Conv(self.c_hid, (3, 3), strides=(2, 2))(x))
        x = _flat(x)
        if self.dropout:
            x = linen.Dropout(self.dropout, deterministic=not train)(x)
        return linen.Dense(self.num_classes)(x)


@register_dataset
class DigitsDataset:
    """scikit-learn's digits (embedded) as ``train_loader``, ``val_loader`` and ``test_loader``.

    Args:
        val_size: examples held out of the training part, stratified by ``split_seed``.
        eval_batch_size: examples per validation / test batch (default: all in one).
        normalize: pixels in [0, 1] (``False``: the raw 0..16 counts).
        image_shape: images shaped ``(N, 8, 8, 1)`` rather than flat.

    Example:
        >>> d = DigitsDataset(global_batch_size=64, val_size=200)
        >>> d.train_loader.epoch_steps, len(d.val_loader[0][1]), len(d.test_loader[0][1])
        (19, 200, 360)
    """

    def __init__(
        self, global_batch_size: int = 128, val_size: int = 200, split_seed: int = 42,
        eval_batch_size: int | None = None, normalize: bool = True, image_shape: bool = False,
    ) -> None:
        (x, y), (xt, yt) = digits()
        if not normalize:
            x, xt = x * 16.0, xt * 16.0
        if image_shape:
            x, xt = x.reshape(-1, 8, 8, 1), xt.reshape(-1, 8, 8, 1)
        val_size = whole(val_size, "val_size", minimum=1, maximum=len(y) - 1, fix="val_size: 200",
                         problem="DigitsDataset's val_size must leave training examples",
                         expected=f"a whole number in 1..{len(y) - 1}")
        train_idx, val_idx = stratified_split(y, test_size=val_size / len(y), seed=split_seed)
        self.global_batch_size = global_batch_size
        self.train_loader = process_share(batches((x[train_idx], y[train_idx]), global_batch_size, seed=split_seed))
        self.val_loader = process_share(_fixed_batches(x[val_idx], y[val_idx], eval_batch_size))
        self.test_loader = process_share(_fixed_batches(xt, yt, eval_batch_size))


def _fixed_batches(x: np.ndarray, y: np.ndarray, size: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    size = size or len(y)
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(y), size)]


CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)


class DatasetConfig:
    """The base of the data sets' typed configs (the kpoeppel fork's ``DatasetConfig``):
    each names its data set in ``class_name`` and builds it with :meth:`instantiate`."""

    class_name: ClassVar[str | None] = None

    def instantiate(self, interface: type | None = None, mesh: Any = None) -> DatasetModule:
        """The data set this config names, built from its fields (the fork's
        ``config.instantiate(DatasetModule, mesh)``). The loaders give host batches; the
        trainer shards them over its own ``mesh=``, so ``mesh`` is only checked."""
        name = type(self).__name__
        if interface is not None and not (isinstance(interface, type) and issubclass(interface, DatasetModule)):
            raise TypeError(explain(
                f"{name}.instantiate builds a DatasetModule",
                expected="instantiate(DatasetModule) or instantiate(DatasetModule, mesh)",
                received=describe(interface), fix="pass gyre.trainer.DatasetModule, or nothing"))
        instance(mesh, f"{name}.instantiate: mesh", Mesh, none=True, kind="a jax.sharding.Mesh",
                 fix="pass mesh=init_ddp_mesh(), or leave it out",
                 expected="init_ddp_mesh() or None (the trainer shards batches over its own mesh=)")
        keys = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        return DATASETS.get(type(self).class_name, where=f"{name}.class_name")(**keys)  # type: ignore[arg-type]


class DatasetModule(metaclass=ConfigTyped):
    """The base of the registered data sets (the kpoeppel fork's
    ``jax_trainer.datasets.DatasetModule``): ``train_loader``, ``val_loader`` and
    ``test_loader``; ``cfgtype`` is the union of their typed configs, to annotate a config
    field with (``dataset: DatasetModule.cfgtype``).

    Example:
        >>> DatasetModule.cfgtype.__args__[0].__name__
        'CIFAR10Config'
    """

    config_class: ClassVar[type] = DatasetConfig
    train_loader: Any
    val_loader: Any
    test_loader: Any


class _ImageDataset(DatasetModule):
    """The three loaders of one image data set (see the module docstring)."""

    reader: Callable[[Any], Any]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __init__(
        self, data_dir: str, global_batch_size: int = 128, local_batch_size: int | None = None,
        val_size: int = 5000, split_seed: int = 42, normalize: bool = True, num_workers: int = 0,
    ) -> None:
        name = type(self).__name__
        size = whole(global_batch_size, f"{name}: global_batch_size", minimum=1,
                     expected="examples per training batch, e.g. 128",
                     fix="global_batch_size: 128")
        if local_batch_size is not None and local_batch_size * jax.process_count() != size:
            raise ValueError(explain(
                f"{name}: local_batch_size must be global_batch_size split over the processes",
                expected=f"{size} // {jax.process_count()} process(es) = {size // jax.process_count()}",
                received=describe(local_batch_size),
                fix="leave local_batch_size out (gyre splits the global batch over the devices)"))
        whole(num_workers, f"{name}: num_workers", fix="num_workers: 0",
              expected="0 (accepted for jax_trainer configs: in-memory arrays batch in the calling thread)")
        train, test = self.reader(data_dir)
        (x, y), (xt, yt) = (self._prepared(*train, normalize), self._prepared(*test, normalize))
        sources = arrays(((x, y), (xt, yt)), size, validation=val_size, seed=split_seed)
        self.global_batch_size = size
        self.train_loader = process_share(supervised(sources.train))
        self.val_loader = process_share(supervised(sources.val))
        self.test_loader = process_share(supervised(sources.test))

    def _prepared(self, images: np.ndarray, labels: np.ndarray, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
        if normalize:
            images = (images - np.float32(self.mean)) / np.float32(self.std)
        return images.astype(np.float32), labels.astype(np.int64)


@register_dataset
class CIFAR10Dataset(_ImageDataset):
    """CIFAR-10 from its binary files in ``data_dir`` (:func:`gyre.data.cifar10`): 45,000
    training images, a seeded validation split of ``val_size``, the 10,000 test images.

    Args:
        data_dir: the folder of ``cifar-10-batches-bin`` (or that folder itself).
        local_batch_size: jax_trainer's per-process batch; only checked (``global / processes``).
        split_seed: the seed of the split and of the training shuffles.
        normalize: subtract CIFAR-10's channel means, divide by their deviations.
        num_workers: accepted for jax_trainer's configs (the arrays are in memory).

    Example:
        >>> CIFAR10Dataset("no/such/folder")
        Traceback (most recent call last):
        FileNotFoundError: ...
    """

    reader = staticmethod(cifar10)
    mean, std = CIFAR10_MEAN, CIFAR10_STD


@register_dataset
class MNISTDataset(_ImageDataset):
    """MNIST from its IDX files in ``data_dir`` (:func:`gyre.data.mnist`): 55,000 training
    images, a seeded validation split of ``val_size``, the 10,000 test images; the arguments
    are :class:`CIFAR10Dataset`'s.

    Example:
        >>> MNISTDataset.mean, MNISTDataset.std  # the normalisation of normalize=True
        ((0.1307,), (0.3081,))
    """

    reader = staticmethod(mnist)
    mean, std = MNIST_MEAN, MNIST_STD


def _typed_config(dataset: type, doc: str) -> type:
    """The typed config of a registered data set: a dataclass of its ``__init__``'s
    parameters (their defaults stay the data set's), whose ``class_name`` names it."""
    parameters = list(inspect.signature(dataset.__init__).parameters.values())[1:]
    hints = typing.get_type_hints(dataset.__init__)
    fields = [(p.name, hints[p.name]) if p.default is p.empty else (p.name, hints[p.name], p.default)
              for p in parameters]
    name = dataset.__name__.removesuffix("Dataset") + "Config"
    config = dataclasses.make_dataclass(name, fields, bases=(DatasetConfig,),
                                        namespace={"class_name": dataset.__name__, "__doc__": doc})
    config.__module__ = "gyre.trainer"
    config.__annotations__["class_name"] = ClassVar[str]
    dataset.config_class = config
    return config


CIFAR10Config = _typed_config(CIFAR10Dataset, """The typed config of :class:`CIFAR10Dataset` (the kpoeppel fork's
    ``CIFAR10Config``): its parameters as fields, ``class_name = "CIFAR10Dataset"``.

    Example:
        >>> config = CIFAR10Config(data_dir="no/such/folder", global_batch_size=64)
        >>> config.class_name, config.val_size
        ('CIFAR10Dataset', 5000)
        >>> config.instantiate(DatasetModule)
        Traceback (most recent call last):
        FileNotFoundError: ...
    """)
MNISTConfig = _typed_config(MNISTDataset, """The typed config of :class:`MNISTDataset`: its parameters as fields,
    ``class_name = "MNISTDataset"``.

    Example:
        >>> MNISTConfig(data_dir="data/").class_name
        'MNISTDataset'
    """)


def build_dataset_module(config: Any) -> Any:
    """The data set of a ``dataset`` section: a registered ``class_name``, or jax_trainer's
    ``constructor`` when it names one of jax_trainer's own data sets (``batch_size`` is read
    as ``global_batch_size``). A config never imports a dotted path: any other constructor is
    refused with the registry's names.

    Example:
        >>> build_dataset_module({"constructor": "my_project.data.build"})
        Traceback (most recent call last):
        gyre.config.ConfigError: dataset.constructor names code to import: my_project.data.build
        ...
    """
    data = plain_section(config)
    instance(data, "dataset", Mapping, problem="build_dataset_module takes the dataset section",
             expected="a mapping with class_name (or jax_trainer's constructor), e.g. "
             "{'class_name': 'CIFAR10Dataset', 'data_dir': 'data/'}", fix="pass config.dataset")
    data = jax_trainer_dataset(dict(data))
    return build_component("datasets", data, "dataset")
