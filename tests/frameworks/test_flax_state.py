"""create_flax_state with linen, nnx and equinox models: steps, rngs, batches and errors."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx, struct

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
            preds, _, _ = state.replace(step=jnp.int32(step))._forward(x, training=True)
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


def test_a_class_that_is_not_a_metric_is_explained():
    class NotAMetric:
        pass

    with pytest.raises(TypeError, match="neither a callable nor a metric object") as info:
        gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=None, metrics={"m": NotAMetric})
    assert "empty/from_model_output/merge/compute" in str(info.value)


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


# -- ciclo's conventions -----------------------------------------------------------------------


def _dense(**kwargs):
    return gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), **kwargs)


def test_ciclo_keyword_losses_and_metrics_give_the_positional_results():
    x, y = _data(8)
    w = np.linspace(0.0, 1.0, 8).astype(np.float32)

    def ciclo_loss(*, preds, target, **_):
        return xent(preds, target).mean()

    def keras_order(y_true, y_pred):  # by name, never by position
        return xent(y_pred, y_true)

    def acc(*, preds, target, loss, **_):  # a metric receives the losses by name
        return (preds.argmax(-1) == target).astype(jnp.float32) + 0 * loss

    positional = _dense(losses={"loss": xent}, metrics={"acc": lambda p, t: p.argmax(-1) == t})
    for losses in ({"loss": ciclo_loss}, {"loss": keras_order}, {"loss": gyre.frameworks.Crossentropy()}):
        keyword = _dense(losses=losses, metrics={"acc": acc})
        a, _ = positional.test_step((x, y))
        b, _ = keyword.test_step((x, y))
        np.testing.assert_allclose(a.metrics.acc, b.metrics.acc, rtol=1e-6)
        np.testing.assert_allclose(a.metrics.loss, b.metrics.loss, rtol=1e-6)
    weighted_a, _ = positional.test_step((x, y, w))
    weighted_b, _ = _dense(losses={"loss": gyre.frameworks.Crossentropy()}).test_step((x, y, w))
    np.testing.assert_allclose(weighted_a.metrics.loss, weighted_b.metrics.loss, rtol=1e-6)
    # per-example values of a keyword loss that does not take sample_weight are weighted by it
    per_example = _dense(losses={"loss": lambda *, preds, target, **_: xent(preds, target)})
    np.testing.assert_allclose(per_example.test_step((x, y, w))[0].metrics.loss,
                               positional.test_step((x, y, w))[0].metrics.loss, rtol=1e-6)


def test_jax_metrics_style_objects_and_avg_losses_like_ciclo():
    import gyre.frameworks as jm  # ciclo's examples: import jax_metrics as jm

    x, y = _data(16)
    state = _dense(losses={"loss": jm.losses.Crossentropy()}, metrics={"accuracy": jm.metrics.Accuracy()})
    batches = [(x[:8], y[:8]), (x[8:12], y[8:12])]
    losses = []
    for batch in batches:
        logs, state = state.train_step(batch)
        losses.append(float(logs.losses.loss))
    assert sorted(logs.stateful_metrics) == ["accuracy", "avg_loss"]
    # avg_loss: the running mean over the epoch's examples (weighted by batch size)
    assert float(logs.stateful_metrics.avg_loss) == pytest.approx((8 * losses[0] + 4 * losses[1]) / 12, rel=1e-5)
    logs, _ = state.reset_step().test_step(batches[0])
    assert sorted(logs.metrics) == ["loss"] and sorted(logs.stateful_metrics) == ["accuracy", "avg_loss"]


def test_clu_metrics_detect_their_keywords():
    clu = pytest.importorskip("clu.metrics")
    from flax import struct

    @struct.dataclass
    class CicloAccuracy(clu.Average):  # a subclass taking ciclo's names
        @classmethod
        def from_model_output(cls, *, preds, target, **_):
            return super().from_model_output(values=(preds.argmax(-1) == target).astype(jnp.float32))

    @struct.dataclass
    class Both(clu.Collection):
        accuracy: clu.Accuracy
        mean_loss: clu.Average.from_output("loss")

    x, y = _data(12)
    state = _dense(losses={"loss": xent}, metrics={"clu": clu.Accuracy, "ciclo": CicloAccuracy.empty(), "both": Both})
    for i in (0, 4, 8):
        logs, state = state.test_step((x[i : i + 4], y[i : i + 4]))
    whole, _ = _dense(losses={"loss": xent}, metrics={"acc": gyre.frameworks.Accuracy()}).test_step((x, y))
    for name in ("clu", "ciclo", "accuracy"):  # the Collection's compute() adds its entries
        np.testing.assert_allclose(logs.stateful_metrics[name], whole.stateful_metrics.acc, rtol=1e-6)
    assert "mean_loss" in logs.stateful_metrics
    assert int(state.reset_step().metric_states["clu"].count) == 0


def test_signatures_gyre_cannot_call_are_explained_at_creation():
    with pytest.raises(TypeError, match="loss 'loss' cannot be called by create_flax_state") as info:
        _dense(losses={"loss": lambda x: x})
    text = str(info.value)
    assert "signature (x)" in text and "fn(preds, labels)" in text and "target" in text
    with pytest.raises(TypeError, match="unknown parameter\\(s\\) \\['y', 'z'\\]"):
        _dense(losses={"loss": lambda preds, labels, y, z: preds})
    with pytest.raises(TypeError, match="metric 'm' cannot be called"):
        _dense(losses={"loss": xent}, metrics={"m": lambda a, b, c, d: a})

    class Odd:
        @classmethod
        def empty(cls):
            return cls()

        @classmethod
        def from_model_output(cls, scores, truth):
            return cls()

        def merge(self, other):
            return self

        def compute(self):
            return 0.0

    with pytest.raises(TypeError, match="metric 'odd' cannot be called by create_flax_state \\(its from_model_output"):
        _dense(losses={"loss": xent}, metrics={"odd": Odd})
    with pytest.raises(ValueError, match="loss name 'preds' is one of the keywords"):
        _dense(losses={"preds": xent})


def test_keywords_from_dict_labels_and_missing_ones():
    x, y = _data(8)
    state = _dense(losses={"loss": lambda *, preds, cls, **_: xent(preds, cls)})
    logs, _ = state.test_step((x, {"cls": y}))
    np.testing.assert_allclose(logs.metrics.loss, xent(state.predict_step(x)[0].outputs.preds, y).mean(), rtol=1e-6)
    with pytest.raises(TypeError, match="takes \\['cls'\\], which this batch does not provide"):
        state.test_step((x, y))


def test_an_integer_loss_function_is_an_error():
    x, y = _data(8)
    state = _dense(losses={"hits": lambda p, t: p.argmax(-1) == t})
    with pytest.raises(TypeError, match="loss 'hits' of create_flax_state is bool: its gradient would be zero"):
        state.train_step((x, y))


class Reporter(nn.Module):
    """ciclo's integration test model: it writes a loss and a metric into its collections."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(3)(x)
        self.put_variable("losses", "a", jnp.array(1.0))
        self.put_variable("metrics", "b", jnp.array(2.0))
        self.sow("losses", "l2", 0.01 * jnp.sum(self.variables["params"]["Dense_0"]["kernel"] ** 2))
        return x


class Quiet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)


def test_model_collections_are_logged_as_ciclo_does():
    x, y = _data(16)
    state = gyre.create_flax_state(Reporter(), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1),
                                   losses={"loss": xent}, metrics={"accuracy": Accuracy()})
    assert state.model_state == {}  # reported collections are not state
    kernel = np.asarray(state.params["Dense_0"]["kernel"])  # the state is donated
    logs, trained = state.train_step((x, y))
    assert sorted(logs.losses) == ["a", "l2", "loss"] and float(logs.losses.a) == 1.0
    assert float(logs.metrics.b) == 2.0
    assert sorted(logs.stateful_metrics) == ["accuracy", "avg_a", "avg_l2", "avg_loss"]
    logs, _ = trained.test_step((x, y))  # was: "collection 'losses' is immutable"
    assert sorted(logs.metrics) == ["a", "b", "l2", "loss"]
    # the model's losses are minimised too: the kernel shrinks faster than with xent alone
    plain = gyre.create_flax_state(Quiet(), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), losses={"loss": xent})
    np.testing.assert_array_equal(plain.params["Dense_0"]["kernel"], kernel)  # same initialisation
    _, plain = plain.train_step((x, y))
    with_l2 = kernel - trained.params["Dense_0"]["kernel"]
    without = kernel - plain.params["Dense_0"]["kernel"]
    np.testing.assert_allclose(with_l2 - without, 0.1 * 0.02 * kernel, atol=1e-6)  # lr * d(0.01 k^2)/dk
    # names by path, and clashes
    full = gyre.create_flax_state(Reporter(), inputs=jnp.zeros((1, 4)), tx=None, losses={"loss": xent}, logs_full_path=True)
    assert sorted(full.test_step((x, y))[0].metrics) == ["a", "b", "l2", "loss"]  # top-level: no path to add
    with pytest.raises(ValueError, match="the model reports a loss named 'a', which another loss already has"):
        gyre.create_flax_state(Reporter(), inputs=jnp.zeros((1, 4)), tx=None, losses={"a": xent})


def test_models_that_write_other_collections_train_and_evaluate():
    class Counter(nn.Module):
        @nn.compact
        def __call__(self, x):
            seen = self.variable("counters", "seen", lambda: jnp.zeros((), jnp.int32))
            seen.value = seen.value + x.shape[0]
            self.put_variable("notes", "last", x.mean())
            return nn.Dense(3)(x)

    x, y = _data(8)
    state = gyre.create_flax_state(Counter(), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), losses={"loss": xent})
    _, state = state.train_step((x, y))
    _, state = state.train_step((x, y))
    logs, tested = state.test_step((x, y))  # writes allowed in evaluation, not kept
    assert int(state.model_state["counters"]["seen"]) == 1 + 16
    assert int(tested.model_state["counters"]["seen"]) == 17
    assert "loss" in logs.metrics


def test_sowing_into_a_state_collection_is_explained():
    class Grows(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.sow("history", "mean", x.mean())
            return nn.Dense(3)(x)

    x, y = _data(8)
    state = gyre.create_flax_state(Grows(), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), losses={"loss": xent})
    with pytest.raises(ValueError, match="changed the structure of its collection\\(s\\) \\['history'\\]") as info:
        state.train_step((x, y))
    assert "sow into 'losses', 'metrics' or 'intermediates'" in str(info.value)


def test_ciclo_create_flax_state_run_through_train_loop():
    import gyre.frameworks as jm

    x, y = _data(24)
    state = gyre.create_flax_state(Reporter(), inputs=jnp.zeros((1, 4)), tx=optax.adamw(1e-3),
                                   losses={"loss": jm.losses.Crossentropy()}, metrics={"accuracy": jm.metrics.Accuracy()})
    state, history, _ = gyre.train_loop(
        state, gyre.data.batches((x, y), 3), test_dataset=lambda: gyre.data.batches((x, y), 3, epochs=1),
        epoch_duration=3, test_duration=2, stop=12,
    )
    names = ("avg_loss", "accuracy", "avg_loss_test", "accuracy_test", "avg_a", "b", "avg_a_test", "b_test")
    for name in names:
        assert len(history.collect(name)) > 0, name
    assert all(float(v) == 1.0 for v in history.collect("avg_a_test"))


def test_accumulated_microbatches_keep_the_metric_states():
    x, y = _data(16)
    state = gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1), losses={"loss": xent},
                                   metrics={"accuracy": Accuracy()}, accumulate_steps=4)
    logs, state = state.train_step((x, y))
    assert float(state.metric_states["accuracy"].total) == 16.0  # every microbatch counted
    assert float(state.metric_states["avg_loss"].count) == 16.0
    np.testing.assert_allclose(logs.stateful_metrics.accuracy, state.metric_states["accuracy"].compute())


# -- evaluation without recompiles: the state's test_step takes mask ------------------------------


def _masked_data():
    x, y = _data(1000)
    w = np.random.default_rng(2).uniform(0.5, 2.0, 1000).astype(np.float32)
    return x, y, w


def _dense_state(metrics=None):
    return gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1),
                                  losses={"loss": xent}, metrics=metrics or {"accuracy": Accuracy()})


def test_test_loop_on_1000_examples_compiles_the_test_step_once_with_exact_means():
    from gyre.engine._named import DEFAULT_TEST_AGGREGATION

    x, y, _ = _masked_data()
    state = _dense_state()
    test = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 1000, 64)]  # 15 of 64, one of 40
    with gyre.testing.count_compilations() as compiled:
        logs, _ = gyre.inner_loop("test", lambda s: gyre.test_loop(s, test), aggregation=DEFAULT_TEST_AGGREGATION)(state)
    # once: run in blocks, the test step is compiled inside the loop's ring step (never alone)
    assert [n for n in compiled.names if n in ("jit(pure)", "jit(ringed)")] == ["jit(ringed)"], compiled.names
    preds = np.asarray(state.predict_step(x)[0].outputs.preds, np.float64)
    assert float(logs.metrics.loss_test) == pytest.approx(float(np.mean(xent(preds, y))), abs=1e-6)
    assert float(logs.stateful_metrics.accuracy_test) == pytest.approx(float(np.mean(preds.argmax(-1) == y)), abs=1e-6)
    assert float(logs.stateful_metrics.avg_loss_test) == pytest.approx(float(np.mean(xent(preds, y))), abs=1e-6)


def test_the_mask_multiplies_the_sample_weights_and_reaches_clu_style_metrics():
    x, y, w = _masked_data()
    seen = {}

    class CluLike(struct.PyTreeNode):
        total: jax.Array = 0.0
        count: jax.Array = 0.0

        @classmethod
        def empty(cls):
            return cls(jnp.float32(0), jnp.float32(0))

        @classmethod
        def from_model_output(cls, *, preds, labels, mask, **_):
            seen["mask"] = (mask.shape, str(mask.dtype))  # (a tracer: the step is compiled)
            hits = (preds.argmax(-1) == labels) * mask
            return cls(hits.sum().astype(jnp.float32), mask.sum().astype(jnp.float32))

        def merge(self, other):
            return CluLike(self.total + other.total, self.count + other.count)

        def compute(self):
            return self.total / self.count

    state = _dense_state(metrics={"accuracy": Accuracy(), "clu": CluLike})
    mask = np.arange(8) < 5
    logs, after = state.test_step((x[:8], y[:8], w[:8]), mask=mask)
    preds = np.asarray(state.predict_step(x[:5])[0].outputs.preds, np.float64)
    weighted = np.sum(xent(preds, y[:5]) * w[:5]) / np.sum(w[:5])
    assert float(logs.metrics.loss) == pytest.approx(float(weighted), rel=1e-5)
    assert float(after.metric_states["accuracy"].total) == pytest.approx(float(w[:5].sum()), rel=1e-6)
    assert float(after.metric_states["clu"].count) == 5.0
    assert seen["mask"] == ((8,), "bool")


def test_a_whole_batch_loss_warns_once_that_it_counts_the_padding():
    x, y, _ = _masked_data()
    state = gyre.create_flax_state(nn.Dense(3), inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1),
                                   losses={"loss": lambda preds, labels: xent(preds, labels).mean(), "per": xent})
    test = [(x[i : i + 64], y[i : i + 64]) for i in range(0, 200, 64)]
    with pytest.warns(gyre.LoopWarning, match=r"\['loss'\] give one value for the whole batch") as caught:
        gyre.test_loop(state, test)
    assert len(caught) == 1 and "take mask=" in str(caught[0].message)


def test_masked_weight_zeroes_the_padded_rows():
    from gyre.frameworks._flax_state import _masked_weight

    assert _masked_weight(None, jnp.array([True, False])).tolist() == [1.0, 0.0]
    assert _masked_weight(jnp.array([[2.0], [3.0]]), jnp.array([True, False])).tolist() == [[2.0], [0.0]]


def test_a_linen_states_apply_fn_is_flaxs_own():
    # was: the adapter's apply, so apply_fn({"params": state.params}, x) as ciclo's and flax's
    # TrainState take it raised "LinenAdapter.apply() missing 1 required positional argument"
    from flax import linen as nn

    model = nn.Dense(3)
    state = gyre.create_flax_state(model, inputs=jnp.zeros((1, 4)), tx=optax.sgd(0.1),
                                   losses={"l": optax.softmax_cross_entropy_with_integer_labels})
    x = jnp.ones((2, 4))
    np.testing.assert_allclose(state.apply_fn({"params": state.params}, x), model.apply({"params": state.params}, x))
