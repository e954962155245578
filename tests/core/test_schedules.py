import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.core._clock import Elapsed


def fired(schedule, clocks):
    return [i for i, e in enumerate(clocks) if schedule(e)]


def steps(n):
    return [Elapsed(steps=i) for i in range(n)]


def test_every_steps_fires_on_multiples_including_zero():
    assert fired(gyre.every(3), steps(10)) == [0, 3, 6, 9]
    assert fired(gyre.every(steps=1), steps(3)) == [0, 1, 2]


def test_every_epochs_fires_on_first_step_of_each_nth_epoch():
    # 3 steps per epoch: the clock at each step index.
    clocks = [Elapsed(steps=i, epochs=i // 3, step_in_epoch=i % 3) for i in range(12)]
    assert fired(gyre.every(epochs=1), clocks) == [0, 3, 6, 9]
    assert fired(gyre.every(epochs=2), clocks) == [0, 6]


def test_every_samples_fires_when_crossing_multiples():
    # batch of 48 samples: samples at step start 0, 48, 96, 144, 192, 240, 288
    clocks = [Elapsed(steps=i, samples=48 * i) for i in range(7)]
    assert fired(gyre.every(samples=100), clocks) == [0, 3, 5]


def test_every_time_with_injected_clock_and_state_dict():
    times = [0.0, 0.4, 1.1, 1.2, 2.5, 2.6, 5.0]
    clocks = [Elapsed(steps=i, time=t) for i, t in enumerate(times)]
    s = gyre.every(time=1.0)
    assert fired(s, clocks) == [0, 2, 4, 6]
    # state survives a round trip: a restored copy does not fire again in the same bucket
    restored = gyre.every(time=1.0)
    restored.load_state_dict(s.state_dict())
    assert restored(Elapsed(time=5.5)) is False
    assert restored(Elapsed(time=6.0)) is True


def test_after_and_refinements():
    assert fired(gyre.after(steps=3), steps(6)) == [3, 4, 5]
    assert fired(gyre.after(steps=50).every(100), steps(300)) == [50, 150, 250]
    assert fired(gyre.after(steps=5).then(gyre.every(2)), steps(10)) == [5, 7, 9]
    assert fired(gyre.after(steps=5) >> gyre.every(3), steps(12)) == [5, 8, 11]


def test_after_time_with_injected_clock():
    clocks = [Elapsed(steps=i, time=0.5 * i) for i in range(6)]
    assert fired(gyre.after(time=1.2), clocks) == [3, 4, 5]


def test_then_on_refined_after_is_an_error():
    with pytest.raises(TypeError, match="bare after"):
        gyre.after(steps=1).every(2).then(gyre.always())


def test_piecewise_switches_and_counts_from_switch():
    s = gyre.piecewise(gyre.every(1), {gyre.at(steps=4): gyre.every(3), gyre.at(steps=10): gyre.never()})
    assert fired(s, steps(14)) == [0, 1, 2, 3, 4, 7]


def test_piecewise_state_round_trip():
    s = gyre.piecewise(gyre.never(), {gyre.at(steps=2): gyre.every(2)})
    fired(s, steps(3))
    other = gyre.piecewise(gyre.never(), {gyre.at(steps=2): gyre.every(2)})
    other.load_state_dict(s.state_dict())
    assert [other(Elapsed(steps=i)) for i in (3, 4)] == [False, True]


def test_always_never():
    assert fired(gyre.always(), steps(3)) == [0, 1, 2]
    assert fired(gyre.never(), steps(3)) == []


def test_algebra():
    assert fired(gyre.every(2) & gyre.every(3), steps(13)) == [0, 6, 12]
    assert fired(gyre.every(4) | gyre.every(6), steps(13)) == [0, 4, 6, 8, 12]
    assert fired(~gyre.every(2), steps(6)) == [1, 3, 5]
    # plain callables join the algebra on either side
    odd = lambda e: e.steps % 2 == 1  # noqa: E731
    assert fired(odd & gyre.every(3), steps(10)) == [3, 9]
    assert fired(gyre.every(5) | odd, steps(6)) == [0, 1, 3, 5]


def test_algebra_does_not_short_circuit_stateful_operands():
    stateful = gyre.every(samples=10)
    s = gyre.never() & stateful
    clocks = [Elapsed(steps=i, samples=4 * i) for i in range(6)]
    assert fired(s, clocks) == []
    # the stateful operand saw every step: its last bucket is samples 20 // 10 = 2
    assert stateful.state_dict() == {"last": 2}


def test_any_callable_is_a_schedule_in_a_loop():
    seen = []
    gyre.loop(None, range(6), {(lambda e: e.steps in (1, 4)): [lambda elapsed: seen.append(elapsed.steps)]})
    assert seen == [1, 4]


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: gyre.every(), "exactly one"),
        (lambda: gyre.every(2, samples=3), "exactly one"),
        (lambda: gyre.every(0), "whole number >= 1"),
        (lambda: gyre.every(-3), "whole number >= 1"),
        (lambda: gyre.every(time=0.0), "seconds > 0"),
        (lambda: gyre.every(time=float("inf")), "seconds > 0"),
        (lambda: gyre.every(1.5), "must be a whole number >= 1"),
        (lambda: gyre.every(True), "whole number"),
        (lambda: gyre.piecewise(gyre.always(), {3: gyre.always()}), "periods"),
        (lambda: gyre.as_schedule(3), "callable"),
    ],
)
def test_bad_schedules(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()


@pytest.mark.parametrize("n", [np.int64(3), np.int32(3), np.array(3), jnp.array(3), jnp.int32(3)])
def test_numpy_and_jax_integers_are_whole_numbers(n):
    s = gyre.every(n)
    assert [i for i in range(10) if s(Elapsed(steps=i))] == [0, 3, 6, 9]
    assert gyre.every(epochs=n).amount == 3 and type(gyre.every(samples=n).amount) is int
    assert gyre.every(time=np.float32(1.5)).amount == 1.5


# -- the contract table: every schedule through the same checks ---------------------------------
#
# One fixed run of 16 steps: batches of 3 samples, epochs of 4 steps, and the seconds at which
# each step starts. Each row gives a schedule (built fresh for each use), the steps it fires on
# over that run, and the clock counters its reads() names. Every row is checked asked directly
# on the clocks, inside gyre.loop (the same steps, the same clocks), and across a
# state_dict() / load_state_dict() round trip in the middle of the run, directly and between
# two loops (a resumed run fires where the uninterrupted one does).

N = 16
TIMES = [0.0, 0.4, 0.9, 1.3, 1.5, 2.2, 2.3, 3.1, 3.2, 3.3, 4.6, 5.0, 5.1, 6.7, 6.8, 7.0]
CLOCKS = [Elapsed(steps=i, samples=3 * i, epochs=i // 4, step_in_epoch=i % 4, time=TIMES[i]) for i in range(N)]
REFUSES = "refuses to be asked"


class EveryThirdAsk(gyre.Schedule):
    """A user's own stateful schedule: fires on the first of every three times it is asked."""

    def __init__(self):
        self.asked = 0

    def __call__(self, elapsed):
        self.asked += 1
        return self.asked % 3 == 1

    def reads(self):
        return frozenset()

    def state_dict(self):
        return {"asked": self.asked}

    def load_state_dict(self, state):
        self.asked = state["asked"]


def _listed(elapsed):
    return elapsed.steps in (2, 3, 11)


ALL = list(range(N))
SCHEDULES = {  # name: (make, fires on, reads)
    "every(4)": (lambda: gyre.every(4), [0, 4, 8, 12], {"steps"}),
    "every(samples=7)": (lambda: gyre.every(samples=7), [0, 3, 5, 7, 10, 12, 14], {"samples"}),
    "every(epochs=2)": (lambda: gyre.every(epochs=2), [0, 8], {"epochs", "step_in_epoch"}),
    "every(time=2.0)": (lambda: gyre.every(time=2.0), [0, 5, 10, 13], {"time"}),
    "after(steps=6)": (lambda: gyre.after(steps=6), list(range(6, N)), {"steps"}),
    "after(samples=20).every(3)": (lambda: gyre.after(samples=20).every(3), [7, 10, 13], {"samples", "steps"}),
    "after(epochs=1) >> every(samples=9)": (
        lambda: gyre.after(epochs=1) >> gyre.every(samples=9), [4, 7, 10, 13], {"epochs", "samples"}),
    "piecewise": (
        lambda: gyre.piecewise(gyre.every(5), {gyre.at(steps=6): gyre.every(2), gyre.at(time=5.0): gyre.never()}),
        [0, 5, 6, 8, 10], {"steps", "time"}),
    "always()": (gyre.always, ALL, set()),
    "never()": (gyre.never, [], set()),
    "every(2) & every(samples=10)": (lambda: gyre.every(2) & gyre.every(samples=10), [0, 4, 10, 14], {"steps", "samples"}),
    "every(6) | every(epochs=3)": (lambda: gyre.every(6) | gyre.every(epochs=3), [0, 6, 12], {"steps", "epochs", "step_in_epoch"}),
    "~every(time=3.0)": (lambda: ~gyre.every(time=3.0), [i for i in ALL if i not in (0, 7, 13)], {"time"}),
    "a plain function": (lambda: _listed, [2, 3, 11], None),
    "a Schedule subclass with state": (EveryThirdAsk, [0, 3, 6, 9, 12, 15], set()),
    "NamedSchedule": (lambda: gyre.on_train_step, REFUSES, set()),
}
NAMES = list(SCHEDULES)


def _fired(schedule, clocks):
    return [e.steps for e in clocks if schedule(e)]


def _run(make, schedule, *, stop=None, elapsed=None, history=None):
    """gyre.loop over the fixed run; returns the steps the schedule fired on, the clocks the
    steps saw and the loop's (history, elapsed)."""
    fired, clocks = [], []
    first = 0 if elapsed is None else elapsed.steps
    _NOW[0] = TIMES[first]

    def tick(elapsed):  # the injected clock says when the next step starts
        clocks.append((elapsed.steps, elapsed.samples, elapsed.epochs, elapsed.step_in_epoch, elapsed.time))
        _NOW[0] = TIMES[min(elapsed.steps + 1, N - 1)]

    tasks = {schedule: lambda elapsed: fired.append(elapsed.steps), gyre.always(): tick}
    _, history, elapsed = gyre.loop(
        None, range(first, N), tasks, stop=stop, elapsed=elapsed, history=history,
        batch_size_fn=lambda batch: 3, epoch_duration=4, clock=lambda: _NOW[0],
    )
    return fired, clocks, elapsed


_NOW = [0.0]


@pytest.mark.parametrize("name", NAMES)
def test_each_schedule_fires_on_its_steps(name):
    make, expected, _ = SCHEDULES[name]
    schedule = gyre.as_schedule(make())
    if expected == REFUSES:
        with pytest.raises(TypeError, match="evaluated as a plain schedule"):
            schedule(CLOCKS[0])
        return
    assert _fired(schedule, CLOCKS) == expected


@pytest.mark.parametrize("name", NAMES)
def test_each_schedule_says_what_it_reads(name):
    make, _, reads = SCHEDULES[name]
    got = gyre.as_schedule(make()).reads()
    assert got == (None if reads is None else frozenset(reads))


@pytest.mark.parametrize("name", NAMES)
def test_each_schedule_fires_on_the_same_steps_in_a_loop(name):
    make, expected, _ = SCHEDULES[name]
    if expected == REFUSES:
        with pytest.raises(TypeError, match="train_loop"):
            _run(make, make())
        return
    fired, clocks, elapsed = _run(make, make())
    assert clocks == [(e.steps, e.samples, e.epochs, e.step_in_epoch, e.time) for e in CLOCKS]
    assert fired == expected and elapsed.steps == N


@pytest.mark.parametrize("name", NAMES)
def test_a_state_dict_round_trip_mid_run_gives_the_same_later_firings(name):
    make, expected, _ = SCHEDULES[name]
    for middle in range(1, N):
        first = gyre.as_schedule(make())
        if expected == REFUSES:
            saved = first.state_dict()
            assert saved == {}
            first.load_state_dict(saved)
            with pytest.raises(TypeError):
                first(CLOCKS[middle])
            return
        before = _fired(first, CLOCKS[:middle])
        saved = json.loads(json.dumps(first.state_dict()))  # plain data, as a checkpoint keeps it
        resumed = gyre.as_schedule(make())
        resumed.load_state_dict(saved)
        after = _fired(resumed, CLOCKS[middle:])
        assert before + after == expected, f"resumed at step {middle}"


@pytest.mark.parametrize("name", [n for n in NAMES if SCHEDULES[n][1] != REFUSES])
@pytest.mark.parametrize("middle", [5, 7, 11])
def test_a_loop_resumed_from_its_state_dict_fires_as_one_never_interrupted(name, middle):
    make, expected, _ = SCHEDULES[name]
    schedule = make()
    fired, _, elapsed = _run(make, schedule, stop=middle)
    assert elapsed.steps == middle
    saved = json.loads(json.dumps(gyre.as_schedule(schedule).state_dict()))
    again = make()  # a new process builds its table anew, then loads what was saved
    gyre.as_schedule(again).load_state_dict(saved)
    later, clocks, final = _run(make, again, elapsed=elapsed)
    assert clocks[0][:4] == (middle, 3 * middle, middle // 4, middle % 4) and clocks[0][4] == TIMES[middle]
    assert fired + later == expected and final.steps == N


def test_the_table_covers_every_schedule_factory():
    factories = {"every", "after", "piecewise", "always", "never", "as_schedule"}
    assert factories <= set(gyre.__all__)
    kinds = {type(gyre.as_schedule(make())).__name__ for make, _, _ in SCHEDULES.values()}
    assert {"Every", "Piecewise", "_Always", "_Never", "_And", "_Or", "_Not", "_Function", "NamedSchedule"} <= kinds


@jax.jit
def _count_step(state, batch):
    return None, state + 1


@pytest.mark.parametrize("position", ["before the step", "after the step"])
@pytest.mark.parametrize(
    "name", [n for n in NAMES if SCHEDULES[n][1] != REFUSES and "time" not in (SCHEDULES[n][2] or ())]
)
def test_fused_chunks_end_where_each_schedule_fires(name, position):
    """steps_per_call cuts chunks where a schedule fires, so it fires on the same steps (each
    schedule is asked once per step, in order); time-based schedules are checked at chunk ends
    only (documented), so they are left out here."""
    make, expected, _ = SCHEDULES[name]
    fired = []
    record = {make(): lambda elapsed: fired.append(elapsed.steps)}
    step = {gyre.every(1): _count_step}
    tasks = {**record, **step} if position == "before the step" else {**step, **record}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gyre.LoopWarning)  # always() cuts chunks to one step
        state, _, elapsed = gyre.loop(
            jnp.int32(0), range(N), tasks, batch_size_fn=lambda batch: 3, epoch_duration=4,
            steps_per_call=4,
        )
    assert fired == expected and elapsed.steps == N and int(jax.device_get(state)) == N


@pytest.mark.parametrize("second", [gyre.at(steps=5), gyre.at(steps=10, time=9.0), gyre.at(steps=4, epochs=9)])
def test_piecewise_refuses_pieces_out_of_order_or_at_the_same_point(second):
    # out of order, the first piece would never run: the later-listed one stays active
    with pytest.raises(ValueError, match=r"(?s)piecewise\(\) pieces must be listed in increasing order.*sort"):
        gyre.piecewise(gyre.never(), {gyre.at(steps=10): gyre.every(5), second: gyre.every(2)})


def test_piecewise_accepts_pieces_it_cannot_order():
    s = gyre.piecewise(gyre.never(), {gyre.at(epochs=2): gyre.always(), gyre.at(steps=5): gyre.never()})
    assert s(Elapsed(steps=2, epochs=2)) and not s(Elapsed(steps=5, epochs=2))


@pytest.mark.parametrize("make", [lambda: gyre.every("10"), lambda: gyre.every(epochs="1"),
                                  lambda: gyre.every(time="60"), lambda: gyre.at(steps="10"),
                                  lambda: gyre.after(steps="3")])
def test_a_schedule_given_a_string_is_refused(make):
    with pytest.raises(ValueError, match=r"(?s)must be .*received: str"):
        make()
    with pytest.raises(TypeError, match=r"unknown schedule 'every' in the task table"):
        gyre.loop(0, [1], {"every": lambda state: state})


@pytest.mark.filterwarnings("ignore:steps_per_call=4 cannot fuse this table:gyre.LoopWarning")  # every(samples=...)
def test_a_schedule_reused_in_a_new_loop_starts_anew():
    # a table built once and run twice (a notebook cell run again, a helper's schedule): the
    # stateful schedules kept the first loop's switch points and last firings, so the second
    # loop fired after(steps=5) from step 0 and every(samples=...) never
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_metric("b", batch.sum()), state + 1

    schedules = {
        "after": (gyre.after(steps=5), [5, 6, 7, 8, 9, 10, 11]),
        "after_every": (gyre.after(steps=5).every(3), [5, 8, 11]),
        "piecewise": (gyre.piecewise(gyre.every(1), {gyre.at(steps=4): gyre.every(3)}), [0, 1, 2, 3, 4, 7, 10]),
        "samples": (gyre.every(samples=9), [0, 3, 6, 9]),
        "time": (gyre.every(time=1.0), [0, 4, 8]),
    }
    data = [np.ones(3, np.float32)] * 12
    for name, (schedule, expected) in schedules.items():
        for steps_per_call in (1, 1, 4):
            seen, ticks = [], iter(range(1000))
            gyre.loop(jnp.int32(0), data, {gyre.every(1): step, schedule: lambda elapsed, seen=seen: seen.append(elapsed.steps)},
                      steps_per_call=steps_per_call, clock=lambda ticks=ticks: next(ticks) / 4)
            if name != "time":  # (a fused chunk reads the clock less often)
                assert seen == expected, (name, steps_per_call, seen)
            else:
                assert seen[0] == 0, (name, steps_per_call, seen)
    s = gyre.every(samples=10)  # a clock that continues (elapsed= of the loop before) goes on counting
    assert [s(gyre.Elapsed(steps=i, samples=4 * i)) for i in range(6)] == [True, False, False, True, False, True]
    assert not s(gyre.Elapsed(steps=6, samples=24)) and s(gyre.Elapsed(steps=0, samples=0))
