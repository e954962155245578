"""gyre.data._datasets: the digits data set and the stratified split behind it."""

import sys

import numpy as np
import pytest

from gyre.data import digits, stratified_split


@pytest.fixture(scope="module")
def split():
    return digits()


def test_digits_shapes_dtypes_and_range(split):
    (x_train, y_train), (x_test, y_test) = split
    assert x_train.shape == (1437, 64) and x_test.shape == (360, 64)
    assert y_train.shape == (1437,) and y_test.shape == (360,)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    assert x_train.min() == 0.0 and x_train.max() == 1.0
    assert set(np.unique(y_train)) == set(range(10))


def test_digits_split_is_deterministic_disjoint_and_stratified(split):
    (x_train, y_train), (x_test, y_test) = split
    (x_train2, _), (x_test2, y_test2) = digits(seed=0)
    np.testing.assert_array_equal(x_test, x_test2)
    np.testing.assert_array_equal(y_test, y_test2)
    np.testing.assert_array_equal(x_train, x_train2)
    (_, _), (x_other, _) = digits(seed=1)
    assert not np.array_equal(x_test, x_other)
    # Disjoint and complete, checked on indices of a labelled toy problem (digits has
    # duplicate images, so rows cannot be matched).
    labels = np.repeat(np.arange(10), 50)
    train, test = stratified_split(labels, test_size=0.2, seed=0)
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(500))
    assert np.bincount(labels[test]).tolist() == [10] * 10
    # Class proportions of the real split stay within one sample of the whole set's.
    all_counts = np.bincount(np.concatenate([y_train, y_test]))
    assert np.all(np.abs(np.bincount(y_test) - 0.2 * all_counts) <= 1)


def test_digits_test_size():
    (x_train, _), (x_test, _) = digits(test_size=0.5)
    assert len(x_train) + len(x_test) == 1797 and len(x_test) == 899


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, "0.2", True])
def test_digits_bad_test_size(bad):
    with pytest.raises(ValueError, match="test_size must be a fraction") as info:
        digits(test_size=bad)
    assert "expected:" in str(info.value) and "fix:" in str(info.value)


def test_digits_without_scikit_learn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"pip install 'gyre\[examples\]'"):
        digits()


@pytest.mark.parametrize("call", [
    lambda seed: digits(seed=seed),
    lambda seed: stratified_split(np.arange(4) % 2, test_size=0.5, seed=seed),
])
@pytest.mark.parametrize("seed", [-1, 1.5, "0", None])
def test_bad_seeds_are_explained_at_the_call(call, seed):
    with pytest.raises(ValueError) as info:
        call(seed)
    assert str(info.value).splitlines()[0] == "a seed must be a whole number >= 0"
    assert f"received: {type(seed).__name__}" in str(info.value)


def test_numpy_numbers_are_accepted_everywhere():
    (x_train, _), (x_test, _) = digits(test_size=np.float32(0.5), seed=np.int64(3))
    assert len(x_test) == 899
    assert np.array_equal(x_train, digits(test_size=0.5, seed=3)[0][0])


def test_stratified_split_keeps_the_proportions_of_unbalanced_classes():
    labels = np.array([0] * 80 + [1] * 20)
    train, test = stratified_split(labels, test_size=0.25, seed=4)
    assert len(test) == 25 and len(train) == 75
    assert np.bincount(labels[test]).tolist() == [20, 5]
    assert set(train.tolist()).isdisjoint(test.tolist())
    again = stratified_split(labels, test_size=0.25, seed=4)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], test)


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        (np.array([0.0, 1.0, 0.5, 1.0]), r"(?s)1-D integer class labels.*float64"),
        (np.eye(3)[[0, 1, 2, 0]].astype(np.int32), r"(?s)1-D integer class labels.*shape \(4, 3\).*argmax"),
        (np.array([[0], [1], [0], [1]]), r"(?s)shape \(4, 1\).*ravel"),
    ],
)
def test_stratified_split_refuses_float_or_2d_labels(labels, match):
    with pytest.raises(ValueError, match=match):
        stratified_split(labels, test_size=0.5, seed=0)


def test_a_whole_split_given_as_training_data_is_explained(split, tmp_path):
    # was: a loop or fit iterated digits() as two batches (all 1,437 training rows, then all 360
    # test rows), and batches(digits(), 64) failed in numpy ("inhomogeneous shape")
    import jax.numpy as jnp
    import optax

    import gyre

    assert split.train[0].shape == (1437, 64) and split.test[1].shape == (360,)  # it still unpacks as a tuple
    step = {gyre.every(1): lambda state, batch: (gyre.logs(), state)}
    with pytest.raises(TypeError, match=r"(?s)the dataset is the whole result of a built-in data set.*"
                       r"received: Split\(train=\(x, y\) of shapes \(\(1437, 64\), \(1437,\)\).*gyre.data.batches"):
        gyre.loop(0, split, step, stop=3)
    with pytest.raises(TypeError, match=r"(?s)hold tuples of arrays where arrays belong.*\(1437, 64\)"):
        gyre.data.batches(split, 64)
    state = gyre.TrainState.create(apply_fn=lambda p, x: x @ p, params=jnp.zeros((64, 10)), tx=optax.sgd(0.1))
    with pytest.raises(TypeError, match="the training data is the whole result of a built-in data set"):
        gyre.fit(state, split, loss_fn=lambda logits, y: optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(),
                 num_epochs=1, log_dir=str(tmp_path), progress=False)
