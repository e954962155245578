"""jax_trainer's image data sets from local files (nothing is downloaded): ``MNISTDataset`` and
``CIFAR10Dataset``, registered under those names, giving :class:`gyre.data.SupervisedBatch`
batches (float32 NHWC images, normalised unless ``normalize=False``; int64 targets); and
:func:`build_dataset_module`, phlippe/jax_trainer's entry point."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from gyre.config._jax_trainer import jax_trainer_dataset
from gyre.config._registry import ConfigTyped, register_dataset
from gyre.core._checks import instance, whole
from gyre.core._errors import describe, explain
from gyre.data import arrays, cifar10, mnist, supervised

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
        from jax.sharding import Mesh

        from gyre.config import DATASETS

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
        import jax

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
        self.train_loader = supervised(sources.train)
        self.val_loader = supervised(sources.val)
        self.test_loader = supervised(sources.test)

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
    from gyre.trainer._setup import component, plain_section

    data = plain_section(config)
    instance(data, "dataset", Mapping, problem="build_dataset_module takes the dataset section",
             expected="a mapping with class_name (or jax_trainer's constructor), e.g. "
             "{'class_name': 'CIFAR10Dataset', 'data_dir': 'data/'}", fix="pass config.dataset")
    data = jax_trainer_dataset(dict(data))
    cls, kwargs = component("datasets", data, "dataset")
    return cls(**kwargs)
