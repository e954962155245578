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

    class CountLoss(ImgClassifierTrainer):  # an int loss: JAX's "grad requires real-valued outputs" before
        def loss_function(self, model, batch, train=True):
            return jnp.sum(model(batch[0]).argmax(-1) != batch[1]), {}

    with pytest.raises(TypeError, match=r"loss 'loss' of loss_function is int32(.|\n)*dtype int32"):
        trainer(tmp_path, cls=CountLoss).train_model(digits.train_loader)


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


def test_a_masked_eval_step_weighs_a_batch_by_its_real_rows_and_keeps_explicit_counts(tmp_path):
    import jax

    from gyre.trainer._metrics import MetricAccumulator

    masked = []

    class Counted(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True, mask=None):
            if not train:
                masked.append(mask is not None)
            loss, metrics = super().loss_function(model, batch, train, mask)
            return loss, {**metrics, "five": {"value": jnp.float32(5.0), "count": 3}}

    x = np.zeros((4, 64), np.float32)
    t = trainer(tmp_path, cls=Counted)
    t.init_model((x, np.zeros(4, np.int32)))
    builder = t._builder
    batch, mask = (x, np.array([0, 1, 1, 1], np.int32)), np.array([True, False, False, False])
    specs, shapes = builder.specs(t.state, batch, train=False, mask=mask)
    acc, _ = jax.jit(builder.eval_step())(t.state, MetricAccumulator.init(specs, shapes), batch, mask)
    weights = {k: float(m.count) for k, m in acc.metrics.items()}
    assert weights == {"loss": 1.0, "acc": 1.0, "five": 3.0}  # mask.sum() rows; an explicit count stays
    masked.clear()
    alone = t.eval_model([(x[:1], batch[1][:1])])  # the real row by itself
    assert masked and all(masked)  # the trainer evaluates this loss function with a mask
    got = acc.compute()
    assert float(got["loss"]) == pytest.approx(float(alone["val/loss"]), abs=1e-6)
    assert float(got["acc"]) == float(alone["val/acc"])
