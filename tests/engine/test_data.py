"""gyre.engine._data: the data position of a loop (what it consumed, not what it read ahead),
for gyre's batches, grain, users' own sources and plain iterables; resuming a loop at exactly
the next batch (epoch boundary, mid-epoch, prefetching, fused steps); the errors."""

import itertools
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from gyre.engine._data import DataTracker, check_data_resume, to_json, track_data
from gyre.engine._elapse import Elapse

N, BATCH = 80, 16  # 5 batches per epoch; 16 samples split over the 8 simulated devices
X = np.random.default_rng(0).normal(size=(N, 3)).astype(np.float32)
Y = np.arange(N, dtype=np.int32)  # a batch's labels name its samples


def data(**kwargs):
    return gyre.data.batches((X, Y), BATCH, seed=7, **kwargs)


def json_round_trip(value):
    return json.loads(json.dumps(value))


def drive(tracker, steps, *, ahead=0):
    """Pulls ``steps`` batches the way a loop does (through prefetching when ``ahead``);
    returns the clock and the batches."""
    source = gyre.prefetch_to_device(tracker, size=ahead) if ahead else tracker
    clock = Elapse(source)
    tracker.follow(clock)
    got = [jax.tree.map(np.asarray, batch) for _, batch in itertools.islice(clock, steps)]
    return clock, got


def labels(batches_):
    return [b[1].tolist() for b in batches_]


# --- driving the tracker directly ------------------------------------------------------------


@pytest.mark.parametrize("ahead", [0, 3])
@pytest.mark.parametrize("consumed", [0, 3, 5, 7])  # 5: the end of epoch 0
def test_the_position_is_that_of_the_consumed_batches_not_of_those_read_ahead(ahead, consumed):
    whole = labels(itertools.islice(data(), 12))
    tracker = track_data(data())
    _, got = drive(tracker, consumed, ahead=ahead)
    assert [g[1].tolist() for g in got] == whole[:consumed]
    saved = json_round_trip(tracker.state_dict())
    assert saved["kind"] == "state_dict" and saved["source"] == "Batches"
    assert (saved["state"]["epoch"], saved["state"]["position"]) == divmod(consumed, 5)
    again = track_data(data())
    again.load_state_dict(saved)
    _, rest = drive(again, 12 - consumed, ahead=ahead)
    assert [r[1].tolist() for r in rest] == whole[consumed:]


def test_gyres_batches_are_pulled_directly_their_position_known_from_the_index():
    batches = data()
    tracker = track_data(batches)
    assert iter(tracker) is batches  # nothing between the loop and the data: no per-step cost
    drive(tracker, 7, ahead=3)
    assert batches.index == 10  # read 3 ahead
    assert (tracker.state_dict()["state"]["epoch"], tracker.state_dict()["state"]["position"]) == (1, 2)


def test_without_tracking_a_source_is_pulled_directly_and_cannot_read_ahead():
    source = Source()
    tracker = track_data(source, track=False)
    assert iter(tracker) is source  # nothing between the loop and the data: no per-step cost
    tracker = track_data(Loader(), track=False)
    clock = Elapse(tracker)
    tracker.follow(clock)
    next(clock)
    assert tracker.state_dict()["state"]["next_index"] == 1
    ahead = track_data(Loader(), track=False)
    drive(ahead, 2, ahead=2)
    with pytest.raises(RuntimeError, match="not tracked"):
        ahead.state_dict()


class Source:
    """An iterator with the state protocol, counting how often its state is asked."""

    def __init__(self):
        self.i, self.asked = 0, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        return np.full(2, self.i)

    def state_dict(self):
        self.asked += 1
        return {"i": self.i}

    def load_state_dict(self, d):
        self.i = d["i"]


def test_tracking_asks_the_source_once_per_batch_pulled():
    source = Source()
    tracker = track_data(source)
    drive(tracker, 6, ahead=2)
    assert source.asked == 1 + 6 + 2  # the start, then after each pull (2 read ahead)
    assert tracker.state_dict()["state"] == {"i": 6}


def test_the_tracker_knows_the_epoch_length():
    assert track_data(data()).epoch_steps == 5
    assert track_data([1, 2, 3]).epoch_steps == 3
    assert track_data(iter([1, 2])).epoch_steps is None
    assert gyre.prefetch_to_device(track_data(data())).epoch_steps == 5


# --- plain iterables: restart or skip -----------------------------------------------------------


def test_plain_iterables_restart_with_one_warning():
    tracker = track_data(list(range(10)))
    drive(tracker, 4, ahead=2)
    saved = json_round_trip(tracker.state_dict())
    assert saved == {"kind": "count", "source": "list", "state": 4}
    again = track_data(list(range(10)))
    with pytest.warns(gyre.LoopWarning, match="starts again from its first batch, not after the 4") as caught:
        again.load_state_dict(saved)
    assert len(caught) == 1 and "data_resume='skip'" in str(caught[0].message)
    clock, got = drive(again, 3)
    assert [int(g) for g in got] == [0, 1, 2]
    assert again.state_dict()["state"] == 3  # counted from the restart


def test_nothing_consumed_restarts_silently():
    tracker = track_data(iter(range(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker.load_state_dict({"kind": "count", "source": "list_iterator", "state": 0})


def test_skip_pulls_and_drops_the_consumed_batches():
    def stream():
        yield from range(100)

    tracker = track_data(stream(), "skip")
    drive(tracker, 7, ahead=3)
    saved = json_round_trip(tracker.state_dict())
    again = track_data(stream(), "skip")
    again.load_state_dict(saved)
    _, got = drive(again, 3, ahead=3)
    assert [int(g) for g in got] == [7, 8, 9]
    assert again.state_dict()["state"] == 10  # the position in the stream, skipped ones included


def test_skip_past_the_end_of_the_data_is_explained():
    tracker = track_data([1, 2, 3], data_resume="skip")
    with pytest.raises(ValueError, match="the data ended while skipping") as info:
        tracker.load_state_dict({"kind": "count", "source": "list", "state": 5})
    assert "it held 3, the run had consumed 5" in str(info.value)
    assert "data_resume='restart'" in str(info.value)


# --- users' own sources and grain -------------------------------------------------------------


class Loader:
    """A re-iterable data loader with the state protocol: every pass starts where the loaded
    (or last) position says."""

    def __init__(self, n=20):
        self.n, self.next_index = n, 0

    def __iter__(self):
        start = self.next_index
        for i in range(start, self.n):
            self.next_index = i + 1
            yield np.full(4, i)

    def state_dict(self):
        return {"next_index": np.int64(self.next_index), "order": (1, 2)}

    def load_state_dict(self, state):
        assert state["order"] == [1, 2]  # tuples come back as lists, numpy ints as ints
        self.next_index = state["next_index"]


def test_a_users_loader_resumes_through_its_own_state_dict():
    tracker = track_data(Loader())
    drive(tracker, 6, ahead=2)
    saved = json_round_trip(tracker.state_dict())
    assert saved["state"] == {"next_index": 6, "order": [1, 2]}
    again = track_data(Loader())
    again.load_state_dict(saved)  # before the loop takes the loader's iterator
    _, got = drive(again, 3, ahead=2)
    assert [int(g[0]) for g in got] == [6, 7, 8]
    for track in (True, False):  # loaded after the loop took its iterator, before a pull
        late = track_data(Loader(), track=track)
        clock = Elapse(late)
        late.follow(clock)
        late.load_state_dict(saved)
        assert [int(b[0]) for _, b in itertools.islice(clock, 2)] == [6, 7]
    started = track_data(Loader(), track=False)
    next(iter(started))
    with pytest.raises(RuntimeError, match="after its iterator was made"):
        started.load_state_dict(saved)


def test_a_state_json_cannot_hold_is_explained():
    class Bad(Loader):
        def state_dict(self):
            return {"rng": np.random.default_rng(0)}

    tracker = track_data(Bad())
    drive(tracker, 1)
    with pytest.raises(TypeError, match="the state of Bad\\['rng'\\] cannot be saved in a checkpoint") as info:
        tracker.state_dict()
    assert "Generator" in str(info.value) and "fix:" in str(info.value)
    with pytest.raises(TypeError, match="a key that is not a string"):
        to_json({1: 2}, "state")


def test_a_source_that_refuses_a_position_says_where_it_came_from():
    class Strict(Loader):
        def load_state_dict(self, state):
            raise ValueError("position from other data")

    tracker = track_data(Strict())
    with pytest.raises(ValueError, match="position from other data") as info:
        tracker.load_state_dict({"kind": "state_dict", "source": "Strict", "state": {}})
    assert "while restoring the data position of a Strict" in "".join(info.value.__notes__)


def grain_pipeline():
    grain = pytest.importorskip("grain")
    return grain.MapDataset.source(np.arange(64)).shuffle(seed=3).batch(8)


@pytest.mark.parametrize("iterable", [True, False])
def test_a_grain_pipeline_resumes_at_its_exact_next_element(iterable):
    def make():
        pipeline = grain_pipeline()
        return pipeline.to_iter_dataset() if iterable else pipeline

    whole = [b.tolist() for b in itertools.islice(iter(make()), 8)]
    tracker = track_data(make())
    _, got = drive(tracker, 3, ahead=2)
    assert [g.tolist() for g in got] == whole[:3]
    saved = json_round_trip(tracker.state_dict())
    assert saved["kind"] == "grain" and saved["state"] == {"next_index": 3}
    again = track_data(make())
    again.load_state_dict(saved)
    _, rest = drive(again, 5, ahead=2)
    assert [r.tolist() for r in rest] == whole[3:]


def test_a_grain_data_loader_state_is_saved_as_text():
    grain = pytest.importorskip("grain")

    def make():
        sampler = grain.samplers.IndexSampler(num_records=40, shuffle=True, seed=1, num_epochs=1)
        return grain.DataLoader(
            data_source=np.arange(40), sampler=sampler, operations=[grain.transforms.Batch(4)], worker_count=0
        )

    whole = [b.tolist() for b in make()]
    tracker = track_data(make())
    drive(tracker, 4, ahead=1)
    saved = json_round_trip(tracker.state_dict())
    assert saved["encoding"] == "utf-8" and isinstance(saved["state"], str)
    again = track_data(make())
    again.load_state_dict(saved)
    _, rest = drive(again, 6)
    assert [r.tolist() for r in rest] == whole[4:]


# --- errors -------------------------------------------------------------------------------------


def test_a_data_resume_typo_is_explained_everywhere():
    with pytest.raises(ValueError, match="data_resume= must say how") as info:
        check_data_resume("skp")
    assert "Did you mean 'skip'" in str(info.value) and "received: str 'skp'" in str(info.value)
    with pytest.raises(ValueError, match="data_resume="):
        track_data([1], data_resume=None)
    with pytest.raises(ValueError, match="data_resume="):
        gyre.loop(None, [1], {}, data_resume="restrat")
    with pytest.raises(ValueError, match="data_resume="):
        gyre.train_loop(0, [1], {}, data_resume=True)
    with pytest.raises(ValueError, match="data_resume="):
        gyre.test_loop(0, [1], {}, data_resume="ignore")


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ([1, 2], TypeError, "must be the dict that loop.data.state_dict\\(\\) returned"),
        ({"epoch": 0, "position": 1}, TypeError, "must be the dict that loop.data.state_dict"),
        ({"kind": "pickle", "state": 1}, ValueError, "unknown kind of data position 'pickle'"),
    ],
)
def test_what_is_not_a_saved_data_position_is_explained(state, error, match):
    with pytest.raises(error, match=match) as info:
        track_data(data()).load_state_dict(state)
    assert "fix:" in str(info.value)


def test_a_position_of_another_kind_of_dataset_is_refused():
    counted = {"kind": "count", "source": "generator", "state": 4}
    with pytest.raises(ValueError, match="belongs to another kind of dataset") as info:
        track_data(data()).load_state_dict(counted)
    text = str(info.value)
    assert "a position saved from data that cannot save its position (a count of batches) (a generator)" in text
    assert "as this loop's dataset (a Batches) is" in text
    saved = track_data(data()).state_dict()
    for plain in ("restart", "skip"):
        with pytest.raises(ValueError, match="belongs to another kind of dataset") as info:
            track_data([1, 2, 3], plain).load_state_dict(saved)
        assert "resume with the dataset the run was saved with (a Batches" in str(info.value)
    with pytest.raises(ValueError, match="must be a number of batches >= 0"):
        track_data([1, 2, 3]).load_state_dict({"kind": "count", "state": -1})


def test_a_position_of_other_batches_is_refused_by_the_batches():
    saved = track_data(data()).state_dict()
    other = gyre.data.batches((X, Y), BATCH, seed=8)
    with pytest.raises(ValueError, match="seed: saved 7, here 8"):
        track_data(other).load_state_dict(saved)


def test_a_position_loaded_after_batches_were_pulled_is_a_wiring_error():
    tracker = track_data(data())
    drive(tracker, 1)
    with pytest.raises(RuntimeError, match="after the loop pulled batches"):
        tracker.load_state_dict(tracker.state_dict())


def test_the_tracker_checks_the_dataset_as_the_loop_does():
    with pytest.raises(TypeError, match="the dataset is not iterable"):
        track_data(3)
    with pytest.raises(TypeError, match="tuple of whole arrays"):
        track_data((X, Y))
    assert isinstance(track_data([]), DataTracker) and "list" in repr(track_data([]))


# --- loops: continue with exactly the next batch -----------------------------------------------


@managed.train_step
def train_step(state, batch):
    x, y = batch
    loss = jnp.mean((x @ state.params["w"] - y[:, None].astype(jnp.float32) / N) ** 2)
    return gyre.logs().add_loss("loss", loss).add_metric("first", y[0]), state


def fresh_state():
    return managed.ManagedState.create(params={"w": jnp.zeros((3, 1))}, tx=optax.sgd(0.05), strategy="data_parallel")


def run(stop, *, at=None, resume=None, steps_per_call=1, prefetch=2):
    """A loop over the batches, stopped after step ``at`` (as a kill after a checkpoint), or
    resumed from ``resume = (state, elapsed, history, data position)``."""
    saved = {}

    def probe(loop):
        saved["data"] = json_round_trip(loop.data.state_dict())
        loop.request_stop("killed")

    def load(loop):
        loop.data.load_state_dict(resume[3])

    state, elapsed, history = (fresh_state(), None, None) if resume is None else resume[:3]
    tasks = {gyre.every(1): train_step}
    if at is not None:
        tasks[lambda e: e.steps == at] = probe
    state, history, elapsed = gyre.loop(
        state, data(), tasks, stop=stop, elapsed=elapsed, history=history,
        on_start=load if resume else None, steps_per_call=steps_per_call, prefetch=prefetch,
    )
    return state, elapsed, history, saved.get("data")


@pytest.mark.filterwarnings("ignore:steps_per_call=.*cannot fuse this table:gyre.LoopWarning")  # the probe is a lambda
@pytest.mark.parametrize(
    ("at", "steps_per_call", "prefetch"),
    [(4, 1, 2), (6, 1, 2), (6, 3, 2), (4, 4, 0), (0, 1, 3)],  # 4: the last step of epoch 0
)
def test_a_resumed_loop_continues_with_exactly_the_next_batch(at, steps_per_call, prefetch):
    reference, ref_elapsed, ref_history, _ = run(12, steps_per_call=steps_per_call, prefetch=prefetch)
    first = run(12, at=at, steps_per_call=steps_per_call, prefetch=prefetch)
    assert first[1].steps == at + 1
    assert (first[3]["state"]["epoch"], first[3]["state"]["position"]) == divmod(at + 1, 5)
    state, elapsed, history, _ = run(12, resume=first, steps_per_call=steps_per_call, prefetch=prefetch)
    assert history.collect("first") == ref_history.collect("first")  # the same batches, in order
    assert elapsed.steps == ref_elapsed.steps == 12 and elapsed.epochs == ref_elapsed.epochs == 2
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.asarray(reference.params["w"]))


def test_train_loop_over_batches_needs_no_epoch_duration():
    evaluated = []

    def test_step(state, batch):
        return gyre.logs().add_metric("n", len(batch[1]))

    _, history, elapsed = gyre.train_loop(
        fresh_state(), data(), {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
        callbacks=[type("E", (), {"on_epoch_end": lambda self, elapsed: evaluated.append(elapsed.steps)})()],
        test_dataset=lambda: [(X[:16], Y[:16])], stop=gyre.at(epochs=2),
    )
    assert elapsed.steps == 10 and elapsed.epochs == 2
    assert evaluated == [4, 9] and history.collect("steps", "n_test") == ([4, 9], [16.0, 16.0])


def test_the_epoch_error_names_what_the_user_asked_for():
    def stream():
        yield from range(10)

    step = {gyre.on_train_step: lambda state: state, gyre.on_test_step: lambda state: None}
    with pytest.raises(ValueError) as info:
        gyre.train_loop(0, stream(), step, test_dataset=lambda: [0])
    first = str(info.value).splitlines()[0]
    assert first.startswith("train_loop with an evaluation on test_dataset= (run at the end of each epoch)")
    assert "on_epoch_end" not in str(info.value)  # the user added no such callback
    assert "a dataset of type generator with neither len() nor epoch_steps" in str(info.value)
    assert "gyre.data.batches(...)" in str(info.value)
    with pytest.raises(ValueError, match="callbacks on \\['on_epoch_end'\\]") as info:
        gyre.train_loop(0, stream(), {gyre.on_train_step: lambda state: state, gyre.on_epoch_end: lambda: None})
    assert "evaluation" not in str(info.value).splitlines()[0]


@pytest.mark.filterwarnings("ignore:steps_per_call=.*cannot fuse this table:gyre.LoopWarning")  # the probe is a lambda
def test_a_resumed_train_loop_evaluates_and_continues_as_without_the_break():
    def test_step(state, batch):
        return gyre.logs().add_metric("w", jnp.sum(state.params["w"]))

    def run_train(stop, at=None, resume=None):
        saved = {}

        def probe(loop):
            saved["data"] = json_round_trip(loop.data.state_dict())
            loop.request_stop("killed")

        tasks = {gyre.on_train_step: train_step, gyre.on_test_step: test_step}
        if at is not None:
            tasks[lambda e: e.steps == at] = probe
        if resume is not None:
            tasks[gyre.on_train_begin] = lambda loop: loop.data.load_state_dict(resume[3])
        state, elapsed, history = (fresh_state(), None, None) if resume is None else resume[:3]
        state, history, elapsed = gyre.train_loop(
            state, data(), tasks, test_dataset=lambda: [(X[:16], Y[:16])], stop=stop,
            elapsed=elapsed, history=history, steps_per_call=2,
        )
        return state, elapsed, history, saved.get("data")

    reference = run_train(13)
    state, elapsed, history, _ = run_train(13, resume=run_train(13, at=7))
    assert history.collect("steps", "first") == reference[2].collect("steps", "first")
    assert history.collect("steps", "w_test") == reference[2].collect("steps", "w_test")
    assert history.collect("steps", "w_test")[0] == [4, 9]  # epochs inferred from the batches
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.asarray(reference[0].params["w"]))
