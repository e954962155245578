"""How create_flax_state calls losses and metrics: a table of signatures and their convention."""

import functools

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.frameworks import _calling as calling
from gyre.frameworks.losses import Crossentropy

KNOWN = frozenset(calling.KEYWORDS)


def _positional(p, y):
    return p


def _with_weight(p, y, w):
    return p


def _ciclo(*, preds, target, **_):
    return preds


def _target_first(target, preds):
    return preds


def _keras(y_true, y_pred):
    return y_pred


def _params_only(*, params, **_):
    return params


def _takes_weights(*, preds, sample_weight=None, **_):
    return preds


def _dict_label(*, preds, segmentation):
    return preds


#: (signature, keyword?, weighs?)
TABLE = [
    (_positional, False, False),
    (_with_weight, False, True),
    (optax.softmax_cross_entropy_with_integer_labels, True, False),  # logits=, labels=
    (optax.l2_loss, False, False),  # (predictions, targets=None): by position
    (_ciclo, True, False),
    (_target_first, True, False),
    (_keras, True, False),
    (_params_only, True, False),
    (_takes_weights, True, True),
    (_dict_label, True, False),  # a keyword-only name from a dict of labels
    (Crossentropy(), True, True),
    (functools.partial(_with_weight, w=None), False, False),
    (lambda preds, labels, sample_weight=None: preds, True, True),
]


@pytest.mark.parametrize("fn,keyword,weighs", TABLE, ids=[getattr(t[0], "__name__", type(t[0]).__name__) for t in TABLE])
def test_the_convention_is_read_from_the_signature(fn, keyword, weighs):
    found = calling.plan(fn, KNOWN)
    assert found is not None and found.keyword is keyword and found.weighs is weighs


@pytest.mark.parametrize("fn", [lambda x: x, lambda a, b, c, d: a, lambda *, scores: scores, lambda p, /: p])
def test_signatures_that_cannot_be_called_are_refused(fn):
    assert calling.plan(fn, KNOWN) is None
    with pytest.raises(TypeError, match="cannot be called by create_flax_state") as info:
        calling.bind("l", fn, what="loss")
    assert "expected: fn(preds, labels)" in str(info.value) and "signature (" in str(info.value)


def test_the_closest_keyword_is_suggested():
    with pytest.raises(TypeError, match="Did you mean 'target'"):  # at creation
        calling.bind("l", lambda preds, traget, x, y: preds, what="loss")
    # a keyword-only name may come from a dict of labels: checked at the first batch
    call = calling.bind("l", lambda *, preds, traget: preds, what="loss")
    with pytest.raises(TypeError, match="Did you mean 'target'"):
        call(_args(jnp.ones(2), jnp.ones(2)))


def _args(preds, labels, weight=None, inputs=None):
    return calling.arguments(preds=preds, labels=labels, sample_weight=weight, inputs=inputs, state=None, key=None)


def test_values_are_averaged_and_weighted_unless_the_function_weighs():
    p, y, w = jnp.array([1.0, 3.0]), jnp.zeros(2), jnp.array([1.0, 0.0])
    per_example = calling.bind("l", lambda *, preds, target: (preds - target) ** 2, what="loss")
    assert float(per_example(_args(p, y))) == 5.0
    assert float(per_example(_args(p, y, w))) == 1.0  # weighted by sample_weight
    own = calling.bind("l", lambda *, preds, sample_weight: preds * 0 + sample_weight.sum(), what="metric")
    assert float(own(_args(p, y, w))) == 1.0  # it weighs: averaged, not weighted again
    positional = calling.bind("l", lambda p, y, w: (p * w), what="metric")
    assert float(positional(_args(p, y, w))) == 0.5


def test_arguments_spread_dict_labels_and_inputs_without_overriding():
    args = _args(jnp.ones(1), {"a": 1, "preds": "no"}, inputs={"image": 2})
    assert args["a"] == 1 and args["image"] == 2 and args["preds"] is not "no"  # noqa: F632
    assert args["logits"] is args["preds"] and args["y_true"] is args["target"]
    assert args["mask"] is None and args["key_seq"] is None
    masked = _args(jnp.ones(2), None, jnp.array([0.0, 2.0]))
    assert masked["mask"].tolist() == [False, True]


def test_a_missing_keyword_at_call_time_is_explained():
    call = calling.bind("l", lambda *, preds, segmentation: preds, what="loss")
    with pytest.raises(TypeError, match="takes \\['segmentation'\\], which this batch does not provide"):
        call(_args(jnp.ones(2), jnp.ones(2)))
    assert float(call(_args(jnp.ones(2), {"segmentation": 1}))) == 1.0


def test_flatten_names_is_unique_and_follows_sow_tuples():
    tree = {"enc": {"kl": (jnp.float32(1), jnp.float32(2))}, "dec": {"kl": jnp.float32(3), "rec": jnp.float32(4)}}
    short = calling.flatten_names(tree)
    assert list(short) == ["kl", "kl_1", "kl_2", "rec"]
    assert np.allclose([float(v) for v in short.values()], [1, 2, 3, 4])
    assert list(calling.flatten_names(tree, full_path=True)) == ["enc/kl", "enc/kl_1", "dec/kl", "dec/rec"]


def test_key_seq_draws_new_keys():
    import jax

    seq = calling.KeySeq(jax.random.key(1))
    keys = [jax.random.key_data(next(seq)) for _ in range(3)]
    assert len({tuple(np.asarray(k).tolist()) for k in keys}) == 3


def test_weighted_mean_weighs_examples_and_keeps_scalars():
    assert float(calling.weighted_mean(jnp.array([1.0, 3.0]), jnp.array([1.0, 0.0]))) == 1.0
    assert float(calling.weighted_mean(jnp.float32(2.5), jnp.array([1.0, 0.0]))) == 2.5
