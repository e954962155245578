"""steps_per_call: fused steps give the same parameters and per-step history as step by step."""

import dataclasses
import functools
import io

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre.core._clock import Elapsed
from gyre.core._compat import cache_size
from gyre.core._history import History
from gyre.core._logs import Logs

CLOCK = ("steps", "samples", "epochs", "step_in_epoch")


def make_problem(n_batches=10, batch=8, features=4, classes=3):
    """A tiny softmax regression with adam, a jitted donating step, and its batches."""
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(features, classes))
    xs = [rng.normal(size=(batch, features)).astype(np.float32) for _ in range(n_batches)]
    batches = [(x, np.argmax(x @ true_w, axis=-1).astype(np.int32)) for x in xs]
    tx = optax.adam(0.05)

    def init():
        params = {"w": jnp.zeros((features, classes)), "b": jnp.zeros(classes)}
        return params, tx.init(params)

    def loss_of(params, x, y):
        logits = x @ params["w"] + params["b"][None, :]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def train_step(state, batch):
        params, opt_state = state
        loss, grads = jax.value_and_grad(loss_of)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return gyre.logs().add_loss("loss", loss), (optax.apply_updates(params, updates), opt_state)

    def test_step(state, batch):
        return gyre.logs().add_metric("score", loss_of(state[0], *batch))

    return batches, init, jax.jit(train_step, donate_argnums=0), jax.jit(test_step)


# On CPU the scan runs the very same computation per step: results are bit-identical.


def assert_same_tree(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def assert_same_history(a, b, *keys):
    for key in (*CLOCK, *keys):
        assert a.collect("steps", key) == b.collect("steps", key), key


def test_loop_fused_matches_per_step_with_a_partial_last_chunk():
    batches, init, step, _ = make_problem()
    runs = {}
    for k in (1, 2, 4):  # 10 steps: chunks of 4, 4, 2; of 2 five times (staging buffers reused)
        runs[k] = gyre.loop(init(), batches, {gyre.every(1): step}, stop=10, steps_per_call=k)
    (s1, h1, e1), (_, h4, e4) = runs[1], runs[4]
    for k in (2, 4):
        assert_same_tree(s1, runs[k][0])
        assert_same_history(h1, runs[k][1], "loss")
    assert len(h4) == 10 and e4 == e1.replace(time=e4.time, date=e4.date)
    assert [e.steps for e in (e1, e4)] == [10, 10]


def test_train_loop_fused_matches_per_step_with_epochs_and_evaluation():
    batches, init, step, test_step = make_problem()
    seen = {}
    runs = {}
    for k in (1, 4):
        events = seen[k] = []
        tasks = {
            gyre.on_train_step: step,
            gyre.on_test_step: test_step,
            gyre.on_epoch_begin: lambda elapsed, ev=events: ev.append(("begin", elapsed.steps)),
            gyre.on_epoch_end: lambda elapsed, ev=events: ev.append(("end", elapsed.steps)),
        }
        # epochs of 5 steps: the chunks are 4, 1, 4, 1 (never across an epoch end)
        runs[k] = gyre.train_loop(
            init(), batches, tasks, test_dataset=lambda: batches[:2], epoch_duration=5,
            steps_per_call=k,
        )
    (s1, h1, _), (s4, h4, e4) = runs[1], runs[4]
    assert_same_tree(s1, s4)
    assert_same_history(h1, h4, "loss")
    assert h4.collect("steps", "score_test")[0] == [4, 9]
    assert h4.collect("score_test") == h1.collect("score_test")
    assert seen[4] == seen[1] == [("begin", 0), ("end", 4), ("begin", 5), ("end", 9)]
    assert (e4.steps, e4.epochs) == (10, 2)


def test_test_and_predict_loops_fuse_their_step():
    batches, init, _, test_step = make_problem(n_batches=5)
    params = init()
    _, h1, _ = gyre.test_loop(params, batches, {gyre.on_test_step: test_step})
    _, h3, e3 = gyre.test_loop(params, batches, {gyre.on_test_step: test_step}, steps_per_call=3)
    assert_same_history(h1, h3, "score")
    assert e3.steps == 5
    predict = jax.jit(lambda state, batch: gyre.logs().add_output("y", batch[0].sum(axis=1)))
    _, hp, _ = gyre.predict_loop(params, batches, {gyre.on_predict_step: predict}, steps_per_call=2)
    for got, (x, _) in zip(hp.collect("y"), batches, strict=True):
        np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-6)


@jax.jit
def add_step(state, batch):
    state = state + batch
    return gyre.logs().add_metric("total", state), state


def test_callbacks_run_after_the_same_steps_as_step_by_step():
    seen = {}
    calls = {}
    for k in (1, 4):
        asked = seen[k] = []
        log = calls[k] = []

        def schedule(elapsed, asked=asked):  # a stateful-looking schedule: once per step, in order
            asked.append(elapsed.steps)
            return elapsed.steps % 3 == 0

        def after(elapsed, logs, batch, log=log):
            log.append((elapsed.steps, float(jax.device_get(logs.metrics.total)), float(batch)))
            return gyre.logs().add_metric("extra", elapsed.steps)

        def before(elapsed, log=log):
            log.append(("before", elapsed.steps))

        data = [np.float32(i) for i in range(10)]
        tasks = {gyre.every(5): before, gyre.every(1): add_step, schedule: after}
        _, history, _ = gyre.loop(jnp.float32(0), data, tasks, steps_per_call=k)
        calls[k] = (log, history.collect("steps", "extra"), history.collect("total"))
    # every(5) before the step fires on 0 and 5, `schedule` after it on 0, 3, 6, 9: the chunks
    # are [0], [1..3], [4], [5, 6], [7..9]
    log, extra, total = calls[4]
    assert log == [
        ("before", 0), (0, 0.0, 0.0), (3, 6.0, 3.0), ("before", 5), (6, 21.0, 6.0), (9, 45.0, 9.0),
    ]
    assert calls[4] == calls[1] and seen[4] == seen[1] == list(range(10))
    assert extra == ([0, 3, 6, 9], [0, 3, 6, 9])
    assert total == [float(sum(range(i + 1))) for i in range(10)]


def test_stop_request_takes_effect_after_the_same_step_as_step_by_step():
    def stop_after_five(elapsed, loop):
        if elapsed.steps >= 5:
            loop.request_stop("enough")

    data = [np.float32(1)] * 20
    tasks = {gyre.every(1): add_step, gyre.every(2): stop_after_five}
    for k in (1, 4):
        state, history, elapsed = gyre.loop(jnp.float32(0), data, tasks, steps_per_call=k)
        assert elapsed.steps == 7 and float(state) == 7.0 and len(history) == 7


def test_progress_bar_counts_every_step_at_chunk_boundaries():
    out = io.StringIO()
    bar = gyre.keras_bar(total=10, file=out)
    data = [np.float32(1)] * 10
    gyre.loop(jnp.float32(0), data, {gyre.every(1): [add_step, bar]}, steps_per_call=4)
    assert out.getvalue().splitlines()[-1].startswith("10/10 [")


def test_device_batches_are_stacked_on_the_device():
    data = [jnp.float32(i) for i in range(6)]
    state, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): add_step}, steps_per_call=3)
    assert float(state) == 15.0 and history.collect("total")[-1] == 15.0


def test_fused_function_compiles_once_per_chunk_length():
    traces = []

    @jax.jit
    def step(state, batch):
        traces.append(1)
        return gyre.logs().add_metric("x", batch), state + batch

    data = [np.float32(1)] * 10
    for _ in range(2):
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=4)
    assert cache_size(gyre.fuse(step, 4)) == 1  # chunks of 4 ...
    assert cache_size(gyre.fuse(step, 2)) == 1  # ... and the last one of 2
    assert gyre.fuse(step, 4) is gyre.fuse(step, 4)
    assert len(traces) == 1  # the scans call the jitted step: it is traced once, for any length


def test_a_plain_function_cannot_be_fused():
    def step(state, batch):
        return None, state + batch

    with pytest.raises(TypeError, match="not a compiled step") as err:
        gyre.loop(0.0, [1.0] * 4, {gyre.every(1): step}, steps_per_call=2)
    assert "jax.jit" in str(err.value) and "received" in str(err.value)
    with pytest.raises(TypeError, match="must be a compiled step"):
        gyre.train_loop(0.0, [1.0] * 4, {gyre.on_train_step: step}, steps_per_call=2)
    with pytest.raises(TypeError, match="not a compiled step"):
        gyre.fuse(step, 2)


class Marks(gyre.ChunkSafe):
    def __init__(self):
        self.steps = []

    def __call__(self, elapsed):
        self.steps.append(elapsed.steps)


def test_table_errors_name_the_problem():
    log = []
    with pytest.warns(gyre.LoopWarning, match="fires so often"):  # a plain callback on every step
        gyre.loop(jnp.float32(0), [np.float32(1)] * 8, {gyre.every(1): [add_step, lambda elapsed: log.append(elapsed.steps)]}, steps_per_call=4)
    assert log == list(range(8))  # ... runs on every step: the chunks are one step long
    with pytest.raises(ValueError, match="fuses one step"):
        gyre.loop(0.0, [1.0] * 4, {gyre.every(1): [add_step, add_step]}, steps_per_call=2)
    with pytest.raises(ValueError, match="steps_per_call must be"):
        gyre.loop(0.0, [1.0] * 4, {gyre.every(1): add_step}, steps_per_call=0)
    marks = Marks()  # a ChunkSafe callback runs once per chunk, with its last step
    gyre.loop(jnp.float32(0), [np.float32(1)] * 4, {gyre.every(1): [marks, add_step]}, steps_per_call=2)
    assert marks.steps == [1, 3]


def test_batches_of_a_chunk_must_share_their_shapes():
    data = [np.ones(3, np.float32)] * 3 + [np.ones(2, np.float32)]
    step = jax.jit(lambda state, batch: (None, state + batch.sum()))
    with pytest.raises(ValueError, match="same shapes") as err:
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=4)
    assert "drop_remainder" in str(err.value)


def test_tuple_batches_of_a_chunk_must_share_their_shapes():
    x, y = np.ones((4, 3), np.float32), np.zeros(4, np.int32)
    data = [(x, y)] * 3 + [(x, np.zeros(3, np.int32))]
    step = jax.jit(lambda state, batch: (None, state + batch[0].sum()))
    with pytest.raises(ValueError, match="same shapes") as err:
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=4)
    assert "batch 3 of the chunk with a leaf of shape (3,)" in str(err.value)


def test_nested_batches_are_stacked_leaf_by_leaf():
    data = [({"x": np.full(2, i, np.float32)}, np.float32(i)) for i in range(4)]
    step = jax.jit(lambda state, batch: (gyre.logs().add_metric("s", batch[0]["x"].sum() + batch[1]),
                                         state + 1))
    _, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, steps_per_call=2)
    assert history.collect("s") == [3.0 * i for i in range(4)]


def test_staging_buffers_are_aligned_and_reused_once_their_call_is_done():
    from gyre.loop._staging import ALIGNMENT, Stager

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


def test_boundary_callbacks_that_only_read_leave_the_history_as_step_by_step():
    read = []

    def reader(elapsed, logs):  # reads the last step's logs, adds nothing
        read.append((elapsed.steps, logs))

    def overwrite(logs):  # replaces a value of the last step's record
        return gyre.logs().add_metric("total", -1.0)

    data = [np.float32(i) for i in range(10)]
    runs = [
        gyre.loop(jnp.float32(0), data, {gyre.every(1): add_step, gyre.every(4): reader},
                  steps_per_call=k)[1]
        for k in (1, 4)
    ]
    assert_same_history(*runs, "total")
    assert [steps for steps, _ in read] == [0, 4, 8, 0, 4, 8]
    _, history, _ = gyre.loop(
        jnp.float32(0), data, {gyre.every(1): add_step, gyre.every(4): overwrite}, steps_per_call=4
    )
    assert history.collect("total")[2:6] == [3.0, 6.0, -1.0, 15.0]
    assert len(history) == 10


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


def test_commit_stacked_keeps_order_and_splits_rows_on_the_host():
    h = History(flush_every=2, lag=1)
    h.commit(Elapsed(steps=0), Logs().add_loss("loss", jnp.float32(0)))
    h.commit_stacked([Elapsed(steps=i) for i in (1, 2, 3)], Logs().add_loss("loss", jnp.arange(4.0)), start=1)
    h.commit(Elapsed(steps=4), Logs().add_loss("loss", jnp.float32(4)))
    h.commit_stacked([Elapsed(steps=5)], Logs().add_loss("loss", jnp.full(2, 5.0)), batch_sizes=[8])
    assert len(h) == 6
    assert h.collect("steps", "loss") == ([0, 1, 2, 3, 4, 5], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert h[5].batch_size == 8
    with pytest.raises(ValueError, match="no row for every step"):
        h.commit_stacked([Elapsed()] * 3, Logs().add_loss("loss", jnp.zeros(2)))


def test_fused_loop_never_syncs_with_the_host(monkeypatch):
    from tests.conftest import SyncDetector

    batches, init, step, _ = make_problem(n_batches=12)
    state = init()

    def run(state, history=None):
        bar = gyre.keras_bar(total=12, file=io.StringIO(), interval=0.0)
        return gyre.loop(state, batches, {gyre.every(1): [step, bar]}, history=history, steps_per_call=4)

    run(init())  # compile outside the detector
    detector = SyncDetector(monkeypatch)
    with jax.transfer_guard_device_to_host("disallow"):
        state, history, _ = run(state, gyre.history(flush_every=4, lag=2))
    monkeypatch.undo()
    assert len(history.collect("loss")) == 12 and detector.explicit >= 1


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
