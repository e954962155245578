"""Schedule.next_step: a loop that calls a schedule only at the steps it names sees the same
firings and ends with the same state as one that calls it at every step."""

import json

import pytest

import gyre
from gyre.core._clock import Elapsed, at
from gyre.core._schedules import UNSOLVED, as_schedule
from gyre.engine._tasks import EachStep, StepPoint, When

RUN = 400

# name -> a factory of fresh copies (stateful schedules must not be shared between runs)
SCHEDULES = {
    "every(1)": lambda: gyre.every(1),
    "every(7)": lambda: gyre.every(7),
    "every(50)": lambda: gyre.every(50),
    "every(epochs=1)": lambda: gyre.every(epochs=1),
    "every(epochs=2)": lambda: gyre.every(epochs=2),
    "always()": gyre.always,
    "never()": gyre.never,
    "after(steps=5)": lambda: gyre.after(steps=5),
    "after(steps=50).every(100)": lambda: gyre.after(steps=50).every(100),
    "after(steps=20) >> every(3)": lambda: gyre.after(steps=20) >> gyre.every(3),
    "after(epochs=1) >> every(epochs=2)": lambda: gyre.after(epochs=1) >> gyre.every(epochs=2),
    "after(epochs=3)": lambda: gyre.after(epochs=3),
    "after(steps=30, epochs=2)": lambda: gyre.piecewise(gyre.never(), {at(steps=30, epochs=2): gyre.every(4)}),
    "piecewise 3 pieces": lambda: gyre.piecewise(
        gyre.every(1), {at(steps=10): gyre.every(3), at(steps=40): gyre.every(25), at(steps=200): gyre.never()}
    ),
    "piecewise epochs then steps": lambda: gyre.piecewise(
        gyre.every(5), {at(epochs=2): gyre.every(epochs=1), at(steps=100): gyre.every(9)}
    ),
    "piecewise nested": lambda: gyre.piecewise(
        gyre.never(), {at(steps=15): gyre.after(steps=30).every(11), at(steps=300): gyre.every(2)}
    ),
    "every(3) & ~every(6)": lambda: gyre.every(3) & ~gyre.every(6),
    "every(2) | every(5)": lambda: gyre.every(2) | gyre.every(5),
    "~every(3)": lambda: ~gyre.every(3),
    "~always()": lambda: ~gyre.always(),
    "~never()": lambda: ~gyre.never(),
    "~~every(4)": lambda: ~~gyre.every(4),
    "every(4) & every(6)": lambda: gyre.every(4) & gyre.every(6),
    "every(10) & every(epochs=1)": lambda: gyre.every(10) & gyre.every(epochs=1),
    "~(every(2) | every(3))": lambda: ~(gyre.every(2) | gyre.every(3)),
    "every(1) & never()": lambda: gyre.every(1) & gyre.never(),
    "after(steps=25) & every(4)": lambda: gyre.after(steps=25) & gyre.every(4),
    "after(steps=60) | every(epochs=3)": lambda: gyre.after(steps=60) | gyre.every(epochs=3),
    "every(3) & after(steps=100).every(10)": lambda: gyre.every(3) & gyre.after(steps=100).every(10),
    "~every(epochs=2)": lambda: ~gyre.every(epochs=2),
    "StepPoint": lambda: StepPoint("on_train_step"),
    "EachStep (named)": lambda: EachStep("on_train_batch_end"),
    "When epoch end": lambda: When(lambda e: e.step_in_epoch == 6, "on_epoch_end", reads=("step_in_epoch",)),
    "When epochs": lambda: When(
        lambda e: e.step_in_epoch == 6 and (e.epochs + 1) % 3 == 0, "evaluation", reads=("step_in_epoch", "epochs")
    ),
    "When in epoch": lambda: When(lambda e: e.step_in_epoch in (1, 4), "twice", reads=("step_in_epoch",)),
    "When steps": lambda: When(lambda e: e.steps in (17, 2000), "once", reads=("steps",)),
}
EPOCHS = {"every(epochs=1)", "every(epochs=2)", "after(epochs=1) >> every(epochs=2)", "after(epochs=3)",
          "after(steps=30, epochs=2)", "piecewise epochs then steps", "every(10) & every(epochs=1)",
          "after(steps=60) | every(epochs=3)", "~every(epochs=2)", "When epoch end", "When epochs", "When in epoch"}
STARTS = {"start": Elapsed(), "mid-run": Elapsed(steps=13, epochs=1, step_in_epoch=6)}


def clocks(start, epoch_steps, n=RUN):
    """The clocks a loop hands out from ``start`` (with samples and time, which origins record)."""
    clock = start.replace(samples=start.steps * 8, time=start.steps * 0.5)
    out = []
    for _ in range(n):
        out.append(clock)
        clock = clock._after(8, clock.time + 0.5, 0.0, epoch_steps)
    return out


def every_step(schedule, run):
    return [e.steps for e in run if schedule(e)], schedule.state_dict()


def at_next_steps(schedule, run, epoch_steps):
    """Calls ``schedule`` only where next_step says; returns firings, state and calls."""
    first = run[0].steps
    fired, calls, index = [], 0, 0
    while index < len(run):
        step = schedule.next_step(run[index], epoch_steps=epoch_steps)
        assert step is not UNSOLVED
        if step is None or step - first >= len(run):
            break
        assert step >= run[index].steps
        calls += 1
        if schedule(run[step - first]):
            fired.append(step)
        index = step - first + 1
    return fired, schedule.state_dict(), calls


@pytest.mark.parametrize("epoch_steps", [None, 7])
@pytest.mark.parametrize("start", list(STARTS))
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_calls_at_next_steps_only_see_the_same_firings_and_state(name, start, epoch_steps):
    make = SCHEDULES[name]
    run = clocks(STARTS[start], epoch_steps)
    if epoch_steps is None and name in EPOCHS:
        assert make().next_step(run[0]) is UNSOLVED
        return
    fired, state = every_step(make(), run)
    solved_fired, solved_state, calls = at_next_steps(make(), run, epoch_steps)
    assert (solved_fired, solved_state) == (fired, state)
    assert calls <= len(fired) + 3, (calls, len(fired))  # one more per switch point at most
    # and again after a checkpoint round trip part-way through the run
    cut = 37
    before = make()
    every_step(before, run[:cut])
    saved = json.loads(json.dumps(before.state_dict()))
    resumed, solved = make(), make()
    resumed.load_state_dict(saved)
    solved.load_state_dict(saved)
    assert every_step(resumed, run[cut:]) == at_next_steps(solved, run[cut:], epoch_steps)[:2]


def test_next_step_does_not_change_the_state():
    s = gyre.piecewise(gyre.every(2), {at(steps=3): gyre.every(5)})
    before = s.state_dict()
    assert s.next_step(10) == 10  # the switch at 3, reached and not recorded yet
    assert s.state_dict() == before


def test_an_int_is_the_clock_of_that_step():
    assert gyre.every(10).next_step(13) == 20
    assert gyre.every(10).next_step(20) == 20
    assert gyre.after(steps=50).every(100).next_step(0) == 50
    assert gyre.never().next_step(0) is None


def test_what_cannot_be_solved_in_advance():
    for schedule in (
        gyre.every(samples=100),
        gyre.every(time=60.0),
        as_schedule(lambda e: e.steps % 2 == 0),
        gyre.after(samples=1000),
        gyre.after(time=60.0).every(10),
        gyre.after(steps=10).every(time=60.0),  # the piece after the switch is unsolved
        gyre.every(10) | gyre.every(time=1.0),
        gyre.every(10) & as_schedule(lambda e: True),
        ~gyre.after(steps=3),  # the negation of a stateful schedule
        gyre.after(steps=5) & ~gyre.after(steps=3),
        ~gyre.every(samples=10),
        gyre.every(epochs=1),  # no epoch_steps
        When(lambda e: e.time > 1, "late", reads=("time",)),
    ):
        assert schedule.next_step(Elapsed(steps=5), epoch_steps=None) is UNSOLVED, schedule
    assert repr(UNSOLVED) == "UNSOLVED"


def test_the_epoch_solution_counts_from_the_clock_given():
    clock = Elapsed(steps=13, epochs=1, step_in_epoch=6)
    # epochs 2, 3, 4 start at steps 14, 21, 28
    assert gyre.every(epochs=1).next_step(clock, epoch_steps=7) == 14
    assert gyre.every(epochs=3).next_step(clock, epoch_steps=7) == 21
    assert gyre.every(epochs=4).next_step(clock, epoch_steps=7) == 28
    assert gyre.after(epochs=3).next_step(clock, epoch_steps=7) == 21


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="epoch_steps"):
        gyre.every(2).next_step(0, epoch_steps=0)
    with pytest.raises(ValueError, match="a step index"):
        gyre.every(2).next_step(-1)


def test_the_loops_own_predicates_of_step_in_epoch():
    twice = When(lambda e: e.step_in_epoch in (1, 4), "twice", reads=("step_in_epoch",))
    clock = Elapsed(steps=12, epochs=1, step_in_epoch=5)
    assert twice.next_step(clock, epoch_steps=7) == 15  # step_in_epoch 1 of the next epoch
    assert twice.next_step(clock.replace(step_in_epoch=4), epoch_steps=7) == 12
    assert When(lambda e: e.step_in_epoch == 9, "never", reads=("step_in_epoch",)).next_step(clock, epoch_steps=7) is None
    assert twice.next_step(clock) is UNSOLVED  # no epoch length
