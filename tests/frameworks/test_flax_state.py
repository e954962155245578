"""create_flax_state with linen, nnx and equinox models: steps, rngs, batches and errors."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import gyre
import gyre.data
from gyre.frameworks import Accuracy, Mean

xent = optax.softmax_cross_entropy_with_integer_labels


def _data(n=32, features=4, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = np.eye(classes, features, dtype=np.float32)[y] + 0.1 * rng.standard_normal((n, features)).astype(np.float32)
    return x, y.astype(np.int32)


class BNDropout(nn.Module):
    @nn.compact
    def __call__(self, x, training: bool):
        x = nn.Dense(8)(x)
        x = nn.BatchNorm(use_running_average=not training)(x)
        x = nn.Dropout(0.5, deterministic=not training)(x)
        return nn.Dense(3)(x)


def _linen_state(**kwargs):
    return gyre.create_flax_state(
        BNDropout(), inputs=jnp.zeros((1, 4)), tx=optax.adam(0.05), losses={"loss": xent}, **kwargs
    )


def test_linen_batch_stats_updated_in_training_and_used_in_evaluation():
    state = _linen_state()
    x, y = _data()
    before = np.asarray(state.batch_stats["BatchNorm_0"]["mean"])  # the state is donated
    logs, trained = state.train_step((x, y))
    after = trained.batch_stats["BatchNorm_0"]["mean"]
    assert not np.allclose(before, after)
    assert "loss" in logs.losses and int(trained.step) == 1
    logs, tested = trained.test_step((x, y))
    assert "loss" in logs.metrics  # evaluation logs losses as metrics
    np.testing.assert_array_equal(tested.batch_stats["BatchNorm_0"]["mean"], after)
    # evaluation normalises with the running averages: changing them changes the outputs
    moved = jax.tree_util.tree_map(lambda v: v + 1.0, trained.model_state)
    out1 = trained.predict_step(x)[0].outputs.preds
    out2 = trained.replace(model_state=moved).predict_step(x)[0].outputs.preds
    assert not np.allclose(out1, out2)


def test_dropout_keys_differ_per_step_and_are_reproducible():
    x = np.ones((16, 4), np.float32)
    y = np.zeros(16, np.int32)
    model = nn.Sequential([nn.Dropout(0.5, deterministic=False)])

    def outputs(seed):
        state = gyre.create_flax_state(model, inputs=jnp.zeros((1, 4)), tx=None, rng=seed, losses={"l": xent})
        out = []
        for step in range(2):
            # the forward pass of training, at steps 0 and 1
            preds, _ = state.replace(step=jnp.int32(step))._forward(x, training=True)
            out.append(np.asarray(preds))
        return out

    a0, a1 = outputs(0)
    b0, b1 = outputs(0)
    c0, _ = outputs(1)
    np.testing.assert_array_equal(a0, b0)
    np.testing.assert_array_equal(a1, b1)
    assert not np.array_equal(a0, a1)
    assert not np.array_equal(a0, c0)
    del y


def test_linen_dropout_model_trains():
    x, y = _data()
    state = _linen_state(metrics={"accuracy": Accuracy()})
    first, _ = state.test_step((x, y))
    for _ in range(30):
        logs, state = state.train_step((x, y))
    last, _ = state.test_step((x, y))
    assert float(last.metrics.loss) < float(first.metrics.loss) / 2
    assert float(last.stateful_metrics.accuracy) > 0.9


class NnxModel(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(4, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.l2 = nnx.Linear(8, 3, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(nnx.relu(self.bn(self.l1(x)))))


def test_nnx_model_trains_and_keeps_its_batch_stats():
    x, y = _data()
    state = gyre.create_flax_state(
        NnxModel(nnx.Rngs(0)), inputs=jnp.zeros((1, 4)), tx=optax.adam(0.05), losses=xent,
        metrics={"accuracy": lambda p, t: p.argmax(-1) == t},
    )
    assert state.adapter.framework == "nnx" and state.adapter.rng_streams == ("default",)
    first, _ = state.test_step((x, y))
    stats = [np.asarray(v) for v in jax.tree_util.tree_leaves(state.model_state["other"])]
    for _ in range(30):
        _, state = state.train_step((x, y))
    last, _ = state.test_step((x, y))
    assert float(last.metrics.loss) < float(first.metrics.loss) / 2
    assert float(last.metrics.accuracy) > 0.9
    assert any(not np.allclose(a, b) for a, b in zip(stats, jax.tree_util.tree_leaves(state.model_state["other"]), strict=True))


def test_equinox_model_trains():
    eqx = pytest.importorskip("equinox")
    x, y = _data()
    model = eqx.nn.MLP(4, 3, 8, 1, key=jax.random.key(0))
    state = gyre.create_flax_state(model, inputs=jnp.zeros((1, 4)), tx=optax.adam(0.05), losses={"loss": xent})
    first, _ = state.test_step((x, y))
    for _ in range(30):
        _, state = state.train_step((x, y))
    last, _ = state.test_step((x, y))
    assert state.adapter.framework == "equinox"
    assert float(last.metrics.loss) < float(first.metrics.loss) / 2


def test_keras_style_batches():
    x, y = _data(8)
    state = gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), losses={"loss": xent})
    logs, _ = state.predict_step(x)
    assert logs.outputs.preds.shape == (8, 3)
    logs, _ = state.predict_step((x,))
    assert logs.outputs.preds.shape == (8, 3)
    plain, _ = state.test_step((x, y))
    ones, _ = state.test_step((x, y, np.ones(8, np.float32)))
    np.testing.assert_allclose(plain.metrics.loss, ones.metrics.loss, rtol=1e-6)
    # a weight of zero drops an example from the mean
    w = np.zeros(8, np.float32)
    w[0] = 1.0
    weighted, _ = state.test_step((x, y, w))
    first, _ = state.test_step((x[:1], y[:1]))
    np.testing.assert_allclose(weighted.metrics.loss, first.metrics.loss, rtol=1e-6)
    with pytest.raises(ValueError, match="batch of 4 parts"):
        state.test_step((x, y, w, w))


def test_stateful_accuracy_over_an_epoch_and_reset():
    x, y = _data(12)
    state = gyre.create_flax_state(
        nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.0), losses={"loss": xent},
        metrics={"accuracy": Accuracy(), "mean_loss": Mean("loss"), "batch_acc": lambda p, t: p.argmax(-1) == t},
    )
    per_batch, s = [], state
    for i in range(0, 12, 4):
        logs, s = s.test_step((x[i : i + 4], y[i : i + 4]))
        per_batch.append(float(logs.metrics.batch_acc))
    whole, _ = state.test_step((x, y))
    np.testing.assert_allclose(logs.stateful_metrics.accuracy, np.mean(per_batch), rtol=1e-6)
    np.testing.assert_allclose(logs.stateful_metrics.accuracy, whole.stateful_metrics.accuracy, rtol=1e-6)
    np.testing.assert_allclose(logs.stateful_metrics.mean_loss, whole.metrics.loss, rtol=1e-5)
    assert float(s.reset_step().metric_states["accuracy"].total) == 0.0


def test_train_loop_registers_the_state_steps():
    x, y = _data(32)
    state = _linen_state(metrics={"accuracy": Accuracy()})
    state, history, elapsed = gyre.train_loop(
        state, gyre.data.batches((x, y), 8), test_dataset=lambda: [(x, y)], epoch_duration=4, stop=8,
    )
    assert elapsed.epochs == 2
    assert len(history.collect("accuracy_test")) == 2
    _, history, _ = gyre.predict_loop(state, [x[:4], x[4:8]])
    assert [p.shape for p in history.collect("outputs.preds")] == [(4, 3), (4, 3)]


def test_data_parallel_strategy():
    x, y = _data(16)
    state = _linen_state(strategy="data_parallel", metrics={"accuracy": Accuracy()})
    logs, state = state.train_step((x, y))
    state = state.reset_step()
    logs, state = state.train_step((x, y))
    assert int(state.step) == 2 and np.isfinite(float(logs.losses.loss))


def test_shape_mismatch_is_a_clear_error_at_creation():
    class Fixed(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(x.reshape((x.shape[0], 64)))

    with pytest.raises(ValueError, match="cannot run on the given inputs") as info:
        gyre.create_flax_state(Fixed(), inputs=jnp.zeros((1, 28, 28)), tx=optax.sgd(0.1), losses=xent)
    assert "expected:" in str(info.value) and "(1, 28, 28)" in str(info.value)
    with pytest.raises(ValueError, match="cannot run on the given inputs"):
        gyre.create_flax_state(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), inputs=jnp.zeros((1, 5)), tx=optax.sgd(0.1), losses=xent)
    with pytest.raises(ValueError, match="needs example inputs"):
        gyre.create_flax_state(nn.Dense(3), tx=optax.sgd(0.1), losses=xent)


def test_data_that_does_not_fit_the_model_is_a_clear_error_in_the_step():
    state = gyre.create_flax_state(nnx.Linear(4, 3, rngs=nnx.Rngs(0)), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), losses=xent)
    with pytest.raises(ValueError, match="do not fit the model"):
        state.train_step((np.zeros((2, 5), np.float32), np.zeros(2, np.int32)))


def test_missing_loss_is_a_clear_error():
    state = gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1))
    x, y = _data(4)
    with pytest.raises(ValueError, match="no loss to minimise"):
        state.train_step((x, y))
    logs, _ = state.test_step((x, y))  # evaluation without losses is fine
    assert logs == {}


def test_bad_losses_and_metrics_are_clear_errors():
    kwargs = dict(inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1))
    with pytest.raises(TypeError, match="must map names"):
        gyre.create_flax_state(nn.Dense(3), losses=[xent], **kwargs)
    with pytest.raises(ValueError, match="names both a loss and a metric"):
        gyre.create_flax_state(nn.Dense(3), losses={"a": xent}, metrics={"a": xent}, **kwargs)
    with pytest.raises(TypeError, match="neither a callable"):
        gyre.create_flax_state(nn.Dense(3), losses=xent, metrics={"m": 3}, **kwargs)
    with pytest.raises(TypeError, match="no supported framework"):
        gyre.create_flax_state(lambda x: x, losses=xent, **kwargs)


def test_clu_metric_classes_need_clu():
    pytest.importorskip("numpy")
    try:
        import clu  # noqa: F401
    except ImportError:
        class NotAMetric:
            pass

        with pytest.raises(ImportError, match="pip install clu"):
            gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=None, metrics={"m": NotAMetric})
    else:
        pytest.skip("clu is installed")


def test_clu_style_metric_instances():
    from flax import struct

    class Average(struct.PyTreeNode):  # the clu.metrics.Average protocol
        total: jax.Array
        count: jax.Array

        @classmethod
        def empty(cls):
            return cls(total=jnp.zeros(()), count=jnp.zeros(()))

        @classmethod
        def from_model_output(cls, *, logits, labels, mask=None, **_):
            hits = (logits.argmax(-1) == labels).astype(jnp.float32)
            return cls(total=hits.sum(), count=jnp.float32(hits.shape[0]))

        def merge(self, other):
            return type(self)(total=self.total + other.total, count=self.count + other.count)

        def compute(self):
            return self.total / self.count

    x, y = _data(8)
    state = gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=None, metrics={"acc": Average.empty()})
    logs, state = state.test_step((x, y))
    logs, state = state.test_step((x, y))
    assert float(state.metric_states["acc"].count) == 16.0
    assert float(state.reset_step().metric_states["acc"].count) == 0.0
