"""gyre.fitting._fit_checks: what gyre.fit checks of a Jax Fit user's data and optimizer, once
(at the door, or while its step is traced): each mistake found by trying, as a new user makes it."""

import numpy as np
import optax
import pytest

import gyre
from gyre.fitting._fit_checks import (
    check_labels,
    eval_batches,
    is_pair_of_arrays,
    optimizer_error,
    split_batch,
)
from tests.fitting.test_fit import accuracy, make_data, make_state, run


def one_hot_ce(logits, labels):
    return optax.softmax_cross_entropy(logits, labels).mean(), {}


def test_column_labels_with_a_one_hot_loss_are_refused_at_the_first_step(tmp_path):
    columns = [(x, y[:, None].astype(np.float32)) for x, y in make_data()]  # (8, 1) against logits (8, 3)
    with pytest.raises(ValueError) as err:
        run(tmp_path, train=columns, loss_fn=one_hot_ce)
    text = str(err.value)
    assert "labels of shape (8, 1) against logits of shape (8, 3)" in text and "trains at chance" in text
    assert "y.reshape(-1)" in text and "jax.nn.one_hot(labels, 3)" in text
    assert err.value.elapsed.steps == 0  # found while the first step was traced, before it ran


def test_labels_the_loss_can_read_pass():
    check_labels(np.zeros((4, 3)), np.zeros(4, np.int32))  # class indices
    check_labels(np.zeros((4, 3)), np.zeros((4, 3)))  # one-hot
    check_labels(np.zeros((4, 1)), np.zeros((4, 1)))  # one logit, one target
    check_labels(np.zeros((4, 1)), np.zeros(4))  # the loss may squeeze the logit: its call
    check_labels((np.zeros((4, 3)), np.zeros((4, 3))), np.zeros((4, 1)))  # several outputs: not read
    with pytest.raises(ValueError, match=r"labels of shape \(2, 5, 1\) against logits of shape \(2, 5, 7\)"):
        check_labels(np.zeros((2, 5, 7)), np.zeros((2, 5, 1)))  # per-token labels too


def test_dict_batches_are_explained_with_the_mapping_that_fixes_them(tmp_path):
    dicts = [{"image": x, "label": y} for x, y in make_data()]
    with pytest.raises(TypeError) as err:
        run(tmp_path, train=dicts)
    text = str(err.value)
    assert "train_ds gives dicts" in text and "keys ['image', 'label']" in text
    assert "[(b['image'], b['label']) for b in ds]" in text
    with pytest.raises(TypeError, match="fit trains on \\(x, labels\\) batches"):
        split_batch((1, 2, 3))


def test_arrays_as_test_ds_and_val_ds_are_evaluated_in_training_sized_batches(tmp_path):
    data = make_data(n=44)  # 5 batches of 8 and one of 4
    x = np.concatenate([b[0] for b in data])
    y = np.concatenate([b[1] for b in data])
    _, listed = run(tmp_path / "a", train=data, test=data, eval_step=accuracy, val_ds=data)
    _, arrays = run(tmp_path / "b", train=data, test=(x, y), eval_step=accuracy, val_ds=(x, y))
    assert arrays.collect("accuracy_test") == listed.collect("accuracy_test")
    assert arrays.collect("accuracy_val") == listed.collect("accuracy_val")
    assert [len(b[1]) for b in eval_batches((x, y), 8)] == [8, 8, 8, 8, 8, 4]
    assert not is_pair_of_arrays(data[:2])  # a list of two batches stays batches


def test_arrays_as_train_ds_are_explained(tmp_path):
    data = make_data()
    x, y = np.concatenate([b[0] for b in data]), np.concatenate([b[1] for b in data])
    with pytest.raises(TypeError) as err:
        run(tmp_path, train=(x, y))
    assert "train_ds is a pair of arrays" in str(err.value)
    assert "gyre.data.batches((x, y), 64)" in str(err.value)


def test_a_learning_rate_given_as_a_string_is_explained(tmp_path):
    with pytest.raises(TypeError) as err:
        run(tmp_path, state=make_state(optax.adam("1e-3")))
    text = str(err.value)
    assert text.startswith("fit: the optimizer holds a number given as a string")
    assert "optax.adam(1e-3)" in text
    assert optimizer_error(TypeError("other"), optax.adam(1e-3)) is None  # numbers: not this
    labels = {"a": "adam", "b": "sgd"}  # strings that are not numbers (multi_transform's labels)
    tx = optax.multi_transform({"adam": optax.adam(1e-3), "sgd": optax.sgd(0.1)}, labels)
    assert optimizer_error(TypeError("other"), tx) is None


def test_fit_still_trains_on_pairs(tmp_path):
    state, history = run(tmp_path, test=make_data(), eval_step=accuracy)
    assert int(state.step) == 6 and len(history.collect("accuracy_test")) == 1


def test_a_pair_of_arrays_as_train_ds_is_refused_with_an_explanation():
    import numpy as np

    from gyre.fitting._fit_checks import refuse_array_pair

    with pytest.raises(TypeError, match="fit trains on batches, and train_ds is a pair of arrays"):
        refuse_array_pair((np.zeros((8, 2)), np.zeros(8)))
    refuse_array_pair([(np.zeros((8, 2)), np.zeros(8))])  # batches pass


def test_empty_training_data_is_explained_in_fits_words(tmp_path):
    # the error named the trainer's argument: "the trainer needs to know how many batches one
    # epoch of train_loader holds", where fit's argument is train_ds
    with pytest.raises(TypeError, match=r"one epoch of train_ds holds(.|\n)*its length is 0") as err:
        gyre.fit(make_state(), [], loss_fn=one_hot_ce, num_epochs=1, log_dir=str(tmp_path), progress=False)
    assert "train_loader" not in str(err.value) and "trainer" not in str(err.value)
