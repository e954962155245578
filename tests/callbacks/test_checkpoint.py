"""gyre.checkpoint: saving with orbax inside loops and by hand, retention, restore, errors."""

import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.callbacks._checkpoint import Checkpoint


def make_state(value=0.0):
    return {"w": jnp.full((2, 3), value, jnp.float32), "b": jnp.arange(3, dtype=jnp.int32)}


def add_batch(state, batch):
    """A deterministic 'update': w += batch, b += 1."""
    return {"w": state["w"] + batch, "b": state["b"] + 1}


def target():
    return {"w": jnp.zeros((2, 3), jnp.float32), "b": jnp.zeros(3, jnp.int32)}


def leaves_equal(a, b):
    return all(
        np.array_equal(np.asarray(x), np.asarray(y)) and x.dtype == y.dtype
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    ) and jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)


# -- saving in loops ----------------------------------------------------------------------


def test_loop_every_n_steps_saves_completed_clock_and_restores_exactly(tmp_path):
    ckpt = gyre.checkpoint(tmp_path / "ckpt", keep=10)
    saved = {}

    def remember(state, loop):
        saved[loop.completed.steps] = (jax.tree_util.tree_map(np.asarray, state), loop.completed)

    batches = [float(i) for i in range(1, 8)]
    state, _, elapsed = gyre.loop(
        make_state(), batches, {gyre.every(1): [add_batch], gyre.every(3): [ckpt, remember]},
        on_end=ckpt.on_train_end,
    )
    # every(3) fires at step indices 0, 3, 6: the state then includes that step's update,
    # so it is saved under the clock after the step.
    assert ckpt.all_steps() == [1, 4, 7] == sorted(saved)
    assert elapsed.steps == 7
    for step in (1, 4, 7):
        restored, clock = ckpt.restore(target(), step=step)
        assert leaves_equal(restored, saved[step][0])
        # loop.completed reads the time when asked: compare the counters, not the seconds.
        assert clock.replace(time=0.0, date=0.0) == saved[step][1].replace(time=0.0, date=0.0)
        assert clock.steps == step and 0.0 <= clock.time <= elapsed.time
    latest, clock = ckpt.restore(target())
    assert leaves_equal(latest, state)
    assert clock.replace(time=0.0, date=0.0) == elapsed.replace(time=0.0, date=0.0)
    ckpt.close()


def test_restored_clock_continues_the_run(tmp_path):
    ckpt = gyre.checkpoint(str(tmp_path), keep=1)
    gyre.loop(make_state(), [1.0] * 4, {gyre.every(1): [add_batch], gyre.every(2): [ckpt]},
              on_end=ckpt.on_train_end)
    state, clock = ckpt.restore(target())
    assert clock.steps == 3
    assert np.asarray(state["w"]).tolist() == [[3.0] * 3] * 2
    state, _, elapsed = gyre.loop(state, [1.0] * 2, {gyre.every(1): [add_batch]}, elapsed=clock)
    assert elapsed.steps == 5
    assert np.asarray(state["w"])[0, 0] == 5.0


def test_train_loop_self_registers_on_epoch_end(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=5)
    assert ckpt.on_epoch_end is not None and callable(ckpt.on_train_end)
    state, _, elapsed = gyre.train_loop(
        make_state(), [1.0] * 6, {gyre.on_train_step: add_batch},
        callbacks=[ckpt], epoch_duration=2,
    )
    assert elapsed.epochs == 3
    assert ckpt.all_steps() == [2, 4, 6]  # the end of each epoch
    restored, clock = ckpt.restore(target(), step=4)
    assert np.asarray(restored["w"])[0, 0] == 4.0
    assert (clock.steps, clock.epochs, clock.step_in_epoch) == (4, 2, 0)
    assert leaves_equal(ckpt.restore(target())[0], state)


def test_train_loop_with_monitor_after_evaluation(tmp_path):
    losses = iter([3.0, 1.0, 2.0, 4.0])

    def test_step(state, batch):
        return gyre.logs().add_loss("loss", jnp.float32(next(losses)))

    ckpt = gyre.checkpoint(tmp_path, keep=1, keep_best=1, monitor="loss_test", mode="min")
    gyre.train_loop(
        make_state(), [1.0] * 8, {gyre.on_train_step: add_batch, gyre.on_test_step: test_step},
        callbacks=[ckpt], test_dataset=lambda: [0], epoch_duration=2,
    )
    assert ckpt.best_step() == 4
    assert ckpt.all_steps() == [4, 8]  # the best and the latest


# -- saving by hand -----------------------------------------------------------------------


def test_manual_call_with_elapsed_then_state(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=3)
    state = make_state()
    for elapsed, batch in gyre.elapse([1.0, 2.0, 3.0]):
        state = add_batch(state, batch)
        assert ckpt(elapsed, state) is None
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [1, 2, 3]  # one numbering: the steps completed, as in gyre.loop
    restored, clock = ckpt.restore(target(), step=3)
    assert leaves_equal(restored, state)
    assert clock.steps == 3 and clock.samples == 3
    ckpt.close()


def test_hand_loop_and_gyre_loop_number_checkpoints_alike(tmp_path):
    by_hand = gyre.checkpoint(tmp_path / "hand", keep=5)
    state = make_state()
    for elapsed, batch in gyre.elapse([1.0] * 4):
        state = add_batch(state, batch)
        if gyre.every(2)(elapsed):
            by_hand(elapsed, state)
    in_loop = gyre.checkpoint(tmp_path / "loop", keep=5)
    gyre.loop(make_state(), [1.0] * 4, {gyre.every(1): add_batch, gyre.every(2): in_loop})
    by_hand.wait_until_finished()
    in_loop.wait_until_finished()
    assert by_hand.all_steps() == in_loop.all_steps() == [1, 3]
    by_hand.close()
    in_loop.close()


def test_same_step_twice_is_skipped(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    ckpt(gyre.Elapsed(steps=5), make_state(1.0))
    ckpt(gyre.Elapsed(steps=5), make_state(2.0))  # no crash, first one kept
    restored, _ = ckpt.restore(target())
    assert np.asarray(restored["w"])[0, 0] == 1.0
    assert ckpt.all_steps() == [5]


def test_earlier_step_warns_and_is_skipped(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    ckpt(gyre.Elapsed(steps=5), make_state(1.0))
    with pytest.warns(UserWarning, match="later step"):
        ckpt(gyre.Elapsed(steps=2), make_state(2.0))
    assert ckpt.all_steps() == [5]


def test_save_survives_donation_of_the_state(tmp_path):
    # The loop donates the state to the next step: the async save must not need its buffers.
    ckpt = gyre.checkpoint(tmp_path)
    state = make_state(7.0)
    ckpt(gyre.Elapsed(steps=1), state)
    for leaf in jax.tree_util.tree_leaves(state):
        leaf.delete()
    restored, _ = ckpt.restore(target())
    assert np.asarray(restored["w"]).tolist() == [[7.0] * 3] * 2


def test_elapsed_round_trips_every_counter(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    clock = gyre.Elapsed(steps=9, samples=288, epochs=2, step_in_epoch=1, time=1.25, date=1.7e9 + 0.1)
    ckpt(clock, make_state())
    assert ckpt.restore(target())[1] == clock


# -- retention ----------------------------------------------------------------------------


def test_keep_two_keeps_the_two_latest(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=2)
    for step in range(1, 6):
        ckpt(gyre.Elapsed(steps=step), make_state(float(step)))
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [4, 5]
    assert ckpt.latest_step() == 5
    assert sorted(p for p in os.listdir(tmp_path) if p.isdigit()) == ["4", "5"]


def test_monitor_min_keeps_best_and_latest(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=1, keep_best=2, monitor="loss", mode="min")
    for step, loss in [(1, 5.0), (2, 1.0), (3, 4.0), (4, 2.0), (5, 3.0), (6, 9.0)]:
        logs = gyre.logs().add_loss("loss", jnp.float32(loss))
        ckpt(gyre.Elapsed(steps=step), make_state(float(step)), logs)
    ckpt.wait_until_finished()
    assert ckpt.all_steps() == [2, 4, 6]  # the two best (1.0, 2.0) and the latest (9.0)
    assert ckpt.best_step() == 2
    restored, clock = ckpt.restore(target(), step=ckpt.best_step())
    assert np.asarray(restored["w"])[0, 0] == 2.0 and clock.steps == 2


def test_monitor_max_and_reopening_the_directory(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=1, keep_best=1, monitor="metrics.acc", mode="max")
    for step, acc in [(1, 0.2), (2, 0.9), (3, 0.5)]:
        ckpt(gyre.Elapsed(steps=step), make_state(), gyre.logs().add_metric("acc", acc))
    ckpt.close()
    again = gyre.checkpoint(tmp_path, keep=1, keep_best=1, monitor="metrics.acc", mode="max")
    assert again.all_steps() == [2, 3]
    assert again.best_step() == 2  # the metrics are read back from disk
    again.close()


def test_nan_monitored_value_ranks_last(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=1, keep_best=1, monitor="loss")
    for step, loss in [(1, 1.0), (2, float("nan")), (3, 2.0)]:
        ckpt(gyre.Elapsed(steps=step), make_state(), gyre.logs().add_loss("loss", loss))
    ckpt.wait_until_finished()
    assert ckpt.best_step() == 1
    assert ckpt.all_steps() == [1, 3]


# -- misc -----------------------------------------------------------------------------------


def test_directory_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = gyre.checkpoint("rel/ckpts")
    assert ckpt.directory == str(tmp_path / "rel" / "ckpts")
    assert os.path.isabs(gyre.checkpoint(pathlib.Path("x")).directory)
    ckpt(gyre.Elapsed(steps=1), make_state())
    ckpt.close()
    assert (tmp_path / "rel" / "ckpts" / "1").is_dir()


def test_type_and_repr():
    ckpt = gyre.checkpoint("/tmp/never-created-by-gyre-tests", keep=3, monitor="loss")
    assert isinstance(ckpt, Checkpoint)
    assert "keep=3" in repr(ckpt) and "'loss'" in repr(ckpt)
    assert not os.path.exists("/tmp/never-created-by-gyre-tests")  # nothing until first use


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", [None, 3, b"bytes", ["a"]])
def test_bad_directory_type(directory):
    with pytest.raises(TypeError, match="directory must be a path"):
        gyre.checkpoint(directory)


def test_empty_or_file_directory(tmp_path):
    with pytest.raises(ValueError, match="non-empty path"):
        gyre.checkpoint("")
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        gyre.checkpoint(file)


@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "2", None])
def test_bad_keep(tmp_path, keep):
    with pytest.raises(ValueError, match="keep must be a whole number >= 1") as info:
        gyre.checkpoint(tmp_path, keep=keep)
    assert "expected:" in str(info.value) and "fix:" in str(info.value)


@pytest.mark.parametrize("mode", ["auto", "MIN", None, 1])
def test_bad_mode(tmp_path, mode):
    with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
        gyre.checkpoint(tmp_path, monitor="loss", mode=mode)


def test_bad_monitor_type(tmp_path):
    with pytest.raises(TypeError, match="monitor must be the name"):
        gyre.checkpoint(tmp_path, monitor=3)


def test_monitor_never_logged_lists_available_entries(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, monitor="loss_test")
    logs = gyre.logs().add_loss("loss", 1.0).add_metric("acc", 0.5)
    with pytest.raises(KeyError, match="loss_test") as info:
        ckpt(gyre.Elapsed(steps=1), make_state(), logs)
    message = str(info.value)
    assert "losses.loss" in message and "metrics.acc" in message
    with pytest.raises(KeyError, match="no logs"):
        ckpt(gyre.Elapsed(steps=1), make_state())
    assert ckpt.all_steps() == []


def test_monitor_never_logged_inside_a_loop(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, monitor="loss_test")

    def step(state):
        return gyre.logs().add_loss("loss", 1.0)

    with pytest.raises(KeyError, match="losses.loss"):
        gyre.loop(make_state(), [1.0], {gyre.every(1): [step, ckpt]})


def test_monitor_must_be_a_scalar(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, monitor="loss")
    with pytest.raises(ValueError, match="not a single number"):
        ckpt(gyre.Elapsed(steps=1), make_state(), gyre.logs().add_loss("loss", jnp.ones(3)))


def test_manual_call_with_arguments_swapped(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    with pytest.raises(TypeError, match="clock first"):
        ckpt(make_state(), gyre.Elapsed(steps=1))


def test_restore_with_nothing_saved(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint to restore"):
        ckpt.restore(target())


def test_restore_unknown_step_lists_saved_steps(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    ckpt(gyre.Elapsed(steps=3), make_state())
    with pytest.raises(FileNotFoundError, match=r"one of the saved steps \[3\]"):
        ckpt.restore(target(), step=4)


def test_restore_into_a_different_structure(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    ckpt(gyre.Elapsed(steps=3), make_state())
    with pytest.warns(UserWarning, match="saved leaves not in the target"), pytest.raises(
        ValueError, match="do not fit target_state"
    ):
        ckpt.restore({"w": jnp.zeros((2, 3))})


def test_best_step_needs_a_monitor(tmp_path):
    with pytest.raises(ValueError, match="needs a checkpoint that monitors"):
        gyre.checkpoint(tmp_path).best_step()


# -- numpy numbers, construction-time checks, errors that print as written ------------------


def test_numpy_and_jax_integers_as_keep_and_restore_step(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=np.int64(2))
    assert ckpt.keep == 2 and type(ckpt.keep) is int
    for step in (1, 2, 3):
        ckpt(gyre.Elapsed(steps=step), make_state(float(step)))
    assert ckpt.all_steps() == [2, 3]
    state, elapsed = ckpt.restore(target(), step=jnp.array(2))
    assert elapsed.steps == 2 and float(state["w"][0, 0]) == 2.0
    state, _ = ckpt.restore(target(), step=np.int32(3))
    assert float(state["w"][0, 0]) == 3.0


def test_directory_under_a_file_is_refused_at_construction(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError) as info:
        gyre.checkpoint(tmp_path / "notes.txt" / "ckpts")
    assert str(info.value).splitlines()[0] == "checkpoint's directory cannot be created: a file is in the way"
    assert f"under the file {str(tmp_path / 'notes.txt')!r}" in str(info.value)


def test_unwritable_directory_is_refused_at_construction(tmp_path, monkeypatch):
    # Root writes anywhere, so the permission is simulated.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(PermissionError) as info:
        gyre.checkpoint(tmp_path / "ckpts")
    lines = str(info.value).splitlines()
    assert lines[0] == "checkpoint's directory cannot be written"
    assert lines[2] == f"  received: {str(tmp_path / 'ckpts')!r}, under {str(tmp_path)!r}, which is not writable"


def test_vector_monitor_names_the_entry_and_its_shape(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, monitor="per_class")
    logs = gyre.logs().add_metric("per_class", jnp.ones((2, 5)))
    with pytest.raises(ValueError) as info:
        ckpt(gyre.Elapsed(steps=1), make_state(), logs)
    lines = str(info.value).splitlines()
    assert lines[0] == "checkpoint monitors 'per_class', which is not a single number at step 1"
    assert lines[2] == "  received: an array of shape (2, 5) (float32)"
    assert ckpt.all_steps() == []


def test_missing_monitor_error_prints_real_newlines(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, monitor="loss_test")
    with pytest.raises(KeyError) as info:
        ckpt(gyre.Elapsed(steps=1), make_state(), gyre.logs().add_loss("loss", 1.0))
    assert isinstance(info.value, gyre.core.ExplainedKeyError)
    text = str(info.value)
    assert "\\n" not in text and text.splitlines()[:3] == [
        "checkpoint monitors 'loss_test', which was not logged at step 1",
        "  expected: an entry named 'loss_test' in the logs when checkpoint runs",
        "  received: entries ['losses.loss']",
    ]


def test_readme_checkpoint_section_runs(tmp_path, monkeypatch, capsys):
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Checkpoints")[1].split("\n## ")[0]
    code = section.split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md (Checkpoints)", "exec"), {})
    assert capsys.readouterr().out == "9 [9. 9.]\n"
    assert _saved_steps_in(tmp_path / "runs" / "readme" / "checkpoints") == [5, 7, 9]


def _saved_steps_in(directory):
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())
