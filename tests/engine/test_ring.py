"""The ring a step writes its logs into: rows in order, the write index in the ring, a new
structure refused while tracing (nothing runs), the state donated only when the step donates."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from gyre.engine._binding import bind
from gyre.engine._ring import LARGEST, ROWS, Ring, RingMismatch, donates, ringable


@jax.jit
def step(state, batch):
    return gyre.logs().add_metric("sum", batch.sum()).add_output("rows", batch), state + 1


def test_a_ring_holds_each_steps_logs_in_a_row_and_counts_its_writes():
    ring = Ring(bind(step), step)
    state = jnp.int32(0)
    ring.open(state, np.zeros(3, np.float32))
    for i in range(5):
        state = ring.call(state, np.full(3, i, np.float32))
    assert int(ring.ring[ROWS, 0]) == 5  # the write index, in the ring's last row
    logs = ring.seal()
    assert ring.ring is None and logs.outputs.rows.shape == (ROWS, 3)
    assert logs.metrics.sum[:5].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]
    np.testing.assert_array_equal(logs.outputs.rows[4], np.full(3, 4.0))


def test_logs_of_another_structure_are_refused_before_anything_runs():
    ring = Ring(bind(step), step)
    ring.open(jnp.int32(0), np.zeros(3, np.float32))
    held = ring.ring
    with pytest.raises(RingMismatch):
        ring.call(jnp.int32(0), np.zeros(2, np.float32))  # rows of 2: another shape
    assert not held.is_deleted()  # not donated
    ring.open(jnp.int32(0), np.zeros(2, np.float32), again=True)
    ring.call(jnp.int32(0), np.ones(2, np.float32))
    assert int(ring.ring[ROWS, 0]) == 1 and ring.seal().outputs.rows.shape == (ROWS, 2)


def test_the_state_is_donated_only_when_the_step_donates_it():
    keeps = jax.jit(lambda s, b: s + b)
    gives = jax.jit(lambda s, b: s + b, donate_argnums=0)
    assert (donates(keeps), donates(gives)) == (False, True)
    assert ringable(keeps, None) and not ringable(lambda s, b: s, None)


def test_a_large_log_value_is_kept_per_step_not_ringed():
    @jax.jit
    def images(state, batch):
        return gyre.logs().add_output("big", jnp.full(LARGEST + 1, batch)).add_metric("b", batch), state

    ring = Ring(bind(images), images)
    ring.open(0, np.float32(0))
    assert ring.layout.leaves[0] is None  # no 256 copies of it
    for b in (1.0, 2.0, 3.0):
        ring.call(0, np.float32(b))
    logs = ring.seal()
    assert logs.outputs.big.shape == (3, LARGEST + 1) and logs.outputs.big[:, 0].tolist() == [1.0, 2.0, 3.0]
    assert logs.metrics.b[:3].tolist() == [1.0, 2.0, 3.0]
    _, history, _ = gyre.loop(0, [np.float32(i) for i in range(5)], {gyre.every(1): images})
    assert [float(x[0]) for x in history.collect("big")] == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("place", [lambda x: x, lambda x: jax.device_put(x, jax.devices()[0])])
def test_the_step_compiles_once_whether_the_state_is_committed_or_not(place):
    @jax.jit
    def count(state, batch):
        return gyre.logs().add_metric("x", batch), state + batch

    with gyre.testing.count_compilations() as compiled:
        gyre.loop(place(jnp.float32(0)), [np.float32(1)] * 10, {gyre.every(1): count})
    assert compiled.names.count("jit(ringed)") == 1


def test_every_dtype_comes_back_bit_for_bit():
    """The ring is one uint32 array: each value's bits are packed in and unpacked, so what the
    history holds is what the step logged, NaN payloads and -0.0 included."""
    nan = np.frombuffer(np.uint32(0x7FC01234).tobytes(), np.float32)[0]  # a NaN with a payload
    values = {
        "f32": np.array([nan, -0.0, 1.5], np.float32),
        "bf16": jnp.array([-0.0, 3.140625], jnp.bfloat16),
        "f16": np.array([65504.0], np.float16),
        "i8": np.array([-128, 127], np.int8),
        "u8": np.uint8(255),
        "i32": np.int32(-(2**31)),
        "u32": np.uint32(2**32 - 1),
        "flag": np.array([True, False]),
    }

    @jax.jit
    def logged(state, batch):
        logs = gyre.logs()
        for name, x in values.items():
            logs = logs.add_output(name, jnp.asarray(x) if name != "i32" else jnp.asarray(x) + batch)
        return logs, state

    ring = Ring(bind(logged), logged)
    ring.open(0, np.int32(0))
    for b in (0, 1):
        ring.call(0, np.int32(b))
    logs = ring.seal()
    for name, x in values.items():
        got = np.asarray(logs.outputs[name][:2])
        want = np.stack([np.asarray(x)] * 2) if name != "i32" else np.array([x, x + 1], np.int32)
        assert got.dtype == np.asarray(x).dtype, name
        assert got.tobytes() == want.tobytes(), name


def test_an_eager_managed_step_runs_op_by_op_in_a_loop_and_donates_nothing():
    # strategy="eager" is ciclo's debugging mode (prints and breakpoints work): the loop once
    # compiled its managed step into the ring anyway, with the state donated, so a print saw
    # tracers and the arrays the state was made from were deleted
    seen = []

    @managed.train_step
    def train_step(state, batch):
        seen.append(isinstance(batch, jax.core.Tracer))
        return gyre.logs().add_loss("loss", jnp.mean((batch @ state.params["w"]) ** 2)), state

    params = {"w": jnp.ones(3)}
    state = managed.ManagedState.create(params=params, tx=optax.sgd(0.1), strategy="eager")
    assert not ringable(train_step, state)
    _, history, elapsed = gyre.loop(state, [np.ones((4, 3), np.float32)] * 3, {gyre.every(1): train_step})
    assert elapsed.steps == 3 and seen == [False] * 3 and len(history.collect("loss")) == 3
    assert not params["w"].is_deleted()
