"""TrainerModule's construction and its explained mistakes."""


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
