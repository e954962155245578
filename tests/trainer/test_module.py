"""TrainerModule's construction and its explained mistakes."""

import json
import os

import numpy as np
import pytest

import gyre
from tests.trainer.helpers import trainer


def test_the_base_trainer_and_a_mismatched_model_mode_are_explained(tmp_path, digits):
    with pytest.raises(NotImplementedError, match="the trainer has no loss function"):
        trainer(tmp_path, cls=gyre.TrainerModule).train_model(digits.train_loader)
    with pytest.raises(ValueError, match=r"model_mode is 'linen' but the model is a nnx module"):
        trainer(tmp_path, model_mode="linen")
    with pytest.raises(TypeError, match="must be a flax module"):
        trainer(tmp_path, model=lambda x: x)


def test_batch_to_input_finds_common_batches_and_explains_the_rest():
    t = gyre.TrainerModule.__new__(gyre.TrainerModule)
    x = np.zeros((2, 3))
    assert t.batch_to_input((x, None)) is x and t.batch_to_input({"image": x}) is x
    with pytest.raises(TypeError, match="override batch_to_input"):
        t.batch_to_input(7)


def test_methods_that_need_a_model_before_there_is_one(tmp_path):
    t = trainer(tmp_path)
    with pytest.raises(RuntimeError, match="bind_model needs a trained or initialised model"):
        t.bind_model()
    with pytest.raises(RuntimeError, match="test_model needs"):
        t.test_model([])
    assert t.learning_rate() is None and t.global_step == 0


def _supervised_batches(x, y, size):
    """Batches as jax_trainer's SupervisedBatch: a flax struct with size, input and target."""
    from flax import struct

    @struct.dataclass
    class SupervisedBatch:
        size: int = struct.field(pytree_node=False)
        input: np.ndarray
        target: np.ndarray

    return [SupervisedBatch(len(y[i:i + size]), x[i:i + size], y[i:i + size]) for i in range(0, len(y), size)]


def test_jax_trainers_constructor_initialises_from_exmp_input_and_tests_at_once(tmp_path):
    import optax

    from gyre.trainer import ImgClassifierConfig, ImgClassifierTrainer, SimpleClassifier

    (x, y), _ = gyre.data.digits()
    batches = _supervised_batches(x[:256], y[:256], 64)
    config = ImgClassifierConfig(train_epochs=2, enable_progress_bar=False, logger={"log_dir": str(tmp_path)})
    from flax import nnx

    t = ImgClassifierTrainer(config=config, model=SimpleClassifier(c_hid=16, rngs=nnx.Rngs(0)),
                             optimizer=optax.adam(1e-2), exmp_input=batches[0])
    assert t.trainer_config is t.config and t.config.train_epochs == 2  # config= is the trainer section
    before = t.test_model(batches, epoch_idx=0)  # no training: the model is built from exmp_input
    assert 0.0 <= before["test/acc"] < 0.5
    saved = json.loads((tmp_path / "metrics" / "test_epoch_0000.json").read_text())
    assert saved["epoch"] == 0 and saved["test/acc"] == pytest.approx(before["test/acc"])
    result = t.train_model(batches, val_loader=batches, test_loader=batches)
    assert sorted(k for k in result if isinstance(k, int)) == [1, 2]  # result[epoch]["val/acc"]
    assert result[2] == result["val"] and result[2]["val/acc"] > before["test/acc"]
    final = json.loads((tmp_path / "metrics" / "test_epoch_0002.json").read_text())
    assert final["test/acc"] == pytest.approx(result["test"]["test/acc"])
    val = json.loads((tmp_path / "metrics" / "val_epoch_0002.json").read_text())
    assert final["step"] == val["step"] == t.global_step - 1  # one x-axis: the last trained step's index


def test_a_bad_epoch_idx_or_mesh_is_explained(tmp_path):
    t = trainer(tmp_path)
    with pytest.raises(ValueError, match=r"(?s)test: epoch_idx must be a whole number >= 0.*received: int -1"):
        t.eval_model([(np.zeros((2, 64), np.float32), np.zeros(2, np.int32))], mode="test", epoch_idx=-1)
    with pytest.raises(TypeError, match=r"(?s)the trainer's mesh must be a jax.sharding.Mesh.*received: str 'data'"):
        trainer(tmp_path, mesh="data")


def test_a_mesh_makes_the_trainer_data_parallel(tmp_path):
    import jax
    from jax.sharding import Mesh

    t = trainer(tmp_path, mesh=Mesh(np.asarray(jax.devices()), ("batch",)))
    assert t.strategy.name == "data_parallel" and t.strategy.mesh.axis_names == ("batch",)


def test_batch_to_target_finds_named_and_positional_targets():
    t = gyre.TrainerModule.__new__(gyre.TrainerModule)
    x, y = np.zeros((2, 3)), np.arange(2)
    batch = _supervised_batches(x, y, 2)[0]
    assert t.batch_to_input(batch) is batch.input and t.batch_to_target(batch) is batch.target
    assert t.batch_to_target((x, y)) is y and t.batch_to_target({"x": x, "label": y}) is y
    with pytest.raises(TypeError, match=r"(?s)cannot find the model's target.*override batch_to_target"):
        t.batch_to_target((x,))


def test_an_ml_collections_configdict_is_a_trainer_config(tmp_path):
    import optax
    from ml_collections import ConfigDict

    from tests.trainer.helpers import mlp

    t = gyre.trainer.ImgClassifierTrainer(ConfigDict({"train_epochs": 3, "seed": 7}), model=mlp(),
                                          optimizer=optax.sgd(0.1), log_dir=str(tmp_path))
    assert (t.config.train_epochs, t.config.seed) == (3, 7)


def test_the_forks_whole_flow_construct_test_train_reload_and_compare(tmp_path):
    """The kpoeppel jax_trainer fork's trainer test, in gyre's words: an nnx model with a
    bridged linen layer, built from exmp_input on a mesh, tested at once, trained, reloaded
    from its best checkpoint, and its test metrics compared with the run's file."""
    from glob import glob

    import jax
    from flax import linen, nnx
    from jax.sharding import Mesh

    from gyre.config import register_model
    from gyre.data import SupervisedBatch
    from gyre.trainer import ImgClassifierConfig, ImgClassifierTrainer

    @register_model
    class ForkLikeClassifier(nnx.Module):
        def __init__(self, c_hid: int = 16, num_classes: int = 10, *, rngs):
            self.dense = nnx.Linear(64, c_hid, rngs=rngs)
            norm = linen.vmap(linen.LayerNorm, variable_axes={"params": 0}, in_axes=1, out_axes=1, axis_size=2,
                              split_rngs={"params": True})
            self.norm = nnx.bridge.ToNNX(norm(epsilon=1e-5), rngs=rngs)
            self.head = nnx.Linear(c_hid, num_classes, rngs=rngs)

        def __call__(self, x):
            h = self.dense(x.reshape(x.shape[0], -1))
            h = self.norm(h.reshape(h.shape[0], 2, -1)).reshape(h.shape)
            return self.head(nnx.gelu(h))

    (x, y), (xt, yt) = gyre.data.digits()
    train = [SupervisedBatch(x[i:i + 64], y[i:i + 64]) for i in range(0, 1024, 64)]
    test = [SupervisedBatch(xt[i:i + 120], yt[i:i + 120]) for i in range(0, 360, 120)]
    log_dir = str(tmp_path / "run")
    config = ImgClassifierConfig(train_epochs=3, enable_progress_bar=False, num_classes=10, seed_eval=0,
                                 callbacks={"ModelCheckpoint": {"monitor": "val/acc", "mode": "max"}},
                                 logger={"log_dir": log_dir})
    trainer = ImgClassifierTrainer(config=config, model_config={"class_name": "ForkLikeClassifier", "c_hid": 16},
                                   optimizer_config={"class_name": "AdamW", "learning_rate": 1e-2},
                                   exmp_input=train[0], mesh=Mesh(np.asarray(jax.devices()[:1]), ("data",)))
    assert trainer.test_model(test_loader=test, epoch_idx=0)["test/acc"] < 0.5
    metrics = trainer.train_model(train_loader=train, val_loader=test, test_loader=test,
                                  num_epochs=trainer.config.train_epochs)
    assert metrics[3]["val/acc"] > 0.8 and metrics["test"]["test/acc"] > 0.8
    folder = sorted(glob(os.path.join(log_dir, "checkpoints/*")))[-1]
    loaded = ImgClassifierTrainer.load_from_checkpoint(folder, exmp_input_file=os.path.join(log_dir, "exmp_input.pkl"))
    assert loaded.config.train_epochs == 3
    again = loaded.test_model(test)
    saved = json.loads(open(os.path.join(log_dir, "metrics/test_epoch_0003.json")).read())
    assert again["test/acc"] == pytest.approx(saved["test/acc"], abs=1e-6)
