"""The callback contract table: every kind of callback through the same checks.

Each kind of callback the loop accepts (a function bound by name, by position, a lambda, a
bound method, a callable object, a ``functools.partial``, a state method registered by a
named loop, ciclo's ``__loop_callback__`` object, ``gyre.callback(fn)``, a ChunkSafe object,
a managed step) is run with each return kind it may give (None, Logs, a new state,
``(logs, state)``, ``(None, state)``, ``(logs, None)``, ``gyre.replace_state``), step by step
and with ``steps_per_call=4``, and checked for:

* binding: the values it receives are the loop's (the state after the step, the step's batch,
  clock and logs, the LoopState), bound to the right parameters;
* its return: folded into the state and the history as the contract says;
* the fused boundary: it runs after the same steps, seeing the same values, with either
  ``steps_per_call`` (a ChunkSafe callback runs once per chunk instead, with its last step);
* no host sync: no implicit read of a device value, and no read of one that is not computed
  yet before the loop ends, while the step keeps the device busy.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre import managed

STEPS = 12
EPOCH = 4
CLOCK = ("steps", "samples", "epochs", "step_in_epoch")
W = np.full((128, 128), 0.01, np.float32)  # numpy: a jax constant would be read when traced


@functools.partial(jax.tree_util.register_dataclass, data_fields=["x"], meta_fields=[])
@dataclasses.dataclass
class Box:
    x: jax.Array


@functools.partial(jax.tree_util.register_dataclass, data_fields=["x"], meta_fields=[])
@dataclasses.dataclass
class MethodBox(Box):
    """A state whose class defines a named point: train_loop registers the method itself."""

    behaviour = None  # set by the test: what the method does

    def on_epoch_end(self, batch, elapsed, logs):
        return MethodBox.behaviour(self, batch, elapsed, logs)


@jax.jit
def slow_step(state, batch):
    """About a millisecond of device work, so the host runs ahead of the device and a read of
    a recent value would wait for it (see tests/test_performance_contracts.py)."""
    y = jax.lax.fori_loop(0, 3, lambda i, y: jnp.tanh(y @ W + batch.mean()), jnp.ones((128, 128)))
    new = dataclasses.replace(state, x=state.x + batch.mean())
    return gyre.logs().add_metric("total", new.x).add_metric("work", y[0, 0]), new


def bump(state):
    return dataclasses.replace(state, x=state.x + 100.0)


# -- what a callback returns --------------------------------------------------------------------

RETURNS = {  # name: (returns(state, value), changes the state, logs "cb")
    "None": (lambda state, value: None, False, False),
    "Logs": (lambda state, value: gyre.logs().add_metric("cb", value), False, True),
    "new state": (lambda state, value: bump(state), True, False),
    "(logs, state)": (lambda state, value: (gyre.logs().add_metric("cb", value), bump(state)), True, True),
    "(None, state)": (lambda state, value: (None, bump(state)), True, False),
    "(logs, None)": (lambda state, value: (gyre.logs().add_metric("cb", value), None), False, True),
    "replace_state": (lambda state, value: gyre.replace_state(bump(state)), True, False),
}
ALL_RETURNS = list(RETURNS)


# -- the kinds of callbacks -----------------------------------------------------------------------
#
# Each kind is built around two functions given by the test: `seen(**values)` records what the
# callback received (never reading a device value) and `respond(state, batch)` gives the return
# under test. A kind says which of the loop's values it receives.


class Method:
    def __init__(self, seen, respond):
        self.seen, self.respond = seen, respond

    def method(self, elapsed, batch, state):
        self.seen(elapsed=elapsed, batch=batch, state=state)
        return self.respond(state, batch)


class CallableObject:
    def __init__(self, seen, respond):
        self.seen, self.respond = seen, respond

    def __call__(self, state, batch, loop):
        self.seen(state=state, batch=batch, loop=loop)
        return self.respond(state, batch)


class CicloCallback:
    def __init__(self, seen, respond):
        self.seen, self.respond = seen, respond

    def __loop_callback__(self, loop_state):
        ls = loop_state
        self.seen(state=ls.state, batch=ls.batch, elapsed=ls.elapsed, logs=ls.logs, loop=ls)
        return self.respond(ls.state, ls.batch)


class Shown(gyre.ChunkSafe):
    def __init__(self, seen, respond):
        self.seen, self.respond = seen, respond

    def __call__(self, elapsed, batch, state, logs):
        self.seen(elapsed=elapsed, batch=batch, state=state, logs=logs)
        return self.respond(state, batch)


def by_name(seen, respond):
    def callback(logs, batch, loop, state, elapsed):  # any order: bound by name
        seen(logs=logs, batch=batch, loop=loop, state=state, elapsed=elapsed)
        return respond(state, batch)

    return callback


def by_position(seen, respond):
    def callback(s, b, e, lg):  # no loop names: the first four values, in order
        seen(state=s, batch=b, elapsed=e, logs=lg)
        return respond(s, b)

    return callback


def a_lambda(seen, respond):
    return lambda batch, state: seen(batch=batch, state=state) or respond(state, batch)


def a_partial(seen, respond):
    def callback(tag, state, batch):
        assert tag == "bound"
        seen(state=state, batch=batch)
        return respond(state, batch)

    return functools.partial(callback, "bound")


def a_ciclo_function(seen, respond):
    def callback(state, batch, elapsed, loop_state):  # called by position, ciclo's way
        seen(state=state, batch=batch, elapsed=elapsed, loop=loop_state)
        return respond(state, batch)

    return gyre.callback(callback)


def a_state_method(seen, respond):
    def behaviour(self, batch, elapsed, logs):
        seen(state=self, batch=batch, elapsed=elapsed, logs=logs)
        return respond(self, batch)

    MethodBox.behaviour = behaviour
    return None  # train_loop finds MethodBox.on_epoch_end itself


def a_managed_step(seen, respond):
    def evaluate(state, batch):  # traced once: what it receives is checked through its logs
        out = respond(state, batch.mean())
        if isinstance(out, gyre.Logs) or (isinstance(out, tuple) and isinstance(out[0], gyre.Logs)):
            (out if isinstance(out, gyre.Logs) else out[0]).add_metric("got_state", state.x)
        return out

    return managed.step(evaluate)


EVERY_3 = [0, 3, 6, 9]
EPOCH_ENDS = [3, 7, 11]
NOT_MANAGED = [r for r in ALL_RETURNS if r != "replace_state"]  # a compiled step returns arrays
KINDS = {  # name: (build, schedule, fires on: steps_per_call -> steps, returns it may give)
    "function bound by name": (by_name, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "function bound by position": (by_position, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "lambda": (a_lambda, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "bound method": (lambda s, r: Method(s, r).method, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "callable object": (CallableObject, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "functools.partial": (a_partial, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "state method (named loop)": (a_state_method, None, {1: EPOCH_ENDS, 4: EPOCH_ENDS}, ALL_RETURNS),
    "__loop_callback__ object": (CicloCallback, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    "gyre.callback(fn)": (a_ciclo_function, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, ALL_RETURNS),
    # an observer: once per block (the 12 steps are one block), once per chunk when fused
    "ChunkSafe object": (Shown, gyre.every(1), {1: [STEPS - 1], 4: EPOCH_ENDS}, ["None"]),
    "managed step": (a_managed_step, gyre.every(3), {1: EVERY_3, 4: EVERY_3}, NOT_MANAGED),
}
CASES = [(kind, ret) for kind, (_, _, _, returns) in KINDS.items() for ret in returns]
RECEIVES = {  # what each kind asks for (the managed step: state and batch, seen in its logs)
    "function bound by name": {"state", "batch", "elapsed", "logs", "loop"},
    "function bound by position": {"state", "batch", "elapsed", "logs"},
    "lambda": {"state", "batch"},
    "bound method": {"state", "batch", "elapsed"},
    "callable object": {"state", "batch", "loop"},
    "functools.partial": {"state", "batch"},
    "state method (named loop)": {"state", "batch", "elapsed", "logs"},
    "__loop_callback__ object": {"state", "batch", "elapsed", "logs", "loop"},
    "gyre.callback(fn)": {"state", "batch", "elapsed", "loop"},
    "ChunkSafe object": {"state", "batch", "elapsed", "logs"},
}


def reference(fires, changes_state):
    """x after each step's step function, and x at the end, as the contract says."""
    x, after_step = 0.0, []
    for i in range(STEPS):
        x += i
        after_step.append(x)
        if i in fires and changes_state:
            x += 100.0
    return after_step, x


def run(kind, ret, steps_per_call, detector):
    """One run of the table; returns what the callback saw, the final state, the history."""
    build, schedule, _, _ = KINDS[kind]
    returns = RETURNS[ret][0]
    seen = []

    def record(**values):  # references only: nothing is read here
        got = {"steps": None}
        for name, value in values.items():
            if name == "state":
                got["state"] = value.x
            elif name == "batch":
                got["batch"] = value
            elif name == "elapsed":
                got["elapsed"] = got["steps"] = value.steps
            elif name == "logs":
                got["logs"] = value.metrics.total
            elif name == "loop":
                got["loop"] = (type(value).__name__, value.elapsed.steps, value.state.x is values["state"].x)
        seen.append(got)

    def respond(state, batch):
        return returns(state, batch if isinstance(batch, jax.Array) else batch[0])

    callback = build(record, respond)
    data = [np.full(4, i, np.float32) for i in range(STEPS)]
    history = gyre.history(flush_every=4, lag=2)  # the history sends and lands during the run
    if schedule is None:  # the state method: a named loop registers it
        state, history, elapsed = gyre.train_loop(
            MethodBox(jnp.float32(0)), data, {gyre.on_train_step: slow_step, gyre.on_train_end: detector.end},
            epoch_duration=EPOCH, steps_per_call=steps_per_call, history=history,
        )
    else:
        state, history, elapsed = gyre.loop(
            Box(jnp.float32(0)), data, {gyre.every(1): slow_step, schedule: callback},
            epoch_duration=EPOCH, steps_per_call=steps_per_call, history=history, on_end=detector.end,
        )
    return seen, state, history, elapsed


def host_values(seen):
    """What the callback saw, read after the loop (in one explicit transfer)."""
    return jax.device_get(seen)


@pytest.mark.parametrize("kind, ret", CASES, ids=[f"{k} -> {r}" for k, r in CASES])
def test_every_callback_kind_meets_the_contract(kind, ret, sync_detector):
    _, _, fires, _ = KINDS[kind]
    _, changes_state, logs_cb = RETURNS[ret]
    runs = {}
    for k in (1, 4):
        sync_detector.ended = False
        seen, state, history, elapsed = run(kind, ret, k, sync_detector)
        # no host sync: the detector raised on any implicit read; no stall before the end
        assert sync_detector.stalls == [], sync_detector.stalls[0]
        runs[k] = (host_values(seen), jax.device_get(state.x), history, elapsed)

    after_step, final = reference(fires[1], changes_state)
    for k, (seen, x, history, elapsed) in runs.items():
        assert elapsed.steps == STEPS and x == final, f"steps_per_call={k}"
        # the history: the step's total (which shows when the state changed), and the callback's logs
        assert history.collect("total") == after_step
        if logs_cb:
            assert history.collect("steps", "cb") == (fires[1], [float(i) for i in fires[1]])
        else:
            assert "cb" not in history.names().get("metrics", [])
        if kind == "managed step":
            if logs_cb:  # it received the state after the step, and the step's batch
                assert history.collect("got_state") == [after_step[i] for i in fires[1]]
            continue
        # binding: exactly the values it asks for, the loop's own, after the steps it fires on
        steps = fires[k]
        assert len(seen) == len(steps)
        for got, i in zip(seen, steps, strict=True):
            assert set(got) - {"steps"} == RECEIVES[kind]
            assert got["state"] == after_step[i] and got["batch"][0] == i
            if "elapsed" in got:
                assert got["steps"] == i
            if "logs" in got:
                assert got["logs"] == after_step[i]
            if "loop" in got:
                assert got["loop"] == ("LoopState", i, True)
    # the fused boundary: the same history, record by record, with either steps_per_call
    (_, _, h1, _), (_, _, h4, _) = runs[1], runs[4]
    for key in ("total", *(("cb",) if logs_cb else ())):
        for counter in CLOCK:
            assert h4.collect(counter, key) == h1.collect(counter, key), (counter, key)


def test_the_table_covers_each_kind_and_each_return():
    assert len(KINDS) == 11 and len(RETURNS) == 7
    assert {r for _, r in CASES} == set(RETURNS)
    assert all(KINDS[kind][2][1] == KINDS[kind][2][4] for kind in KINDS if kind != "ChunkSafe object")
