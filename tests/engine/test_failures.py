"""An error or a Ctrl-C leaves one set of completed steps: the clock handed back (``err.elapsed``, or
the ``elapsed`` a caught Ctrl-C returns), the state, the history's rows and the data position agree,
so a loop continued from them over the same data equals the run that never stopped."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre

N = 9


class Boom(Exception):
    pass


@jax.jit
def _step(state, batch):
    state = state * 0.5 + batch.sum()
    return gyre.logs().add_metric("s", state), state


@jax.jit
def _stateless(state, batch):  # a loop without a state: the step logs only
    return gyre.logs().add_metric("s", batch.sum()), state


class _Fails:
    """Raises ``error`` once, at step ``at`` or the first after it it sees (``None``: never)."""

    def __init__(self, at, error):
        self.at, self.error, self.done = at, error, False

    def __call__(self, elapsed):
        if self.at is not None and elapsed.steps >= self.at and not self.done:
            self.done = True
            raise self.error("once")


class _FailsShown(gyre.ChunkSafe, _Fails):  # an observer: run once per block
    pass


def _noop(state):
    return None


TABLES = {  # where the failing callback runs, and on which path
    "event after the step": lambda f, step: {gyre.every(1): step, gyre.every(3): f},
    "after the step, step by step": lambda f, step: {gyre.every(1): [step, f]},
    "event before the step": lambda f, step: {gyre.every(3): f, gyre.every(1): step},
    "before the step, step by step": lambda f, step: {gyre.every(3): f, gyre.every(1): [step, _noop]},
    "observer": lambda f, step: {gyre.every(1): step, gyre.every(3): f},
}


def _data():
    return gyre.data.batches(np.arange(2.0 * N, dtype=np.float32).reshape(N, 2), 1, shuffle=False, epochs=1)


def _rows(history):
    return [(r["steps"], float(r["s"])) for r in history.to_records()]


@pytest.mark.parametrize("where", list(TABLES))
@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
@pytest.mark.parametrize("stateless", [False, True])
@pytest.mark.parametrize("steps_per_call", [1, 2])
def test_a_loop_continued_after_an_error_equals_the_run_that_never_stopped(where, error, stateless, steps_per_call):
    # each broke before: a step counted without its row in the history (an error or Ctrl-C after the
    # step: 4 steps, rows 0-2; an observer's: a block's rows all lost), a stateless loop's step made and
    # not counted though its batch was used (the continued run fed step 3 batch 4), a step not counted
    # whose batch was used (an error before the step, step by step), a Ctrl-C before a block's step
    # returning a clock in progress (the continued run numbered its steps from 4, skipping 3)
    step = _stateless if stateless else _step
    fails = _FailsShown if where == "observer" else _Fails
    table = TABLES[where]
    init = (lambda: None) if stateless else (lambda: jnp.float32(0))
    kw = {"steps_per_call": steps_per_call, "prefetch": 2}
    state, history, elapsed = gyre.loop(init(), _data(), table(fails(None, error), step), **kw)
    for at in (0, 3, N - 1 if where == "after the step, step by step" else 6):
        data, cut, f = _data(), gyre.History(), fails(at, error)
        try:
            got, cut, done = gyre.loop(init(), data, table(f, step), history=cut, **kw)
        except Boom as err:
            got, done = err.state, err.elapsed
        assert error is KeyboardInterrupt or f.done
        assert not done.in_progress and len(cut) == done.steps, (at, len(cut), done)
        assert data.index == done.steps, (at, data.index, done.steps)
        got, cut, done = gyre.loop(got, data, table(f, step), history=cut, elapsed=done, **kw)
        assert done.steps == elapsed.steps and _rows(cut) == _rows(history), at
        assert stateless or float(got) == float(state)


def test_a_counted_step_keeps_its_logs_at_every_steps_per_call():
    # a Ctrl-C (or an error) raised by a callback after step 3 counted step 3 and handed back the
    # state it made, but the history held rows 0-2 only: step 3's logs were dropped
    def stops(elapsed):
        if elapsed.steps == 3:
            raise KeyboardInterrupt

    for steps_per_call in (1, 2, 3):
        state, history, elapsed = gyre.loop(
            jnp.float32(0), [np.full(2, i, np.float32) for i in range(7)],
            {gyre.every(1): _step, gyre.every(3): stops}, steps_per_call=steps_per_call)
        last = history.to_records()[-1]
        assert elapsed.steps == len(history) == 4 and last["steps"] == 3, steps_per_call
        assert last["s"] == float(state)


def test_a_stateless_loop_counts_the_step_that_ran_on_both_paths():
    # state None: a callback raising after the compiled step gave err.elapsed 4 in blocks but 3 step by
    # step (the step's run was judged by the state's identity, and None is None), with the data at 4
    for table in ({gyre.every(1): _stateless, gyre.every(3): _Fails(3, Boom)},
                  {gyre.every(1): [_stateless, _Fails(3, Boom)]}):
        data, history = _data(), gyre.History()
        with pytest.raises(Boom) as info:
            gyre.loop(None, data, table, history=history, prefetch=0)
        assert info.value.elapsed.steps == data.index == len(history) == 4


def test_an_error_before_the_step_puts_its_batch_back():
    # step by step, a callback before the step raising at step 3 handed back 3 steps, and the data
    # was left after batch 3: a loop continued from err.state over it gave step 3 batch 4
    data = _data()
    with pytest.raises(Boom) as info:
        gyre.loop(jnp.float32(0), data, {gyre.every(3): _Fails(3, Boom), gyre.every(1): [_step, _noop]}, prefetch=0)
    assert info.value.elapsed.steps == data.index == 3


def test_a_ctrl_c_before_a_blocks_step_returns_a_completed_clock():
    # the clock came back marked in progress (steps=3, in_progress=True): passed back as elapsed=, the
    # next loop counted step 3 as done and numbered its first step 4
    state, history, elapsed = gyre.loop(jnp.float32(0), _data(), {gyre.every(3): _Fails(3, KeyboardInterrupt),
                                                                  gyre.every(1): _step}, prefetch=0)
    assert (elapsed.steps, elapsed.in_progress) == (3, False)


@pytest.mark.parametrize("steps_per_call", [1, 3])
@pytest.mark.parametrize("step_by_step", [False, True])
def test_a_nan_error_hands_back_the_steps_its_history_holds(step_by_step, steps_per_call, tmp_path):
    # a NaN at step 7 found by the save after step 10: blocks handed back the state and clock of
    # their last block's start (1 step; 7 fused) with 11 rows in the history; step by step, the
    # state and clock before step 10 (10) with its row committed (11) and its batch put back
    @jax.jit
    def counts(state, batch):
        return gyre.logs().add_loss("loss", batch.sum()), state + 1

    x = np.ones((N * 4, 2), np.float32)
    x[7] = np.nan
    data, history = gyre.data.batches(x, 1, shuffle=False, epochs=1), gyre.History()
    ckpt = gyre.checkpoint(str(tmp_path))
    table = {gyre.every(1): [counts, _noop] if step_by_step else counts, gyre.every(10): ckpt}
    with pytest.raises(gyre.NonFiniteError) as info:
        gyre.loop(jnp.float32(0), data, table, history=history, steps_per_call=steps_per_call, prefetch=0)
    err = info.value
    ckpt.close()
    assert err.step == 7 and int(err.state) == err.elapsed.steps == len(history) == data.index >= 10


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_a_step_that_raises_leaves_its_batch_to_the_next_loop(steps_per_call):
    # the step raising on batch 5 (here: a batch of other shape, refused while tracing) handed back
    # 5 steps and the state after them, with the data after batch 5: a loop continued over it skipped it
    @jax.jit
    def strict(state, batch):
        if batch.shape != (1, 2):
            raise Boom("a batch of another shape")
        return gyre.logs().add_metric("s", state + 1), state + 1

    data_list = [np.ones((1, 2), np.float32)] * 12
    data_list[5] = np.ones((2, 2), np.float32)

    class Source:  # a source that saves its position, over a list
        def __init__(self):
            self.i = 0

        def __iter__(self):
            return self

        def __next__(self):
            if self.i == len(data_list):
                raise StopIteration
            self.i += 1
            return data_list[self.i - 1]

        def state_dict(self):
            return {"i": self.i}

        def load_state_dict(self, state):
            self.i = state["i"]

    for table in ({gyre.every(1): strict}, {gyre.every(1): [strict, _noop]}):
        source, history = Source(), gyre.History()
        with pytest.raises(Boom) as info:
            gyre.loop(jnp.float32(0), source, table, history=history, steps_per_call=steps_per_call)
        assert int(info.value.state) == info.value.elapsed.steps == len(history) == source.i == 5


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_a_task_between_a_blocks_steps_that_raises_counts_the_step_before_it(error):
    # a task run between a block's steps (_between_steps, as the trainer's log window) raising after
    # step 4 handed back the state after 5 steps with 5 rows, but a clock of 4 and the data at 4
    class Window:
        _between_steps = True

        def __call__(self, state):
            if int(state) >= 4:
                raise error("once")
            return gyre.logs().add_metric("seen", state), None

    @jax.jit
    def counts(state, batch):
        return gyre.logs().add_metric("s", state + 1), state + 1

    data, history = _data(), gyre.History()
    try:
        state, history, elapsed = gyre.loop(jnp.float32(0), data, {gyre.every(1): counts, gyre.every(2): Window()},
                                            history=history, prefetch=0)
    except Boom as err:
        state, elapsed = err.state, err.elapsed
    assert int(state) == elapsed.steps == len(history) == data.index == 5
