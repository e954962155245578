"""gyre.noop: a callback that does nothing, whatever it is given."""

import pytest

import gyre
from gyre.callbacks._noop import noop


def test_noop_takes_anything_and_returns_none():
    assert noop() is None
    assert noop(1, "two", three=3) is None
    assert gyre.noop is noop


@pytest.mark.filterwarnings("ignore:train_loop had no train step:gyre.LoopWarning")  # evaluation only, on purpose
def test_noop_in_a_table_changes_nothing():
    state, history, elapsed = gyre.loop(5, range(3), {gyre.every(1): gyre.noop})
    assert state == 5 and len(history) == 0 and elapsed.steps == 3
    state, _, _ = gyre.train_loop(5, range(2), {gyre.on_epoch_end: [gyre.noop]})
    assert state == 5
