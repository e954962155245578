"""The ready-made classification parts: the digits CNN trains to >= 0.95 with nnx and linen."""


import pathlib

import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from gyre.trainer import (
    DigitsDataset,
    ImgClassifierTrainer,
    SimpleCNN,
    SimpleCNNLinen,
)


@pytest.mark.parametrize("mode", ["nnx", "linen"])
def test_the_digits_cnn_reaches_095_test_accuracy(tmp_path, digits, mode):
    model = SimpleCNN(c_hid=16, rngs=nnx.Rngs(0)) if mode == "nnx" else SimpleCNNLinen(c_hid=16)
    t = ImgClassifierTrainer(model=model, optimizer=optax.adam(5e-3), train_epochs=8, enable_progress_bar=False,
                             log_dir=str(tmp_path), model_mode=mode)
    out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    assert t.model_mode == mode
    assert out["test"]["test/acc"] >= 0.95, out
    assert out["val"]["val/acc"] >= 0.9
    assert t.global_step == 8 * digits.train_loader.epoch_steps


def test_classification_metrics_and_the_digits_dataset():
    from gyre.trainer._classifier import activation, classification_metrics

    logits = jnp.array([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    loss, metrics = classification_metrics(logits, jnp.array([0, 2]), 3)
    assert float(metrics["acc"]) == 0.5
    assert metrics["conf_matrix"]["value"].tolist() == [[1, 0, 0], [0, 0, 0], [0, 1, 0]]  # rows: true labels
    assert "conf_matrix" not in classification_metrics(logits, jnp.array([0, 2]), None)[1]
    d = DigitsDataset(global_batch_size=100, val_size=300, image_shape=True, eval_batch_size=128)
    assert d.train_loader.epoch_steps == 11 and d.val_loader[0][0].shape == (128, 8, 8, 1)
    assert sum(len(y) for _, y in d.val_loader) == 300 and sum(len(y) for _, y in d.test_loader) == 360
    with pytest.raises(ValueError, match="val_size must leave training examples"):
        DigitsDataset(val_size=5000)
    with pytest.raises(ValueError, match="unknown activation 'gleu'"):
        activation("gleu")


def test_a_confusion_matrix_callback_gets_its_matrix_without_num_classes(tmp_path, digits):
    from gyre.trainer import ConfusionMatrixCallback, SimpleClassifier
    from gyre.trainer._classifier import classification_metrics

    logits, labels = jnp.array([[3.0, 0.0, 0.0, 0.0]] * 2), jnp.array([0, 3])
    _, metrics = classification_metrics(logits, labels, None, conf_matrix=True)
    assert metrics["conf_matrix"]["value"].shape == (4, 4)  # the logits' width
    assert metrics["conf_matrix"]["value"][3, 0] == 1
    t = ImgClassifierTrainer(model=SimpleClassifier(c_hid=16, rngs=nnx.Rngs(0)), optimizer=optax.adam(1e-2),
                             enable_progress_bar=False, log_dir=str(tmp_path),
                             callbacks=[ConfusionMatrixCallback(every_n_epochs=1)])
    assert t.config.num_classes is None
    out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    assert out["test"]["test/conf_matrix"].shape == (10, 10) and out["test"]["test/conf_matrix"].sum() == 360
    assert (tmp_path / "confusion_matrix" / "test_epoch_0001.png").is_file()


def test_the_mlp_explains_inputs_of_another_size():
    from gyre.trainer import SimpleClassifier

    with pytest.raises(ValueError, match=r"(?s)takes 64 input features.*received: 3072 values.*input_dim: 3072"):
        SimpleClassifier(c_hid=4, input_dim=64, rngs=nnx.Rngs(0))(jnp.ones((2, 32, 32, 3)))
    assert SimpleClassifier(c_hid=4, input_dim=12, rngs=nnx.Rngs(0))(jnp.ones((2, 2, 6))).shape == (2, 10)


def test_the_mlp_without_input_dim_is_sized_by_its_first_input_eagerly_or_by_the_trainer(tmp_path, digits):
    import jax

    from gyre.trainer import SimpleClassifier

    model = SimpleClassifier(c_hid=4, num_layers=2, rngs=nnx.Rngs(0))
    assert model(jnp.ones((2, 5, 3))).shape == (2, 10) and model.hidden[0].kernel.shape == (15, 4)
    with pytest.raises(ValueError, match=r"(?s)sized by its first input, which must come eagerly.*give input_dim"):
        jax.jit(lambda x: SimpleClassifier(c_hid=4, rngs=nnx.Rngs(0))(x))(jnp.ones((2, 3)))
    t = ImgClassifierTrainer(model=SimpleClassifier(c_hid=16, rngs=nnx.Rngs(0)), optimizer=optax.adam(1e-2),
                             train_epochs=2, enable_progress_bar=False, log_dir=str(tmp_path))
    out = t.train_model(digits.train_loader, digits.val_loader)
    assert t.state.params["hidden"][0]["kernel"].shape == (64, 16) and out["val"]["val/acc"] > 0.8


DIGITS_MLP = str(pathlib.Path(__file__).parents[2] / "examples" / "configs" / "digits_mlp.yaml")


@pytest.mark.parametrize("model, key", [
    ("SimpleClassifier", "num_classes"), ("SimpleClassifier", "c_hid"), ("SimpleClassifier", "num_layers"),
    ("SimpleCNN", "num_classes"), ("SimpleClassifierLinen", "num_classes"), ("SimpleCNNLinen", "num_classes"),
])
def test_a_model_of_no_classes_or_no_units_is_refused_by_the_config(model, key):
    import yaml

    from gyre.config import ConfigError, load_config

    data = yaml.safe_load(open(DIGITS_MLP).read())
    data["model"] = {"class_name": model, key: 0}
    with pytest.raises(ConfigError, match=rf"(?s)invalid value at model\.{key}.*greater than or equal to 1"):
        load_config(data)


@pytest.mark.parametrize("model, rate, bound", [
    ("SimpleClassifier", 1.5, "less than 1"), ("SimpleCNN", -0.1, "greater than or equal to 0"),
    ("SimpleClassifierLinen", float("nan"), "less than 1"), ("SimpleCNNLinen", 1.0, "less than 1"),
])
def test_a_dropout_rate_outside_0_1_is_refused_by_the_config(model, rate, bound):
    # flax's dropout zeroes every unit silently at a rate >= 1 (and for NaN)
    import yaml

    from gyre.config import ConfigError, load_config

    data = yaml.safe_load(open(DIGITS_MLP).read())
    data["model"] = {"class_name": model, "dropout": rate}
    with pytest.raises(ConfigError, match=rf"(?s)invalid value at model\.dropout.*{bound}"):
        load_config(data)


def test_a_trainer_of_no_classes_is_refused_by_the_config():
    from gyre.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"(?s)invalid value at trainer\.num_classes.*greater than or equal to 1"):
        load_config(DIGITS_MLP, ["trainer.num_classes=0"])


def test_gyre_config_of_no_classes_exits_2_naming_the_key(capsys):
    from gyre import cli

    assert cli.main(["config", DIGITS_MLP, "model.num_classes=0"]) == 2
    assert "fix: set model.num_classes to a value greater than or equal to 1" in capsys.readouterr().err


def test_a_num_classes_other_than_the_models_is_refused_not_a_confusion_matrix_that_drops_pairs():
    # trainer.num_classes 5 on a 10-class model: a 5x5 matrix that counted 89 of 200 examples
    from gyre.trainer._classifier import classification_metrics

    logits, labels = jnp.zeros((4, 10)), jnp.array([0, 3, 7, 9])
    with pytest.raises(ValueError, match=r"trainer.num_classes is 5 but the model gives 10 logits(.|\n)*num_classes: 10"):
        classification_metrics(logits, labels, 5)
    assert int(classification_metrics(logits, labels, 10)[1]["conf_matrix"]["value"].sum()) == 4
