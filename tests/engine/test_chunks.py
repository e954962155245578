"""steps_per_call (gyre.engine._chunks): fused chunks give the same parameters, per-step history
and callback calls as step by step."""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from tests.engine._helpers import add_step, assert_same_history, assert_same_tree, make_problem

# On CPU the scan runs the very same computation per step: results are bit-identical.


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
        fusing = pytest.warns(gyre.LoopWarning, match="cannot fuse this table") if k > 1 else contextlib.nullcontext()
        with fusing:  # a plain function schedule cannot say when it fires: step by step, said once
            _, history, _ = gyre.loop(jnp.float32(0), data, tasks, steps_per_call=k)
        calls[k] = (log, history.collect("steps", "extra"), history.collect("total"))
    # every(5) before the step fires on 0 and 5, `schedule` after it on 0, 3, 6, 9
    log, extra, total = calls[4]
    assert log == [
        ("before", 0), (0, 0.0, 0.0), (3, 6.0, 3.0), ("before", 5), (6, 21.0, 6.0), (9, 45.0, 9.0),
    ]
    assert calls[4] == calls[1] and seen[4] == seen[1] == list(range(10))
    assert extra == ([0, 3, 6, 9], [0, 3, 6, 9])
    assert total == [float(sum(range(i + 1))) for i in range(10)]


# a stop checked every 2 steps, on purpose
@pytest.mark.filterwarnings("ignore:steps_per_call=.*cannot fuse this table:gyre.LoopWarning")
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


class Marks(gyre.ChunkSafe):
    def __init__(self):
        self.steps = []

    def __call__(self, elapsed):
        self.steps.append(elapsed.steps)


def test_a_callback_on_every_step_runs_the_fused_loop_step_by_step_and_says_so():
    log = []
    with pytest.warns(gyre.LoopWarning, match="cannot fuse this table, so it runs step by step"):
        gyre.loop(jnp.float32(0), [np.float32(1)] * 8, {gyre.every(1): [add_step, lambda elapsed: log.append(elapsed.steps)]}, steps_per_call=4)
    assert log == list(range(8))  # a plain callback on every step: run on every step


def test_a_chunk_safe_callback_runs_once_per_chunk_with_its_last_step():
    marks = Marks()  # a ChunkSafe callback runs once per chunk, with its last step
    gyre.loop(jnp.float32(0), [np.float32(1)] * 4, {gyre.every(1): [marks, add_step]}, steps_per_call=2)
    assert marks.steps == [1, 3]


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


def test_a_second_fused_train_loop_with_the_same_step_does_not_warn_it_trains_nothing():
    import warnings

    @jax.jit
    def step(state, batch):  # a fresh step: its fused scans are compiled by the first loop
        return gyre.logs().add_metric("s", state), state + batch

    data = [np.float32(1)] * 8
    for _ in range(2):  # the second loop reuses the fused scans the first one traced
        with warnings.catch_warnings():
            warnings.simplefilter("error", gyre.LoopWarning)
            state, _, _ = gyre.train_loop(jnp.float32(0), data, {gyre.on_train_step: step}, steps_per_call=4)
        assert float(state) == 8.0
    only_logs = jax.jit(lambda state, batch: gyre.logs().add_metric("s", batch))
    for _ in range(2):  # a step that truly returns no state is still reported, every time
        with pytest.warns(gyre.LoopWarning, match="trains nothing"):
            gyre.train_loop(jnp.float32(0), data, {gyre.on_train_step: only_logs}, steps_per_call=4)
