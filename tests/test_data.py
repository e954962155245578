"""gyre.data: the digits data set, array batching, steps_per_epoch, and their errors."""

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gyre.data
from gyre.data import batches, digits, steps_per_epoch, stratified_split


@pytest.fixture(scope="module")
def split():
    return digits()


# -- digits -------------------------------------------------------------------------------


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


# -- batches --------------------------------------------------------------------------------


def _data(n=10):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n)
    return x, y


def test_batches_in_order_without_shuffle():
    x, y = _data(5)
    out = list(batches((x, y), 2, shuffle=False, epochs=1, drop_remainder=False))
    assert [b[1].tolist() for b in out] == [[0, 1], [2, 3], [4]]
    assert all(isinstance(b, tuple) and len(b) == 2 for b in out)
    np.testing.assert_array_equal(out[0][0], x[:2])


def test_batches_drop_remainder_gives_equal_shapes():
    x, y = _data(10)
    out = list(batches((x, y), 3, epochs=2))
    assert len(out) == 2 * steps_per_epoch(10, 3) == 6
    assert {b[0].shape for b in out} == {(3, 2)} and {b[1].shape for b in out} == {(3,)}


def test_batches_shuffle_covers_every_sample_once_per_epoch_and_keeps_rows_aligned():
    x, y = _data(12)
    out = list(batches((x, y), 5, epochs=3, drop_remainder=False, seed=3))
    assert len(out) == 9
    epochs = [np.concatenate([b[1] for b in out[i * 3 : (i + 1) * 3]]) for i in range(3)]
    for order in epochs:
        assert sorted(order.tolist()) == list(range(12))
    assert not np.array_equal(epochs[0], epochs[1])  # reshuffled each epoch
    assert epochs[0].tolist() != list(range(12))
    for bx, by in out:
        np.testing.assert_array_equal(bx, x[by])  # inputs still match their labels


def test_batches_are_deterministic_per_seed():
    x, y = _data(20)
    first = [b[1].tolist() for b in batches((x, y), 4, epochs=2, seed=7)]
    again = [b[1].tolist() for b in batches((x, y), 4, epochs=2, seed=7)]
    other = [b[1].tolist() for b in batches((x, y), 4, epochs=2, seed=8)]
    assert first == again and first != other


def test_batches_repeat_forever_by_default():
    x, y = _data(4)
    out = list(itertools.islice(batches((x, y), 2), 101))
    assert len(out) == 101


def test_batches_of_a_single_array_are_arrays():
    y = np.arange(6)
    out = list(batches(y, 3, shuffle=False, epochs=1))
    assert [b.tolist() for b in out] == [[0, 1, 2], [3, 4, 5]]
    assert next(batches([y], 3))[0].shape == (3,)  # a list of one array gives 1-tuples


def test_batches_accept_lists_and_jax_arrays():
    import jax.numpy as jnp

    out = next(batches(([[1, 2], [3, 4]], jnp.arange(2)), 2, shuffle=False))
    assert isinstance(out[0], np.ndarray) and out[0].tolist() == [[1, 2], [3, 4]]


def test_batches_mismatched_leading_dims():
    with pytest.raises(ValueError, match="different numbers of samples") as info:
        batches((np.zeros((10, 3)), np.zeros(9)), 2)
    assert "(10, 3)" in str(info.value) and "(9,)" in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
def test_batches_bad_batch_size(bad):
    with pytest.raises(ValueError, match="batch_size must be a whole number >= 1"):
        batches(_data(), bad)


def test_batches_batch_larger_than_data():
    with pytest.raises(ValueError, match="larger than the data") as info:
        batches(_data(10), 11)
    assert "drop_remainder=False" in str(info.value)
    out = list(batches(_data(10), 11, drop_remainder=False, epochs=1))
    assert [b[1].shape for b in out] == [(10,)]


@pytest.mark.parametrize(
    ("arrays", "error", "match"),
    [
        ((), TypeError, "non-empty tuple of arrays"),
        ("abc", TypeError, "non-empty tuple of arrays"),
        (42, TypeError, "non-empty tuple of arrays"),
        (np.float32(1.0), ValueError, "leading sample dimension"),
        ((np.zeros(3), np.float32(1.0)), ValueError, "no leading sample dimension"),
        ((np.zeros((0, 2)),), ValueError, "empty arrays"),
    ],
)
def test_batches_bad_arrays(arrays, error, match):
    with pytest.raises(error, match=match):
        batches(arrays, 1, drop_remainder=False)


def test_batches_bad_epochs_are_reported_at_the_call():
    with pytest.raises(ValueError, match="epochs must be a whole number >= 1"):
        batches(_data(), 2, epochs=0)  # not deferred to the first next()


# -- steps_per_epoch --------------------------------------------------------------------------


def test_steps_per_epoch():
    assert steps_per_epoch(1437, 64) == 22
    assert steps_per_epoch(1437, 64, drop_remainder=False) == 23
    assert steps_per_epoch(128, 64, drop_remainder=False) == 2
    assert steps_per_epoch(0, 8) == 0
    with pytest.raises(ValueError, match="batch_size"):
        steps_per_epoch(10, 0)
    with pytest.raises(ValueError, match="number of samples"):
        steps_per_epoch(-1, 2)


def test_public_names():
    assert set(gyre.data.__all__) >= {"batches", "digits", "steps_per_epoch"}


def test_import_gyre_is_enough_and_does_not_import_scikit_learn():
    # A fresh interpreter: this one has scikit-learn loaded already.
    code = (
        "import sys, gyre\n"
        "assert 'sklearn' not in sys.modules, 'import gyre loaded scikit-learn'\n"
        "(x, y), _ = gyre.data.digits()\n"
        "assert 'sklearn' in sys.modules\n"
        "print(x.shape, gyre.data.steps_per_epoch(len(x), 64))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1437, 64) 22"


def test_gyre_data_is_a_facade():
    import gyre

    assert gyre.data is sys.modules["gyre.data"] and "data" in gyre.__all__
    assert gyre.data.__all__ == sorted(gyre.data.__all__)
    for name in gyre.data.__all__:
        assert callable(getattr(gyre.data, name)), name
        assert getattr(gyre.data, name).__doc__, name


@pytest.mark.parametrize("call", [
    lambda seed: digits(seed=seed),
    lambda seed: stratified_split(np.arange(4) % 2, test_size=0.5, seed=seed),
    lambda seed: batches(_data(), 2, seed=seed),  # checked at the call, not at the first batch
])
@pytest.mark.parametrize("seed", [-1, 1.5, "0", None])
def test_bad_seeds_are_explained_at_the_call(call, seed):
    with pytest.raises(ValueError) as info:
        call(seed)
    assert str(info.value).splitlines()[0] == "a seed must be a whole number >= 0"
    assert f"received: {type(seed).__name__}" in str(info.value)


def test_numpy_numbers_are_accepted_everywhere():
    import jax.numpy as jnp

    (x_train, _), (x_test, _) = digits(test_size=np.float32(0.5), seed=np.int64(3))
    assert len(x_test) == 899
    assert np.array_equal(x_train, digits(test_size=0.5, seed=3)[0][0])
    x, y = _data()
    first = next(batches((x, y), np.int64(4), seed=jnp.array(5), epochs=np.int32(1)))
    assert first[0].shape == (4, 2)
    assert np.array_equal(first[1], next(batches((x, y), 4, seed=5))[1])
    assert steps_per_epoch(np.int64(10), jnp.array(3)) == 3


def test_readme_data_section_runs(tmp_path, monkeypatch):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Data: `gyre.data`")[1].split("\n## ")[0]
    code = section.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md (Data)", "exec"), namespace)
    assert namespace["x"].shape == (64, 64) and namespace["y"].dtype == np.int32
    assert namespace["steps"] == 22 and len(list(namespace["test"]())) == 6
