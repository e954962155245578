"""Augmentation and preprocessing modules inside the step: augmentation changes training
batches only, preprocessing every batch; nnx and linen; bad sections explained."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import gyre
from gyre.config import ConfigError, register_model
from gyre.trainer import (
    Augmentation,
    AugmentationLinen,
    ImgClassifierTrainer,
    SimpleClassifier,
    SimpleClassifierLinen,
)


@register_model
class ZeroLabels(Augmentation):  # training labels all 0: a model trained on them predicts 0
    def augment(self, batch):
        x, y = batch
        return x, jnp.zeros_like(y)


@register_model
class ZeroLabelsLinen(AugmentationLinen):
    def augment(self, batch):
        x, y = batch
        return x, jnp.zeros_like(y)


@register_model
class Negate(nnx.Module):  # preprocessing: the model sees -x, in training and evaluation
    def __init__(self, rngs=None):
        pass

    def preprocess(self, batch):
        return -batch[0], batch[1]


def _data():
    (x, y), _ = gyre.data.digits()
    return [(x[i:i + 64], y[i:i + 64]) for i in range(0, 512, 64)]


def _trainer(tmp_path, mode, **options):
    model = SimpleClassifier(c_hid=16, rngs=nnx.Rngs(0)) if mode == "nnx" else SimpleClassifierLinen(c_hid=16)
    return ImgClassifierTrainer(model=model, optimizer=optax.adam(2e-2), model_mode=mode, train_epochs=3,
                                enable_progress_bar=False, log_dir=str(tmp_path), **options)


@pytest.mark.parametrize("mode", ["nnx", "linen"])
def test_an_augmentation_changes_the_training_batches_only(tmp_path, mode):
    name = "ZeroLabels" if mode == "nnx" else "ZeroLabelsLinen"
    t = _trainer(tmp_path, mode, augmentation={"class_name": name})
    data = _data()
    out = t.train_model(data, val_loader=data)
    assert isinstance(t.model, Augmentation if mode == "nnx" else AugmentationLinen)
    labels = np.concatenate([y for _, y in data])
    assert out[3]["val/acc"] == pytest.approx(np.mean(labels == 0), abs=0.02)  # it learnt "always 0"
    # the training metrics saw the augmented labels
    assert json_value(tmp_path, "train_epoch_0003.json", "train/acc_epoch") > 0.95


def json_value(run, name, key):
    import json

    return json.loads((run / "metrics" / name).read_text())[key]


def test_preprocessing_changes_every_batch_and_gaussian_noise_trains(tmp_path):
    data = _data()
    t = _trainer(tmp_path, "nnx", preprocessing={"class_name": "Negate"},
                 augmentation={"class_name": "GaussianNoise", "scale": 0.05}, augmentation_seed=3)
    out = t.train_model(data, val_loader=data)
    model = t.bind_model().wrapped_model
    model.eval()
    x = np.concatenate([x for x, _ in data])
    y = np.concatenate([y for _, y in data])
    by_hand = float(np.mean(np.asarray(model(jnp.asarray(-x)).argmax(-1)) == y))  # the model sees -x
    assert out[3]["val/acc"] == pytest.approx(by_hand, abs=1e-6) and by_hand > 0.8


def test_gaussian_noise_for_linen_trains(tmp_path):
    data = _data()
    out = _trainer(tmp_path, "linen", augmentation={"class_name": "GaussianNoiseLinen", "scale": 0.05}).train_model(
        data, val_loader=data)
    assert out[3]["val/acc"] > 0.8


@pytest.mark.parametrize("section, error, match", [
    ("GaussianNoise", ConfigError, r"(?s)trainer.augmentation must be a mapping.*received: str"),
    ({"scale": 0.1}, TypeError, r"trainer.augmentation must name a registered module"),
    ({"class_name": "GausianNoise"}, Exception, r"GaussianNoise"),
    ({"class_name": "GaussianNoise", "scale": -0.1}, ValueError, r"(?s)GaussianNoise's scale must be a finite number >= 0.0.*received: float -0.1"),
    ({"class_name": "GaussianNoise", "scale": float("nan")}, ValueError, r"(?s)GaussianNoise's scale must be.*received: float nan"),
])
def test_a_bad_augmentation_section_is_explained(tmp_path, section, error, match):
    with pytest.raises(error, match=match):
        _trainer(tmp_path, "nnx", augmentation=section)


def test_a_run_with_an_nnx_augmentation_resumes_bit_identical(tmp_path):
    import jax

    from tests.trainer.test_training import SigtermAt

    def run(log_dir, resume=None, callbacks=()):
        t = _trainer(log_dir, "nnx", augmentation={"class_name": "GaussianNoise", "scale": 0.3}, resume=resume,
                     callbacks=list(callbacks))
        t.train_model(gyre.data.batches(tuple(np.concatenate(a) for a in zip(*_data(), strict=True)), 64, seed=0))
        return t

    whole = run(tmp_path / "whole")
    with pytest.warns(gyre.LoopWarning, match="preempted"):
        killed = run(tmp_path / "killed", callbacks=[SigtermAt(10)])  # in epoch 2 of three 8-step epochs
    assert killed.history.stop_reason == "preempted" and killed.global_step == 10
    resumed = run(tmp_path / "killed", resume="latest")
    assert resumed.global_step == whole.global_step == 24
    for a, b in zip(jax.tree_util.tree_leaves(whole.state.params), jax.tree_util.tree_leaves(resumed.state.params),
                    strict=True):
        assert np.array_equal(a, b)  # the noise drawn after the resume is the noise of the whole run


# -- the fork's typed bases: registered with their configs, built from a section's keys -------

import dataclasses  # noqa: E402

from gyre.trainer import (  # noqa: E402
    AugmentedImgClassifierTrainer,
    AugmentedImgClassifierTrainerConfig,
    BaseAugmentationLinen,
    BaseAugmentationLinenConfig,
    BaseAugmentationNNX,
    BaseAugmentationNNXConfig,
    BasePreprocessingNNX,
    BasePreprocessingNNXConfig,
)


@dataclasses.dataclass
class ZeroLabelsTypedConfig(BaseAugmentationNNXConfig):
    keep: int = 0


class ZeroLabelsTyped(BaseAugmentationNNX):
    config: ZeroLabelsTypedConfig

    def augment(self, batch):
        return batch[0], jnp.zeros_like(batch[1]) + self.config.keep


@dataclasses.dataclass
class ZeroLabelsTypedLinenConfig(BaseAugmentationLinenConfig):
    keep: int = 0


class ZeroLabelsTypedLinen(BaseAugmentationLinen):
    config: ZeroLabelsTypedLinenConfig

    def augment(self, batch):
        return batch[0], jnp.zeros_like(batch[1]) + self.config.keep


@dataclasses.dataclass
class NegateTypedConfig(BasePreprocessingNNXConfig):
    pass


class NegateTyped(BasePreprocessingNNX):
    def __init__(self, config: NegateTypedConfig, **kwargs):  # the config named by __init__ alone
        super().__init__(config)

    def preprocess(self, batch):
        return -batch[0], batch[1]


def test_typed_bases_register_their_configs():
    assert ZeroLabelsTypedConfig.class_name == "ZeroLabelsTyped"
    assert ZeroLabelsTypedLinenConfig.class_name == "ZeroLabelsTypedLinen"
    assert NegateTypedConfig.class_name == "NegateTyped"
    assert AugmentedImgClassifierTrainerConfig.class_name == "AugmentedImgClassifierTrainer"
    assert issubclass(AugmentedImgClassifierTrainer, ImgClassifierTrainer)


@pytest.mark.parametrize("mode", ["nnx", "linen"])
def test_a_typed_augmentation_and_preprocessing_train_from_their_sections(tmp_path, mode):
    name = "ZeroLabelsTyped" if mode == "nnx" else "ZeroLabelsTypedLinen"
    t = _trainer(tmp_path, mode, augmentation={"class_name": name, "keep": 0},
                 preprocessing={"class_name": "NegateTyped"})
    assert isinstance(t.model, BaseAugmentationNNX if mode == "nnx" else BaseAugmentationLinen)
    assert isinstance(t.preprocessing, NegateTyped) and t.preprocessing.config == NegateTypedConfig()
    data = _data()
    out = t.train_model(data, val_loader=data)
    labels = np.concatenate([y for _, y in data])
    assert out[3]["val/acc"] == pytest.approx(np.mean(labels == 0), abs=0.02)  # it learnt "always 0"


def test_a_typed_augmentation_section_is_checked_against_its_config(tmp_path):
    with pytest.raises(ConfigError, match="unknown key trainer.augmentation.kep"):
        _trainer(tmp_path, "nnx", augmentation={"class_name": "ZeroLabelsTyped", "kep": 0})


def test_the_augmented_trainer_is_built_from_its_config_section(tmp_path):
    config = AugmentedImgClassifierTrainerConfig(
        {"class_name": "AugmentedImgClassifierTrainer", "train_epochs": 1, "enable_progress_bar": False,
         "augmentation": {"class_name": "ZeroLabelsTyped"}, "logger": {"log_dir": str(tmp_path)}})
    t = AugmentedImgClassifierTrainer(config=config, model_config={"class_name": "SimpleClassifier", "c_hid": 8},
                                      optimizer=optax.adam(1e-2), exmp_input=_data()[0])
    assert isinstance(t.model, ZeroLabelsTyped) and t.config.class_name == "AugmentedImgClassifierTrainer"


# -- a linen augmentation in the fork's form: augment(inp, *, rng), the model run bare --------

import jax  # noqa: E402

from gyre.trainer import GaussianNoiseLinen  # noqa: E402
from gyre.trainer._model import _takes_rng, augment_linen  # noqa: E402


@dataclasses.dataclass
class ForkNoiseLinenConfig(BaseAugmentationLinenConfig):
    scale: float = 0.05


class ForkNoiseLinen(BaseAugmentationLinen):
    """The fork test's shape: ``augment`` reads ``rng["augmentation"]`` and ``__call__``
    names an attribute nothing defines, so only a trainer that never calls it can train."""

    config: ForkNoiseLinenConfig

    def augment(self, inp, *, rng=None, **kwargs):
        x, y = inp
        return x + jax.random.normal(rng["augmentation"], x.shape) * self.config.scale, y

    def __call__(self, inp, *, train=True, rng=None, **kwargs):
        return self.wrapped_model_instance(inp, train=train, **kwargs)


def test_a_fork_form_linen_augmentation_gets_rng_and_never_wraps_the_forward(tmp_path):
    t = _trainer(tmp_path, "linen", augmentation={"class_name": "ForkNoiseLinen", "scale": 0.05})
    data = _data()
    out = t.train_model(data, val_loader=data)
    assert out[3]["val/acc"] > 0.8
    # the parameters are the wrapped model's own, as the fork's (no "wrapped_model" level)
    bare = SimpleClassifierLinen(c_hid=16).init(jax.random.key(0), jnp.asarray(data[0][0]))["params"]
    assert jax.tree.structure(dict(t.state.params)) == jax.tree.structure(dict(bare))
    assert t.bind_model()(jnp.asarray(data[0][0])).shape == (64, 10)
    # the step's augmentation key reaches augment as rng={"augmentation": key}
    x, y = map(jnp.asarray, data[0])
    key = jax.random.key(1)
    noisy, same = augment_linen(t.model, t.state.params, (x, y), key)
    np.testing.assert_allclose(noisy - x, jax.random.normal(key, x.shape) * 0.05, rtol=1e-5, atol=1e-6)
    assert np.array_equal(same, y)


def test_only_an_augment_taking_rng_is_given_it():
    assert _takes_rng(ForkNoiseLinen.augment)
    assert not _takes_rng(ZeroLabelsLinen.augment) and not _takes_rng(GaussianNoiseLinen.augment)
    assert not _takes_rng(BaseAugmentationLinen.augment)


def test_the_forward_module_of_an_augmentation_wrapper_is_the_model_it_wraps():
    from flax import linen

    from gyre.trainer._model import AugmentationLinen, forward_module

    dense = linen.Dense(1)
    assert forward_module(AugmentationLinen(wrapped_model=dense)) is dense
    assert forward_module(dense) is dense
