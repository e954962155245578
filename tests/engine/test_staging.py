"""gyre.engine._staging: a chunk's batches stacked into reused, aligned host buffers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.engine._staging import ALIGNMENT, Stager, aligned_empty
from tests.engine._helpers import add_step


def test_device_batches_are_stacked_on_the_device():
    data = [jnp.float32(i) for i in range(6)]
    state, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): add_step}, steps_per_call=3)
    assert float(state) == 15.0 and history.collect("total")[-1] == 15.0


def test_a_batch_of_other_shapes_ends_a_fused_chunk_and_runs_as_step_by_step():
    data = [np.ones(3, np.float32)] * 3 + [np.ones(2, np.float32)] + [np.ones(3, np.float32)] * 2
    step = jax.jit(lambda state, batch: (gyre.logs().add_metric("s", batch.sum()), state + batch.sum()))
    runs = [gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=k) for k in (1, 4)]
    (one, h1, e1), (four, h4, e4) = runs
    assert float(one) == float(four) == 17.0 and h1.collect("s") == h4.collect("s") == [3, 3, 3, 2, 3, 3]
    assert (e1.steps, e1.samples) == (e4.steps, e4.samples) == (6, 17)


def test_a_batch_whose_leaves_disagree_is_refused_fused_as_step_by_step():
    x, y = np.ones((4, 3), np.float32), np.zeros(4, np.int32)
    data = [(x, y)] * 3 + [(x, np.zeros(3, np.int32))]
    step = jax.jit(lambda state, batch: (None, state + batch[0].sum()))
    for k in (1, 4):
        with pytest.raises(ValueError, match="disagree on their leading dimension"):
            gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=k)


def test_nested_batches_are_stacked_leaf_by_leaf():
    data = [({"x": np.full(2, i, np.float32)}, np.float32(i)) for i in range(4)]
    step = jax.jit(lambda state, batch: (gyre.logs().add_metric("s", batch[0]["x"].sum() + batch[1]),
                                         state + 1))
    _, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=2)
    assert history.collect("s") == [3.0 * i for i in range(4)]


def test_staging_buffers_are_aligned_and_reused_once_their_call_is_done():
    from gyre.engine._staging import ALIGNMENT, Stager

    stager = Stager(slots=2)
    batches = [(np.full((2, 3), i, np.float32), np.int32(i)) for i in range(4)]
    first, slot = stager.stack(batches)
    assert all(leaf.ctypes.data % ALIGNMENT == 0 for leaf in first)  # read in place on CPU
    np.testing.assert_array_equal(first[1], [0, 1, 2, 3])
    pending = jnp.asarray(first[0]).sum()  # stands for the fused call's outputs
    stager.release(slot, [pending])
    _, other = stager.stack(batches)
    stager.release(other, [])
    again, slot_again = stager.stack(batches[::-1])  # waits for `pending`, then reuses
    assert slot_again == slot and again[0] is first[0]
    np.testing.assert_array_equal(first[1], [3, 2, 1, 0])
    assert float(pending) == 2 * 3 * (0 + 1 + 2 + 3)


class LogsItsBatch:
    """A fusable step whose fused function is plain Python and logs the stacked batch itself."""

    def __call__(self, state, batch):  # pragma: no cover - only fused here
        raise AssertionError

    def fuse(self, steps):
        return lambda state, batch: (gyre.logs().add_output("x", batch), state)


def test_a_fused_step_that_returns_its_staging_buffer_keeps_it():
    data = [np.full(2, i, np.float32) for i in range(12)]
    _, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): LogsItsBatch()},
                              steps_per_call=2)
    assert [row.tolist() for row in history.collect("x")] == [[i, i] for i in range(12)]


# -- the staging buffers, directly --------------------------------------------------------------


def test_stack_puts_batches_along_a_new_axis_on_the_host_or_the_device():
    host, _ = Stager().stack([(np.zeros(2, np.float32), 1), (np.ones(2, np.float32), 2)])
    assert isinstance(host[0], np.ndarray) and host[0].shape == (2, 2) and host[1].tolist() == [1, 2]
    device, _ = Stager().stack([{"x": jnp.zeros(3)}, {"x": jnp.ones(3)}])
    assert isinstance(device["x"], jax.Array) and device["x"].shape == (2, 3)


@pytest.mark.parametrize("shape, dtype", [((3, 5), np.float32), ((7,), np.int8), ((2, 3, 4), np.float64)])
def test_aligned_buffers(shape, dtype):
    buffer = aligned_empty(shape, dtype)
    assert buffer.shape == shape and buffer.dtype == dtype
    assert buffer.ctypes.data % ALIGNMENT == 0 and buffer.flags.c_contiguous


def test_a_new_shape_replaces_the_buffers_of_its_slot_and_device_batches_need_none():
    stager = Stager(slots=1)
    first, slot = stager.stack([np.zeros(2, np.float32)] * 3)
    stager.release(slot, [])  # no outputs to wait on: the slot's buffers are dropped
    again, _ = stager.stack([np.zeros(2, np.float32)] * 3)
    assert again is not first and again.shape == (3, 2)
    stager.release(0, [jnp.zeros(())])
    other, _ = stager.stack([np.zeros(5, np.float32)] * 2)  # another shape: new buffers
    assert other.shape == (2, 5)
    stacked, none = stager.stack([jnp.zeros(2)] * 2)
    assert none is None and isinstance(stacked, jax.Array)
    stager.release(None, [stacked])  # nothing to record for device batches
