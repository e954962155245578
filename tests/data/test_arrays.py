"""gyre.data._arrays: array batching, steps_per_epoch, and their errors."""

import itertools
import json

import numpy as np
import pytest

from gyre.data import batches, steps_per_epoch
from gyre.data._arrays import check_seed


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


def test_steps_per_epoch():
    assert steps_per_epoch(1437, 64) == 22
    assert steps_per_epoch(1437, 64, drop_remainder=False) == 23
    assert steps_per_epoch(128, 64, drop_remainder=False) == 2
    with pytest.raises(ValueError, match="no samples"):  # an epoch of no batch: refused
        steps_per_epoch(0, 8)
    with pytest.raises(ValueError, match="batch_size"):
        steps_per_epoch(10, 0)
    with pytest.raises(ValueError, match="number of samples"):
        steps_per_epoch(-1, 2)


@pytest.mark.parametrize("call", [
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

    x, y = _data()
    first = next(batches((x, y), np.int64(4), seed=jnp.array(5), epochs=np.int32(1)))
    assert first[0].shape == (4, 2)
    assert np.array_equal(first[1], next(batches((x, y), 4, seed=5))[1])
    assert steps_per_epoch(np.int64(10), jnp.array(3)) == 3


def test_check_seed_takes_whole_numbers_from_zero():
    assert check_seed(0) == 0 and type(check_seed(np.uint16(9))) is int
    with pytest.raises(ValueError, match="a seed must be a whole number >= 0"):
        check_seed(-1)


def test_each_epoch_has_its_own_order_whatever_ran_before():
    x, y = _data(12)
    two_epochs = [b[1].tolist() for b in batches((x, y), 4, epochs=2, seed=1)]
    three_epochs = [b[1].tolist() for b in batches((x, y), 4, epochs=3, seed=1)]
    assert three_epochs[:6] == two_epochs  # epoch k's order is seeded by (seed, k)


# --- the resumable iterator: same batches as the generator it replaced, position save/load


def _reference(data, batch_size, shuffle, seed, epochs, drop_remainder):
    """The batches as gyre.data.batches produced them before it became resumable (the order
    a saved run depends on must never change)."""
    n = data[0].shape[0]
    steps = n // batch_size if drop_remainder else -(-n // batch_size)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = np.random.default_rng((seed, epoch)).permutation(n) if shuffle else None
        for i in range(steps):
            start, end = i * batch_size, min((i + 1) * batch_size, n)
            index = slice(start, end) if order is None else order[start:end]
            yield tuple(a[index] for a in data)
        epoch += 1


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_remainder", [True, False])
def test_batches_are_those_of_the_generator_they_replaced(shuffle, drop_remainder):
    x, y = _data(23)
    ours = list(batches((x, y), 5, shuffle=shuffle, seed=4, epochs=3, drop_remainder=drop_remainder))
    ref = list(_reference((x, y), 5, shuffle, 4, 3, drop_remainder))
    assert len(ours) == len(ref) == 3 * steps_per_epoch(23, 5, drop_remainder)
    for a, b in zip(ours, ref, strict=True):
        assert all(np.array_equal(u, v) and u.dtype == v.dtype for u, v in zip(a, b, strict=True))


def test_batches_is_an_iterator_that_knows_its_epoch_length():
    from collections.abc import Iterator

    from gyre.data import Batches

    it = batches(_data(10), 3)
    assert isinstance(it, Batches) and isinstance(it, Iterator) and iter(it) is it
    assert it.epoch_steps == 3 and it.epochs is None
    assert batches(_data(10), 3, drop_remainder=False).epoch_steps == 4
    assert "epoch_steps=3" in repr(it)


def test_state_dict_is_json_and_names_the_next_batch():
    import json

    it = batches(_data(10), 4, seed=2)  # 2 batches per epoch
    assert it.state_dict()["epoch"] == 0 and it.state_dict()["position"] == 0
    next(it)
    state = it.state_dict()
    assert (state["epoch"], state["position"], state["seed"]) == (0, 1, 2)
    assert json.loads(json.dumps(state)) == state
    next(it)  # the last batch of epoch 0: the next one is the first of epoch 1
    assert (it.state_dict()["epoch"], it.state_dict()["position"]) == (1, 0)
    assert (it.epoch, it.position) == (1, 0)


@pytest.mark.parametrize("taken", [0, 1, 2, 3, 5, 6, 7, 11])
def test_load_state_dict_continues_with_exactly_the_next_batch(taken):
    import json

    x, y = _data(13)
    whole = list(itertools.islice(batches((x, y), 4, seed=9), 15))
    it = batches((x, y), 4, seed=9)  # 3 batches per epoch: taken 3 and 6 are epoch boundaries
    for _ in range(taken):
        next(it)
    saved = json.loads(json.dumps(it.state_dict()))
    resumed = batches((x, y), 4, seed=9)
    resumed.load_state_dict(saved)
    rest = list(itertools.islice(resumed, 15 - taken))
    for a, b in zip(rest, whole[taken:], strict=True):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_a_loaded_position_past_the_last_epoch_ends_the_batches():
    it = batches(_data(6), 3, epochs=2, seed=0)
    assert len(list(it)) == 4 and it.state_dict()["epoch"] == 2
    again = batches(_data(6), 3, epochs=2, seed=0)
    again.load_state_dict(it.state_dict())
    assert list(again) == []
    more = batches(_data(6), 3, epochs=3, seed=0)  # more epochs: continues with epoch 2
    more.load_state_dict(it.state_dict())
    assert len(list(more)) == 2


def test_load_state_dict_from_other_batches_says_what_differs():
    x, y = _data(12)
    saved = batches((x, y), 4, seed=1).state_dict()
    with pytest.raises(ValueError, match="built with other arguments") as info:
        batches((x, y), 3, seed=2).load_state_dict(saved)
    text = str(info.value)
    assert "batch_size: saved 4, here 3" in text and "seed: saved 1, here 2" in text
    assert "fix:" in text and "samples" not in text
    with pytest.raises(ValueError, match="shapes: saved \\[\\[2\\], \\[\\]\\], here \\[\\[3\\], \\[\\]\\]"):
        batches((np.zeros((12, 3)), y), 4, seed=1).load_state_dict(saved)
    with pytest.raises(ValueError, match="samples: saved 12, here 11"):
        batches(_data(11), 4, seed=1).load_state_dict(saved)


def test_a_process_resuming_process_0s_position_over_its_own_rows_is_pointed_at_process_share(monkeypatch):
    # each process fed batches of its own rows; a checkpoint holds process 0's position, so process 1's
    # resume was told to "build the batches as the run that saved the position did"
    import jax

    x, y = _data(12)
    saved = batches((x[:6], y[:6]), 2, seed=1).state_dict()  # process 0's rows
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match=r"(?s)data: saved .*fix: with several processes a checkpoint holds "
                       r"process 0's position.*gyre\.data\.process_share\(gyre\.data\.batches\(\.\.\.\)\)"):
        batches((x[6:], y[6:]), 2, seed=1).load_state_dict(saved)  # process 1's rows
    with pytest.raises(ValueError, match="fix: build the batches as the run that saved"):  # another difference
        batches((x[6:], y[6:]), 3, seed=1).load_state_dict(saved)


def test_load_state_dict_from_other_values_of_the_same_shapes_is_refused():
    # the arguments and shapes alone let a position of other data through: a resumed run
    # continued, silently, on reversed inputs (their labels no longer theirs)
    x, y = _data(12)
    saved = json.loads(json.dumps(batches((x, y), 4, seed=1).state_dict()))
    for other in ((x[::-1], y), (x * 2.0, y), (x.astype(np.float64), y), (x, y[::-1])):
        with pytest.raises(ValueError, match="data: saved .*checksum of sampled rows"):
            batches(other, 4, seed=1).load_state_dict(saved)
    batches((x.copy(), y.copy()), 4, seed=1).load_state_dict(saved)  # equal values: the same data
    old = {k: v for k, v in saved.items() if k != "data"}  # a position saved before the checksum
    batches((x[::-1], y), 4, seed=1).load_state_dict(old)


def test_the_seed_is_not_checked_when_nothing_is_shuffled():
    saved = batches(_data(8), 2, shuffle=False, seed=1).state_dict()
    it = batches(_data(8), 2, shuffle=False, seed=5)
    it.load_state_dict({**saved, "position": 3})
    assert next(it)[1].tolist() == [6, 7]
    with pytest.raises(ValueError, match="shuffle: saved False, here True"):
        batches(_data(8), 2, seed=1).load_state_dict(saved)


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ([0, 1], TypeError, "takes the dict that state_dict\\(\\) returned"),
        ({"epoch": 0}, ValueError, "lacks 'position'"),
        ({"seed": 0}, ValueError, "lacks 'epoch', 'position'"),
        ({"epoch": -1, "position": 0}, ValueError, "epoch must be a whole number >= 0"),
        ({"epoch": 0, "position": 1.5}, ValueError, "position must be a whole number >= 0"),
        ({"epoch": 0, "position": 5}, ValueError, "position 5 is past the end of an epoch of 5"),
    ],
)
def test_load_state_dict_bad_states(state, error, match):
    it = batches(_data(10), 2)
    with pytest.raises(error, match=match) as info:
        it.load_state_dict(state)
    assert "fix:" in str(info.value)
    assert it.state_dict()["position"] == 0  # unchanged


def test_state_dict_at_any_index_is_the_state_dict_there():
    it = batches(_data(10), 3, seed=4)  # 3 batches per epoch
    ahead = batches(_data(10), 3, seed=4)
    for index in range(8):
        assert it.index == index and ahead.state_dict_at(index) == it.state_dict()
        next(it)


def test_steps_per_epoch_refuses_an_epoch_of_no_batch_as_batches_does():
    with pytest.raises(ValueError, match=r"(?s)every batch would be dropped.*drop_remainder=False") as info:
        steps_per_epoch(10, 32)  # was 0: a loop of zero steps per epoch, without a word
    with pytest.raises(ValueError) as same:
        batches(_data(10), 32)
    assert str(info.value) == str(same.value)
    assert steps_per_epoch(10, 32, drop_remainder=False) == 1


def test_an_epochs_order_is_fixed_by_seed_and_epoch_and_differs_between_epochs():
    from gyre.data._arrays import epoch_order

    first = epoch_order(0, 0, 5).tolist()
    assert first == epoch_order(0, 0, 5).tolist() != epoch_order(0, 1, 5).tolist()
    assert sorted(first) == [0, 1, 2, 3, 4]  # a permutation of the rows


def test_process_share_keeps_a_batchs_scalar_leaves_whole():
    # was: IndexError 'tuple index out of range' (the first leaf, 'lr', taken for the rows) on
    # several processes only; a strategy replicates such a leaf, so each process keeps it whole
    from gyre.data._batch import ProcessShare

    share = ProcessShare([{"lr": 0.1, "x": np.arange(4)}, {"lr": 0.2, "x": np.arange(4, 8)}], index=1, count=2)
    assert [(b["lr"], b["x"].tolist()) for b in share] == [(0.1, [2, 3]), (0.2, [6, 7])]


def test_process_share_refuses_an_evaluations_last_batch_it_cannot_share_at_once():
    # was: accepted, then refused at the last batch of the first evaluation, after an epoch of
    # training (MNIST's val of 1001 rows in batches of 100 over 2 processes: a last batch of 1 row)
    from gyre.data._batch import ProcessShare
    from gyre.data._source import EvalBatches

    ProcessShare(EvalBatches((np.arange(1000),), 100), index=0, count=2)
    with pytest.raises(ValueError, match="a batch of 1 rows cannot be shared evenly by 2 processes"):
        ProcessShare(EvalBatches((np.arange(1001),), 100), index=0, count=2)
