"""gyre.data.arrays: the seeded validation split, epoch orders, exact mid-epoch resume on the
numpy and the grain paths (the same batches, augmented or not), evaluation batches, the
reader-result form, the engine reading and resuming the source, and every bad input."""

import itertools
import json
import sys

import numpy as np
import pytest

import gyre
from gyre.engine._epochs import first_batch, training_data

N, BATCH = 20, 4
Y = np.arange(N, dtype=np.int32)  # a batch's labels name its examples
X = np.arange(N * 4 * 4 * 2, dtype=np.float32).reshape(N, 4, 4, 2) + 1  # images, no zero pixel


def sources(workers=0, batch_size=BATCH, **kwargs):
    return gyre.data.arrays((X, Y), batch_size, workers=workers, **kwargs)


def take(source, count):
    return [tuple(np.array(a) for a in batch) for batch in itertools.islice(source, count)]


def labels(batches):
    return [b[1].tolist() for b in batches]


def same(a, b):
    return len(a) == len(b) and all(
        len(p) == len(q) and all(np.array_equal(u, v) for u, v in zip(p, q, strict=True))
        for p, q in zip(a, b, strict=True)
    )


def json_round_trip(value):
    return json.loads(json.dumps(value))


@pytest.fixture
def closing():
    made = []
    yield made.append
    for source in made:
        getattr(source, "close", lambda: None)()


# --- the validation split ----------------------------------------------------------------------


def test_the_split_is_stable_for_a_seed_and_another_seed_gives_another():
    def held(seed, validation=0.25):
        return [y for batch in sources(validation=validation, seed=seed).val for y in batch[1].tolist()]

    assert held(0) == held(0) and len(held(0)) == 5
    assert held(0) != held(1)
    assert held(0, validation=5) == held(0) == held(0, validation=np.int64(5)) == held(0, np.float32(0.25))
    assert held(0) == sorted(held(0))  # the data's order: fixed
    assert len(held(0, validation=0.01)) == 1  # a fraction holds at least one example


def test_train_and_val_are_disjoint_and_cover_the_data():
    train, val, test = sources(validation=7, seed=3, drop_remainder=False)
    assert test is None and val.samples == 7 and len(val) == 2
    trained = [y for batch in take(train, train.epoch_steps) for y in batch[1].tolist()]
    held = [y for batch in val for y in batch[1].tolist()]
    assert len(trained) == 13 and train.epoch_steps == 4 and not set(trained) & set(held)
    assert sorted(trained + held) == Y.tolist()
    for batch in val:  # inputs travel with their labels
        np.testing.assert_array_equal(batch[0], X[batch[1]])


# --- epoch orders and resume ------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_epoch_orders_differ_between_epochs_and_repeat_for_the_same_seed(workers, closing):
    runs = [sources(workers, seed=seed) for seed in (5, 5, 6)]
    for run in runs:
        closing(run.train)
    first, again, other = (labels(take(run.train, 15)) for run in runs)
    assert first == again and first != other
    epochs = [first[i : i + 5] for i in range(0, 15, 5)]
    assert epochs[0] != epochs[1] != epochs[2] and epochs[0] != epochs[2]
    assert all(sorted(sum(e, [])) == Y.tolist() for e in epochs)  # each epoch: every example once


@pytest.mark.parametrize("augment", [None, True])
def test_grain_gives_exactly_the_numpy_paths_batches(augment, closing):
    numpy_path = sources(0, seed=2, validation=4, augment=augment).train
    grain_path = sources(2, seed=2, validation=4, augment=augment).train
    closing(grain_path)
    assert grain_path.epoch_steps == numpy_path.epoch_steps == 4
    assert same(take(grain_path, 10), take(numpy_path, 10))  # across two epoch boundaries
    unshuffled = sources(1, shuffle=False, drop_remainder=False, augment=augment, batch_size=3).train
    closing(unshuffled)
    reference = sources(0, shuffle=False, drop_remainder=False, augment=augment, batch_size=3).train
    assert same(take(unshuffled, 15), take(reference, 15))  # the last, smaller batch kept


@pytest.mark.parametrize(("saved_by", "resumed_by"), [(0, 0), (2, 2), (0, 2), (2, 0)])
@pytest.mark.parametrize("augment", [None, {"padding": 1}])
@pytest.mark.parametrize("at", [3, 7])  # mid-epoch 0; mid-epoch 1
def test_resume_mid_epoch_gives_exactly_the_next_batch(saved_by, resumed_by, augment, at, closing):
    whole = sources(saved_by, seed=4, augment=augment).train
    closing(whole)
    expected = take(whole, 12)
    cut = sources(saved_by, seed=4, augment=augment).train
    closing(cut)
    take(cut, at)
    state = json_round_trip(cut.state_dict())
    assert (state["epoch"], state["position"]) == divmod(at, 5)
    resumed = sources(resumed_by, seed=4, augment=augment).train
    closing(resumed)
    resumed.load_state_dict(state)
    assert same(take(resumed, 12 - at), expected[at:])


def test_a_grain_source_resumes_after_it_was_read_ahead_and_after_close(closing):
    train = sources(2, seed=1).train
    closing(train)
    expected = take(sources(0, seed=1).train, 8)
    assert same(take(train, 2), expected[:2])
    saved = train.state_dict()
    take(train, 4)  # grain's threads have prefetched further still
    train.load_state_dict(saved)
    assert same(take(train, 1), expected[2:3])
    train.close()
    assert train.state_dict()["position"] == 3 and same(take(train, 5), expected[3:8])
    assert iter(train) is train and "GrainBatches(samples=20" in repr(train)


def test_a_position_of_other_batches_is_refused_on_both_paths(closing):
    state = sources(0, seed=1).train.state_dict()
    for workers in (0, 2):
        train = gyre.data.arrays((X, Y), 5, workers=workers, seed=1).train
        closing(train)
        with pytest.raises(ValueError, match="(?s)other arguments.*batch_size: saved 4, here 5"):
            train.load_state_dict(state)


# --- evaluation batches, the reader's form, augmentation ------------------------------------------


def test_val_and_test_keep_a_fixed_order_and_their_last_batch():
    x_test, y_test = X[:10] * 2, Y[:10] + 100
    train, val, test = gyre.data.arrays(((X, Y), (x_test, y_test)), BATCH, validation=6, seed=0)
    assert len(test) == 3 and [len(b[1]) for b in test] == [4, 4, 2]
    assert labels(test) == labels(test) == [[100, 101, 102, 103], [104, 105, 106, 107], [108, 109]]
    np.testing.assert_array_equal(np.concatenate([b[0] for b in test]), x_test)
    assert len(val) == 2 and [len(b[1]) for b in val] == [4, 2] and labels(val) == labels(val)
    assert train.epoch_steps == 3 and not set(sum(labels(take(train, 3)), [])) & set(sum(labels(val), []))
    assert "EvalBatches(samples=10, batch_size=4, batches=3)" == repr(test)


def test_the_reader_form_in_one_line_as_for_mnist():
    ((x_train, y_train), (x_test, y_test)) = ((X, Y), (X[:3], Y[:3]))
    train, val, test = gyre.data.arrays([[x_train, y_train], [x_test, y_test]], 2)  # lists too
    assert val is None and len(test) == 2 and train.epoch_steps == 10
    assert isinstance(gyre.data.arrays((X, Y), 2), gyre.data.Sources)


def test_augmentation_touches_the_training_images_only_and_repeats_for_a_seed():
    plain = take(sources(seed=0, validation=4).train, 3)
    train, val, _ = sources(seed=0, validation=4, augment=True)
    augmented = take(train, 3)
    assert labels(augmented) == labels(plain)  # the same examples, in the same order
    assert any(not np.array_equal(a[0], p[0]) for a, p in zip(augmented, plain, strict=True))
    assert same(take(sources(seed=0, validation=4, augment=True).train, 3), augmented)
    for batch in val:  # never augmented
        np.testing.assert_array_equal(batch[0], X[batch[1]])
    identity = take(sources(seed=0, validation=4, augment={"padding": 0, "flip": False}).train, 3)
    assert same(identity, plain)
    other = take(sources(seed=0, validation=4, augment={"seed": 9}).train, 3)
    assert not same(other, augmented) and labels(other) == labels(plain)


# --- the engine and the trainer read it ----------------------------------------------------------


@pytest.mark.parametrize(("workers", "augment"), [(0, None), (0, True), (2, None), (2, True)])
def test_train_loop_reads_the_epoch_length_and_resumes_exactly(workers, augment, closing):
    def run(stop, *, at=None, resume=None):
        seen, saved = [], {}
        train, val, _ = sources(workers, seed=3, validation=5, augment=augment)
        closing(train)

        def step(state, batch):
            seen.append((batch[1].tolist(), float(batch[0].sum())))  # examples and pixels
            return state + 1

        def probe(loop):
            saved["data"] = json_round_trip(loop.data.state_dict())
            loop.request_stop("killed")

        tasks = {gyre.on_train_step: step, gyre.on_test_step: lambda batch: gyre.logs().add_metric("n", len(batch[1]))}
        if at is not None:
            tasks[lambda e: e.steps == at] = probe
        if resume is not None:
            tasks[gyre.on_train_begin] = lambda loop: loop.data.load_state_dict(resume[2]["data"])
        state, elapsed = (0, None) if resume is None else resume[:2]
        state, history, elapsed = gyre.train_loop(state, train, tasks, test_dataset=val, stop=stop, elapsed=elapsed)
        return state, elapsed, saved, seen, history

    _, whole, _, seen, history = run(9)
    steps, sizes = history.collect("steps", "n_test")  # evaluated at each epoch's last step
    assert whole.epochs == 3 and steps == [2, 5, 8] and sizes == pytest.approx([(4 * 4 + 1) / 5] * 3)
    first = run(9, at=4)  # mid-epoch 1 (3 batches per epoch)
    assert first[2]["data"]["state"]["epoch"] == 1 and first[2]["data"]["state"]["position"] == 2
    state, elapsed, _, rest, _ = run(9, resume=first)
    assert first[3] + rest == seen and state == 9 and elapsed.steps == 9


def test_the_trainer_takes_the_grain_source_as_it_is(closing):
    train = sources(2, seed=0).train
    closing(train)
    data, steps = training_data(train, 3)
    assert data is train and steps == 5
    batch = first_batch(train)  # peeks without moving the position
    assert train.state_dict()["position"] == 0 and same([batch], take(train, 1))


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "kwargs", "error", "match"),
    [
        (X, {}, TypeError, "(?s)a tuple of arrays.*gyre.data.mnist"),
        (((X, Y), X), {}, TypeError, "or a reader's result"),
        (([1, 2], [3, 4]), {}, TypeError, "a tuple of arrays"),
        ((), {}, TypeError, "a tuple of arrays"),
        ((X, Y[:-1]), {}, ValueError, r"(?s)data must hold the same number.*\(20, 4, 4, 2\), \(19,\)"),
        (((X, Y), (X, Y[:-1])), {}, ValueError, "the test arrays must hold the same number"),
        ((X[:0], Y[:0]), {}, ValueError, "same number \\(>= 1\\)"),
        ((X, Y), {"validation": 0}, ValueError, "a count < 1"),
        ((X, Y), {"validation": N}, ValueError, "all 20 examples, leaving none for training"),
        ((X, Y), {"validation": N + 1}, ValueError, "more than the 20 examples"),
        ((X, Y), {"validation": 1.0}, ValueError, "a float outside \\(0, 1\\)"),
        ((X, Y), {"validation": 5000.0}, ValueError, "(?s)a count is an int.*validation=2 \\(an int\\)"),
        ((X, Y), {"validation": -0.1}, ValueError, "a float outside"),
        ((X, Y), {"validation": float("nan")}, ValueError, "a float outside"),
        ((X, Y), {"validation": 0.999}, ValueError, "leaving none for training"),
        ((X, Y), {"validation": True}, ValueError, "not a number"),
        ((X, Y), {"validation": "0.1"}, ValueError, "not a number"),
        ((X, Y), {"validation": 18}, ValueError, "the batch is larger than the data"),
        ((X, Y), {"augment": "yes"}, TypeError, "(?s)augment= takes None, True or a dict.*received: str 'yes'"),
        ((X, Y), {"augment": {"pading": 2}}, ValueError, "(?s)an unknown option 'pading'.*Did you mean 'padding'"),
        ((X.reshape(N, -1), Y), {"augment": True}, ValueError, "(?s)the first array holds none.*x.reshape"),
        ((X, Y), {"augment": {"flip": 1}}, TypeError, "flip must be a bool"),
        ((X, Y), {"augment": {"padding": -1}}, ValueError, "padding must be a whole number >= 0"),
        ((X, Y), {"augment": {"seed": -1}}, ValueError, "a seed must be a whole number"),
        ((X, Y), {"workers": -1}, ValueError, "workers must be a whole number >= 0"),
        ((X, Y), {"workers": 1.5}, ValueError, "workers must be"),
        ((X, Y), {"batch_size": 0}, ValueError, "batch_size must be a whole number >= 1"),
        ((X, Y), {"seed": -1}, ValueError, "a seed must be a whole number >= 0"),
    ],
)
def test_bad_input_is_explained(data, kwargs, error, match):
    kwargs = {"batch_size": BATCH, **kwargs}
    with pytest.raises(error, match=match):
        gyre.data.arrays(data, **kwargs)


def test_workers_without_grain_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "grain", None)  # import grain raises ImportError
    with pytest.raises(ImportError, match=r"(?s)runs on grain.*pip install 'gyre\[grain\]'"):
        sources(1)
    assert sources(0).train.epoch_steps == 5  # the numpy path needs no grain


def test_the_whole_triple_where_one_part_belongs_is_refused_naming_the_parts():
    from gyre.data._source import refuse_sources

    sources = gyre.data.arrays((np.zeros((6, 2)), np.arange(6)), 2, validation=2)
    refuse_sources(sources.train, "the training data")  # a part passes
    with pytest.raises(TypeError, match=r"(?s)whole result of gyre\.data\.arrays.*sources\.train"):
        refuse_sources(sources, "the training data")
    with pytest.raises(TypeError, match=r"(?s)the training data is the whole result.*Sources\(train="):
        training_data(sources, 2)


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("augment", [None, True])
def test_len_of_the_training_batches_is_batches_per_epoch_as_jax_fit_reads_it(workers, augment):
    images = np.zeros((10, 4, 4, 1), np.float32), np.arange(10, dtype=np.int32)
    train, _, _ = gyre.data.arrays(images, 4, workers=workers, augment=augment)
    try:
        assert len(train) == train.epoch_steps == 2  # gyre.lr_schedule(steps_per_epoch=len(train_ds))
        assert [next(train)[1].shape for _ in range(3)] == [(4,)] * 3  # still endless
    finally:
        getattr(train, "close", lambda: None)()


def test_the_arrays_given_one_by_one_as_keras_takes_them_are_explained():
    x, y = np.zeros((10, 2), np.float32), np.arange(10)
    with pytest.raises(TypeError, match=r"(?s)takes the arrays as one tuple.*3 positional arguments.*arrays\(\(x, y\), batch_size\)"):
        gyre.data.arrays(x, y, 4)
    with pytest.raises(TypeError, match=r"(?s)takes the arrays as one tuple.*2 positional arguments"):
        gyre.data.arrays(x, y)  # the batch size forgotten
    assert len(gyre.data.arrays((x, y), 4).train) == 2


def test_train_and_test_arrays_of_other_example_shapes_are_refused():
    x, y = np.zeros((10, 64), np.float32), np.zeros(10, np.int32)
    narrow = np.zeros((4, 32), np.float32)
    with pytest.raises(ValueError, match=r"(?s)the test arrays.*\(64,\).*\(32,\)"):
        gyre.data.arrays(((x, y), (narrow, y[:4])), 2)
    with pytest.raises(ValueError, match=r"(?s)the test arrays.*\(\).*\(1,\)"):
        gyre.data.arrays(((x, y), (x[:4], y[:4, None])), 2)
