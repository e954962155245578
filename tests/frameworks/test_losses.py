"""Keyword loss objects (jax_metrics' calling convention)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.frameworks.losses import Crossentropy, MeanSquaredError

LOGITS = jnp.array([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0], [1.0, 1.0, 1.0]])
LABELS = jnp.array([0, 2, 1])


def test_crossentropy_matches_optax_in_each_form():
    expected = optax.softmax_cross_entropy_with_integer_labels(LOGITS, LABELS)
    assert float(Crossentropy()(preds=LOGITS, target=LABELS)) == pytest.approx(float(expected.mean()), rel=1e-6)
    one_hot = jax.nn.one_hot(LABELS, 3)
    assert float(Crossentropy()(preds=LOGITS, labels=one_hot)) == pytest.approx(float(expected.mean()), rel=1e-6)
    probs = jax.nn.softmax(LOGITS)
    assert float(Crossentropy(from_logits=False)(preds=probs, target=LABELS)) == pytest.approx(float(expected.mean()), rel=1e-5)
    w = jnp.array([1.0, 0.0, 3.0])
    weighted = float(Crossentropy()(preds=LOGITS, target=LABELS, sample_weight=w))
    assert weighted == pytest.approx(float((expected * w).sum() / w.sum()), rel=1e-6)
    smooth = optax.softmax_cross_entropy(LOGITS, optax.smooth_labels(one_hot, 0.1)).mean()
    assert float(Crossentropy(label_smoothing=0.1)(preds=LOGITS, target=LABELS)) == pytest.approx(float(smooth), rel=1e-6)


def test_binary_crossentropy():
    logits, target = jnp.array([[0.5, -1.0]]), jnp.array([[1, 0]])
    expected = optax.sigmoid_binary_cross_entropy(logits, target.astype(jnp.float32)).mean()
    assert float(Crossentropy(binary=True)(preds=logits, target=target)) == pytest.approx(float(expected), rel=1e-6)
    probs = jax.nn.sigmoid(logits)
    assert float(Crossentropy(binary=True, from_logits=False)(preds=probs, target=target)) == pytest.approx(
        float(expected), rel=1e-5
    )


def test_mean_squared_error():
    preds, target = jnp.array([[1.0, 2.0], [0.0, 0.0]]), jnp.zeros((2, 2))
    assert float(MeanSquaredError()(preds=preds, target=target)) == pytest.approx(1.25)
    assert float(MeanSquaredError()(preds=preds, target=target, sample_weight=np.array([1.0, 0.0]))) == 2.5


def test_missing_target_is_explained():
    with pytest.raises(TypeError, match="Crossentropy needs the batch's labels"):
        Crossentropy()(preds=LOGITS)
