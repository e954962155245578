"""phlippe/jax_trainer's optimizer sections read as gyre's (the same maths), and the errors
of a wrong section."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.config import ConfigError, build_optimizer, build_schedule, from_jax_trainer
from gyre.config._schema import validate_optimizer


def rates(schedule, *steps):
    return np.asarray(schedule(jnp.asarray(steps, dtype=jnp.int32)))


def schedule_of(section, run=None):
    return build_schedule(from_jax_trainer(section)["learning_rate"], run_steps=run)


def one_update(section, grads, params):
    tx = build_optimizer(section)
    return {k: v.tolist() for k, v in tx.update(grads, tx.init(params), params)[0].items()}


def test_exponential_decay_is_per_transition_step_with_warmup_and_cooldown():
    section = {"name": "adam", "lr": 1.0, "scheduler": {"name": "exponential_decay", "decay_rate": 0.5,
               "warmup_steps": 2, "cooldown_steps": 2, "decay_steps": 8}}
    schedule = schedule_of(section)
    # warmup 0 -> 1 over 2 steps, halving every step, then linear to 0 over the last 2
    np.testing.assert_allclose(rates(schedule, 0, 1, 2, 3, 4, 6, 7, 8), [0, 0.5, 1, 0.5, 0.25, 0.0625, 0.03125, 0],
                               rtol=1e-6, atol=1e-7)
    factor = {**section, "scheduler": {"name": "exponential_decay", "end_lr_factor": 0.25, "decay_steps": 10}}
    schedule = schedule_of(factor)
    np.testing.assert_allclose(rates(schedule, 0, 5, 10), [1.0, 0.5, 0.25], rtol=1e-6)
    end = {**section, "scheduler": {"name": "exponential_decay", "end_lr": 0.25, "decay_steps": 10}}
    np.testing.assert_allclose(rates(schedule_of(end), 10), [0.25], rtol=1e-6)


def test_exponential_decay_goes_on_past_decay_steps_without_a_cooldown_as_jax_trainer():
    # jax_trainer builds optax.warmup_exponential_decay_schedule with no end: a decay_steps shorter
    # than the run sets only the rate (gyre held the rate from decay_steps on)
    steps = jnp.arange(40)
    for scheduler, rate in (({"decay_rate": 0.9, "decay_steps": 10}, 0.9),
                            ({"end_lr_factor": 0.25, "decay_steps": 10}, 0.25 ** (1 / 10)),
                            ({"end_lr": 0.25, "decay_steps": 10, "warmup_steps": 2}, 0.25 ** (1 / 8))):
        section = {"name": "adam", "lr": 1.0, "scheduler": {"name": "exponential_decay", **scheduler}}
        expected = optax.warmup_exponential_decay_schedule(0.0, 1.0, scheduler.get("warmup_steps", 0), 1, rate)
        np.testing.assert_allclose(schedule_of(section, run=40)(steps), expected(steps), rtol=1e-6)
        assert schedule_of(section, run=40)(20) < 0.25 * 0.9  # past decay_steps, still decaying


def test_warmup_cosine_decay_counts_the_warmup_in_decay_steps_and_reads_alpha():
    section = {"name": "sgd", "lr": 1.0, "scheduler": {"name": "warmup_cosine_decay", "warmup_steps": 2, "decay_steps": 10}}
    schedule = schedule_of(section)
    assert schedule.total_steps == 10  # optax's decay_steps counted the warmup: so does steps here
    np.testing.assert_allclose(rates(schedule, 0, 1, 2, 10), [0.0, 0.5, 1.0, 0.0], atol=1e-7)
    # alpha, which jax_trainer dropped, sets the end value
    alpha = {**section, "scheduler": {**section["scheduler"], "alpha": 0.1}}
    np.testing.assert_allclose(rates(schedule_of(alpha), 10), [0.1], rtol=1e-6)


def test_transforms_clip_and_decay_as_jax_trainer():
    p, g = {"w": jnp.array([2.0, -2.0])}, {"w": jnp.array([3.0, 4.0])}
    clip = {"name": "sgd", "lr": 1.0, "transforms": {"gradient_clip_norm": 1.0}}
    assert one_update(clip, g, p)["w"] == pytest.approx([-0.6, -0.8])  # jax_trainer ignored this spelling
    decay = {"name": "sgd", "lr": 1.0, "transforms": {"weight_decay": 0.5}}
    assert one_update(decay, g, p)["w"] == [-4.0, -3.0]  # coupled, on every parameter: g + 0.5 * p
    adamw = from_jax_trainer({"name": "adamw", "lr": 1e-3, "params": {"beta1": 0.8}, "transforms": {"weight_decay": 0.1}})
    assert adamw == {"class_name": "AdamW", "learning_rate": 1e-3, "b1": 0.8, "weight_decay": 0.1}
    after = {"name": "sgd", "lr": 0.5, "transforms": {"weight_decay": {"value": 0.5, "before_optimizer": False}}}
    assert one_update(after, {"w": jnp.zeros(2)}, p)["w"] == [-0.5, 0.5]  # shrinks: -lr * 0.5 * p


def test_configdict_and_the_schema_read_the_form():
    from ml_collections import ConfigDict

    section = {"name": "adam", "lr": 1e-3, "params": {"beta1": 0.9}, "scheduler": {"name": "cosine_decay", "decay_steps": 10}}
    assert isinstance(build_optimizer(ConfigDict(section)), optax.GradientTransformation)
    checked = validate_optimizer(section)
    assert checked["class_name"] == "Adam" and checked["b1"] == 0.9
    assert checked["learning_rate"]["class_name"] == "CosineSchedule"
    other = from_jax_trainer({"name": "rmsprop", "lr": 0.1, "params": {"decay": 0.8}})
    assert other == {"class_name": "rmsprop", "learning_rate": 0.1, "decay": 0.8}


@pytest.mark.parametrize(
    "section, match",
    [
        ({"name": "adam", "lr": 1e-3, "param": {}}, r"unknown key optimizer.param .*Did you mean 'params'"),
        ({"name": "adam"}, r"optimizer has no lr"),
        ({"name": 3, "lr": 1e-3}, r"optimizer.name must be an optimizer name"),
        ({"name": "adam", "lr": 1e-3, "scheduler": {"name": "cosine"}}, r"unknown scheduler 'cosine'.*Did you mean 'cosine_decay'"),
        ({"name": "adam", "lr": 1e-3, "scheduler": {"name": "exponential_decay", "decay_steps": 5}},
         r"needs decay_rate, end_lr or end_lr_factor"),
        ({"name": "adam", "lr": 1e-3, "scheduler": {"name": "cosine_decay", "alhpa": 0.1}}, r"unknown key optimizer.scheduler.alhpa"),
        ({"name": "adam", "lr": 1e-3, "transforms": {"clip_norm": 1.0}}, r"unknown key optimizer.transforms.clip_norm"),
    ],
)
def test_bad_jax_trainer_sections(section, match):
    with pytest.raises(ConfigError, match=match):
        from_jax_trainer(section)
    with pytest.raises(ConfigError, match=match):
        validate_optimizer(section)


def test_trainer_and_model_sections_in_jax_trainers_form():
    from gyre.config._jax_trainer import jax_trainer_component

    model = {"name": "tests.models.SimpleClassifier", "hparams": {"c_hid": 32, "num_classes": 10}}
    assert jax_trainer_component(model, "model") == {"class_name": "SimpleClassifier", "c_hid": 32, "num_classes": 10}
    trainer = {"name": "jax_trainer.trainer.ImgClassifierTrainer", "train_epochs": 2}
    assert jax_trainer_component(trainer, "trainer") == {"class_name": "ImgClassifierTrainer", "train_epochs": 2}
    assert jax_trainer_component({"class_name": "X", "name": "y"}, "model") == {"class_name": "X", "name": "y"}
    with pytest.raises(ConfigError, match=r"model.hparams repeats c_hid of model"):
        jax_trainer_component({**model, "c_hid": 8}, "model")


def test_logger_keys_of_jax_trainer():
    from gyre.config import LoggerConfig

    logger = LoggerConfig(log_dir="None", base_log_dir="checkpoints/", tool="TensorBoard", project_name="default",
                          stderrthreshold="warning")
    assert logger.log_dir is None and logger.base_log_dir == "checkpoints/"
    assert logger.tool_config["class_name"] == "TensorboardToolLogger"
    wandb = LoggerConfig(tool="wandb", project_name="cifar").tool_config
    assert (wandb["class_name"], wandb["project"]) == ("WandBToolLogger", "cifar")
    with pytest.raises(ConfigError, match=r"trainer.logger.tool must be one of TensorBoard, WandB, MLflow, CSV.*"
                                          r"(.|\n)*Did you mean 'TensorBoard'"):
        LoggerConfig(tool="Tensorbord")
    with pytest.raises(ConfigError, match=r"trainer.logger has both tool and tool_config"):
        LoggerConfig(tool="TensorBoard", tool_config={"class_name": "CSVToolLogger"})
    with pytest.raises(ConfigError, match=r"invalid value at trainer.logger.stderrthreshold"):
        LoggerConfig(stderrthreshold="loud")


def test_a_dataset_constructor_of_jax_trainer_passes_the_config_check_as_its_data_set():
    import gyre.trainer  # noqa: F401  (registers CIFAR10Dataset and MNISTDataset)
    from gyre.config import Config
    from gyre.config._jax_trainer import jax_trainer_dataset

    assert jax_trainer_dataset({"constructor": "jax_trainer.datasets.build_mnist_datasets", "batch_size": 4,
                                "data_dir": "data/"}) == {"global_batch_size": 4, "data_dir": "data/",
                                                          "class_name": "MNISTDataset"}
    section = {"class_name": "CIFAR10Dataset", "constructor": "kept.as.given"}
    assert jax_trainer_dataset(section) is section  # a class_name wins: checked as gyre's section
    config = Config(trainer={}, model={"class_name": "SimpleCNN"}, optimizer={"class_name": "SGD", "learning_rate": 0.1},
                    dataset={"constructor": "jax_trainer.datasets.build_cifar10_datasets", "batch_size": 16,
                             "data_dir": "data/"})
    assert config.dataset["class_name"] == "CIFAR10Dataset" and config.dataset["global_batch_size"] == 16
    with pytest.raises(ConfigError, match=r"(?s)dataset.constructor names code to import: my.build.*CIFAR10Dataset.*fix:"):
        Config(trainer={}, model={"class_name": "SimpleCNN"}, optimizer={"class_name": "SGD", "learning_rate": 0.1},
               dataset={"constructor": "my.build"})


def test_a_jax_trainer_optimizer_section_has_a_name_and_no_class_name():
    from gyre.config._jax_trainer import is_jax_trainer_section

    assert is_jax_trainer_section({"name": "adam", "lr": 1e-3})
    assert not is_jax_trainer_section({"class_name": "Adam"})
