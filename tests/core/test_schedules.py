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
