"""The engine's side of exact resume (``gyre.engine._resume``), with an in-memory checkpoint.

The orbax checkpoint has its own tests (tests/callbacks/test_checkpoint.py); here a
:class:`Checkpointer` that keeps its snapshots in memory (through JSON, as a real one stores
them) proves what the engine saves and restores: state, clock, history, the state of stateful
callbacks, and what an exception hands back.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.engine._resume import check_resume
from gyre.engine._snapshot import Checkpointer, Snapshot


class MemoryCheckpoint(Checkpointer):
    """A checkpoint that keeps its snapshots in memory, through JSON like a real one."""

    def __init__(self):
        self.saved = {}
        self.files = {}

    def __call__(self, loop):
        loop.request_save(self)

    def save_snapshot(self, snapshot, *, wait=False):
        if snapshot.step in self.saved:
            return
        self.files.update(snapshot.files)
        self.saved[snapshot.step] = (
            jax.device_get(snapshot.state),
            json.dumps({"elapsed": snapshot.elapsed.to_dict(), "meta": snapshot.meta}),
            jax.device_get(snapshot.arrays),
        )

    def saved_step(self):
        return max(self.saved, default=None)

    def load_snapshot(self, resume, target_state):
        if not self.saved:
            return None
        step = max(self.saved) if resume == "latest" else resume
        state, text, arrays = self.saved[step]
        data = json.loads(text)
        return Snapshot(
            step=step,
            state=jax.tree_util.tree_map(jnp.asarray, state),
            elapsed=gyre.Elapsed.from_dict(data["elapsed"]),
            meta=data["meta"],
            arrays=arrays,
        )

    def read_file(self, name):
        return self.files.get(name)

    def list_files(self, folder):
        return sorted(n for n in self.files if n.startswith(folder + "/"))

    def wait_until_finished(self):
        pass


class Counter:
    """A stateful callback: counts the steps it saw (resumes through state_dict)."""

    def __init__(self):
        self.seen = 0

    def __call__(self, elapsed):
        self.seen += 1
        return gyre.logs().add_metric("seen", self.seen)

    def state_dict(self):
        return {"seen": self.seen, "vector": np.arange(3) * self.seen}

    def load_state_dict(self, d):
        assert isinstance(d["vector"], (np.ndarray, jax.Array))
        self.seen = d["seen"]


class Boom(Exception):
    pass


@jax.jit
def _step(state, batch):
    key = jax.random.fold_in(state["rng"], state["n"])
    noise = jax.random.normal(key, (2,))
    w = state["w"] * 0.9 + batch + noise
    return gyre.logs().add_loss("loss", jnp.sum(w**2)), {**state, "w": w, "n": state["n"] + 1}


def _state():
    return {"w": jnp.zeros(2), "n": jnp.int32(0), "rng": jax.random.key_data(jax.random.key(0))}


def _program(ckpt, counter, stop, crash_at=None, resume=None, steps_per_call=1):
    def crash(elapsed):
        if crash_at is not None and elapsed.steps == crash_at:
            raise Boom(f"crash at {elapsed.steps}")

    tasks = {
        gyre.every(1): [_step, counter, crash],
        gyre.every(3): ckpt,
    }
    data = [jnp.full(2, 0.5)] * stop  # the data position has its own tests (test_data.py)
    return gyre.loop(_state(), data, tasks, stop=stop, resume=resume, steps_per_call=steps_per_call)


def _same(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# constant batches from a list: the data position has its own tests (test_data.py)
@pytest.mark.filterwarnings("ignore:resuming. the dataset:gyre.LoopWarning")
def test_a_crashed_run_resumed_ends_as_one_never_interrupted():
    whole_ckpt, whole_counter = MemoryCheckpoint(), Counter()
    state, history, elapsed = _program(whole_ckpt, whole_counter, stop=11)

    ckpt, counter = MemoryCheckpoint(), Counter()
    with pytest.raises(Boom):
        _program(ckpt, counter, stop=11, crash_at=8)
    assert ckpt.saved_step() == 7  # every(3) fired on steps 0, 3, 6: saved once they completed
    counter = Counter()  # a new process: fresh objects
    state2, history2, elapsed2 = _program(ckpt, counter, stop=11, resume="latest")

    _same(state, state2)
    assert elapsed2.steps == elapsed.steps == 11
    assert counter.seen == whole_counter.seen == 11
    assert history2.collect("steps", "loss", "seen") == history.collect("steps", "loss", "seen")
    assert sorted(ckpt.saved) == sorted(whole_ckpt.saved) == [1, 4, 7, 10, 11]  # 11: the final save


def test_the_loop_saves_its_final_step_and_history_blocks_chain():
    ckpt = MemoryCheckpoint()
    _program(ckpt, Counter(), stop=8)
    assert sorted(ckpt.saved) == [1, 4, 7, 8]
    blocks = [json.loads(ckpt.files[n]) for n in ckpt.list_files("history")]
    assert [(b["start"], b["stop"]) for b in blocks] == [(0, 1), (1, 4), (4, 7), (7, 8)]


def test_resume_latest_with_nothing_saved_starts_afresh():
    state, history, elapsed = _program(MemoryCheckpoint(), Counter(), stop=4, resume="latest")
    assert elapsed.steps == 4 and len(history) == 4


def test_fused_and_per_step_save_the_same_checkpoints():
    a, b = MemoryCheckpoint(), MemoryCheckpoint()
    for ckpt, k in ((a, 1), (b, 4)):
        counter = Counter()
        tasks = {gyre.every(1): _step, gyre.every(5): counter, gyre.every(3): ckpt}
        gyre.loop(_state(), [jnp.full(2, 0.5)] * 10, tasks, steps_per_call=k)
    assert sorted(a.saved) == sorted(b.saved)
    for step in a.saved:
        _same(a.saved[step][0], b.saved[step][0])
        meta_a, meta_b = json.loads(a.saved[step][1])["meta"], json.loads(b.saved[step][1])["meta"]
        assert meta_a["resumables"] == meta_b["resumables"] and meta_a["history"] == meta_b["history"]


def test_an_exception_hands_back_the_last_consistent_state_and_clock():
    def boom(elapsed):
        if elapsed.steps == 4:
            raise Boom("user error")

    # the failing callback runs before the step: the state after step 3, 4 steps completed
    with pytest.raises(Boom) as info:
        gyre.loop(_state(), [jnp.ones(2)] * 10, {gyre.every(1): [boom, _step]})
    assert info.value.elapsed.steps == 4
    assert int(info.value.state["n"]) == 4

    # after the step: the state the step produced, counted as completed, whether or not the step
    # donates (without donation it was the state before the step, 4 steps, though the step's batch
    # was used: a run continued over the same data from it skipped a batch), and in blocks too
    donating = jax.jit(_step.__wrapped__, donate_argnums=0)
    for step, tasks in ((donating, lambda s: {gyre.every(1): [s, boom]}), (_step, lambda s: {gyre.every(1): [s, boom]}),
                        (_step, lambda s: {gyre.every(1): s, gyre.every(2): boom})):
        with pytest.raises(Boom) as info:
            gyre.loop(_state(), [jnp.ones(2)] * 10, tasks(step))
        assert info.value.elapsed.steps == 5
        assert int(info.value.state["n"]) == 5

    # a loop without a state (state=None, callbacks only): was 5, so a run continued from it skipped step 4
    with pytest.raises(Boom) as info:
        gyre.loop(None, range(10), {gyre.every(1): boom})
    assert (info.value.state, info.value.elapsed.steps) == (None, 4)


def test_resume_needs_a_checkpoint_and_a_known_kind():
    with pytest.raises(ValueError, match="needs a checkpoint in the loop"):
        gyre.loop(0, range(2), {gyre.every(1): lambda: None}, resume="latest")
    with pytest.raises(ValueError, match="resume= names the checkpoint"):
        check_resume("lastest")
    assert check_resume(np.int64(3)) == 3


def test_state_dicts_must_be_json_and_arrays():
    class Bad:
        def __call__(self):
            pass

        def state_dict(self):
            return {"fn": print}

        def load_state_dict(self, d):
            pass

    with pytest.raises(TypeError, match=r"state_dict value at Bad.fn cannot be saved"):
        gyre.loop(0, range(3), {gyre.every(1): [Bad()], gyre.every(2): MemoryCheckpoint()})


# constant batches from a list: the data position has its own tests (test_data.py)
@pytest.mark.filterwarnings("ignore:resuming. the dataset:gyre.LoopWarning")
def test_sigterm_finishes_the_step_saves_it_and_a_resume_continues():
    import os
    import signal

    def preempt(elapsed):
        if elapsed.steps == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    ckpt = MemoryCheckpoint()
    tasks = {gyre.every(1): [_step, preempt], gyre.every(100): ckpt}
    with pytest.warns(gyre.LoopWarning, match=r"preempted \(SIGTERM\) during step 5"):
        state, history, elapsed = gyre.loop(_state(), [jnp.full(2, 0.5)] * 20, tasks)
    assert history.stop_reason == "preempted"
    assert elapsed.steps == 6 and sorted(ckpt.saved) == [1, 6]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone again

    tasks = {gyre.every(1): _step, gyre.every(100): ckpt}
    _, history, elapsed = gyre.loop(_state(), [jnp.full(2, 0.5)] * 20, tasks, stop=9, resume="latest")
    assert history.collect("steps")[5:] == [5, 6, 7, 8] and history.stop_reason is None


def test_a_nested_loop_is_not_preempted_midway():
    import os
    import signal

    inner_steps = []

    def evaluate(state):
        def count(elapsed):
            if elapsed.steps == 0:
                os.kill(os.getpid(), signal.SIGTERM)
            inner_steps.append(elapsed.steps)

        gyre.loop(None, range(4), {gyre.every(1): count})

    with pytest.warns(gyre.LoopWarning, match="preempted"):
        _, history, elapsed = gyre.loop(0, range(10), {gyre.every(1): evaluate})
    assert inner_steps == [0, 1, 2, 3] and elapsed.steps == 1


@pytest.mark.filterwarnings("ignore:resuming. the dataset:gyre.LoopWarning")
def test_a_stop_below_the_saved_step_is_refused_not_a_silent_return():
    ckpt = MemoryCheckpoint()
    _program(ckpt, Counter(), stop=8)
    with pytest.raises(ValueError) as info:
        _program(ckpt, Counter(), stop=4, resume="latest")
    lines = str(info.value).splitlines()
    assert lines[0].startswith("resume='latest' continues from step 8, which is past stop=4")
    assert lines[2] == "  received: stop=4 (steps 8 > 4)"
    assert "raise stop above 8 steps" in lines[3] and "new checkpoint directory" in lines[3]
    # a stop the run already reached is a finished run: resuming it returns at once
    assert _program(ckpt, Counter(), stop=8, resume="latest")[2].steps == 8
