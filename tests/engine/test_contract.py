"""The engine's contract: fusing changes speed, never meaning.

One task table holds every kind of callback (each return kind, a stop request, a state
assignment, a stateful schedule, ``every(2)``, ``every(3)``, ``after(5)``, epoch-based
callbacks, callbacks before and after the step); it runs with ``steps_per_call`` 1, 2, 4 and
5 and must give the same state, history, clock and callback calls (steps, clock, batch and
state seen by each call). On the engine before the rebuild this test fails: a callback under
``every(2)`` ran after steps 1, 3, 5... once fused, and ``loop.state = ...`` was ignored step by
step but applied when fused.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre

CLOCK = ("steps", "samples", "epochs", "step_in_epoch")


@jax.jit
def add_step(state, batch):
    state = state + batch.sum()
    return gyre.logs().add_metric("total", state), state


def host(x):
    return float(jax.device_get(x))


def make_table(calls):
    def note(name):
        def record(state, batch, elapsed, loop):
            calls.append((name, elapsed.steps, elapsed.samples, elapsed.epochs, elapsed.step_in_epoch,
                          host(state), host(batch.sum()), loop.stop_requested))
        return record

    def returns_none(state, batch, elapsed, logs, loop):
        note("none")(state, batch, elapsed, loop)

    def returns_logs(state, batch, elapsed, logs, loop):
        note("logs")(state, batch, elapsed, loop)
        return gyre.logs().add_metric("seen", elapsed.steps)

    def returns_state(state, batch, elapsed, logs, loop):
        note("state")(state, batch, elapsed, loop)
        return state * 0.5

    def returns_pair(state, batch, elapsed, logs, loop):
        note("pair")(state, batch, elapsed, loop)
        return gyre.logs().add_metric("pair", elapsed.samples), state + 1.0

    def returns_pair_none_state(state, batch, elapsed, logs, loop):
        note("pair_none_state")(state, batch, elapsed, loop)
        return gyre.logs().add_metric("epoch", elapsed.epochs), None

    def returns_pair_none_logs(state, batch, elapsed, logs, loop):
        note("pair_none_logs")(state, batch, elapsed, loop)
        return None, state - 3.0

    def assigns_state(state, batch, elapsed, logs, loop):
        note("assign")(state, batch, elapsed, loop)
        loop.state = loop.state + 100.0

    def stops(state, batch, elapsed, logs, loop):
        note("stop")(state, batch, elapsed, loop)
        if elapsed.steps >= 26:
            loop.request_stop("enough")

    def reads_logs(state, batch, elapsed, logs, loop):
        note("reads")(state, batch, elapsed, loop)
        calls.append(("reads.total", host(logs.metrics.total)))

    return {
        gyre.every(3): returns_none,  # before the step: runs with the state before it
        gyre.every(epochs=1): returns_pair_none_state,
        gyre.every(1): add_step,
        gyre.every(2): [returns_logs, reads_logs],  # after the step
        gyre.every(samples=10): returns_state,  # stateful (remembers the last bucket)
        gyre.after(5).every(4): returns_pair,
        gyre.every(7): assigns_state,
        gyre.every(5): returns_pair_none_logs,
        gyre.after(steps=20).every(3): stops,
    }


def run(k):
    calls = []
    batches = [np.full(4, i % 5, np.float32) for i in range(40)]  # batch size 4
    state, history, elapsed = gyre.loop(
        jnp.float32(0), batches, make_table(calls), stop=35, epoch_duration=6, steps_per_call=k,
    )
    records = {key: history.collect("steps", key) for key in (*CLOCK, "total", "seen", "pair", "epoch")}
    clock = tuple(getattr(elapsed, name) for name in CLOCK)
    return host(state), records, clock, calls


@pytest.fixture(scope="module")
def step_by_step():
    return run(1)


# the table fires every 2 steps on purpose: fused chunks end there (what this test compares)
@pytest.mark.filterwarnings("ignore:steps_per_call=.*cannot fuse this table:gyre.LoopWarning")
@pytest.mark.parametrize("k", [2, 4, 5])
def test_fused_runs_mean_the_same_as_step_by_step(step_by_step, k):
    state, records, clock, calls = step_by_step
    assert clock == (27, 108, 4, 3)  # the stop request on step 26 ends the loop after it
    assert calls[:3] == [
        ("none", 0, 0, 0, 0, 0.0, 0.0, False),
        ("pair_none_state", 0, 0, 0, 0, 0.0, 0.0, False),
        ("logs", 0, 0, 0, 0, 0.0, 0.0, False),
    ]
    fused = run(k)
    assert fused[3] == calls  # every callback, the same steps, clocks, batches and states
    assert fused[1] == records  # the same history, record by record
    assert fused[2] == clock and fused[0] == state
