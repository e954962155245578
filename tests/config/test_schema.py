"""The strict schema: component sections checked against the registered signatures (or a
``config_class``), the trainer and logger sections as pydantic models, and every mistake a
ConfigError naming its dotted path, the valid keys and the closest one."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from gyre.config import (
    REGISTRIES,
    Config,
    ConfigError,
    LoggerConfig,
    TrainerConfig,
    config_to_dict,
    validate_component,
    validate_nested,
)
from gyre.config._components import check_section, check_value, type_name
from gyre.config._schema import validate_optimizer

# -- components standing in for the real ones (registered per test, removed after) ------------


class ToyTrainerConfig(TrainerConfig):
    num_classes: int = 10


class ToyTrainer:
    config_class = ToyTrainerConfig


class ToyPlainTrainer:
    pass


class ToyBadTrainer:
    config_class = dict


class ToyModel:
    def __init__(
        self,
        c_hid: int,
        num_classes: int = 10,
        act_fn: Literal["gelu", "relu"] = "gelu",
        dropout: float = 0.0,
        *,
        rngs: Any,
    ) -> None:
        pass


class ToyModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width: int = 8
    shape: tuple[int, int] = (2, 2)


class ToyConfiguredModel:
    config_class = ToyModelConfig


def toy_kwargs_model(depth: int = 1, **options: Any) -> None:
    pass


def toy_callable_default(scale: float = 1.0, act=abs, shape: tuple[int, int] = (3, 4)) -> None:
    pass


def toy_unresolved(x: NotImportedHere = 1) -> None:  # noqa: F821 (a name only a type checker sees)
    pass


def toy_sgd(
    learning_rate: float | Mapping[str, Any],
    momentum: float = 0.0,
    transforms: list[Mapping[str, Any]] | None = None,
) -> None:
    pass


def toy_warmup(*, peak_value: float, warmup_steps: int = 0) -> None:
    pass


def toy_concat(*, schedules: list[Any], boundaries: list[int]) -> None:
    pass


def toy_clip(*, max_norm: float, before_optimizer: bool = True) -> None:
    pass


def toy_checkpoint(
    monitor: str = "val/loss", mode: Literal["min", "max"] = "min", save_top_k: int = 1, every_n_epochs: int = 1
) -> None:
    pass


def toy_data(batch_size: int = 32, data_dir: str = "data/") -> None:
    pass


TOYS = {
    "trainers": {"TestOnlyTrainer": ToyTrainer, "TestOnlyPlainTrainer": ToyPlainTrainer,
                 "TestOnlyBadTrainer": ToyBadTrainer},
    "models": {"TestOnlyModel": ToyModel, "TestOnlyConfigured": ToyConfiguredModel,
               "TestOnlyKwargs": toy_kwargs_model, "TestOnlyDefaults": toy_callable_default,
               "TestOnlyUnresolved": toy_unresolved},
    "optimizers": {"TestOnlySGD": toy_sgd},
    "schedules": {"TestOnlyWarmup": toy_warmup, "TestOnlyConcat": toy_concat},
    "transforms": {"TestOnlyClip": toy_clip},
    "callbacks": {"TestOnlyCheckpoint": toy_checkpoint},
    "datasets": {"TestOnlyData": toy_data},
}


@pytest.fixture
def toys(monkeypatch):
    """The toy components, registered for one test."""
    for kind, entries in TOYS.items():
        for name, obj in entries.items():
            monkeypatch.setitem(REGISTRIES[kind]._items, name, obj)


def config_data(**changes: Any) -> dict[str, Any]:
    data = {
        "trainer": {"class_name": "TestOnlyTrainer", "train_epochs": 2},
        "model": {"class_name": "TestOnlyModel", "c_hid": 16},
        "optimizer": {"class_name": "TestOnlySGD", "learning_rate": 0.1},
        "dataset": {"class_name": "TestOnlyData"},
    }
    data.update(changes)
    return data


# -- validate_component -----------------------------------------------------------------------


def test_the_keyword_arguments_come_back_in_signature_order_with_plain_defaults_filled(toys):
    checked = validate_component("models", {"dropout": 1, "class_name": "TestOnlyModel", "c_hid": 3},
                                 where="model", extra_allowed=("rngs",))
    assert checked == {"c_hid": 3, "num_classes": 10, "act_fn": "gelu", "dropout": 1.0}
    assert list(checked) == ["c_hid", "num_classes", "act_fn", "dropout"]
    assert type(checked["dropout"]) is float  # an int is accepted for a float, as a float


def test_the_keyword_arguments_build_the_component_and_check_section_keeps_the_name(toys, monkeypatch):
    def toy_built(width: int, depth: int = 2) -> tuple[int, int]:
        return width, depth

    monkeypatch.setitem(REGISTRIES["models"]._items, "TestOnlyBuilt", toy_built)
    section = {"class_name": "TestOnlyBuilt", "width": 4}
    assert toy_built(**validate_component("models", section, where="model")) == (4, 2)
    assert check_section("models", section, where="model") == {"class_name": "TestOnlyBuilt", "width": 4, "depth": 2}


def test_an_unknown_key_names_its_path_the_valid_keys_and_the_closest(toys):
    with pytest.raises(ConfigError, match=r"unknown key model\.c_hdi for the model 'TestOnlyModel'\. "
                                          r"Did you mean 'c_hid'\?") as caught:
        validate_component("models", {"class_name": "TestOnlyModel", "c_hdi": 3}, where="model")
    assert "a key of TestOnlyModel: class_name, c_hid, num_classes, act_fn, dropout, rngs" in str(caught.value)
    assert "received: c_hdi: int 3" in str(caught.value)


@pytest.mark.parametrize(
    "value, received",
    [("32", "str '32'"), (True, "bool True"), (None, "NoneType None"), (3.5, "float 3.5"), ([3], "list [3]")],
)
def test_a_wrong_type_names_the_path_the_type_and_the_value(toys, value, received):
    with pytest.raises(ConfigError, match=r"wrong type at model\.c_hid\.\n  expected: int .*, for the "
                                          rf"parameter c_hid of TestOnlyModel\n  received: {re.escape(received)}"):
        validate_component("models", {"class_name": "TestOnlyModel", "c_hid": value}, where="model",
                           extra_allowed=("rngs",))


def test_a_value_outside_a_literal_suggests_the_closest(toys):
    with pytest.raises(ConfigError, match=r"invalid value at model\.act_fn\. Did you mean 'relu'\?\n"
                                          r"  expected: 'gelu' \| 'relu'"):
        validate_component("models", {"class_name": "TestOnlyModel", "c_hid": 1, "act_fn": "reul"},
                           where="model", extra_allowed=("rngs",))


def test_a_number_for_a_string_says_to_quote_it(toys):
    with pytest.raises(ConfigError, match=r"(?s)wrong type at trainer\.callbacks\.C\.monitor\..*quote it"):
        validate_component("callbacks", {"class_name": "TestOnlyCheckpoint", "monitor": 1},
                           where="trainer.callbacks.C")


def test_a_missing_required_key_is_named_with_its_type(toys):
    with pytest.raises(ConfigError, match=r"missing required keys c_hid, rngs in model \(model 'TestOnlyModel'\)"
                                          r"\n  expected: c_hid: int, rngs: any value"):
        validate_component("models", {"class_name": "TestOnlyModel"}, where="model")


def test_a_supplied_parameter_is_neither_required_nor_filled(toys):
    checked = validate_component("models", {"class_name": "TestOnlyModel", "c_hid": 1}, where="model",
                                 extra_allowed=("rngs",))
    assert "rngs" not in checked


def test_an_allowed_extra_key_passes_through(toys):
    checked = validate_component("datasets", {"class_name": "TestOnlyData", "shard": [0, 2]}, where="dataset",
                                 extra_allowed=("shard",))
    assert checked == {"batch_size": 32, "data_dir": "data/", "shard": [0, 2]}


@pytest.mark.parametrize("section", [{"batch_size": 3}, {"class_name": 3}])
def test_a_section_without_a_class_name_lists_the_registered_names(toys, section):
    with pytest.raises(ConfigError, match=r"dataset\.class_name is (missing|not a name)\n"
                                          r"  expected: class_name: one of the registered datasets: .*TestOnlyData"):
        validate_component("datasets", section, where="dataset")


def test_an_unknown_class_name_lists_the_registered_names(toys):
    with pytest.raises(ConfigError, match=r"unknown datasets name 'TestOnlyDat' at dataset\.class_name\. "
                                          r"Did you mean 'TestOnlyData'\?\n  expected: .*TestOnlyData"):
        validate_component("datasets", {"class_name": "TestOnlyDat"}, where="dataset")


def test_a_section_must_be_a_mapping_with_string_keys(toys):
    with pytest.raises(ConfigError, match=r"dataset must be a mapping of keys to values\n.*\n  received: list"):
        validate_component("datasets", ["TestOnlyData"], where="dataset")
    with pytest.raises(ConfigError, match=r"dataset has a key that is not a string\n.*\n  received: int 1"):
        validate_component("datasets", {"class_name": "TestOnlyData", 1: 2}, where="dataset")


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match=r"no registry of 'model'\n  expected: one of trainers, models"):
        validate_component("model", {"class_name": "X"}, where="model")


def test_nested_sections_are_left_to_their_builder_and_validate_nested_checks_them(toys):
    schedule = {"class_name": "TestOnlyWarmup", "peak_value": 1}
    checked = validate_component("optimizers", {"class_name": "TestOnlySGD", "learning_rate": schedule,
                                                "transforms": [{"class_name": "TestOnlyClip", "max_norm": 1}]},
                                 where="optimizer")
    assert checked["learning_rate"] == schedule and checked["transforms"] == [{"class_name": "TestOnlyClip", "max_norm": 1}]
    assert validate_nested("schedules", checked["learning_rate"], where="optimizer.learning_rate") == {
        "class_name": "TestOnlyWarmup", "peak_value": 1.0, "warmup_steps": 0}
    assert validate_nested("transforms", checked["transforms"], where="optimizer.transforms") == [
        {"class_name": "TestOnlyClip", "max_norm": 1.0, "before_optimizer": True}]
    assert validate_nested("transforms", {"clip": {"class_name": "TestOnlyClip", "max_norm": 2}}, where="t") == {
        "clip": {"class_name": "TestOnlyClip", "max_norm": 2.0, "before_optimizer": True}}
    assert validate_nested("schedules", 0.5, where="optimizer.learning_rate") == 0.5
    with pytest.raises(ConfigError, match=r"unknown key optimizer\.transforms\.0\.max_nrm"):
        validate_nested("transforms", [{"class_name": "TestOnlyClip", "max_nrm": 1}], where="optimizer.transforms")


def test_a_config_class_checks_the_section_instead_of_the_signature(toys):
    checked = validate_component("models", {"class_name": "TestOnlyConfigured", "shape": [4, 5]}, where="model")
    assert checked == {"width": 8, "shape": (4, 5)}
    with pytest.raises(ConfigError, match=r"unknown key model\.widht in model\. Did you mean 'width'\?\n"
                                          r"  expected: a key of model: width, shape"):
        validate_component("models", {"class_name": "TestOnlyConfigured", "widht": 3}, where="model")
    with pytest.raises(ConfigError, match=r"wrong type at model\.width\.\n  expected: int"):
        validate_component("models", {"class_name": "TestOnlyConfigured", "width": "3"}, where="model")


def test_a_callable_with_kwargs_takes_any_key(toys):
    checked = validate_component("models", {"class_name": "TestOnlyKwargs", "anything": {"a": 1}}, where="model")
    assert checked == {"depth": 1, "anything": {"a": 1}}


def test_only_plain_defaults_are_filled_and_tuples_are_read_from_lists(toys):
    assert validate_component("models", {"class_name": "TestOnlyDefaults"}, where="model") == {
        "scale": 1.0, "shape": (3, 4)}
    assert validate_component("models", {"class_name": "TestOnlyDefaults", "shape": [1, 2]}, where="model")["shape"] == (1, 2)


def test_an_annotation_that_cannot_be_resolved_is_not_checked(toys):
    assert validate_component("models", {"class_name": "TestOnlyUnresolved", "x": "any"}, where="model") == {
        "x": "any"}


def test_a_flax_linen_module_has_no_parent_key(monkeypatch):
    import flax.linen as nn

    class ToyLinen(nn.Module):
        features: int = 4

    monkeypatch.setitem(REGISTRIES["models"]._items, "TestOnlyLinen", ToyLinen)
    assert validate_component("models", {"class_name": "TestOnlyLinen", "features": 2}, where="model") == {
        "features": 2, "name": None}
    with pytest.raises(ConfigError, match=r"unknown key model\.parent"):
        validate_component("models", {"class_name": "TestOnlyLinen", "parent": None}, where="model")


def test_check_value_and_type_name():
    assert check_value(tuple[int, float], [1, 2], path="p") == (1, 2.0)
    assert check_value(Any, (1, 2), path="p") == [1, 2]
    assert type_name(int | None) == "int | None" and type_name(Literal["a"] | None) == "'a' | None"
    assert type_name(inspect.Parameter.empty) == "any value"


# -- TrainerConfig, LoggerConfig -----------------------------------------------------------------


def test_the_trainer_and_logger_defaults():
    trainer = TrainerConfig()
    assert trainer.model_dump() == {
        "class_name": "TrainerModule", "train_epochs": 1, "check_val_every_n_epoch": 1, "debug": False,
        "enable_progress_bar": True, "seed": 42, "log_grad_norm": False, "detect_nans": True,
        "model_mode": "nnx", "steps_per_call": 1, "num_devices": None, "resume": None, "resume_every_minutes": 10.0,
        "logger": {"class_name": "Logger", "log_dir": None, "log_steps_every": 50, "tool_config": None,
                   "log_file_verbosity": "info", "stderrthreshold": "warning", "base_log_dir": None},
        "callbacks": {},
    }
    assert TrainerConfig(logger=None, callbacks=None) == trainer


def test_steps_per_call_takes_auto():
    assert TrainerConfig(steps_per_call="auto").steps_per_call == "auto"
    assert TrainerConfig(steps_per_call=np.int64(4)).steps_per_call == 4


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("train_epochs", 0, r"invalid value at trainer\.train_epochs\.\n  expected: int \(Input should be greater than or equal to 1\)\n  received: int 0"),
        ("check_val_every_n_epoch", -1, r"invalid value at trainer\.check_val_every_n_epoch\."),
        ("steps_per_call", 0, r"invalid value at trainer\.steps_per_call\."),
        ("steps_per_call", "fast", r"^invalid value at trainer\.steps_per_call\.\n  expected: int \| 'auto' \(Value error, "
                                   r"steps_per_call is a whole number >= 1, or 'auto'\)\n  received: str 'fast'"),
        ("num_devices", 0, r"invalid value at trainer\.num_devices\."),
        ("resume", "latst", r"invalid value at trainer\.resume\. Did you mean 'latest'\?\n  expected: 'latest' \| None"),
        ("model_mode", "flax", r"invalid value at trainer\.model_mode\.\n  expected: 'nnx' \| 'linen'"),
        ("debug", "yes", r"wrong type at trainer\.debug\.\n  expected: bool"),
        ("seed", 1.5, r"wrong type at trainer\.seed\.\n  expected: int"),
        ("train_epoch", 3, r"unknown key trainer\.train_epoch in trainer\. Did you mean 'train_epochs'\?\n"
                           r"  expected: a key of trainer: class_name, train_epochs, check_val_every_n_epoch"),
    ],
)
def test_a_bad_trainer_key_names_its_path(key, value, message):
    with pytest.raises(ConfigError, match=message) as caught:
        TrainerConfig(**{key: value})
    assert not isinstance(caught.value, ValidationError)


def test_several_mistakes_are_all_named():
    with pytest.raises(ConfigError, match=r"^2 mistakes in the config \(each explained below\):\n\n"
                       r"\(1\) invalid value at trainer\.train_epochs\.(.|\n)*\n\n\(2\) wrong type at trainer\.debug\.") as caught:
        TrainerConfig(train_epochs=0, debug="x")
    assert len(caught.value.mistakes) == 2
    assert all("\n  fix: " in m for m in caught.value.mistakes)


def test_a_run_folder_under_the_home_folder_is_there_not_in_a_folder_named_tilde(monkeypatch, tmp_path):
    # YAML does not expand "~": log_dir: ~/exp/run1 trained into ./~/exp/run1, and printed "~/exp/run1"
    monkeypatch.setenv("HOME", str(tmp_path))
    logger = LoggerConfig(log_dir="~/exp/run1", base_log_dir="~/exp")
    assert (logger.log_dir, logger.base_log_dir) == (str(tmp_path / "exp" / "run1"), str(tmp_path / "exp"))
    assert TrainerConfig(logger={"log_dir": "~/a"}).logger.log_dir == str(tmp_path / "a")
    assert LoggerConfig(log_dir="runs/~x").log_dir == "runs/~x"  # only a leading ~


def test_a_bad_logger_key_names_its_path():
    with pytest.raises(ConfigError, match=r"unknown key trainer\.logger\.log_step_every in trainer\.logger\. "
                                          r"Did you mean 'log_steps_every'\?"):
        TrainerConfig(logger={"log_step_every": 5})
    with pytest.raises(ConfigError, match=r"invalid value at trainer\.logger\.log_steps_every\."):
        LoggerConfig(log_steps_every=-1)
    with pytest.raises(ConfigError, match=r"invalid value at trainer\.logger\.log_file_verbosity\. Did you mean 'warning'\?"):
        LoggerConfig(log_file_verbosity="warn")
    with pytest.raises(ConfigError, match=r"invalid value at trainer\.logger\.class_name\. Did you mean 'Logger'\?\n  expected: 'Logger'"):
        LoggerConfig(class_name="MyLogger")
    with pytest.raises(ConfigError, match=r"trainer\.logger must be a mapping"):
        TrainerConfig(logger=3)


def test_a_tool_config_is_checked_against_the_tool_loggers():
    logger = LoggerConfig(tool_config={"class_name": "TensorboardToolLogger", "version": "0"})
    assert logger.tool_config == {"class_name": "TensorboardToolLogger", "name": "", "save_dir": None,
                                  "use_timestamp_version": False, "version": "0"}
    with pytest.raises(ConfigError, match=r"unknown key trainer\.logger\.tool_config\.versoin .*Did you mean 'version'"):
        LoggerConfig(tool_config={"class_name": "TensorboardToolLogger", "versoin": "0"})
    with pytest.raises(ConfigError, match=r"unknown loggers name 'TensorBoardToolLogger' .*Did you mean 'TensorboardToolLogger'"):
        LoggerConfig(tool_config={"class_name": "TensorBoardToolLogger"})
    with pytest.raises(ConfigError, match=r"trainer\.logger\.tool_config\.log_dir is not a key of a tool logger"):
        LoggerConfig(tool_config={"class_name": "CSVToolLogger", "log_dir": "runs"})


def test_a_callback_s_class_name_defaults_to_its_key(toys, monkeypatch):
    monkeypatch.setitem(REGISTRIES["callbacks"]._items, "TestOnlyEarly", toy_checkpoint)
    trainer = TrainerConfig(callbacks={
        "TestOnlyCheckpoint": {"monitor": "val/acc", "mode": "max"},
        "best": {"class_name": "TestOnlyCheckpoint", "save_top_k": 3},
        "TestOnlyEarly": None,
    })
    assert trainer.callbacks == {
        "TestOnlyCheckpoint": {"class_name": "TestOnlyCheckpoint", "monitor": "val/acc", "mode": "max",
                               "save_top_k": 1, "every_n_epochs": 1},
        "best": {"class_name": "TestOnlyCheckpoint", "monitor": "val/loss", "mode": "min", "save_top_k": 3,
                 "every_n_epochs": 1},
        "TestOnlyEarly": {"class_name": "TestOnlyEarly", "monitor": "val/loss", "mode": "min", "save_top_k": 1,
                          "every_n_epochs": 1},
    }


def test_a_typed_tool_config_is_kept_as_given_and_dumped_as_its_section():
    from gyre.config import TensorboardConfig, WandbConfig

    board = TensorboardConfig(save_dir="runs/tb", version="v1")
    logger = LoggerConfig(tool_config=board)
    assert logger.tool_config is board  # the fork's config.tool_config.save_dir reads it
    assert (logger.tool_config.save_dir, logger.tool_config.version) == ("runs/tb", "v1")
    section = {"class_name": "TensorboardToolLogger", "save_dir": "runs/tb", "version": "v1",
               "use_timestamp_version": True, "name": ""}
    assert logger.model_dump()["tool_config"] == section
    assert logger.model_dump(mode="json")["tool_config"] == section
    # the dump reads back as the same section (a saved trainer config reloads)
    assert dict(LoggerConfig.model_validate(logger.model_dump()).tool_config) == {
        **section, "save_dir": "runs/tb"}
    wandb = WandbConfig(project="cifar", version="1")
    assert LoggerConfig(tool_config=wandb).tool_config is wandb
    # a YAML section stays a plain dict, as before
    assert type(LoggerConfig(tool_config={"class_name": "CSVToolLogger"}).tool_config) is dict
    # a typed config is checked as its section: a class in its place is an explained error
    with pytest.raises(ConfigError, match=r"tool_config must be a mapping"):
        LoggerConfig(tool_config=TensorboardConfig)


def test_a_bad_callback_names_its_path(toys):
    with pytest.raises(ConfigError, match=r"unknown key trainer\.callbacks\.TestOnlyCheckpoint\.monitr .*"
                                          r"Did you mean 'monitor'\?\n  expected: a key of TestOnlyCheckpoint: "
                                          r"class_name, monitor, mode, save_top_k, every_n_epochs"):
        TrainerConfig(callbacks={"TestOnlyCheckpoint": {"monitr": "val/acc"}})
    with pytest.raises(ConfigError, match=r"unknown callbacks name 'NoSuchCheckpoint' at "
                                          r"trainer\.callbacks\.NoSuchCheckpoint\.class_name\.(.|\n)*TestOnlyCheckpoint"):
        TrainerConfig(callbacks={"NoSuchCheckpoint": {}, "TestOnlyCheckpoint": {}})
    with pytest.raises(ConfigError, match=r"trainer\.callbacks\.TestOnlyCheckpoint must be a mapping"):
        TrainerConfig(callbacks={"TestOnlyCheckpoint": 1})
    with pytest.raises(ConfigError, match=r"trainer\.callbacks must be a mapping"):
        TrainerConfig(callbacks=["TestOnlyCheckpoint"])


# -- Config -----------------------------------------------------------------------------------


def test_a_config_validates_every_section(toys):
    config = Config.model_validate(config_data())
    assert isinstance(config.trainer, ToyTrainerConfig) and config.trainer.num_classes == 10
    assert config.model == {"class_name": "TestOnlyModel", "c_hid": 16, "num_classes": 10, "act_fn": "gelu", "dropout": 0.0}
    assert config.optimizer == {"class_name": "TestOnlySGD", "learning_rate": 0.1, "momentum": 0.0, "transforms": None}
    assert config.dataset == {"class_name": "TestOnlyData", "batch_size": 32, "data_dir": "data/"}
    assert (config.seed, config.num_gpus) == (42, 1)
    assert Config(**config_data()) == config


def test_the_trainer_s_config_class_adds_its_keys(toys):
    config = Config.model_validate(config_data(trainer={"class_name": "TestOnlyTrainer", "num_classes": 3}))
    assert config.trainer.num_classes == 3 and config.model_dump()["trainer"]["num_classes"] == 3
    with pytest.raises(ConfigError, match=r"unknown key trainer\.num_classes in trainer\.(.|\n)*expected: a key of "
                                          r"trainer: class_name, train_epochs"):
        Config.model_validate(config_data(trainer={"class_name": "TestOnlyPlainTrainer", "num_classes": 3}))
    with pytest.raises(ConfigError, match=r"the trainer 'TestOnlyBadTrainer' has a config_class that is not a gyre TrainerConfig"):
        Config.model_validate(config_data(trainer={"class_name": "TestOnlyBadTrainer"}))
    with pytest.raises(ConfigError, match=r"unknown trainers name 'TestOnlyTrainr' at trainer\.class_name\. "
                                          r"Did you mean 'TestOnlyTrainer'\?"):
        Config.model_validate(config_data(trainer={"class_name": "TestOnlyTrainr"}))


def test_the_default_trainer_is_trainer_module(toys, monkeypatch):
    monkeypatch.setitem(REGISTRIES["trainers"]._items, "TrainerModule", ToyPlainTrainer)
    config = Config.model_validate(config_data(trainer={}))
    assert type(config.trainer) is TrainerConfig and config.trainer.class_name == "TrainerModule"


@pytest.mark.parametrize("section", ["trainer", "model", "optimizer", "dataset"])
def test_a_missing_section_is_named(toys, section):
    data = config_data()
    del data[section]
    with pytest.raises(ConfigError, match=rf"missing required key {section}\n  expected: {section}: a section\n"
                                          rf"  received: no {section} in the config"):
        Config.model_validate(data)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"traner": {}}, r"unknown key traner at the top level of the config\. Did you mean 'trainer'\?\n"
                         r"  expected: a key of the config: seed, num_gpus, trainer, model, optimizer, dataset"),
        ({"seed": "1"}, r"wrong type at seed\.\n  expected: int"),
        ({"num_gpus": -1}, r"invalid value at num_gpus\."),
        ({"model": {"class_name": "TestOnlyModel", "c_hid": "16"}}, r"wrong type at model\.c_hid\."),
        ({"model": "TestOnlyModel"}, r"model must be a mapping of keys to values"),
        ({"dataset": {"class_name": "TestOnlyData", "batch_sise": 1}}, r"unknown key dataset\.batch_sise .*Did you mean 'batch_size'"),
        ({"optimizer": {"class_name": "TestOnlySGD"}}, r"missing required key learning_rate in optimizer"),
    ],
)
def test_a_bad_config_names_the_path(toys, changes, message):
    with pytest.raises(ConfigError, match=message) as caught:
        Config.model_validate(config_data(**changes))
    assert not isinstance(caught.value, ValidationError)


def test_a_config_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConfigError, match=r"the config must be a mapping of keys to values\n.*\n  received: list"):
        Config.model_validate([1])


def test_the_model_s_rngs_are_supplied_by_the_trainer(toys):
    assert "rngs" not in Config.model_validate(config_data()).model


# -- the optimizer section: schedules and transforms inside, optax by name ----------------------


def test_schedules_and_transforms_inside_the_optimizer_are_checked(toys):
    optimizer = validate_optimizer({
        "class_name": "TestOnlySGD",
        "learning_rate": {"class_name": "TestOnlyConcat", "boundaries": [2],
                          "schedules": [{"class_name": "TestOnlyWarmup", "peak_value": 1}, {"class_name": "TestOnlyWarmup", "peak_value": 2}]},
        "transforms": [{"class_name": "TestOnlyClip", "max_norm": 1, "before_optimizer": False}],
    })
    assert optimizer["learning_rate"]["schedules"] == [
        {"class_name": "TestOnlyWarmup", "peak_value": 1.0, "warmup_steps": 0},
        {"class_name": "TestOnlyWarmup", "peak_value": 2.0, "warmup_steps": 0}]
    assert optimizer["transforms"] == [{"class_name": "TestOnlyClip", "max_norm": 1.0, "before_optimizer": False}]
    with pytest.raises(ConfigError, match=r"unknown key optimizer\.learning_rate\.schedules\.1\.peak_valu .*"
                                          r"Did you mean 'peak_value'\?"):
        validate_optimizer({"class_name": "TestOnlySGD", "learning_rate": {
            "class_name": "TestOnlyConcat", "boundaries": [2],
            "schedules": [{"class_name": "TestOnlyWarmup", "peak_value": 1}, {"class_name": "TestOnlyWarmup", "peak_valu": 2}]}})
    with pytest.raises(ConfigError, match=r"wrong type at optimizer\.transforms\.0\.max_norm\."):
        validate_optimizer({"class_name": "TestOnlySGD", "learning_rate": 1.0,
                            "transforms": [{"class_name": "TestOnlyClip", "max_norm": "big"}]})
    with pytest.raises(ConfigError, match=r"unknown schedule or transform name 'TestOnlyWarmpu' at "
                                          r"optimizer\.learning_rate\.class_name\. Did you mean 'TestOnlyWarmup'\?"):
        validate_optimizer({"class_name": "TestOnlySGD", "learning_rate": {"class_name": "TestOnlyWarmpu"}})


def test_an_optax_optimizer_by_name_is_checked_against_optax():
    optimizer = validate_optimizer({"class_name": "adabelief", "learning_rate": 0.1, "b1": 0.8, "transforms": []})
    assert optimizer["b1"] == 0.8 and optimizer["b2"] == 0.999 and optimizer["transforms"] == []
    with pytest.raises(ConfigError, match=r"unknown key optimizer\.b3 for the optimizer 'optax\.adabelief'"):
        validate_optimizer({"class_name": "adabelief", "learning_rate": 0.1, "b3": 0.8})
    with pytest.raises(ConfigError, match=r"unknown optimizer 'adabelif' at optimizer\.class_name\. "
                                          r"Did you mean 'adabelief'\?\n  expected: one of the registered optimizers: .*"
                                          r"; or an optax optimizer: .*adabelief"):
        validate_optimizer({"class_name": "adabelif", "learning_rate": 0.1})


def test_the_seed_optimizer_section_validates_against_gyre_s_optimizers():
    """The optimizer section of seed file 003, against the registered AdamW,
    WarmupCosineDecaySchedule and WeightDecay: the integration point with their builders."""
    from gyre.config import build_optimizer

    section = {
        "b1": 0.9, "b2": 0.999, "class_name": "AdamW", "eps": 1.0e-08,
        "learning_rate": {"class_name": "WarmupCosineDecaySchedule", "decay_factor": 0.1, "decay_steps": 1555,
                          "init_value": 0.0, "peak_value": 0.001, "steps": 1755, "warmup_steps": 200},
        "nesterov": False,
        "weight_decay": {"class_name": "WeightDecay", "mode": "whitelist", "parameter_regex_exclude": "",
                         "parameter_regex_include": "((.*weight$)|(.*kernel$))", "value": 0.01},
    }
    checked = validate_optimizer(section)
    assert checked["learning_rate"]["peak_value"] == 0.001 and checked["weight_decay"]["value"] == 0.01
    assert checked["weight_decay"]["before_optimizer"] is None  # not used in AdamW's own decay
    build_optimizer(checked)  # the filled-in defaults build the same optimizer
    with pytest.raises(ConfigError, match=r"unknown key optimizer\.weight_decay\.parameter_regex_includ "):
        validate_optimizer({**section, "weight_decay": {"class_name": "WeightDecay", "value": 0.1,
                                                        "parameter_regex_includ": "kernel$"}})


def test_a_model_of_the_other_flax_api_is_a_config_error():
    import gyre.trainer  # noqa: F401 (registers SimpleCNN and SimpleCNNLinen)
    from gyre.config._schema import check_model_mode

    with pytest.raises(ConfigError, match=r"'SimpleCNNLinen' is a flax.linen module, but trainer.model_mode is 'nnx'"):
        check_model_mode("SimpleCNNLinen", "nnx")
    with pytest.raises(ConfigError, match=r"fix: write model_mode: nnx in the trainer section, or leave model_mode out"):
        check_model_mode("SimpleCNN", "linen")
    check_model_mode("SimpleCNN", "nnx")
    check_model_mode("SimpleCNNLinen", "linen")


def test_a_left_out_model_mode_is_the_registered_model_class_s_api(toys):
    import gyre.trainer  # noqa: F401 (registers SimpleCNN and SimpleCNNLinen)
    from gyre.config import model_kind

    assert (model_kind("SimpleCNNLinen"), model_kind("SimpleCNN")) == ("linen", "nnx")
    assert model_kind("TestOnlyModel") is None  # a factory function: no API to read
    linen_model = {"class_name": "SimpleCNNLinen"}
    config = Config(**config_data(model=linen_model))
    assert config.trainer.model_mode == "linen"
    assert type(config.trainer).__name__ == type(Config(**config_data()).trainer).__name__  # same section class
    assert config.model_dump()["trainer"]["model_mode"] == "linen"  # the saved config records it
    assert Config(**config_data(model={"class_name": "SimpleCNN"})).trainer.model_mode == "nnx"
    assert Config(**config_data()).trainer.model_mode == "nnx"  # a factory: the default
    given = config_data(model=linen_model, trainer={"class_name": "TestOnlyTrainer", "model_mode": "linen"})
    assert Config(**given).trainer.model_mode == "linen"
    # given and contradicting the class: still the explained error
    wrong = config_data(model=linen_model, trainer={"class_name": "TestOnlyTrainer", "model_mode": "nnx"})
    with pytest.raises(ConfigError, match=r"'SimpleCNNLinen' is a flax.linen module, but trainer.model_mode is 'nnx'"):
        Config(**wrong)


def test_the_top_level_seed_and_the_trainers_are_one_seed(toys):
    assert Config(**config_data(seed=7)).trainer.seed == 7
    one = Config(**config_data(trainer={"class_name": "TestOnlyTrainer", "seed": 3}))
    assert (one.seed, one.trainer.seed) == (3, 3)  # Python's and numpy's generators too
    both = config_data(seed=7, trainer={"class_name": "TestOnlyTrainer", "seed": 7})
    assert Config(**both).trainer.seed == 7 and Config(**config_to_dict(Config(**both))).seed == 7
    assert (Config(**config_data()).seed, Config(**config_data()).trainer.seed) == (42, 42)


def test_a_top_level_seed_that_contradicts_the_trainers_is_refused(toys):
    # the trainer's seed was used and the top-level one ignored without a word
    data = config_data(seed=7, trainer={"class_name": "TestOnlyTrainer", "seed": 3})
    with pytest.raises(ConfigError, match=r"(?s)seed 7 and trainer\.seed 3 disagree.*"
                                          r"expected: one seed.*fix: keep one: remove trainer\.seed"):
        Config(**data)


def test_a_trainer_section_is_also_built_from_one_mapping_and_stays_strict():
    # compoconf's parse_config builds a class that is not a dataclass as cls(section)
    config = TrainerConfig({"train_epochs": 3, "logger": {"log_steps_every": 5}})
    assert config.train_epochs == 3 and config.logger.log_steps_every == 5
    with pytest.raises(ConfigError, match="unknown key trainer.train_epoch"):
        TrainerConfig({"train_epoch": 3})
    for bad in (3, ["train_epochs"]):
        with pytest.raises(ConfigError, match="takes a section mapping or keyword arguments") as err:
            TrainerConfig(bad)
        assert "expected:" in str(err.value) and "fix:" in str(err.value)
    with pytest.raises(ConfigError, match="not both"):
        TrainerConfig({"train_epochs": 3}, seed=1)


def test_a_trainer_config_class_names_its_trainer_on_the_class():
    from gyre.trainer import ImgClassifierConfig, TrainerModuleConfig

    # what compoconf's parse_config matches a section's class_name against
    assert ImgClassifierConfig.class_name == "ImgClassifierTrainer"
    assert TrainerModuleConfig.class_name == "TrainerModule" and TrainerConfig.class_name == "TrainerModule"
    assert ImgClassifierConfig(class_name="Mine").class_name == "Mine"  # an instance keeps its own
    assert not hasattr(TrainerConfig, "no_such_attribute")


def test_a_callback_mode_against_its_monitors_name_is_refused_by_the_config():
    import gyre.trainer  # noqa: F401 (registers ModelCheckpoint and EarlyStopping)

    with pytest.raises(ConfigError, match=r"(?s)trainer\.callbacks\.best: mode 'min' on 'val/acc' keeps the lowest.*"
                                          r"its name says mode 'max'.*fix: set mode: max"):
        TrainerConfig(callbacks={"best": {"class_name": "ModelCheckpoint", "monitor": "val/acc", "mode": "min"}})
    config = TrainerConfig(callbacks={"EarlyStopping": {"monitor": "val/acc"}, "ModelCheckpoint": {"mode": "min"}})
    assert config.callbacks["EarlyStopping"]["mode"] == "auto"  # taken from the name when built
