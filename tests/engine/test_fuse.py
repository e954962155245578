"""gyre.fuse (gyre.engine._fuse): K steps of a compiled step in one lax.scan."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gyre
from gyre.core._compat import cache_size
from gyre.engine._binding import StateMethod
from gyre.engine._fuse import check_steps, is_fusable, scan_steps, step_function
from gyre.engine._ring import compilations
from tests.engine._helpers import add_step, assert_same_tree


def test_a_fused_step_compiles_once_whatever_the_chunk_lengths():
    traces = []

    @jax.jit
    def step(state, batch):
        traces.append(1)
        return gyre.logs().add_metric("x", batch), state + batch

    data = [np.float32(1)] * 10
    for _ in range(2):
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=4)
    assert cache_size(gyre.fuse(step, 4)) == 1  # chunks of 4 ...
    # ... and the last one of 2 runs through the ring, compiled once: no second fused length
    assert cache_size(gyre.fuse(step, 2)) == 0 and compilations(step) == 1
    assert gyre.fuse(step, 4) is gyre.fuse(step, 4)
    assert len(traces) == 1  # the scans call the jitted step: it is traced once, for any length


def test_a_plain_function_cannot_be_fused():
    def step(state, batch):
        return None, state + batch

    with pytest.raises(TypeError, match="not a compiled step"):
        gyre.fuse(step, 2)


def test_steps_per_call_is_checked():
    with pytest.raises(ValueError, match="steps_per_call must be"):
        gyre.loop(0.0, [1.0] * 4, {gyre.every(1): add_step}, steps_per_call=0)


class ManagedStep:
    """A stand-in for a managed step: a callable step that fuses itself."""

    def __init__(self, fn=add_step):
        self.fn = fn
        self.lengths = []

    def __call__(self, state, batch):
        return self.fn(state, batch)

    def fuse(self, steps):
        self.lengths.append(steps)
        return gyre.fuse(self.fn, steps)


def test_fusable_step_objects_fuse_themselves():
    managed = ManagedStep()
    state, history, _ = gyre.train_loop(
        jnp.float32(0), [np.float32(1)] * 5, {gyre.on_train_step: managed}, steps_per_call=2
    )
    assert float(state) == 5.0 and managed.lengths == [2, 1] and len(history) == 5


@functools.partial(jax.tree_util.register_dataclass, data_fields=["total"], meta_fields=[])
@dataclasses.dataclass
class Counter:
    total: jax.Array
    train_step = ManagedStep(jax.jit(lambda state, batch: (None, Counter(state.total + batch))))


def test_a_state_method_step_is_fused():
    state, history, elapsed = gyre.train_loop(
        Counter(jnp.float32(0)), [np.float32(2)] * 5, steps_per_call=4
    )
    assert float(state.total) == 10.0 and elapsed.steps == 5
    assert Counter.train_step.lengths == [4, 1]


def test_fused_steps_do_not_copy_weights_every_iteration():
    """A hidden layer's weight is read by the backward pass after the optimizer got it: in a
    one-step scan body XLA would copy it on every iteration (the carry is updated in place).
    Fused steps run two steps per iteration, which leaves no such copy."""
    import re

    tx = optax.sgd(0.1)

    def step(state, batch):
        params, opt_state = state
        x, y = batch

        def loss_of(p):
            hidden = jnp.tanh(x @ p["w1"])
            return jnp.mean((hidden @ p["w2"] - y) ** 2)

        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return gyre.logs().add_loss("loss", loss), (optax.apply_updates(params, updates), opt_state)

    params = {"w1": jnp.ones((5, 7)) * 0.1, "w2": jnp.ones((7, 3)) * 0.1}
    state = (params, tx.init(params))
    stacked = (jnp.ones((4, 2, 5)), jnp.zeros((4, 2, 3)))
    fused = gyre.fuse(jax.jit(step, donate_argnums=0), 4)
    hlo = fused.lower(state, stacked).compile().as_text()
    copied = re.findall(r"= (f32\[[0-9,]+\])\{[0-9,]*\} copy\(", hlo)
    assert "f32[7,3]" not in copied and "f32[5,7]" not in copied, copied
    logs, _ = fused(state, stacked)
    assert logs.losses.loss.shape == (4,)


# -- fusing, piece by piece -----------------------------------------------------------------------


def test_check_steps_takes_integral_numbers_from_one():
    assert check_steps(np.int64(3)) == 3 and type(check_steps(np.int64(3))) is int
    with pytest.raises(ValueError, match="chunk must be a whole number of steps >= 1") as err:
        check_steps(1.5, "chunk")
    assert "chunk=100" in str(err.value)


def test_what_can_be_fused():
    jitted = jax.jit(lambda s, b: (None, s))
    assert is_fusable(jitted) and is_fusable(ManagedStep()) and not is_fusable(lambda s, b: s)
    assert isinstance(ManagedStep(), gyre.FusableStep) and not isinstance(jitted, gyre.FusableStep)

    class WithJittedMethod:
        train_step = jitted

    method = StateMethod(WithJittedMethod.train_step)
    assert step_function(method) is jitted and is_fusable(method)


def test_scan_steps_gives_what_a_plain_scan_gives_for_odd_lengths():
    def body(carry, x):
        return carry * 2 + x, {"seen": carry, "x2": x * 2}

    xs = jnp.arange(5.0)
    got = scan_steps(body, jnp.float32(1), xs)
    want = jax.lax.scan(body, jnp.float32(1), xs)
    assert_same_tree(got, want)


def test_the_fused_step_donates_the_state_only_when_the_step_does():
    def step(state, batch):
        return gyre.logs().add_metric("s", state.sum()), state + batch

    batches = jnp.ones((3, 2))
    kept = jnp.zeros(2)
    _, new = gyre.fuse(jax.jit(step), 3)(kept, batches)
    assert not kept.is_deleted() and new.tolist() == [3.0, 3.0]
    given = jnp.zeros(2)
    logs, _ = gyre.fuse(jax.jit(step, donate_argnums=0), 3)(given, batches)
    assert given.is_deleted() and logs.metrics.s.tolist() == [0.0, 2.0, 4.0]


def test_a_fuse_method_that_returns_no_function_is_explained():
    class Broken:
        def __call__(self, state, batch):
            return None, state

        def fuse(self, steps):
            return "not a function"

    with pytest.raises(TypeError, match=r"Broken.fuse\(2\) did not return a function"):
        gyre.fuse(Broken(), 2)


def test_a_compiled_step_that_reads_the_clock_is_explained_when_fused():
    @jax.jit
    def step(state, batch, elapsed):
        return None, state + batch * elapsed.steps

    data = [np.float32(1)] * 4
    state, _, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): step})  # step by step: fine
    assert float(state) == 0 + 1 + 2 + 3
    with pytest.raises(TypeError) as err:
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=2)
    lines = str(err.value).splitlines()
    assert lines[0].endswith("step reads elapsed.steps")
    assert "keep the step counter in the state" in lines[-1]


def test_a_compiled_step_that_takes_the_clock_without_reading_it_fuses():
    @jax.jit
    def step(state, batch, elapsed):
        return gyre.logs().add_metric("s", state), state + batch

    data = [np.float32(1)] * 4
    _, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=2)
    assert history.collect("s") == [0.0, 1.0, 2.0, 3.0]


# -- fuse() keeps the user's jit options: the scan calls the jitted step itself -----


def test_the_fused_step_keeps_its_out_shardings_and_donation():
    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    split = NamedSharding(mesh, PartitionSpec("data"))

    def step(state, batch):
        state = state + batch.sum()
        return gyre.logs().add_metric("first", state[0]), state

    jitted = jax.jit(step, out_shardings=(None, split), donate_argnums=0)
    state = jnp.zeros(8 * len(jax.devices()))
    data = [np.float32(1)] * 8
    by_step, _, _ = gyre.loop(jnp.copy(state), data, {gyre.every(1): jitted})
    fused, history, _ = gyre.loop(jnp.copy(state), data, {gyre.every(1): jitted}, steps_per_call=4)
    assert fused.sharding == split == by_step.sharding  # the user's out_shardings apply inside the scan
    np.testing.assert_array_equal(fused, by_step)
    assert history.collect("first") == [float(i + 1) for i in range(8)]
    kept = jax.device_put(state, split)
    gyre.fuse(jitted, 2)(kept, np.ones(2, np.float32))
    assert kept.is_deleted()  # the user's jit donates the state: so does the fused step


def test_a_non_donating_jit_is_not_donated_when_fused():
    step = jax.jit(lambda state, batch: (None, state + batch))
    kept = jnp.zeros(3)
    gyre.fuse(step, 2)(kept, np.ones((2, 3), np.float32))
    assert not kept.is_deleted()


@pytest.mark.parametrize("steps_per_call", [2, 3, 4, 8])
def test_fused_steps_keep_the_batch_order_across_a_short_batch(steps_per_call):
    # a short last batch of each epoch ends a chunk and is carried to the next one; the ring
    # that runs that short chunk once pulled the batches after it from the data, before the
    # carried one, so steps_per_call=K ran the epoch's next batches out of order
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_metric("first", batch[0]), state + 1

    rows = np.arange(50, dtype=np.float32)
    data = [rows[i:i + 16] for i in range(0, 50, 16)] * 3  # sizes 16, 16, 16, 2, ...
    _, history, elapsed = gyre.loop(jnp.int32(0), data, {gyre.every(1): step}, steps_per_call=steps_per_call)
    assert elapsed.steps == len(data)
    assert history.collect("first") == [float(b[0]) for b in data]
    assert history.collect("samples") == list(np.cumsum([0] + [len(b) for b in data[:-1]]))


def test_a_fused_step_that_changes_the_state_dtype_is_explained():
    # an int32 state that a float batch promotes: step by step JAX promotes it, fused it is the
    # scan's carry, and lax.scan's own "carry input and carry output must have equal types" came out
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", state * 1.0), state + batch

    data = [np.float32(1.5)] * 7
    state, _, _ = gyre.loop(jnp.int32(0), data, {gyre.every(1): step})
    assert float(state) == 10.5
    with pytest.raises(TypeError, match="a fused step returned its state with other types than it received") as info:
        gyre.loop(jnp.int32(0), data, {gyre.every(1): step}, steps_per_call=3)
    assert "has type int32[] but the corresponding output carry component has type float32[]" in str(info.value)
    assert "jnp.float32(0)" in str(info.value) and "steps_per_call=1" in str(info.value)

    @jax.jit
    def makes_its_state(state, batch):  # (the ring path runs it: a state the first step makes)
        state = jnp.float32(0) if state is None else state
        return gyre.logs().add_metric("x", state), state + batch

    assert float(gyre.loop(None, data, {gyre.every(1): makes_its_state})[0]) == 10.5
    with pytest.raises(TypeError, match="The input carry state is a <class 'NoneType'>"):
        gyre.loop(None, data, {gyre.every(1): makes_its_state}, steps_per_call=3)


@pytest.mark.parametrize("steps_per_call", [1, 2, 4, 8])
def test_a_failing_chunk_leaves_the_clock_of_the_state_on_the_error(steps_per_call):
    # a fused chunk (or a short one run through the ring) that failed counted every batch it
    # had pulled: err.elapsed said 8 or 9 steps where err.state had made 5
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_metric("x", state), state + batch @ jnp.ones(3)

    data = [np.ones(3, np.float32)] * 5 + [np.ones(4, np.float32)] * 5  # the 6th batch cannot run
    with pytest.raises(TypeError, match="dot_general") as info:
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=steps_per_call)
    assert float(info.value.state) == 15.0 and info.value.elapsed.steps == 5


@pytest.mark.filterwarnings("ignore:steps_per_call=.*cannot fuse this table:gyre.LoopWarning")  # per_step
@pytest.mark.parametrize("steps_per_call", [1, 2, 3, 7, "auto"])
@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("donate", [(), (0,)])
def test_a_dataset_that_raises_hands_back_a_state_and_clock_that_match(steps_per_call, per_step, donate):
    # the data raising between two steps of a block handed back the state after step 16 with
    # the clock of step 16 in progress (16 steps); and step by step, a state not donated, the
    # state before step 16 with the clock after it (17): resuming from either repeats a step
    def data():
        for i in range(40):
            if i == 17:
                raise ValueError("record 17 is corrupt")
            yield np.ones(3, np.float32)

    step = jax.jit(lambda state, batch: (gyre.logs().add_metric("x", state), state + batch[0]), donate_argnums=donate)
    tasks = {gyre.every(1): [step, *([lambda: None] if per_step else [])], gyre.every(5): [lambda: None]}
    with pytest.raises(ValueError, match="record 17 is corrupt") as info:
        gyre.loop(jnp.float32(0), data(), tasks, steps_per_call=steps_per_call)
    assert float(info.value.state) == info.value.elapsed.steps == 17


@pytest.mark.parametrize("steps_per_call", [1, 2, 3, 7, "auto"])
def test_a_fused_chunk_runs_the_batches_it_pulled_before_the_data_raised(steps_per_call):
    # a fused chunk whose data raised dropped the batches it had pulled: continuing over the
    # same iterator from err.state then skipped batch 16 with steps_per_call=2 or 3
    class Flaky:
        def __init__(self):
            self.i = 0

        def __iter__(self):
            return self

        def __next__(self):
            i, self.i = self.i, self.i + 1
            if i == 17:
                raise ValueError("record 17 is corrupt")
            if i >= 30:
                raise StopIteration
            return np.full(3, float(i), np.float32)

    step = jax.jit(lambda state, batch: (gyre.logs().add_metric("x", state), state + batch[0]))
    data = Flaky()
    with pytest.raises(ValueError, match="record 17 is corrupt") as info:
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step, gyre.every(5): lambda: None}, steps_per_call=steps_per_call)
    assert float(info.value.state) == sum(range(17)) and info.value.elapsed.steps == 17
    state, _, elapsed = gyre.loop(info.value.state, data, {gyre.every(1): step}, elapsed=info.value.elapsed,
                                  steps_per_call=steps_per_call)
    assert float(state) == sum(range(30)) - 17 and elapsed.steps == 29


@pytest.mark.filterwarnings("ignore:steps_per_call=.*cannot fuse this table:gyre.LoopWarning")  # per_step
@pytest.mark.parametrize("steps_per_call", [1, 2, 3, 7, "auto"])
@pytest.mark.parametrize("per_step", [False, True])
def test_an_iterator_that_ended_is_not_asked_again(steps_per_call, per_step):
    # blocks and fused chunks asked an iterator for a batch again after its StopIteration: one
    # that starts a new pass then (an epoch iterator) trained on to stop=50, where step by step
    # ended with the data after 30 steps
    class Passes:
        def __init__(self):
            self.i, self.pulls = 0, 0

        def __iter__(self):
            return self

        def __next__(self):
            self.pulls += 1
            i, self.i = self.i, self.i + 1
            if i == 30:
                self.i = 0
                raise StopIteration
            return np.full(3, float(i), np.float32)

    step = jax.jit(lambda state, batch: (gyre.logs().add_metric("x", state), state + batch[0]))
    tasks = {gyre.every(1): [step, *([lambda: None] if per_step else [])], gyre.every(4): [lambda: None]}
    data = Passes()
    with pytest.warns(gyre.LoopWarning, match="the data ended after 30 steps, before stop="):
        state, _, elapsed = gyre.loop(jnp.float32(0), data, tasks, stop=50, steps_per_call=steps_per_call)
    assert (float(state), elapsed.steps, data.pulls) == (sum(range(30)), 30, 31)


@pytest.mark.parametrize("steps_per_call", [1, 2, 3])
def test_an_event_that_raises_after_a_chunk_hands_back_the_state_it_was_given(steps_per_call):
    # an event after the step that raised on a block's or a fused chunk's last step handed back the
    # chunk's start state with its first clock: (state after step 0, 1 step) at K = 1 and 3, (after
    # step 2, 3 steps) at K = 2, though the chunk's rows were committed and its batches used; so a
    # run continued over the same data from err.state skipped them (672 or 576 where 496 is right)
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_metric("x", state), state + batch.sum()

    def fails_once(elapsed):
        if elapsed.steps == 3 and not failed:
            failed.append(True)
            raise KeyError("once")

    failed = []
    data = gyre.data.batches(np.arange(32, dtype=np.float32).reshape(16, 2), 2, shuffle=False)
    tasks = {gyre.every(1): step, gyre.every(3): fails_once}
    with pytest.raises(KeyError) as info:
        gyre.loop(jnp.float32(0), data, tasks, stop=8, steps_per_call=steps_per_call)
    assert (float(info.value.state), info.value.elapsed.steps) == (120.0, 4)  # steps 0 to 3
    state, _, elapsed = gyre.loop(info.value.state, data, tasks, stop=8, elapsed=info.value.elapsed,
                                  steps_per_call=steps_per_call)
    assert (float(state), elapsed.steps) == (496.0, 8)


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_text_in_a_batch_of_a_compiled_step_is_explained(steps_per_call):
    # JAX's error named gyre's wrapper ("Error interpreting argument to <function
    # step_body.<locals>.body>") at K = 1, and at K = 3 said "data type 'a.png' not understood"
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_metric("x", batch[0].sum()), state + 1

    good = (np.ones(2, np.float32), 0)
    for data, done in (([(np.ones(2, np.float32), "a.png")] * 3, 0), ([good] * 3 + [(np.ones(2, np.float32), "d.png")] * 3, 3)):
        with pytest.raises(TypeError, match=r"a batch holds text(.|\n)*received: batch\[1\] = '.\.png'") as info:
            gyre.loop(jnp.int32(0), data, {gyre.every(1): step}, steps_per_call=steps_per_call)
        assert int(info.value.state) == info.value.elapsed.steps == done
