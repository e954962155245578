"""TrainerModule's construction and its explained mistakes."""

import json

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
    from ml_collections import ConfigDict

    import optax

    from tests.trainer.helpers import mlp

    t = gyre.trainer.ImgClassifierTrainer(ConfigDict({"train_epochs": 3, "seed": 7}), model=mlp(),
                                          optimizer=optax.sgd(0.1), log_dir=str(tmp_path))
    assert (t.config.train_epochs, t.config.seed) == (3, 7)
