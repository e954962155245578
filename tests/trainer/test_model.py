"""The two model modes behind the trainer: nnx split into states, linen with its collections."""

import jax
import jax.numpy as jnp
import pytest
from flax import linen, nnx

from gyre.trainer._model import LinenModel, NNXModel, model_mode_of


class Net(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.norm = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.norm(self.linear(x)))


def test_nnx_batch_statistics_update_inside_grad_under_jit_and_modes_differ():
    model = NNXModel(Net(nnx.Rngs(0)))
    params, rest = model.initial()

    @jax.jit
    def step(params, rest):
        def objective(p):
            module = model.merge(p, rest, train=True)
            return module(jnp.ones((8, 3))).sum(), model.rest_of(module)

        return jax.value_and_grad(objective, has_aux=True)(params)

    (_, new_rest), grads = step(params, rest)
    assert not jnp.array_equal(new_rest["norm"]["mean"], rest["norm"]["mean"])
    evaluation = model.merge(params, rest, train=False)
    x = jnp.arange(6.0).reshape(2, 3)
    assert jnp.array_equal(evaluation(x), evaluation(x))  # no dropout, running statistics
    trained = model.merge(params, rest, train=True)
    assert not jnp.array_equal(trained(x), trained(x))  # dropout draws a fresh mask each call


def test_linen_collections_are_mutable_in_training_only():
    class Norm(linen.Module):
        @linen.compact
        def __call__(self, x, train=False):
            return linen.BatchNorm(use_running_average=not train)(linen.Dense(2)(x))

    model = LinenModel(Norm())
    params, collections = model.init(jax.random.key(0), jnp.ones((4, 3)))
    assert list(collections) == ["batch_stats"]
    _, updated = model.apply(params, collections, jnp.ones((4, 3)) * 2, None, train=True)
    assert not jnp.array_equal(updated["batch_stats"]["BatchNorm_0"]["mean"], collections["batch_stats"]["BatchNorm_0"]["mean"])
    _, same = model.apply(params, collections, jnp.ones((4, 3)) * 2, None, train=False)
    assert same is not None and jnp.array_equal(same["batch_stats"]["BatchNorm_0"]["mean"],
                                                collections["batch_stats"]["BatchNorm_0"]["mean"])


def test_anything_but_a_flax_module_is_explained():
    with pytest.raises(TypeError, match=r"must be a flax module(.|\n)*received: function"):
        model_mode_of(lambda x: x)


class _BridgedNet:
    """An nnx model holding a linen layer through nnx.bridge.ToNNX (built on its first input),
    as the kpoeppel jax_trainer fork's test model does."""

    @staticmethod
    def make(seed=0):
        from flax import linen, nnx

        class Net(nnx.Module):
            def __init__(self, rngs):
                self.dense = nnx.Linear(64, 8, rngs=rngs)
                self.norm = nnx.bridge.ToNNX(linen.LayerNorm(), rngs=rngs)
                self.head = nnx.Linear(8, 10, rngs=rngs)

            def __call__(self, x):
                return self.head(self.norm(self.dense(x)))

        return Net(nnx.Rngs(seed))


def test_bridged_linen_layers_are_initialised_from_the_example_input(tmp_path):
    import numpy as np

    import gyre
    from gyre.trainer._model import lazy_init_nnx
    from tests.trainer.helpers import trainer

    (x, y), _ = gyre.data.digits()
    data = [(x[i:i + 64], y[i:i + 64]) for i in range(0, 512, 64)]
    t = trainer(tmp_path, model=_BridgedNet.make(), exmp_input=data[0])
    assert sorted(t.state.params["norm"]) == ["bias", "scale"]  # built from exmp_input, not at the first step
    before = t.test_model(data)["test/acc"]  # runs at once: the bridged layers have their variables
    result = t.train_model(data, val_loader=data)
    assert result["val"]["val/acc"] > before + 0.2
    assert not lazy_init_nnx(t.model, x[:2])  # initialised layers: the model is not called again
    with pytest.raises(ValueError, match=r"(?s)bridged linen layers could not be initialised.*exmp_input=next"):
        lazy_init_nnx(_BridgedNet.make(), np.zeros((2, 5), np.float32))
