"""The planned engine: a table of a jitted step, events and observers runs in blocks, with the
step writing its logs into a device ring, and computes what the per-step path computes."""

import math
import os
import re
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre.core._history import block_clocks
from gyre.engine import _blocks
from gyre.engine._blocks import Plan


@jax.jit
def add_step(state, batch):
    state = state + batch.sum()
    return gyre.logs().add_metric("total", state).add_output("rows", batch), state


def plan_of(tasks, **kwargs):
    seen = []

    def peek(loop):
        seen.append(loop.plan)

    gyre.loop(jnp.float32(0), [np.ones(2, np.float32)] * 3, tasks, on_end=peek, **kwargs)
    return seen[0]


def test_the_plan_says_which_path_a_loop_takes_and_why():
    bar = gyre.keras_bar(total=3, file=None)
    assert plan_of({gyre.every(1): [add_step], **bar}) == Plan("blocks")
    steps = plan_of({gyre.every(1): [add_step, lambda: None]})
    assert steps.path == "steps" and "<lambda> runs on every step" in steps.reason
    assert plan_of({gyre.every(1): add_step}, steps_per_call=2).path == "fused"
    plain = plan_of({gyre.every(1): lambda state, batch: state})
    assert plain.path == "steps" and "no one jax.jit step on every step (" in plain.reason


def run(data, extra=(), **kwargs):
    """The same table in blocks, or on the per-step path (a host callback on every step)."""
    table = {gyre.every(1): [add_step, *extra]}
    state, history, elapsed = gyre.loop(jnp.float32(0), data, table, **kwargs)
    return float(state), history.to_records(), elapsed.steps, elapsed.samples


@pytest.mark.parametrize("steps_per_call, patches", [
    (1, {}), ("auto", {"HOST_BOUND": 0.0, "FASTER": math.inf}), ("auto", {"HOST_BOUND": 2.0, "SHORT_STEP": 0.0}),
    ("auto", {"HOST_BOUND": 2.0, "FASTER": math.inf}),  # a dispatch that looks cheap, but a short step: tried
])
def test_blocks_compute_what_the_per_step_path_computes_bit_for_bit(steps_per_call, patches, monkeypatch):
    for name, value in patches.items():  # "auto" that always fuses, never does, or tries a short step
        monkeypatch.setattr(_blocks, name, value)
    monkeypatch.setattr(_blocks, "_CHOSEN", weakref.WeakKeyDictionary())  # measured afresh
    # 800 batches: several blocks, and a last batch of another shape, whose logs (the rows
    # output) do not fit the ring: a new ring opens for it (fused, a chunk ends before it)
    data = [np.full(3, i % 7, np.float32) for i in range(800)] + [np.ones(2, np.float32)]
    plans = []
    blocks = run(data, steps_per_call=steps_per_call, on_end=lambda loop: plans.append(loop.plan))
    steps = run(data, extra=[lambda: None])
    assert blocks[0] == steps[0] and blocks[2:] == steps[2:] == (801, 2402)
    for a, b in zip(blocks[1], steps[1], strict=True):
        assert (a["steps"], a["samples"], a["total"]) == (b["steps"], b["samples"], b["total"])
        np.testing.assert_array_equal(a["rows"], b["rows"])
    assert plans[0].path == ("fused" if patches.get("FASTER") else "blocks")


def test_a_step_that_raises_in_a_block_hands_back_the_state_and_clock_before_it():
    calls = []

    def data():
        for i in range(40):
            calls.append(i)
            yield np.full(3, 1.0, np.float32) if i != 20 else np.ones((3, 3), np.float32)

    @jax.jit
    def fails_on_a_matrix(state, batch):
        return batch.reshape(3) + state  # a (3, 3) batch cannot be reshaped

    history = gyre.history()
    with pytest.raises(TypeError) as info:
        gyre.loop(jnp.zeros(3), data(), {gyre.every(1): fails_on_a_matrix}, history=history)
    assert info.value.elapsed.steps == 20
    np.testing.assert_array_equal(info.value.state, np.full(3, 20.0))


def test_steps_per_call_auto_is_checked_at_the_door():
    with pytest.raises(ValueError, match="steps_per_call='Auto' is not a number of steps"):
        gyre.loop(jnp.float32(0), [np.ones(2, np.float32)], {gyre.every(1): add_step}, steps_per_call="Auto")


@pytest.mark.parametrize("epoch_steps", [None, 1, 3, 7])
def test_a_blocks_clocks_are_those_of_its_steps_one_after_the_other(epoch_steps):
    rng = np.random.default_rng(0)
    starts = [0, 2] if epoch_steps is None else [*range(epoch_steps), epoch_steps + 2]
    for start in starts:  # (past the epoch's end: an epoch length changed on resume)
        first = gyre.Elapsed(steps=5, samples=10, epochs=2, step_in_epoch=start, time=1.5, date=9.0)
        sizes = [int(x) for x in rng.integers(1, 6, 20)]
        expected = [first]
        for size in sizes[:-1]:
            expected.append(expected[-1]._after(size, 1.5, 9.0, epoch_steps))
        clocks = _blocks.BlockClocks(first, sizes, epoch_steps)
        assert [c.to_dict() for c in clocks] == [c.to_dict() for c in expected]
        assert clocks[-1].to_dict() == expected[-1].to_dict() and len(clocks[3:7]) == 4


def test_a_time_schedule_is_asked_at_block_ends_and_ends_the_block_when_its_time_comes():
    ticks = iter(np.arange(0.0, 1e4, 0.05))  # every read of the clock: 50 ms later
    fired, plans = [], []

    def note(elapsed, loop):
        fired.append((elapsed.steps, elapsed.time))
        plans.append(loop.plan.path)

    gyre.loop(
        jnp.float32(0), [np.ones(2, np.float32)] * 200, {gyre.every(1): add_step, gyre.every(time=1.0): note},
        clock=lambda: float(next(ticks)),
    )
    assert set(plans) == {"blocks"} and fired[0][0] == 0
    times = [t for _, t in fired]
    # once per second of the loop's clock, each time after the second it fires for has come
    assert [int(t) for t in times] == list(range(len(times))) and len(times) >= 9


def test_an_observer_on_a_time_schedule_runs_at_block_ends():
    ticks = iter(np.arange(0.0, 1e4, 0.05))
    shown = []

    class Dots(gyre.ChunkSafe):
        def __call__(self, elapsed):
            shown.append(elapsed.steps)

    gyre.loop(
        jnp.float32(0), [np.ones(2, np.float32)] * 100, {gyre.every(1): add_step, gyre.every(time=1.0): Dots()},
        clock=lambda: float(next(ticks)),
    )
    assert shown and shown[0] > 0 and shown == sorted(set(shown))


@pytest.mark.parametrize("epoch_steps", [None, 1, 2, 5, 7])
def test_a_blocks_last_clock_is_the_clock_its_steps_reach_one_by_one(epoch_steps):
    """The loop's clock after a block is computed without the block's clock columns: it is
    the clock that as many single steps reach, and the last row of those columns."""
    rng = np.random.default_rng(epoch_steps or 0)
    for _ in range(200):
        first = gyre.Elapsed(steps=int(rng.integers(100)), samples=int(rng.integers(1000)),
                             epochs=int(rng.integers(3)), step_in_epoch=int(rng.integers(12)))
        sizes = [int(s) for s in rng.integers(1, 9, size=int(rng.integers(1, 40)))]
        clock = first
        for size in sizes[:-1]:
            clock = clock._after(size, first.time, first.date, epoch_steps)
        last = _blocks.BlockClocks(first, sizes, epoch_steps)[-1]
        assert last == clock
        columns = block_clocks(first, sizes, epoch_steps)  # what the history records
        assert [last.steps, last.samples, last.epochs, last.step_in_epoch] == [
            int(columns[name][-1]) for name in ("steps", "samples", "epochs", "step_in_epoch")]


def test_a_blocks_last_row_comes_from_its_seal_and_only_for_callbacks_that_read_logs(monkeypatch):
    from gyre.engine import _chunks, _ring

    taken, sealed = [], []
    original_row, original_seal = _chunks._row, _ring.Ring.seal
    monkeypatch.setattr(_chunks, "_row", lambda logs, i: (taken.append(i), original_row(logs, i))[1])
    monkeypatch.setattr(_ring.Ring, "seal", lambda self, *, last=False: (sealed.append(last), original_seal(self, last=last))[1])
    data = [np.full(2, i, np.float32) for i in range(12)]

    def run(*observers):
        taken.clear(), sealed.clear()
        _, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): add_step, gyre.every(4): list(observers)})
        return history

    with open(os.devnull, "w") as sink:
        run(gyre.keras_bar(total=12, file=sink), gyre.write_to(gyre.ConsoleWriter(sink)))
    assert sealed == [False] and taken == []  # they read the history: no last row for them

    class Reads(gyre.ChunkSafe):
        def __call__(self, elapsed, logs):
            seen.append((elapsed.steps, float(logs["metrics"]["total"]), np.asarray(logs["outputs"]["rows"]).tolist()))

    seen = []
    run(Reads())
    # an observer runs once per block, at its last step; the row comes with the seal, no other call
    assert seen == [(11, 132.0, [11.0, 11.0])] and sealed == [True] and taken == []

    class Adds(gyre.ChunkSafe):  # reads nothing, logs something: the last row gets both
        def __call__(self, elapsed):
            return gyre.logs().add_metric("seen_at", elapsed.steps)

    history = run(Adds())
    assert history.collect("steps", "total", "seen_at") == ([11], [132.0], [11])
    assert len(history.collect("total")) == 12 and taken == []


def test_auto_measures_once_per_step_and_shapes_and_later_loops_take_its_choice(monkeypatch):
    monkeypatch.setattr(_blocks, "HOST_BOUND", 0.0)
    monkeypatch.setattr(_blocks, "FASTER", math.inf)  # fusing always "pays": the choice is visible
    monkeypatch.setattr(_blocks, "_CHOSEN", weakref.WeakKeyDictionary())
    timed = []
    original = _blocks.BlockRunner.timed
    monkeypatch.setattr(_blocks.BlockRunner, "timed", lambda self: (timed.append(1), original(self))[1])
    data = [np.full(3, i % 7, np.float32) for i in range(300)]
    plans, results = [], []
    for _ in range(2):
        state, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): add_step}, steps_per_call="auto",
                                      on_end=lambda loop: plans.append(loop.plan))
        results.append((float(state), history.collect("total")))
    assert len(timed) == 2  # the per-step block and the fused chunk, in the first loop only
    assert plans[0].path == plans[1].path == "fused"
    assert "earlier loop" in plans[1].reason and "earlier loop" not in plans[0].reason
    assert results[0] == results[1]
    gyre.loop(jnp.float32(0), [np.ones(5, np.float32)] * 300, {gyre.every(1): add_step}, steps_per_call="auto")
    assert len(timed) == 4  # other shapes: measured again


def test_auto_says_in_the_plan_why_it_ran_one_step_per_call(monkeypatch):
    # was: Plan(path='blocks', reason=None) whatever the cause (too short a run, a compute-bound step)
    monkeypatch.setattr(_blocks, "_CHOSEN", weakref.WeakKeyDictionary())
    plans = []

    def run(n, data=None):
        data = data if data is not None else [np.full(3, i % 7, np.float32) for i in range(n)]
        gyre.loop(jnp.float32(0), data, {gyre.every(1): add_step}, steps_per_call="auto",
                  on_end=lambda loop: plans.append(loop.plan))
        return plans[-1]

    assert run(10) == ("blocks", "steps_per_call='auto' ran one step per call: the run ended before its steps were timed")
    monkeypatch.setattr(_blocks, "HOST_BOUND", math.inf)  # no step is host-bound
    monkeypatch.setattr(_blocks, "SHORT_STEP", 0.0)
    assert re.fullmatch(r"steps_per_call='auto' ran one step per call: a step takes \d+ us, its call \d+ of them, "
                        r"so fusing would not pay", run(60, [np.ones(4, np.float32)] * 60).reason)
    monkeypatch.setattr(_blocks, "HOST_BOUND", 0.0)
    monkeypatch.setattr(_blocks, "FASTER", 0.0)  # fusing never pays
    assert re.fullmatch(r"steps_per_call='auto' ran one step per call: \d+ us per step fused against \d+",
                        run(300, [np.ones(5, np.float32)] * 300).reason)
    assert run(300, [np.ones(5, np.float32)] * 300).reason.endswith("(measured by an earlier loop over this step)")


@pytest.mark.parametrize("batch_size_fn", [None, lambda batch: batch.shape[0]])
def test_samples_are_the_same_whether_the_ring_or_the_host_sizes_the_batches(batch_size_fn):
    """The default size function runs while the ring step is traced (its result is part of the
    call's output); a batch_size_fn runs on the host each step: the same clock either way, a
    smaller batch mid-block and a step that raises included."""

    @jax.jit
    def step(state, batch):
        if batch.shape[0] == 2:
            raise ValueError("no batch of 2")
        return gyre.logs().add_loss("loss", batch.sum()), state + 1

    data = [np.ones(4, np.float32)] * 3 + [np.ones(3, np.float32)] + [np.ones(4, np.float32)] * 2 + [np.ones(2, np.float32)]
    history = gyre.history()
    with pytest.raises(ValueError, match="no batch of 2") as info:
        gyre.loop(jnp.float32(0), data, {gyre.every(1): step}, history=history, batch_size_fn=batch_size_fn)
    assert history.collect("samples") == [0, 4, 8, 12, 15, 19] and float(info.value.state) == 6
    _, history, elapsed = gyre.loop(jnp.float32(0), data[:-1], {gyre.every(1): step}, batch_size_fn=batch_size_fn)
    assert (elapsed.steps, elapsed.samples) == (6, 23) and history.batch_sizes() == [4, 4, 4, 3, 4, 4]


def _roll(state):
    """A task between steps: ``(state) -> (logs, state)``, reading and changing the state only."""
    return gyre.logs().add_metric("rolled", state * 2).add_stateful_metric("seen", state), state - 1.0


def _between(state):
    return _roll(state)


_between._between_steps = True


class Ends(gyre.ChunkSafe):
    """An observer that counts block ends (it runs once per block)."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1


@pytest.mark.parametrize("steps_per_call", [1, 4, "auto"])
def test_a_task_between_steps_computes_what_an_event_computes_without_ending_blocks(steps_per_call, monkeypatch):
    if steps_per_call == "auto":  # measured in blocks, then fused (the tasks between steps become events)
        monkeypatch.setattr(_blocks, "HOST_BOUND", 0.0)
        monkeypatch.setattr(_blocks, "FASTER", math.inf)
        monkeypatch.setattr(_blocks, "_CHOSEN", weakref.WeakKeyDictionary())
    # on every(3) and at each epoch's end (both solved in advance), beside an event on every(5)
    # that ends blocks (so the task also runs on a block's first and last steps): the history,
    # state and clock are those of the same callback run as an event, bit for bit
    data = [np.full(2, i, np.float32) for i in range(40)]

    def event(state):
        return gyre.logs().add_metric("event", state), state

    runs = []
    for roll in (_roll, _between):
        ends = Ends()
        table = {gyre.every(1): [add_step, ends], gyre.every(3): roll, gyre.every(epochs=1): roll, gyre.every(5): event}
        state, history, elapsed = gyre.loop(jnp.float32(0), data, table, epoch_duration=7, steps_per_call=steps_per_call)
        records = [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in r.items() if k not in ("time", "date")}
                   for r in history.to_records()]  # (the time: blocks end at other steps)
        runs.append((float(state), records, elapsed.replace(time=0.0, date=0.0), ends.calls))
    (state_a, records_a, clock_a, ends_a), (state_b, records_b, clock_b, ends_b) = runs
    assert (state_a, records_a, clock_a) == (state_b, records_b, clock_b)
    rolled = [r["steps"] for r in records_b if "rolled" in r]
    # every(5) ends blocks after steps 0, 5, 10...: 6 is a block's first step, 15 its last, 7
    # an epoch's end, 21 both schedules' step
    assert {6, 7, 15, 21} <= set(rolled) and len(rolled) == 18
    if steps_per_call == 1:
        assert ends_b < ends_a  # the tasks between steps no longer end blocks (a fused call runs them as events)


def test_a_task_between_steps_may_not_log_a_name_the_step_logs():
    def clash(state):
        return gyre.logs().add_metric("total", state), state

    clash._between_steps = True
    with pytest.raises(ValueError, match="repeat the step's entry metrics.total"):
        gyre.loop(jnp.float32(0), [np.ones(2, np.float32)] * 6, {gyre.every(1): add_step, gyre.every(2): clash})


def test_a_task_between_steps_that_raises_leaves_the_steps_it_ran_after_counted():
    def roll(state):
        if state > 50:  # (a host read: the task runs on the host between two calls)
            raise RuntimeError("the task failed")
        return gyre.logs().add_metric("rolled", state), state - 1.0

    roll._between_steps = True
    history = gyre.history()
    with pytest.raises(RuntimeError, match="the task failed"):
        gyre.loop(jnp.float32(0), [np.full(2, i, np.float32) for i in range(40)],
                  {gyre.every(1): add_step, gyre.every(3): roll}, history=history)
    # steps 0..9 ran (the task failed after step 9, when the state passed 50); each is counted
    assert history.collect("steps", "total") == (list(range(10)), [0.0, 1.0, 5.0, 11.0, 18.0, 28.0, 40.0, 53.0, 69.0, 87.0])
    assert history.collect("steps", "rolled") == ([0, 3, 6], [0.0, 11.0, 40.0])


class Counted(gyre.TrainState):
    """A state with a field of its own, for the structured-state test."""

    seen: jax.Array


def test_a_structured_state_travels_as_its_leaves_within_a_block_and_comes_back_whole():
    # a flax dataclass state (static apply_fn and tx, an optax namedtuple inside) goes to the
    # ring step as its leaves; at the block's end and to tasks between steps it is the object
    # again, with its static fields; a task that replaces the state's structure is followed
    tx = optax.sgd(0.1)
    state = Counted.create(params={"w": jnp.ones(2)}, tx=tx, rng=0, seen=jnp.int32(0))

    @jax.jit
    def train(state, batch):
        new = state.apply_gradients(grads={"w": batch}).replace(seen=state.seen + 1)
        return gyre.logs().add_metric("w0", new.params["w"][0]), new

    seen = []

    def between(state):
        seen.append((type(state).__name__, state.tx is tx, int(state.seen)))
        return gyre.logs(), state

    between._between_steps = True
    data = [np.full(2, 0.5, np.float32)] * 9
    plans = []
    out, history, _ = gyre.loop(state, data, {gyre.every(1): train, gyre.every(4): between},
                                on_end=lambda loop: plans.append(loop.plan))
    assert plans[0].path == "blocks" and isinstance(out, Counted) and out.tx is tx and int(out.seen) == 9
    assert seen == [("Counted", True, 1), ("Counted", True, 5), ("Counted", True, 9)]
    np.testing.assert_allclose(history.collect("w0"), 1.0 - 0.05 * np.arange(1, 10), rtol=1e-6)

    @jax.jit
    def add(state, batch):
        return gyre.logs().add_metric("total", state["total"]), {**state, "total": state["total"] + batch.sum()}

    def grow(state):  # between steps, once: the state gains an entry
        return gyre.logs(), state if "extra" in state else gyre.replace_state({**state, "extra": jnp.int32(7)})

    grow._between_steps = True
    grown, history, _ = gyre.loop({"total": jnp.float32(0)}, data, {gyre.every(1): add, gyre.every(3): grow},
                                  on_end=lambda loop: plans.append(loop.plan))
    assert plans[1].path == "blocks" and sorted(grown) == ["extra", "total"] and float(grown["total"]) == 9.0
    assert history.collect("total") == [float(i) for i in range(9)]


def test_a_state_of_none_is_made_by_the_first_step_in_a_block():
    # a state of None takes any structure (check_structure): the ring step's first call makes
    # it, and the block goes on with the leaves of the state it made
    @jax.jit
    def start(state, batch):
        total = batch.sum() if state is None else state["total"] + batch.sum()
        return gyre.logs().add_metric("total", total), {"total": total}

    plans = []
    out, history, _ = gyre.loop(None, [np.ones(2, np.float32)] * 5, {gyre.every(1): start},
                                on_end=lambda loop: plans.append(loop.plan))
    assert plans == [Plan("blocks")] and float(out["total"]) == 10.0
    assert history.collect("total") == [2.0, 4.0, 6.0, 8.0, 10.0]


@pytest.mark.parametrize("steps_per_call", [1, 3, 4, 8])
def test_a_callback_at_an_event_reads_the_history_of_every_step_before_it(steps_per_call):
    # a block's (or fused chunk's) rows were committed after the tasks at its last step ran, so
    # a callback reading loop.history at step 5 saw step 0 alone with blocks (steps 0-3 with
    # steps_per_call=3), where step by step it sees steps 0 to 4
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", batch.sum() + state), state + 1.0

    def python_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.asarray(batch.sum() + state)), state + 1.0

    def run(train_step, **kwargs):
        seen = []

        def look(loop, elapsed):
            seen.append((elapsed.steps, loop.history.collect("steps"), loop.history.collect("loss")))

        data = [np.full(2, i, np.float32) for i in range(23)]
        _, history, _ = gyre.loop(jnp.float32(0), data, {gyre.every(1): train_step, gyre.every(5): look}, **kwargs)
        return seen, history.collect("steps", "loss")

    expected, records = run(python_step)  # step by step
    assert [steps for _, steps, _ in expected][1] == [0, 1, 2, 3, 4]
    assert run(step, steps_per_call=steps_per_call) == (expected, records)
