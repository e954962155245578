"""gyre.engine._elapse: the clock iterator (pending steps, stop, epochs, samples, time)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.core._clock import Elapsed, Period
from gyre.engine._elapse import (
    END,
    Elapse,
    check_dataset,
    check_stop,
    epoch_steps_of,
    size_function,
    steps_only,
)
from tests.engine._helpers import record


def test_stop_never_pulls_an_unused_batch():
    pulled = []

    def data():
        for i in itertools.count():
            pulled.append(i)
            yield i

    _, _, elapsed = gyre.loop(None, data(), {}, stop=4)
    assert elapsed.steps == 4 and pulled == [0, 1, 2, 3]
    _, _, elapsed = gyre.loop(None, range(100), {}, stop=gyre.at(samples=5))
    assert elapsed.samples == 5


def test_returned_elapsed_continues_without_repeating_steps():
    seen = []
    state, history, elapsed = gyre.loop(None, range(3), {gyre.every(1): [record(seen), lambda: gyre.logs().add_metric("m", 1)]})
    state, history, elapsed = gyre.loop(
        None, range(3), {gyre.every(1): [record(seen), lambda: gyre.logs().add_metric("m", 1)]},
        elapsed=elapsed, history=history, stop=gyre.at(steps=5),
    )
    assert seen == [0, 1, 2, 3, 4]
    assert elapsed.steps == 5 and history.collect("steps") == [0, 1, 2, 3, 4]


def test_epochs_from_len_and_epoch_duration():
    _, _, elapsed = gyre.loop(None, list(range(7)), {})
    assert (elapsed.epochs, elapsed.step_in_epoch) == (1, 0)
    _, _, elapsed = gyre.loop(None, iter(range(7)), {}, epoch_duration=3)
    assert (elapsed.epochs, elapsed.step_in_epoch) == (2, 1)


def test_the_step_path_counts_as_elapsed_update_does():
    # Elapse builds each clock with Elapsed._after (update()'s positional core): the same
    # counters, across epoch ends, with a continued clock, and the step in progress marked
    ticks = iter(float(i) for i in range(100))
    sizes = [np.zeros((n, 2)) for n in (3, 1, 4, 1, 5, 9, 2)]
    start = Elapsed(steps=5, samples=7, epochs=1, step_in_epoch=1, time=2.0, date=0.0)
    clock = Elapse(sizes, initial=start, epoch_duration=3, clock=lambda: next(ticks))
    seen = [(e.steps, e.samples, e.epochs, e.step_in_epoch, e.in_progress) for e, _ in clock]
    final = clock.complete()
    expected, e = [], start
    for batch in sizes:
        expected.append((e.steps, e.samples, e.epochs, e.step_in_epoch, True))
        e = e.update(len(batch), time=0.0, date=0.0, epoch_steps=3)
    assert seen == expected
    assert (final.steps, final.samples, final.epochs, final.step_in_epoch) == (e.steps, e.samples, e.epochs, e.step_in_epoch)
    assert not final.in_progress


def test_samples_from_batch_size_fn():
    _, _, elapsed = gyre.loop(None, range(4), {}, batch_size_fn=lambda b: 10)
    assert elapsed.samples == 40


def test_time_schedule_with_injected_clock():
    ticks = iter([0.0] + [0.3 * i for i in range(1, 50)])
    seen = []
    gyre.loop(None, range(10), {gyre.every(time=1.0): record(seen)}, clock=lambda: next(ticks))
    # time at step start: 0, .3, .6, .9, 1.2, 1.5, 1.8, 2.1, 2.4, 2.7
    assert seen == [0, 4, 7]


def test_elapse_manual_iteration():
    history = gyre.history()
    clocks = []
    for elapsed, batch in gyre.elapse(range(100), stop=4):
        logs = gyre.logs()
        logs.updates, _ = gyre.logs().add_metric("b", batch), None
        history.commit(elapsed, logs)
        clocks.append((elapsed.steps, elapsed.samples))
    assert clocks == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert history.collect("b") == [0, 1, 2, 3]


def test_non_iterable_dataset():
    with pytest.raises(TypeError, match="not iterable") as err:
        gyre.loop(None, 42, {})
    assert "fix:" in str(err.value)


@pytest.mark.parametrize("stop", [0, -1, 2.5, True, "10"])
def test_bad_stop(stop):
    with pytest.raises(ValueError, match="stop="):
        gyre.loop(None, range(3), {}, stop=stop)


def test_bad_elapsed_and_epoch_duration():
    with pytest.raises(TypeError, match="gyre.Elapsed"):
        gyre.loop(None, range(3), {}, elapsed=5)
    with pytest.raises(ValueError, match="epoch_duration"):
        gyre.loop(None, range(3), {}, epoch_duration=0)


# -- the clock iterator's parts ----------------------------------------------------------------


def test_check_stop_accepts_integral_numbers_periods_and_none():
    assert check_stop(np.int64(5)) == Period(steps=5)
    period = gyre.at(epochs=2)
    assert check_stop(period) is period and check_stop(None) is None
    with pytest.raises(ValueError, match="test_duration= must be") as err:
        check_stop(0, "test_duration")
    assert "test_duration=1000" in str(err.value)
    assert steps_only(Period(steps=3)) == 3 and steps_only(Period(epochs=1)) is None
    assert steps_only(None) is None


def test_a_stop_every_clock_has_reached_is_refused_as_stop_0_is():
    # stop=0 was refused, while stop=gyre.at(steps=0) (or epochs=0, time=0, or steps=0 beside epochs=5:
    # whichever comes first) ran no step without a word
    for stop in (gyre.at(steps=0), gyre.at(epochs=0), gyre.at(time=0), gyre.at(steps=0, epochs=5)):
        with pytest.raises(ValueError, match="a Period without a quantity of 0(.|\n)*received: Period"):
            gyre.loop(None, range(3), {gyre.every(1): lambda: None}, stop=stop)
    assert check_stop(gyre.at(steps=3, time=0.5)) == gyre.at(steps=3, time=0.5)


def test_epoch_length_from_epoch_duration_or_len():
    assert epoch_steps_of(None, [1, 2, 3]) == 3
    assert epoch_steps_of(gyre.at(steps=4), iter([])) == 4
    assert epoch_steps_of(np.int32(6), [1]) == 6  # epoch_duration wins over len
    assert epoch_steps_of(None, iter([1, 2])) is None and epoch_steps_of(None, []) is None


def test_batch_size_functions_in_both_forms():
    x, y = np.zeros((4, 2)), np.zeros(4)
    assert size_function(None)((x, y)) == 4  # the leading dimension the leaves share
    assert size_function(lambda shapes: shapes[0][0] * 10)((x, y)) == 40  # ciclo's: leaf shapes
    assert size_function(lambda shapes: 10 * len(shapes) + shapes[0][0])(np.float32(1)) == 11  # a scalar is (1,)
    assert size_function(lambda batch: len(batch))((x, y)) == 2  # named `batch`: the batch
    with pytest.raises(TypeError, match="batch_size_fn must be a function"):
        size_function(32)


def test_pending_steps_complete_when_the_next_batch_is_asked_for():
    clock = Elapse(["a", "b"], batch_size_fn=lambda batch: 3)
    first, batch = next(clock)
    assert (first.steps, batch, first.in_progress, clock.batch_size) == (0, "a", True, 3)
    assert clock.peek_completed().steps == 1 and clock.elapsed.steps == 0  # nothing changed
    second, _ = next(clock)
    assert (second.steps, second.samples) == (1, 3)
    with pytest.raises(StopIteration):
        next(clock)
    assert clock.exhausted and clock.batch_size is None
    assert clock.elapsed.steps == 2 and clock.complete().steps == 2  # completed once only


def test_pull_never_takes_a_batch_past_the_stop():
    pulled = []

    def data():
        for i in itertools.count():
            pulled.append(i)
            yield i

    clock = Elapse(data(), stop=2)
    assert clock.pull(Elapsed(steps=1)) == 0
    assert clock.pull(Elapsed(steps=2)) is END and pulled == [0]
    assert not clock.exhausted
    short = Elapse(iter([]))
    assert short.pull(Elapsed()) is END and short.exhausted


def test_a_tuple_of_batches_alike_is_not_mistaken_for_whole_arrays():
    same = (np.zeros((4, 2)), np.zeros((4, 2)))  # two batches of one shape: iterated as given
    assert [b.shape for b in check_dataset(same)] == [(4, 2), (4, 2)]
    with pytest.raises(TypeError, match="tuple of whole arrays"):
        check_dataset((np.zeros((4, 2)), np.zeros(4, np.int32)))


def test_a_continued_clock_counts_time_from_where_it_stopped():
    ticks = iter([10.0, 11.0, 12.5])
    clock = Elapse(range(3), initial=Elapsed(steps=4, time=2.0), clock=lambda: next(ticks))
    first, _ = next(clock)
    second, _ = next(clock)
    assert (first.steps, first.time) == (4, 2.0) and (second.steps, second.time) == (5, 3.0)
    assert clock.complete().time == 4.5


# --- epoch length: the dataset's own; the explanation when it has none


def test_the_epoch_length_is_the_datasets_own():
    import sys

    import numpy as np

    from gyre.engine._elapse import dataset_epoch_steps, epoch_steps_of

    batches = gyre.data.batches(np.zeros((10, 2)), 3)
    assert dataset_epoch_steps(batches) == 3  # epoch_steps, as gyre.data.batches knows it
    assert dataset_epoch_steps([1, 2]) == 2 and dataset_epoch_steps(iter([1])) is None

    class Endless:  # grain gives a repeated dataset the length sys.maxsize
        def __len__(self):
            return sys.maxsize

    class NotACount:
        epoch_steps = "many"

        def __len__(self):
            return 4

    assert dataset_epoch_steps(Endless()) is None and dataset_epoch_steps([]) is None
    assert dataset_epoch_steps(NotACount()) == 4
    assert epoch_steps_of(7, batches) == 7  # epoch_duration wins
    assert gyre.elapse(batches).epoch_steps == 3


def test_epochs_over_data_without_a_length_name_the_datasets_type():
    from gyre.engine._elapse import check_iterable

    with pytest.raises(ValueError) as info:
        gyre.elapse((i for i in range(3)), stop=gyre.at(epochs=1))
    text = str(info.value)
    assert "a dataset of type generator with neither len() nor epoch_steps" in text
    assert "gyre.data.batches" in text and "epoch_duration=" in text

    class Once:
        def __iter__(self):
            raise AssertionError("a pass was started")

    check_iterable(Once())  # checked without starting a pass


@pytest.mark.parametrize("size", [-4, 2.5, "4", None])
def test_a_batch_size_fn_returning_anything_but_a_whole_number_is_refused_at_the_first_batch(size):
    with pytest.raises(TypeError, match=r"(?s)batch_size_fn returned .* as the samples of a batch.*"
                       r"a whole number >= 0.*received: " + type(size).__name__):
        gyre.loop(0, [np.zeros((4, 1))] * 2, {gyre.every(1): lambda state: state},
                  batch_size_fn=lambda shapes: size)
    sizes = iter([np.int64(4), 3])
    *_, elapsed = gyre.loop(0, [1, 2], {gyre.every(1): lambda state: state},
                            batch_size_fn=lambda batch: next(sizes))
    assert elapsed.samples == 7 and type(elapsed.samples) is int


def test_a_loop_whose_data_gives_no_batch_says_so():
    # a generator that an earlier loop exhausted gave a loop of no step, silently (with a stop,
    # the loop already said the data ended before it)
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_metric("s", state), state + batch

    batches = (np.float32(1) for _ in range(3))
    assert gyre.loop(jnp.float32(0), batches, {gyre.every(1): step})[2].steps == 3
    with pytest.warns(gyre.LoopWarning, match="the data gave no batch, so the loop ran no step"):
        state, _, elapsed = gyre.loop(jnp.float32(0), batches, {gyre.every(1): step})
    assert elapsed.steps == 0 and float(state) == 0.0
    with pytest.warns(gyre.LoopWarning, match="the data ended after 0 steps, before stop"):
        gyre.loop(jnp.float32(0), [], {gyre.every(1): step}, stop=3)
