"""fit's and the trainer's schedules solve in advance (next_step) what they compute step by step."""

import pytest

from gyre.core._clock import Elapsed
from gyre.core._schedules import EpochEnds, periodic


def clocks(epoch_steps, steps):
    return [Elapsed(steps=i, epochs=i // epoch_steps, step_in_epoch=i % epoch_steps) for i in range(steps)]


@pytest.mark.parametrize("every", [1, 2, 3])
@pytest.mark.parametrize("others", [False, True])
@pytest.mark.parametrize("epoch_steps", [1, 4])
def test_next_step_gives_the_firings_of_every_step(every, others, epoch_steps):
    schedule = EpochEnds(epoch_steps, "evaluation", every=every, last=5, others=others)
    run = clocks(epoch_steps, 6 * epoch_steps)
    fired = [c.steps for c in run if schedule(c)]
    solved, at = [], schedule.next_step(run[0], epoch_steps=epoch_steps)
    while at is not None and at < len(run):
        if schedule(run[at]):
            solved.append(at)
        at = schedule.next_step(run[at + 1], epoch_steps=epoch_steps) if at + 1 < len(run) else None
    assert solved == fired


def test_an_epoch_longer_than_the_length_rolls_at_once():
    # a resumed run whose epoch length shrank: the step in progress is past the epoch's end
    assert EpochEnds(3, "save").next_step(Elapsed(steps=10, epochs=1, step_in_epoch=4)) == 13


def test_periodic_skips_the_first_step_and_keeps_its_state():
    schedule = periodic(10.0)
    assert [t for t in (0.0, 9.0, 10.5, 15.0, 21.0) if schedule(Elapsed(time=t))] == [10.5, 21.0]
    assert schedule.state_dict() == {"last": 2}


def test_epoch_ends_fire_every_nth_epoch_and_the_last_and_solve_their_next_step():
    ends = EpochEnds(3, "evaluation", every=2, last=3)
    clocks = [Elapsed(steps=i, epochs=i // 3, step_in_epoch=i % 3) for i in range(9)]
    assert [e.steps for e in clocks if ends(e)] == [5, 8]
    assert (ends.next_step(Elapsed(steps=0)), ends.next_step(Elapsed(steps=6, epochs=2))) == (5, 8)
    assert EpochEnds(3, "save", every=1, others=True).next_step(Elapsed(steps=0)) is None
    assert EpochEnds(4, "save").next_step(Elapsed(steps=5, epochs=1, step_in_epoch=1)) == 7
