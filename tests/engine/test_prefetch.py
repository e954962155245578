"""gyre.prefetch_to_device: order, len, placement on 8 simulated devices, bounded look-ahead,
errors at their position, and use inside loops."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

import gyre
from gyre import managed


def batches(n, size=8):
    return [(np.full((size, 3), i, np.float32), np.full(size, i, np.int32)) for i in range(n)]


class Counting:
    """A one-shot source that counts the items taken from it and can fail at one of them."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at, self.pulled = n, fail_at, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pulled == self.fail_at:
            self.pulled += 1
            raise KeyError(f"bad item {self.fail_at}")
        if self.pulled >= self.n:
            raise StopIteration
        self.pulled += 1
        return np.full((8,), self.pulled - 1, np.float32)


def test_order_and_len_are_kept():
    source = batches(5)
    placed = gyre.prefetch_to_device(source)
    assert len(placed) == 5
    got = [int(x[0, 0]) for x, _ in placed]
    assert got == [0, 1, 2, 3, 4]
    # a list can be iterated again: every pass starts from the first batch
    assert [int(y[0]) for _, y in placed] == [0, 1, 2, 3, 4]
    assert all(isinstance(x, jax.Array) for x, _ in placed)


def test_a_source_without_len_has_no_len():
    placed = gyre.prefetch_to_device(np.ones(2) * i for i in range(3))
    with pytest.raises(TypeError):
        len(placed)
    assert [float(x[0]) for x in placed] == [0.0, 1.0, 2.0]


def test_a_strategy_splits_batches_over_the_mesh():
    assert jax.device_count() == 8
    strategy = gyre.DataParallel()
    for x, y in gyre.prefetch_to_device(batches(3, size=16), sharding=strategy):
        assert x.sharding == NamedSharding(strategy.mesh, PartitionSpec("data"))
        assert y.sharding == NamedSharding(strategy.mesh, PartitionSpec("data"))
        assert len(x.addressable_shards) == 8 and x.addressable_shards[0].data.shape == (2, 3)


def test_a_sharding_or_a_tree_of_shardings_is_applied():
    mesh = jax.make_mesh((8,), ("batch",))
    split = NamedSharding(mesh, PartitionSpec("batch"))
    for x, y in gyre.prefetch_to_device(batches(2), sharding=split):
        assert x.sharding == split and y.sharding == split
    one = SingleDeviceSharding(jax.devices()[3])
    for x, y in gyre.prefetch_to_device(batches(2), sharding=(split, one)):
        assert x.sharding == split and y.sharding == one


def test_default_places_arrays_and_leaves_other_leaves_alone():
    source = [{"x": np.ones(4), "id": "a", "n": 3}]
    (batch,) = list(gyre.prefetch_to_device(source))
    assert isinstance(batch["x"], jax.Array) and batch["id"] == "a" and batch["n"] == 3


@pytest.mark.parametrize("size", [0, 1, 2, 5])
def test_never_more_than_size_items_ahead(size):
    source = Counting(20)
    placed = gyre.prefetch_to_device(source, size=size)
    assert source.pulled == 0  # nothing is taken before the first request
    for k in range(1, 11):
        next(placed)
        assert source.pulled == k + size
    assert placed.pulled - placed.delivered == size


def test_early_stop_takes_at_most_the_window_and_the_iterator_continues():
    source = Counting(20)
    placed = gyre.prefetch_to_device(source, size=2)
    seen = []
    gyre.loop(None, placed, {gyre.every(1): lambda batch: seen.append(int(batch[0]))}, stop=3)
    assert seen == [0, 1, 2] and source.pulled == 5
    # a one-shot source: the prefetch object is the iterator, and keeps its window
    gyre.loop(None, placed, {gyre.every(1): lambda batch: seen.append(int(batch[0]))}, stop=3)
    assert seen == [0, 1, 2, 3, 4, 5] and source.pulled == 8


def test_limit_bounds_what_is_taken_from_the_source():
    source = Counting(20)
    placed = gyre.prefetch_to_device(source, size=2, limit=3)
    seen = []
    gyre.loop(None, placed, {gyre.every(1): lambda batch: seen.append(int(batch[0]))}, stop=3)
    assert seen == [0, 1, 2] and source.pulled == 3
    assert next(source)[0] == 3  # the source continues with the first unused item
    assert len(gyre.prefetch_to_device(batches(5), limit=3)) == 3
    assert len(list(gyre.prefetch_to_device(batches(5), limit=3))) == 3
    with pytest.raises(ValueError, match="limit"):
        gyre.prefetch_to_device([], limit=-1)


def test_a_source_error_arrives_at_its_position():
    placed = gyre.prefetch_to_device(Counting(10, fail_at=3), size=2)
    got = [int(next(placed)[0]) for _ in range(3)]
    assert got == [0, 1, 2]
    with pytest.raises(KeyError, match="bad item 3"):
        next(placed)
    with pytest.raises(StopIteration):
        next(placed)


def test_a_placement_error_arrives_at_its_position():
    odd = batches(2, size=16) + batches(1, size=5) + batches(1, size=16)
    it = iter(gyre.prefetch_to_device(odd, sharding=gyre.DataParallel()))
    next(it), next(it)
    with pytest.raises(ValueError, match="cannot be split evenly over 8 devices"):
        next(it)


def test_bad_arguments():
    with pytest.raises(ValueError, match="size"):
        gyre.prefetch_to_device([], size=-1)
    with pytest.raises(TypeError, match="sharding"):
        gyre.prefetch_to_device([], sharding="data")
    with pytest.raises(TypeError, match="iterable"):
        gyre.prefetch_to_device(3)


def test_a_loop_over_prefetched_batches_trains_as_without():
    @managed.train_step
    def train_step(state, batch):
        x, y = batch
        loss = jnp.mean((x @ state.params["w"] - y[:, None]) ** 2)
        return gyre.logs().add_loss("loss", loss), state

    def run(prefetch):
        state = managed.ManagedState.create(
            params={"w": jnp.zeros((3, 1))}, tx=optax.sgd(0.01), strategy="data_parallel"
        )
        data = batches(6, size=16)
        if prefetch:
            data = gyre.prefetch_to_device(data, sharding=state.strategy)
        state, history, elapsed = gyre.loop(
            state, data, {gyre.every(1): train_step}
        )
        return np.asarray(state.params["w"]), history.collect("loss"), elapsed

    w_ref, loss_ref, elapsed_ref = run(False)
    w, loss, elapsed = run(True)
    # len() is kept, so epochs are inferred as without prefetching
    assert elapsed.steps == elapsed_ref.steps == 6
    assert elapsed.epochs == elapsed_ref.epochs == 1
    np.testing.assert_array_equal(w, w_ref)
    assert loss == loss_ref


def test_loops_prefetch_for_managed_states_by_default():
    state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="data_parallel")
    pulled, seen = [], []

    def source():
        for i in range(100):
            pulled.append(i)
            yield np.full((16, 2), float(i), np.float32)

    def look(batch):
        seen.append((type(batch).__name__, len(batch.sharding.device_set)))

    gyre.loop(state, source(), {gyre.every(1): [look]}, stop=5)
    assert seen == [("ArrayImpl", 8)] * 5  # placed over the 8 devices before the step
    assert pulled == list(range(5))  # never beyond stop
    plain = []
    gyre.loop(None, [np.zeros(2)] * 3, {gyre.every(1): [lambda batch: plain.append(type(batch))]})
    assert plain == [np.ndarray] * 3  # other states: batches untouched
    untouched = []
    gyre.loop(state, [np.zeros((16, 2))], {gyre.every(1): [lambda batch: untouched.append(type(batch))]}, prefetch=0)
    assert untouched == [np.ndarray]


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_a_stop_in_epochs_takes_no_batch_beyond_it(steps_per_call):
    # prefetching stopped only at a stop in steps: stop=gyre.at(epochs=2) took two batches more
    # from an iterator, which a later loop over it then skipped (another result than prefetch=0)
    state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="jit")
    pulled = []

    def source():
        for i in range(100):
            pulled.append(i)
            yield np.full((4, 2), float(i), np.float32)

    data = source()
    step = managed.step(lambda state, batch: (gyre.logs().add_metric("x", batch[0, 0]), state))
    _, _, elapsed = gyre.loop(state, data, {gyre.every(1): step}, stop=gyre.at(epochs=2), epoch_duration=6,
                              steps_per_call=steps_per_call)
    assert elapsed.steps == 12 and pulled == list(range(12))
    _, _, elapsed = gyre.loop(state, data, {gyre.every(1): step}, stop=gyre.at(epochs=3), epoch_duration=6,
                              elapsed=elapsed, steps_per_call=steps_per_call)
    assert elapsed.steps == 18 and pulled == list(range(18))


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_a_loop_a_callback_stops_puts_gyres_batches_back_after_the_last_one_it_used(steps_per_call):
    # prefetch read 2 batches past a stop a callback asked for: a next loop over the same
    # gyre.data.batches skipped them (other parameters than with prefetch=0)
    step = managed.step(lambda state, batch: (gyre.logs().add_metric("x", batch[0, 0]), state))

    def stop_at_5(loop, elapsed):
        if elapsed.steps == 5:
            loop.request_stop("enough")

    seen = {}
    for prefetch in (0, 2):
        state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="jit")
        data = gyre.data.batches(np.arange(80.0).reshape(40, 2), 2, shuffle=False)
        _, history, elapsed = gyre.loop(state, data, {gyre.every(1): step, gyre.every(5): stop_at_5}, stop=20, prefetch=prefetch,
                                        steps_per_call=steps_per_call)
        assert elapsed.steps == 6 and data.index == 6
        _, history, _ = gyre.loop(state, data, {gyre.every(1): step}, stop=9, elapsed=elapsed, history=history,
                                  prefetch=prefetch, steps_per_call=steps_per_call)
        seen[prefetch] = history.collect("x")
    assert seen[2] == seen[0] == [4.0 * i for i in range(9)]


def test_fused_loops_prefetch_too_and_train_as_step_by_step():
    @managed.train_step
    def train_step(state, batch):
        x, y = batch
        loss = jnp.mean((x @ state.params["w"] - y[:, None]) ** 2)
        return gyre.logs().add_loss("loss", loss), state

    pulled = []

    def source():
        for i, batch in enumerate(batches(12, size=16)):
            pulled.append(i)
            yield batch

    def run(steps_per_call, prefetch):
        state = managed.ManagedState.create(
            params={"w": jnp.zeros((3, 1))}, tx=optax.sgd(0.01), strategy="data_parallel"
        )
        pulled.clear()
        state, history, elapsed = gyre.loop(
            state, source(), {gyre.every(1): train_step}, stop=10, steps_per_call=steps_per_call,
            prefetch=prefetch,
        )
        return np.asarray(state.params["w"]), history.collect("loss"), elapsed.steps

    reference = run(1, 0)
    fused = run(4, 2)
    assert pulled == list(range(10))  # placed ahead, never beyond stop
    np.testing.assert_allclose(fused[0], reference[0], rtol=1e-6)
    np.testing.assert_allclose(fused[1], reference[1], rtol=1e-6)
    assert fused[2] == reference[2] == 10


def test_a_fused_chunk_of_prefetched_batches_reaches_the_step_on_the_devices():
    state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="data_parallel")
    seen = []

    class Probe:
        """A fusable step that records what its fused function receives."""

        def __call__(self, state, batch):  # pragma: no cover - only fused here
            raise AssertionError

        def fuse(self, steps):
            def fused(state, stacked):
                seen.append((type(stacked).__name__, stacked.shape, len(stacked.sharding.device_set)))
                return gyre.logs(), state

            return fused

    gyre.loop(state, [np.ones((16, 2), np.float32)] * 8, {gyre.every(1): Probe()}, steps_per_call=4)
    assert seen == [("ArrayImpl", (4, 16, 2), 8)] * 2  # stacked on the devices, batches split


def test_prefetching_keeps_the_epoch_length_of_the_source():
    source = gyre.data.batches(np.zeros((32, 2), np.float32), 8)
    assert gyre.prefetch_to_device(source).epoch_steps == 4  # an iterator that knows it
    assert gyre.prefetch_to_device(batches(6), limit=2).epoch_steps == 6  # not the limit
    state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="data_parallel")
    _, _, elapsed = gyre.loop(state, [np.zeros((16, 2), np.float32)] * 10, {}, stop=3)
    assert (elapsed.steps, elapsed.epochs, elapsed.step_in_epoch) == (3, 0, 3)


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_ctrl_c_from_the_data_stops_after_the_same_steps_with_prefetch(steps_per_call):
    # prefetch let a KeyboardInterrupt the source raised (Ctrl-C while a batch is read) out while it
    # read ahead: the loop stopped 2 steps early (after 5 steps, not 7) and named the wrong batch
    def source():
        for i in range(10):
            if i == 7:
                raise KeyboardInterrupt
            yield np.full((4, 2), float(i), np.float32)

    step = managed.step(lambda state, batch: (gyre.logs().add_metric("x", batch[0, 0]), state))
    for prefetch in (0, 2):
        state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="jit")
        with pytest.warns(gyre.LoopWarning, match="before step 7 ran: the loop stopped after 7 steps"):
            _, history, elapsed = gyre.loop(state, source(), {gyre.every(1): step}, prefetch=prefetch,
                                            steps_per_call=steps_per_call)
        assert elapsed.steps == 7 and history.collect("x") == [float(i) for i in range(7)], prefetch


def test_the_loop_checks_prefetch_whatever_the_state():
    # prefetch=-1 passed with a state of another kind (unused there), and a managed state then
    # refused it in prefetch_to_device's words ("prefetch size ... size=2")
    for state in (None, managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="jit")):
        with pytest.raises(ValueError, match=r"prefetch must be a whole number of batches >= 0(.|\n)*received: int -1"):
            gyre.loop(state, [np.zeros((4, 2), np.float32)], {gyre.every(1): lambda: None}, prefetch=-1)


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_a_loop_that_raises_puts_gyres_batches_back_after_the_last_one_it_used(steps_per_call):
    # after an error, prefetch left gyre.data.batches 2 batches past err.elapsed (index 7 where 5
    # steps had used 5): a loop continued over it from err.state skipped them, unlike prefetch=0
    step = managed.step(lambda state, batch: (gyre.logs().add_metric("x", batch[0, 0]), state))

    def fails_at_4(elapsed):
        if elapsed.steps == 4:
            raise KeyError("once")

    for prefetch in (0, 2):
        state = managed.ManagedState.create(params=jnp.zeros(()), tx=optax.sgd(0.1), strategy="jit")
        data = gyre.data.batches(np.arange(80.0).reshape(40, 2), 2, shuffle=False)
        with pytest.raises(KeyError) as info:
            gyre.loop(state, data, {gyre.every(1): step, gyre.every(2): fails_at_4}, stop=20, prefetch=prefetch,
                      steps_per_call=steps_per_call)
        assert info.value.elapsed.steps == data.index == 5, prefetch
