"""Typed configs: registries of components, the YAML schema, optimizer/schedule/transform builders."""

from gyre.config._components import ConfigError as ConfigError
from gyre.config._components import RunLengthUnknown as RunLengthUnknown
from gyre.config._components import run_length as run_length
from gyre.config._components import validate_component as validate_component
from gyre.config._components import validate_nested as validate_nested
from gyre.config._jax_trainer import from_jax_trainer as from_jax_trainer
from gyre.config._optim import OptimizerBuilder as OptimizerBuilder
from gyre.config._optim import assemble_optimizer as assemble_optimizer
from gyre.config._optim import build_optimizer as build_optimizer
from gyre.config._optim import learning_rate_of as learning_rate_of
from gyre.config._optim import optax_optimizers as optax_optimizers
from gyre.config._registry import CALLBACKS as CALLBACKS
from gyre.config._registry import DATASETS as DATASETS
from gyre.config._registry import LOGGERS as LOGGERS
from gyre.config._registry import MODELS as MODELS
from gyre.config._registry import OPTIMIZERS as OPTIMIZERS
from gyre.config._registry import REGISTRIES as REGISTRIES
from gyre.config._registry import SCHEDULES as SCHEDULES
from gyre.config._registry import TRAINERS as TRAINERS
from gyre.config._registry import TRANSFORMS as TRANSFORMS
from gyre.config._registry import Registry as Registry
from gyre.config._registry import register_callback as register_callback
from gyre.config._registry import register_dataset as register_dataset
from gyre.config._registry import register_logger as register_logger
from gyre.config._registry import register_model as register_model
from gyre.config._registry import register_optimizer as register_optimizer
from gyre.config._registry import register_schedule as register_schedule
from gyre.config._registry import register_trainer as register_trainer
from gyre.config._registry import register_transform as register_transform
from gyre.config._schedules import build_schedule as build_schedule
from gyre.config._schema import Config as Config
from gyre.config._schema import LoggerConfig as LoggerConfig
from gyre.config._schema import TrainerConfig as TrainerConfig
from gyre.config._schema import model_kind as model_kind
from gyre.config._tools import TensorboardConfig as TensorboardConfig
from gyre.config._tools import WandbConfig as WandbConfig
from gyre.config._tools import build_tool_writer as build_tool_writer
from gyre.config._transforms import Transform as Transform
from gyre.config._transforms import WeightDecayTransform as WeightDecayTransform
from gyre.config._transforms import build_transform as build_transform
from gyre.config._transforms import build_transforms as build_transforms
from gyre.config._transforms import parameter_path as parameter_path
from gyre.config._typed_configs import SGD as SGD
from gyre.config._typed_configs import AdamW as AdamW
from gyre.config._typed_configs import AdamWConfig as AdamWConfig
from gyre.config._typed_configs import BaseOptimizerConfig as BaseOptimizerConfig
from gyre.config._typed_configs import BaseScheduleConfig as BaseScheduleConfig
from gyre.config._typed_configs import ConcatSchedule as ConcatSchedule
from gyre.config._typed_configs import ConcatScheduleConfig as ConcatScheduleConfig
from gyre.config._typed_configs import ConstantSchedule as ConstantSchedule
from gyre.config._typed_configs import ConstantScheduleConfig as ConstantScheduleConfig
from gyre.config._typed_configs import CosineSchedule as CosineSchedule
from gyre.config._typed_configs import CosineScheduleConfig as CosineScheduleConfig
from gyre.config._typed_configs import ExponentialSchedule as ExponentialSchedule
from gyre.config._typed_configs import ExponentialScheduleConfig as ExponentialScheduleConfig
from gyre.config._typed_configs import GradClipNormConfig as GradClipNormConfig
from gyre.config._typed_configs import GradClipValueConfig as GradClipValueConfig
from gyre.config._typed_configs import GradientTransformConfig as GradientTransformConfig
from gyre.config._typed_configs import GradientTransformInterface as GradientTransformInterface
from gyre.config._typed_configs import Lamb as Lamb
from gyre.config._typed_configs import LambConfig as LambConfig
from gyre.config._typed_configs import LinearSchedule as LinearSchedule
from gyre.config._typed_configs import LinearScheduleConfig as LinearScheduleConfig
from gyre.config._typed_configs import OptimizerInterface as OptimizerInterface
from gyre.config._typed_configs import ScheduleInterface as ScheduleInterface
from gyre.config._typed_configs import SGDConfig as SGDConfig
from gyre.config._typed_configs import TypedConfig as TypedConfig
from gyre.config._typed_configs import TypedConfigError as TypedConfigError
from gyre.config._typed_configs import WarmupCosineDecaySchedule as WarmupCosineDecaySchedule
from gyre.config._typed_configs import (
    WarmupCosineDecayScheduleConfig as WarmupCosineDecayScheduleConfig,
)
from gyre.config._typed_configs import WeightDecayConfig as WeightDecayConfig
from gyre.config._yaml import config_to_dict as config_to_dict
from gyre.config._yaml import dump_config as dump_config
from gyre.config._yaml import flatten_configdict as flatten_configdict
from gyre.config._yaml import flatten_dict as flatten_dict
from gyre.config._yaml import load_config as load_config

__all__ = [
    "CALLBACKS", "DATASETS", "LOGGERS", "MODELS", "OPTIMIZERS", "REGISTRIES", "SCHEDULES", "TRAINERS",
    "TRANSFORMS", "Registry", "register_callback", "register_dataset", "register_logger", "register_model",
    "register_optimizer", "register_schedule", "register_trainer", "register_transform",
    # optimizers, schedules, transforms
    "assemble_optimizer", "build_optimizer", "learning_rate_of", "optax_optimizers", "build_schedule",
    "run_length", "RunLengthUnknown",
    "Transform", "WeightDecayTransform", "build_transform", "build_transforms", "parameter_path",
    # the schema, YAML files and tool loggers
    "Config", "ConfigError", "LoggerConfig", "TrainerConfig", "model_kind", "validate_component", "validate_nested",
    "build_tool_writer", "TensorboardConfig", "WandbConfig", "config_to_dict", "dump_config", "load_config", "flatten_configdict", "flatten_dict",
    # jax_trainer's optimizer sections
    "OptimizerBuilder", "from_jax_trainer",
    # the kpoeppel fork's typed configs and the classes they build (registered by these names)
    "AdamW", "ConcatSchedule", "ConstantSchedule", "CosineSchedule", "ExponentialSchedule",
    "GradientTransformInterface", "Lamb", "LinearSchedule", "OptimizerInterface", "SGD",
    "ScheduleInterface", "WarmupCosineDecaySchedule",
    "AdamWConfig", "BaseOptimizerConfig", "BaseScheduleConfig", "ConcatScheduleConfig",
    "ConstantScheduleConfig", "CosineScheduleConfig", "ExponentialScheduleConfig",
    "GradClipNormConfig", "GradClipValueConfig", "GradientTransformConfig", "LambConfig",
    "LinearScheduleConfig", "SGDConfig", "TypedConfig", "TypedConfigError",
    "WarmupCosineDecayScheduleConfig", "WeightDecayConfig",
]
