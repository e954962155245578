"""Building a trainer's parts from its config: the trainer config, callbacks, writer, strategy."""

import pytest

import gyre
from gyre.config import ConfigError
from gyre.trainer._module import (
    build_callbacks,
    build_optimizer_of,
    build_writer,
    devices_of_every_process,
    strategy_of,
    trainer_config_of,
)


def test_logger_keys_given_as_trainer_keywords_go_to_the_logger_section(tmp_path):
    config = trainer_config_of(gyre.TrainerModule, {"train_epochs": 2}, {"log_dir": tmp_path, "log_steps_every": 7})
    assert config.logger.log_dir == str(tmp_path) and config.logger.log_steps_every == 7 and config.train_epochs == 2
    # beside logger={...}: was dropped (log_dir fell back to runs/<time>, log_steps_every to 50), silently
    config = trainer_config_of(gyre.TrainerModule, {"logger": {"log_steps_every": 3}},
                               {"log_dir": tmp_path, "logger": {"tool_config": {"class_name": "CSVToolLogger"}}, "log_steps_every": 7})
    assert (config.logger.log_dir, config.logger.log_steps_every) == (str(tmp_path), 7)
    assert config.logger.tool_config["class_name"] == "CSVToolLogger"
    with pytest.raises(ConfigError, match=r"unknown key trainer\.train_epoch(.|\n)*Did you mean 'train_epochs'"):
        trainer_config_of(gyre.TrainerModule, None, {"train_epoch": 2})
    with pytest.raises(TypeError, match="must be a mapping or a gyre.config.TrainerConfig"):
        trainer_config_of(gyre.TrainerModule, [("train_epochs", 2)], {})


def test_callbacks_from_sections_take_their_class_name_from_the_key():
    config = gyre.config.TrainerConfig(callbacks={"best": {"class_name": "ModelCheckpoint", "monitor": "val/acc"},
                                                  "DisableGC": None})
    built = build_callbacks(config)
    assert [type(cb).__name__ for cb in built] == ["ModelCheckpoint", "DisableGC"] and built[0].monitor == "val/acc"


def test_the_default_writer_is_tensorboard_and_a_tool_config_picks_another(tmp_path):
    writer = build_writer(gyre.config.TrainerConfig(), tmp_path)
    assert isinstance(writer, gyre.TensorBoardWriter)
    writer.close()
    config = gyre.config.TrainerConfig(logger={"tool_config": {"class_name": "CSVToolLogger"}})
    writer = build_writer(config, tmp_path)
    assert isinstance(writer, gyre.CSVWriter)
    writer.close()


def test_strategies_and_a_missing_optimizer():
    assert strategy_of(gyre.config.TrainerConfig()).name == "jit"
    assert strategy_of(gyre.config.TrainerConfig(num_devices=2)).data_size == 2
    with pytest.raises(TypeError, match="the trainer has no optimizer"):
        build_optimizer_of(None)
    assert build_optimizer_of(1e-3) is not None  # a bare rate: Adam


def test_num_devices_takes_as_many_devices_of_every_process():
    """Two processes of two devices: num_devices=2 took process 0's two (devices[:2]), and
    process 1 failed deep in JAX, unable to read arrays on devices it does not have."""
    from collections import namedtuple

    device = namedtuple("device", "id process_index")
    devices = [device(0, 0), device(1, 0), device(2, 1), device(3, 1)]
    assert [d.id for d in devices_of_every_process(devices, 2)] == [0, 2]
    assert [d.id for d in devices_of_every_process(devices, 4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="num_devices=3 cannot be shared evenly by the 2 processes"):
        devices_of_every_process(devices, 3)
    one = [device(0, 0), device(1, 0), device(2, 0)]
    assert [d.id for d in devices_of_every_process(one, 2)] == [0, 1]


def test_a_schedule_lasting_the_run_is_built_when_train_model_knows_its_length(tmp_path, digits):
    from gyre.config import RunLengthUnknown
    from gyre.trainer import ImgClassifierTrainer

    section = {"class_name": "Adam", "learning_rate": {
        "class_name": "WarmupCosineDecaySchedule", "peak_value": 0.01, "warmup_steps": 2, "decay_factor": 0.5}}
    assert build_optimizer_of(section, deferred=True) is None
    with pytest.raises(RunLengthUnknown, match="needs steps or decay_steps"):
        build_optimizer_of(section)
    t = ImgClassifierTrainer({"train_epochs": 2, "enable_progress_bar": False, "logger": {"log_dir": str(tmp_path)}},
                             {"class_name": "SimpleClassifier", "c_hid": 8}, section,
                             exmp_input=digits.val_loader[0])
    assert t.optimizer is None and t.test_model(digits.val_loader)["test/acc"] < 0.5  # testable before training
    t.train_model(digits.train_loader)
    assert 0.005 < float(t.learning_rate()) < 0.00501  # the last update: the decay ends with the run


def test_jax_trainers_sections_and_configdicts_build_the_trainer(tmp_path):
    from ml_collections import ConfigDict

    from gyre.trainer import ImgClassifierTrainer, SimpleClassifier

    trainer = ConfigDict({"name": "ImgClassifierTrainer", "train_epochs": 3, "logger": {"log_dir": str(tmp_path)}})
    model = ConfigDict({"name": "my_project.models.SimpleClassifier", "hparams": {"c_hid": 8, "num_classes": 10}})
    optimizer = ConfigDict({"name": "adam", "lr": 1e-3})
    t = ImgClassifierTrainer(trainer, model, optimizer)
    assert isinstance(t.model, SimpleClassifier) and t.config.train_epochs == 3 and t.optimizer is not None
    with pytest.raises(ConfigError, match="model.hparams repeats c_hid"):
        ImgClassifierTrainer(trainer, {"name": "SimpleClassifier", "c_hid": 4, "hparams": {"c_hid": 8}}, optimizer)


def test_a_registered_flax_class_is_built_by_its_own_api_and_a_factory_by_model_mode():
    from flax import linen, nnx

    import gyre.trainer  # noqa: F401 (registers SimpleCNN and SimpleCNNLinen)
    from gyre.config import TrainerConfig
    from gyre.trainer._module import build_model

    left_out = TrainerConfig()  # model_mode left out (nnx by default)
    assert isinstance(build_model(left_out, {"class_name": "SimpleCNNLinen", "c_hid": 4}), linen.Module)
    assert isinstance(build_model(left_out, {"class_name": "SimpleCNN", "c_hid": 4}), nnx.Module)
    # a given model_mode that contradicts the class is the trainer's explained error once
    # built (tests/trainer/test_module.py); the builder itself never passes rngs to linen
    assert isinstance(build_model(TrainerConfig(model_mode="nnx"), {"class_name": "SimpleCNNLinen"}), linen.Module)


def test_init_ddp_mesh_is_a_data_axis_over_every_device_that_the_trainer_takes():
    import jax
    import optax
    from flax import nnx

    from gyre.trainer import init_ddp_mesh

    mesh = init_ddp_mesh()
    assert mesh.axis_names == ("data",) and mesh.size == jax.device_count()
    strategy = gyre.TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), mesh=mesh,
                                  log_dir="unused").strategy
    assert strategy.name == "data_parallel" and strategy.data_axis == ("data",)


def test_a_config_dict_section_becomes_a_plain_mapping():
    from ml_collections import ConfigDict

    from gyre.trainer._module import plain_section

    assert (plain_section(ConfigDict({"lr": 0.1})), plain_section(0.1)) == ({"lr": 0.1}, 0.1)
