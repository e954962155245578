"""The trainer rung: jax_trainer's ``TrainerModule``, its metric modes and callbacks, on gyre's
engine, checkpoints and writers (see :mod:`gyre.trainer._module`)."""

from gyre.trainer._callback import Callback as Callback
from gyre.trainer._callback import ConfusionMatrixCallback as ConfusionMatrixCallback
from gyre.trainer._callback import DisableGC as DisableGC
from gyre.trainer._callback import EarlyStopping as EarlyStopping
from gyre.trainer._callback import GradientSpikeMonitor as GradientSpikeMonitor
from gyre.trainer._callback import JAXProfiler as JAXProfiler
from gyre.trainer._callback import LearningRateMonitor as LearningRateMonitor
from gyre.trainer._callback import ModelCheckpoint as ModelCheckpoint
from gyre.trainer._callback import TrainerView as TrainerView
from gyre.trainer._callback import confusion_matrix as confusion_matrix
from gyre.trainer._classifier import AugmentedImgClassifierTrainer as AugmentedImgClassifierTrainer
from gyre.trainer._classifier import (
    AugmentedImgClassifierTrainerConfig as AugmentedImgClassifierTrainerConfig,
)
from gyre.trainer._classifier import CIFAR10Config as CIFAR10Config
from gyre.trainer._classifier import CIFAR10Dataset as CIFAR10Dataset
from gyre.trainer._classifier import DatasetModule as DatasetModule
from gyre.trainer._classifier import DigitsDataset as DigitsDataset
from gyre.trainer._classifier import ImgClassifierConfig as ImgClassifierConfig
from gyre.trainer._classifier import ImgClassifierTrainer as ImgClassifierTrainer
from gyre.trainer._classifier import MNISTConfig as MNISTConfig
from gyre.trainer._classifier import MNISTDataset as MNISTDataset
from gyre.trainer._classifier import SimpleClassifier as SimpleClassifier
from gyre.trainer._classifier import SimpleClassifierLinen as SimpleClassifierLinen
from gyre.trainer._classifier import SimpleCNN as SimpleCNN
from gyre.trainer._classifier import SimpleCNNLinen as SimpleCNNLinen
from gyre.trainer._classifier import build_dataset_module as build_dataset_module
from gyre.trainer._logger import ArraySpec as ArraySpec
from gyre.trainer._logger import EpochMetricFiles as EpochMetricFiles
from gyre.trainer._logger import Logger as Logger
from gyre.trainer._logger import ToolLoggerInterface as ToolLoggerInterface
from gyre.trainer._logger import array_to_spec as array_to_spec
from gyre.trainer._logger import convert_from_array_spec as convert_from_array_spec
from gyre.trainer._logger import convert_to_array_spec as convert_to_array_spec
from gyre.trainer._logger import load_pytree as load_pytree
from gyre.trainer._logger import np_array_to_spec as np_array_to_spec
from gyre.trainer._logger import save_pytree as save_pytree
from gyre.trainer._logger import spec_to_array as spec_to_array
from gyre.trainer._metrics import LogFreq as LogFreq
from gyre.trainer._metrics import LogMetricMode as LogMetricMode
from gyre.trainer._metrics import LogMode as LogMode
from gyre.trainer._metrics import MetricAccumulator as MetricAccumulator
from gyre.trainer._metrics import MetricSpec as MetricSpec
from gyre.trainer._metrics import get_metrics as get_metrics
from gyre.trainer._metrics import update_metrics as update_metrics
from gyre.trainer._model import Augmentation as Augmentation
from gyre.trainer._model import AugmentationLinen as AugmentationLinen
from gyre.trainer._model import BaseAugmentationLinen as BaseAugmentationLinen
from gyre.trainer._model import BaseAugmentationLinenConfig as BaseAugmentationLinenConfig
from gyre.trainer._model import BaseAugmentationNNX as BaseAugmentationNNX
from gyre.trainer._model import BaseAugmentationNNXConfig as BaseAugmentationNNXConfig
from gyre.trainer._model import BaseModelLinen as BaseModelLinen
from gyre.trainer._model import BaseModelNNX as BaseModelNNX
from gyre.trainer._model import BasePreprocessingLinen as BasePreprocessingLinen
from gyre.trainer._model import BasePreprocessingLinenConfig as BasePreprocessingLinenConfig
from gyre.trainer._model import BasePreprocessingNNX as BasePreprocessingNNX
from gyre.trainer._model import BasePreprocessingNNXConfig as BasePreprocessingNNXConfig
from gyre.trainer._model import GaussianNoise as GaussianNoise
from gyre.trainer._model import GaussianNoiseLinen as GaussianNoiseLinen
from gyre.trainer._model import count_parameters as count_parameters
from gyre.trainer._model import module_named_params as module_named_params
from gyre.trainer._module import TrainerModule as TrainerModule
from gyre.trainer._module import TrainerModuleConfig as TrainerModuleConfig
from gyre.trainer._module import init_ddp_mesh as init_ddp_mesh

__all__ = [
    "Augmentation", "AugmentationLinen", "CIFAR10Dataset", "Callback", "ConfusionMatrixCallback", "DigitsDataset", "DisableGC", "EarlyStopping", "EpochMetricFiles",
    "GaussianNoise", "GaussianNoiseLinen", "GradientSpikeMonitor", "ImgClassifierConfig", "ImgClassifierTrainer", "JAXProfiler", "LearningRateMonitor",
    "LogFreq", "LogMetricMode", "LogMode", "MNISTDataset", "MetricAccumulator", "MetricSpec", "ModelCheckpoint", "SimpleCNN",
    "SimpleCNNLinen", "SimpleClassifier", "SimpleClassifierLinen", "TrainerModule", "TrainerModuleConfig", "TrainerView", "build_dataset_module", "confusion_matrix",
    # the kpoeppel fork's logger surface (jax_trainer.logger)
    "ArraySpec", "Logger", "ToolLoggerInterface", "array_to_spec", "convert_from_array_spec", "convert_to_array_spec",
    "count_parameters", "get_metrics", "load_pytree", "module_named_params", "np_array_to_spec", "save_pytree",
    "spec_to_array", "update_metrics",
    # the kpoeppel fork's interfaces (jax_trainer.interfaces, .datasets, .init_mesh)
    "BaseModelLinen", "BaseModelNNX", "CIFAR10Config", "DatasetModule", "MNISTConfig", "init_ddp_mesh",
    "AugmentedImgClassifierTrainer", "AugmentedImgClassifierTrainerConfig", "BaseAugmentationLinen",
    "BaseAugmentationLinenConfig", "BaseAugmentationNNX", "BaseAugmentationNNXConfig", "BasePreprocessingLinen",
    "BasePreprocessingLinenConfig", "BasePreprocessingNNX", "BasePreprocessingNNXConfig",
]
