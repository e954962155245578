"""The compiled steps: what a loss function must return, and the batch size that weighs means."""


import jax.numpy as jnp
import numpy as np
import pytest

from gyre.trainer import (
    ImgClassifierTrainer,
)
from tests.trainer.helpers import trainer


def test_a_loss_function_that_returns_no_loss_is_explained(tmp_path, digits):
    class NoLoss(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            return {"acc": 1.0}

    with pytest.raises(TypeError, match=r"loss_function returned no scalar loss(.|\n)*received: dict"):
        trainer(tmp_path, cls=NoLoss).train_model(digits.train_loader)

    class VectorLoss(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            return model(batch[0]), {}

    with pytest.raises(TypeError, match=r"no scalar loss(.|\n)*an array of shape \(32, 10\)"):
        trainer(tmp_path, cls=VectorLoss).train_model(digits.train_loader)


def test_what_a_loss_function_may_return():
    from gyre.trainer._steps import batch_size_of, loss_output

    loss = jnp.float32(1.5)
    assert loss_output(loss, mode="nnx", name="f")[1] == {}
    assert loss_output((loss, None), mode="nnx", name="f")[1] == {}
    assert loss_output((loss, ({"batch_stats": 1}, {"acc": 0.5})), mode="linen", name="f")[1:] == (
        {"acc": 0.5}, {"batch_stats": 1}
    )
    with pytest.raises(ValueError, match="metrics hold a key 'loss'"):
        loss_output((loss, {"loss": loss}), mode="nnx", name="f")
    with pytest.raises(TypeError, match=r"no scalar loss(.|\n)*received: NoneType None"):
        loss_output(None, mode="nnx", name="f")  # a missing return
    assert batch_size_of((np.zeros((5, 2)), np.zeros(5)), np.zeros((5, 2))) == 5
    assert batch_size_of({"size": 3}, np.zeros((5, 2))) == 5  # a dict's "size" key is data, not its size
