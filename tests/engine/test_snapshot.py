"""The snapshot a checkpoint saves of a loop (``gyre.engine._snapshot``, ``LoopState.snapshot``)."""

import jax.numpy as jnp
import pytest

import gyre
from gyre.core._history import History
from gyre.engine._loop_state import LoopState
from gyre.engine._snapshot import Checkpointer, Snapshot


class Keeps:
    def __init__(self):
        self.best = jnp.ones(2)

    def __call__(self):
        pass

    def state_dict(self):
        return {"best": self.best, "n": 2}

    def load_state_dict(self, d):
        pass


def test_a_snapshot_holds_state_clock_state_dicts_arrays_and_new_history():
    history = History()
    history.commit(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 1.0))
    ls = LoopState({"w": 1}, history, gyre.Elapsed(steps=1))
    ls.resumables = {"Keeps": Keeps()}
    owner = object()
    snap = ls.snapshot(owner, {"loss": 1.0})
    assert (snap.step, snap.state, snap.metrics) == (1, {"w": 1}, {"loss": 1.0})
    assert snap.meta["resumables"] == {"Keeps": {"best": {"__gyre_array__": "a0"}, "n": 2}}
    assert list(snap.arrays["resumables"]) == ["a0"]
    assert list(snap.files) == ["history/000000000000.json"] and snap.meta["history"] == 1
    assert ls.snapshot(owner).files == {}  # nothing new for that checkpoint


def test_snapshot_defaults_and_the_protocol_is_abstract():
    snap = Snapshot(step=0, state=None, elapsed=gyre.Elapsed())
    assert snap.meta == {} and snap.arrays == {} and snap.files == {} and snap.metrics is None
    with pytest.raises(NotImplementedError):
        Checkpointer().saved_step()
