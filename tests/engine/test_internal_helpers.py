"""Internal helpers of gyre.loop whose docstring examples were their only test (moved here when
the internal docstrings lost their doctests: doctests are for public names)."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.engine._binding import Masked, bind
from gyre.engine._blocks import plan_table
from gyre.engine._chunks import first_firing
from gyre.engine._elapse import Elapse, epochs_unknown, source_of
from gyre.engine._engine import depth, guarded
from gyre.engine._fuse import scanned, step_body
from gyre.engine._inner import check_aggregation, suffixed
from gyre.engine._masked import mask_wanted, real_rows, unmasking
from gyre.engine._nan import apply_nan_policy, check_nan_policy, finite_check, skipped_steps_of
from gyre.engine._ring import ringable
from gyre.engine._snapshot import chain_crc, has_state, new_block
from gyre.engine._tasks import Task, compile_tasks


def test_invoker_binds_by_name():
    inv = bind(lambda logs, state: (logs, state + 1))
    assert inv.name.endswith("<lambda>")
    assert inv.call(1, "batch", "elapsed", {}, None) == ({}, 2)


def test_elapse_helpers():
    assert source_of([1, 2]) == [1, 2]
    text = epochs_unknown("stop=Period(epochs=2)", iter([]))
    assert text.splitlines()[0] == (
        "stop=Period(epochs=2) counts epochs, and the loop cannot tell where an epoch ends"
    )


def test_step_body_and_scanned_return_state_and_logs():
    step = bind(lambda s, b: (gyre.logs().add_metric("b", b), s + b))
    state, logs = step_body(step)(1, 2)
    assert (state, logs.metrics.b) == (3, 2)
    logs, state = scanned(lambda s, b: ({"b": b}, s + b))(jnp.float32(0), jnp.arange(3.0))
    assert (logs["b"].tolist(), float(state)) == ([0.0, 1.0, 2.0], 3.0)


def test_inner_helpers():
    assert suffixed(Logs().add_metric("acc", 1), "test") == Logs(metrics={"acc_test": 1})
    assert check_aggregation({"metrics": "mean"}) is None


def test_masked_helpers():
    seen = unmasking(lambda batch: batch.tolist())
    assert seen.call(None, Masked(np.arange(2), np.ones(2, bool)), None, None, None) == [0, 1]
    assert real_rows(Masked(np.zeros(4), np.array([True, True, False, False]), rows=2)) == 2
    _, wanted = mask_wanted([lambda state, batch, mask=None: None], "test_loop")
    assert wanted is True
    assert mask_wanted([lambda state, batch: None], "test_loop")[1] is False


def test_nan_policy_helpers():
    assert finite_check("ignore", gyre.history(), gyre.Elapsed, skipping=False, state=None) is None
    assert (skipped_steps_of({"skipped_steps": 2}), skipped_steps_of(3)) == (2, None)
    _, skipping = apply_nan_policy({gyre.every(1): [print]}, "raise")
    assert skipping is False
    assert check_nan_policy("skip") == "skip"
    with pytest.raises(ValueError, match="nan_policy of loop must be one of 'raise', 'skip'"):
        check_nan_policy("rasie")
    with pytest.raises(ValueError, match="fit cannot skip non-finite updates: its step applies"):
        check_nan_policy("skip", "fit", no_skip=("its step applies every update", "wrap tx"))


def test_has_state_and_task_schedules():
    assert (has_state(gyre.early_stopping("loss", patience=2)), has_state(len)) == (True, False)
    tasks = compile_tasks({gyre.every(1): print, gyre.every(2): print})
    assert [repr(t.schedule) for t in tasks] == ["None", "every(steps=2)"]


def test_a_named_loops_epoch_point_is_solved_from_the_step_of_the_epoch_it_names():
    from gyre.engine._tasks import When

    last = When(lambda e: e.step_in_epoch == 2, "on_epoch_end", reads=("step_in_epoch",))
    assert last(gyre.Elapsed(step_in_epoch=2)) and repr(last) == "on_epoch_end"
    assert last.next_step(gyre.Elapsed(steps=4, step_in_epoch=1), epoch_steps=3) == 5
    first = When(lambda e: e.step_in_epoch == 0, "on_epoch_begin", reads=("step_in_epoch",), in_epoch=0)
    assert first.next_step(gyre.Elapsed(steps=4, step_in_epoch=1), epoch_steps=3) == 6


def test_a_history_file_keeps_its_bytes_and_its_chain_crc():
    h = History()
    h.commit(gyre.Elapsed(samples=2), Logs().add_loss("loss", np.float32(0.5)).add_metric("m", "a"), batch_size=2)
    name, data = new_block(h, 0)
    int0, float0 = '"dtype": "int64", "shape": [], "bytes": "AAAAAAAAAAA="', '"dtype": "float64", "shape": [], "bytes": "AAAAAAAAAAA="'
    assert name == "history/000000000000.json" and data.decode() == (
        '{"format": 2, "start": 0, "stop": 1, "clocks": {'
        f'"steps": {{{int0}}}, "samples": {{"dtype": "int64", "shape": [], "bytes": "AgAAAAAAAAA="}}, '
        f'"epochs": {{{int0}}}, "step_in_epoch": {{{int0}}}, "time": {{{float0}}}, "date": {{{float0}}}}}, '
        '"batch_sizes": [2], "entries": [["losses", "loss", null, {"dtype": "float32", "shape": [], '
        '"bytes": "AAAAPw=="}], ["metrics", "m", null, {"values": ["a"]}]], "orders": []}'
    )
    assert chain_crc({name: data}.get, 1) == zlib.crc32(data) and chain_crc({}.get, 1) is None


def test_guarded_counts_the_loops_running_on_this_thread():
    assert depth() == 0
    with guarded(catch_interrupt=False) as guard:
        assert (depth(), guard.outermost, guard.check(0)) == (1, True, False)
        with guarded(catch_interrupt=False) as inner:
            assert (depth(), inner.outermost) == (2, False)
    assert depth() == 0


def test_plan_table_sorts_a_jitted_steps_table_or_says_why_not():
    step = jax.jit(lambda s, b: s)
    plan = plan_table(compile_tasks({gyre.every(1): step, gyre.every(10): print}), Elapse([1]))
    assert plan.step.fn is step and len(plan.after) == 1
    reason = plan_table(compile_tasks({gyre.every(1): [step, print]}), Elapse([1]))
    assert reason == "print runs on every step: a plain Python function"


def test_first_firing_asks_the_tasks_in_order_until_one_fires():
    answers = []
    tasks = [Task(1, gyre.every(2), []), Task(2, gyre.every(3), [])]
    assert first_firing(tasks, gyre.Elapsed(steps=3), answers) == 1 and answers == [False, True]


def test_a_wrapper_of_a_jitted_step_is_not_ringable():
    step = jax.jit(lambda s, b: s)
    assert ringable(step, 0) and not ringable(gyre.testing.assert_compiled_once(step), 0)
