"""frameworks.metrics: Accuracy, Mean and Metrics on core.metrics; the metric protocols."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core import metrics as core
from gyre.frameworks import _calling as calling
from gyre.frameworks.metrics import Accuracy, Mean, Metrics, kind_of, metric_state, reset, update

PREDS = jnp.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
LABELS = jnp.array([1, 1, 1, 0])


def test_accuracy_is_a_core_mean_of_hits_with_its_public_behaviour():
    m = Accuracy().update(preds=PREDS, labels=LABELS)
    assert isinstance(m.hits, core.Mean) and float(m.compute()) == 0.75
    assert float(m.correct) == 3.0 and float(m.total) == 4.0
    same = Accuracy().update(logits=PREDS, target=LABELS)  # ciclo / CLU names
    assert float(same.compute()) == 0.75
    one_hot = Accuracy().update(preds=PREDS, labels=jax.nn.one_hot(LABELS, 2))
    assert float(one_hot.compute()) == 0.75
    weighted = Accuracy().update(preds=PREDS, labels=LABELS, sample_weight=jnp.array([0.0, 1.0, 1.0, 2.0]))
    assert float(weighted.compute()) == pytest.approx(3 / 4)  # 0 + 0 + 1 + 2 over 4
    assert float(m.reset().total) == 0.0 and float(Accuracy.empty().total) == 0.0
    halves = Accuracy().update(preds=PREDS[:2], labels=LABELS[:2]).merge(Accuracy().update(preds=PREDS[2:], labels=LABELS[2:]))
    assert float(halves.compute()) == 0.75
    assert float(Accuracy().compute()) == 0.0  # empty: 0, not NaN


def test_accuracy_per_position_and_under_jit():
    preds = jnp.stack([PREDS, PREDS[::-1]], axis=1)  # (batch, length, classes)
    labels = jnp.stack([LABELS, LABELS], axis=1)
    m = jax.jit(lambda m, p, y, w: m.update(preds=p, labels=y, sample_weight=w))(Accuracy(), preds, labels, jnp.ones(4))
    assert float(m.total) == 8.0


def test_accuracy_without_labels_is_explained():
    with pytest.raises(TypeError, match="needs predictions and labels"):
        Accuracy().update(preds=PREDS)


def test_mean_weights_by_sample_weight_else_batch_size():
    m = Mean("loss").update(preds=jnp.zeros((2, 1)), loss=1.0).update(preds=jnp.zeros((6, 1)), loss=3.0)
    assert float(m.compute()) == 2.5 and float(m.count) == 8.0 and isinstance(m.mean, core.Mean)
    w = Mean("loss").update(preds=jnp.zeros((2, 1)), sample_weight=jnp.array([1.0, 0.0]), loss=1.0)
    w = w.update(preds=jnp.zeros((1, 1)), sample_weight=jnp.array([3.0]), loss=5.0)
    assert float(w.compute()) == 4.0
    assert Mean().from_argument("kl").name == "kl" and float(m.reset().count) == 0.0
    with pytest.raises(TypeError, match="Mean\\('kl'\\) found no value 'kl'"):
        Mean("kl").update(preds=PREDS, loss=1.0)


def test_metrics_collection_updates_each_with_the_keywords_it_takes():
    ms = Metrics({"accuracy": Accuracy(), "loss": Mean().from_argument("loss")})
    ms = ms.update(preds=PREDS, target=LABELS, loss=jnp.float32(0.5))
    ms = ms.merge(ms.batch_updates(preds=PREDS, target=LABELS, loss=jnp.float32(1.5)))
    assert {k: float(v) for k, v in ms.compute().items()} == {"accuracy": 0.75, "loss": 1.0}
    assert float(ms.reset().metrics["accuracy"].total) == 0.0


def test_protocols_and_initial_states():
    clu = pytest.importorskip("clu.metrics")
    assert kind_of(Accuracy()) == "update" and kind_of(clu.Accuracy) == "clu" and kind_of(3) is None
    assert float(metric_state("a", Accuracy).total) == 0.0
    assert int(metric_state("c", clu.Accuracy).count) == 0
    assert metric_state("f", lambda p, y: p) is None
    with pytest.raises(TypeError, match="neither a callable nor a metric object"):
        metric_state("bad", 3)

    class NeedsArgs(Accuracy):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(TypeError, match="a class gyre cannot build without arguments"):
        metric_state("n", NeedsArgs)


def test_update_and_reset_dispatch_on_the_protocol():
    clu = pytest.importorskip("clu.metrics")
    args = calling.arguments(preds=PREDS, labels=LABELS.astype(jnp.int32), sample_weight=None, inputs=None,
                             state=None, key=None)
    for metric in (Accuracy(), clu.Accuracy.empty()):
        updated = update(metric, args)
        assert float(updated.compute()) == 0.75
        assert float(reset(updated).compute() if kind_of(metric) == "update" else reset(updated).count) == 0.0
    masked = calling.arguments(preds=PREDS, labels=LABELS.astype(jnp.int32), sample_weight=jnp.array([1.0, 1.0, 1.0, 0.0]),
                               inputs=None, state=None, key=None)
    assert float(update(clu.Accuracy.empty(), masked).compute()) == pytest.approx(2 / 3)  # mask = weight > 0
    np.testing.assert_allclose(update(Accuracy(), masked).compute(), 2 / 3, rtol=1e-6)
