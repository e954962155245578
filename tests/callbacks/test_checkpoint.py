"""gyre.checkpoint: saving with orbax inside loops and by hand, retention, restore, errors."""

import os
import pathlib
import shutil

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
    assert clock.steps == 4  # the loop's end is saved too (every(2) saved 1 and 3 before it)
    assert np.asarray(state["w"]).tolist() == [[4.0] * 3] * 2
    state, _, elapsed = gyre.loop(state, [1.0] * 2, {gyre.every(1): [add_batch]}, elapsed=clock)
    assert elapsed.steps == 6
    assert np.asarray(state["w"])[0, 0] == 6.0


def test_a_run_continued_by_hand_warns_that_its_data_restarts_and_resume_continues_it(tmp_path):
    # restore() brings back the state and the clock; gyre's batches started again at batch 0 silently
    x = np.arange(20, dtype=np.float32)

    def first(state, batch):
        return gyre.logs().add_metric("first", batch[0]), state + 1

    def run(folder, stop, **kwargs):
        ckpt = gyre.checkpoint(tmp_path / folder)
        state, elapsed = ckpt.restore(jnp.int32(0)) if kwargs.pop("by_hand", False) else (jnp.int32(0), None)
        _, history, _ = gyre.loop(state, gyre.data.batches(x, 2, shuffle=False),
                                  {gyre.every(1): [first], gyre.every(3): [ckpt]}, stop=stop, elapsed=elapsed, **kwargs)
        ckpt.close()
        return history.collect("first")

    assert run("a", 6) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with pytest.warns(UserWarning, match=r"(?s)continues step 6 of a checkpoint restored by hand.*"
                      r"expected: the data at the saved position: Batches at epoch 0, batch 6\n"
                      r"  received: Batches at epoch 0, batch 0\n  fix: continue with resume='latest'"):
        assert run("a", 8, by_hand=True) == [0.0, 2.0]  # what it warns of
    assert run("b", 8, resume="latest")[-2:] == [12.0, 14.0]  # the fix: batches 6 and 7


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
    assert by_hand.all_steps() == [1, 3]
    assert in_loop.all_steps() == [1, 3, 4]  # the same numbers, and the loop saves its end
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
    ckpt.close()  # step 5's save finishes before tmp_path goes (else the exit hook reports it failed)


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
    ckpt = gyre.checkpoint(tmp_path, monitor="loss_test", keep_best=1)

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


def test_readme_checkpoint_section_runs(tmp_path, run_readme, capsys):
    run_readme("Checkpoints", page="docs/concepts/checkpoints.md")
    assert capsys.readouterr().out == "9 [9. 9.]\n"
    assert _saved_steps_in(tmp_path / "runs" / "readme" / "checkpoints") == [5, 7, 9]


def _saved_steps_in(directory):
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


# -- issue 10: keep and keep_best, resume, integrity, one run per directory ---------------------

import glob  # noqa: E402
import warnings  # noqa: E402

import optax  # noqa: E402

from gyre.callbacks import CheckpointError  # noqa: E402
from gyre.engine._snapshot import Checkpointer, Snapshot  # noqa: E402


def save_steps(directory, steps, **kwargs):
    """A finished run: ``steps`` saved through one checkpoint, closed."""
    with gyre.checkpoint(directory, keep=10, **kwargs) as ckpt:
        for step in steps:
            ckpt(gyre.Elapsed(steps=step), make_state(float(step)))
    return directory


def messages(caught):
    return [str(w.message) for w in caught]


def test_defaults_and_the_checkpointer_protocol(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    assert (ckpt.keep, ckpt.keep_best, ckpt.monitor, ckpt.async_save, ckpt.overwrite, ckpt.checksums) == (
        3, 0, None, True, False, True
    )
    assert isinstance(ckpt, Checkpointer) and isinstance(ckpt, gyre.LoopElement)
    for name in ("save_snapshot", "saved_step", "load_snapshot", "read_file", "list_files", "wait_until_finished"):
        assert getattr(type(ckpt), name) is not getattr(Checkpointer, name), name
    assert repr(gyre.checkpoint(tmp_path, keep_best=2, monitor="loss", overwrite=True)).endswith(
        "keep=3, keep_best=2, monitor='loss', mode='min', overwrite=True)"
    )


def test_latest_and_best_are_kept_at_the_same_time(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=2, keep_best=2, monitor="loss", mode="min")
    losses = [0.5, 0.1, 0.9, 0.2, 0.8, 0.7, 3.0]
    for step, loss in enumerate(losses, start=1):
        ckpt(gyre.Elapsed(steps=step), make_state(float(step)), gyre.logs().add_loss("loss", loss))
    ckpt.wait_until_finished()
    # the two best (steps 2 and 4) and the two latest (6, 7): the newest is the worst and stays
    assert ckpt.all_steps() == [2, 4, 6, 7] and ckpt.best_step() == 2
    ckpt.close()


def test_async_save_off_writes_before_returning(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, async_save=False)
    ckpt(gyre.Elapsed(steps=1), make_state(1.0))
    assert os.path.isdir(tmp_path / "1") and not glob.glob(str(tmp_path / "*tmp*"))
    ckpt.close()


def test_a_loop_returns_with_every_save_on_disk(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=10)
    gyre.loop(make_state(), [1.0] * 6, {gyre.every(1): add_batch, gyre.every(2): ckpt})
    steps = sorted(n for n in os.listdir(tmp_path) if n[0].isdigit())
    assert steps == ["1", "3", "5", "6"]  # the end too; no *.orbax-checkpoint-tmp left
    assert all(os.path.isfile(tmp_path / s / "commit_success.txt") for s in steps)


# -- save_snapshot / load_snapshot ---------------------------------------------------------------


def test_a_snapshot_round_trips_with_its_meta_arrays_metrics_and_files(tmp_path):
    best = {"w": jnp.arange(4.0)}
    snap = Snapshot(
        step=6, state=make_state(6.0), elapsed=gyre.Elapsed(steps=6, epochs=2),
        meta={"resumables": {"early_stopping": {"wait": 2}}, "history": 6},
        arrays={"resumables": {"early_stopping": {"best": best}}},
        metrics={"loss_test": 0.25}, files={"history/000000000000.json": b'{"records": []}'},
    )
    with gyre.checkpoint(tmp_path, monitor="loss_test", keep_best=1) as ckpt:
        ckpt.save_snapshot(snap, wait=True)
        assert ckpt.saved_step() == 6 and ckpt.best_step() == 6
    resumed = gyre.checkpoint(tmp_path, monitor="loss_test", keep_best=1)
    loaded = resumed.load_snapshot("latest", target())
    assert loaded.step == 6 and loaded.elapsed == gyre.Elapsed(steps=6, epochs=2)
    assert leaves_equal(loaded.state, make_state(6.0))
    assert loaded.meta == snap.meta and loaded.metrics == {"loss_test": 0.25}
    assert np.asarray(loaded.arrays["resumables"]["early_stopping"]["best"]["w"]).tolist() == [0, 1, 2, 3]
    assert resumed.read_file("history/000000000000.json") == b'{"records": []}'
    assert resumed.list_files("history") == ["history/000000000000.json"]
    assert resumed.saved_step() == 6
    # resumed: it saves on in the same directory, and skips the step it resumed from
    resumed.save_snapshot(Snapshot(step=6, state=make_state(0.0), elapsed=gyre.Elapsed(steps=6)))
    resumed(gyre.Elapsed(steps=8), make_state(8.0), gyre.logs().add_loss("loss_test", 0.5))
    resumed.wait_until_finished()
    assert resumed.all_steps() == [6, 8] and resumed.saved_step() == 8
    assert float(resumed.restore(target(), step=6)[0]["w"][0, 0]) == 6.0
    resumed.close()


def test_arrays_restore_into_a_given_structure(tmp_path):
    arrays = {"best": (jnp.ones(2), jnp.zeros((1, 3), jnp.int32))}
    with gyre.checkpoint(tmp_path) as ckpt:
        ckpt.save_snapshot(Snapshot(step=1, state=make_state(), elapsed=gyre.Elapsed(steps=1), arrays=arrays))
    into = {"best": (jnp.zeros(2), jnp.ones((1, 3), jnp.int32))}
    loaded = gyre.checkpoint(tmp_path).load_snapshot(1, target(), target_arrays=into)
    assert isinstance(loaded.arrays["best"], tuple) and leaves_equal(loaded.arrays, arrays)


def test_latest_in_an_empty_directory_starts_fresh_and_says_so_once(tmp_path):
    ckpt = gyre.checkpoint(tmp_path / "new")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ckpt.load_snapshot("latest", target()) is None
        assert ckpt.load_snapshot("latest", target()) is None
        assert gyre.checkpoint(tmp_path / "new", monitor="loss").load_snapshot("best", target()) is None
    assert messages(caught) == [f"checkpoint: no checkpoint in {tmp_path / 'new'}: starting fresh"] * 2
    assert caught[0].filename == __file__  # attributed to the caller
    ckpt(gyre.Elapsed(steps=1), make_state())  # a fresh start saves without complaint
    ckpt.close()


def test_resume_best_picks_the_best_monitored_value(tmp_path):
    with gyre.checkpoint(tmp_path, keep=5, keep_best=1, monitor="metrics.acc", mode="max") as ckpt:
        for step, acc in [(1, 0.5), (2, 0.9), (3, 0.7)]:
            ckpt(gyre.Elapsed(steps=step), make_state(float(step)), gyre.logs().add_metric("acc", acc))
        ckpt.save_snapshot(Snapshot(step=4, state=make_state(4.0), elapsed=gyre.Elapsed(steps=4)))
    assert gyre.checkpoint(tmp_path, monitor="metrics.acc", mode="max").load_snapshot("best", target()).step == 2
    assert gyre.checkpoint(tmp_path, monitor="metrics.acc", mode="min").load_snapshot("best", target()).step == 1


def test_resume_best_needs_a_monitor_and_values(tmp_path):
    save_steps(tmp_path, [1])
    with pytest.raises(ValueError) as info:
        gyre.checkpoint(tmp_path).load_snapshot("best", target())
    assert str(info.value).splitlines()[0] == "resume= 'best' needs a checkpoint that monitors a value"
    with pytest.raises(FileNotFoundError, match="has a value of 'loss' to rank it by"):
        gyre.checkpoint(tmp_path, monitor="loss").load_snapshot("best", target())


def test_resume_a_step_that_does_not_exist_lists_the_saved_ones(tmp_path):
    save_steps(tmp_path, [2, 4])
    with pytest.raises(FileNotFoundError) as info:
        gyre.checkpoint(tmp_path).load_snapshot(3, target())
    assert str(info.value).splitlines()[:3] == [
        f"no checkpoint for step 3 in {tmp_path}",
        "  expected: one of the saved steps [2, 4]",
        "  received: int 3",
    ]
    with pytest.raises(TypeError, match="resume= names the checkpoint to continue from"):
        gyre.checkpoint(tmp_path).load_snapshot(2.0, target())


def test_resume_from_a_step_directory_here_or_elsewhere(tmp_path):
    old = tmp_path / "old"
    with gyre.checkpoint(old) as ckpt:
        ckpt.save_snapshot(Snapshot(step=3, state=make_state(3.0), elapsed=gyre.Elapsed(steps=3),
                                    files={"history/000000000000.json": b"[3]"}))
    assert gyre.checkpoint(old).load_snapshot(old / "3", target()).step == 3  # its own directory
    new = gyre.checkpoint(tmp_path / "new")
    loaded = new.load_snapshot(str(old / "3"), target())
    assert loaded.step == 3 and new.read_file("history/000000000000.json") == b"[3]"  # read there
    new.save_snapshot(Snapshot(step=5, state=make_state(5.0), elapsed=gyre.Elapsed(steps=5)), wait=True)
    assert sorted(os.listdir(tmp_path / "new")) == ["5", "gyre-files.json", "history"]  # copied here
    assert new.read_file("history/000000000000.json") == b"[3]" and new.all_steps() == [5]
    assert gyre.checkpoint(old).all_steps() == [3]  # the other directory is untouched
    new.close()
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        gyre.checkpoint(tmp_path / "new").load_snapshot(tmp_path / "old", target())


def test_save_snapshot_checks_its_argument(tmp_path):
    ckpt = gyre.checkpoint(tmp_path)
    with pytest.raises(TypeError, match="save_snapshot takes a gyre Snapshot"):
        ckpt.save_snapshot({"step": 1})
    with pytest.raises(ValueError, match="a Snapshot's step must be a whole number >= 0"):
        ckpt.save_snapshot(Snapshot(step=-1, state=make_state(), elapsed=gyre.Elapsed()))
    with pytest.raises(ValueError, match="a checkpoint file name must be a relative path"):
        ckpt.save_snapshot(Snapshot(step=1, state=make_state(), elapsed=gyre.Elapsed(steps=1),
                                    files={"../escape.json": b""}))
    ckpt.close()


# -- integrity ----------------------------------------------------------------------------------


def big_state(value):
    return {"w": jax.random.normal(jax.random.key(int(value)), (64, 64)), "b": jnp.full(8, float(value))}


def big_target():
    return {"w": jnp.zeros((64, 64)), "b": jnp.zeros(8)}


def largest_array_file(step_dir):
    files = glob.glob(os.path.join(step_dir, "state", "**", "d", "*"), recursive=True)
    return max(files, key=os.path.getsize)


def flip_bytes(path):
    data = bytearray(open(path, "rb").read())
    for i in range(len(data) // 2, len(data) // 2 + 4):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def leftover_temporary(root):
    shutil.copytree(root / "2", root / "3.orbax-checkpoint-tmp")


def empty_step_directory(root):
    (root / "3").mkdir()


CORRUPTIONS = {
    "temporary-directory": (leftover_temporary, None),
    "empty-step-directory": (empty_step_directory, "3 is not loaded: the step directory is empty"),
    "deleted-array-file": (lambda root: os.remove(largest_array_file(root / "2")), "2 is not loaded: a file is "),
    "truncated-array-file": (lambda root: truncate(largest_array_file(root / "2")), "2 is not loaded: a file is "),
    "flipped-bytes": (lambda root: flip_bytes(largest_array_file(root / "2")), "2 is not loaded: the values of w differ from those saved (checksum mismatch"),
    "emptied-manifest": (lambda root: open(root / "2" / "state" / "manifest.ocdbt", "w").close(), "2 is not loaded: state/manifest.ocdbt is empty"),
    "emptied-metadata": (lambda root: open(root / "2" / "state" / "_METADATA", "w").close(), "2 is not loaded: state/_METADATA is empty"),
    "emptied-record": (lambda root: open(root / "2" / "gyre" / "metadata", "w").close(), "2 is not loaded: gyre/metadata is empty"),
}


@pytest.fixture
def damage_read():
    """orbax reports the damaged array files it reads as unraisable errors of its read
    coroutines, when they are collected: expected in these tests, so they are collected in the
    test's teardown (where DAMAGE_READ filters them) rather than printed under whichever test
    runs at the next collection."""
    yield
    import gc

    gc.collect()


DAMAGE_READ = "ignore::pytest.PytestUnraisableExceptionWarning"


@pytest.mark.filterwarnings(DAMAGE_READ)
@pytest.mark.usefixtures("damage_read")
@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_planted_corruption_is_skipped_with_one_warning_and_the_previous_one_used(tmp_path, name):
    plant, said = CORRUPTIONS[name]
    with gyre.checkpoint(tmp_path, keep=5) as ckpt:
        for step in (1, 2):
            ckpt(gyre.Elapsed(steps=step), big_state(step))
    plant(tmp_path)
    resumed = gyre.checkpoint(tmp_path, keep=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = resumed.load_snapshot("latest", big_target())
    expected_step = 2 if name in ("temporary-directory", "empty-step-directory") else 1
    assert loaded.step == expected_step and leaves_equal(loaded.state, big_state(expected_step))
    if said is None:
        assert messages(caught) == []
    else:
        (line,) = messages(caught)
        assert line.startswith(f"checkpoint {tmp_path}/") and said in line and line.endswith("trying the previous one")
        assert "\n" not in line and "tensorstore" not in line and len(line) < 300
    # the next save sets the damaged step aside and goes on from the one loaded
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed(gyre.Elapsed(steps=expected_step + 5), big_state(7))
        resumed.wait_until_finished()
    assert messages(caught) == []  # already said once
    assert resumed.all_steps() == list(range(1, expected_step + 1)) + [expected_step + 5]
    assert not glob.glob(str(tmp_path / "*orbax-checkpoint-tmp*"))
    if said is not None:
        damaged = said.split(" ")[0]
        assert os.path.isdir(tmp_path / f"{damaged}.corrupt") and not os.path.exists(tmp_path / damaged)
    resumed.close()


def test_a_damaged_step_named_explicitly_raises(tmp_path):
    save_steps(tmp_path, [1, 2])
    open(tmp_path / "2" / "state" / "_METADATA", "w").close()
    with pytest.raises(CheckpointError) as info:
        gyre.checkpoint(tmp_path).load_snapshot(2, target())
    assert str(info.value).splitlines() == [
        f"the checkpoint of step 2 in {tmp_path} cannot be loaded",
        "  expected: an intact checkpoint",
        "  received: state/_METADATA is empty",
        "  fix: load another step (on disk: [1, 2]), or 'latest', which skips damaged checkpoints",
    ]
    with pytest.warns(UserWarning, match="2 is not loaded"):
        assert gyre.checkpoint(tmp_path).restore(target())[1].steps == 1


def test_every_checkpoint_damaged_is_one_error(tmp_path):
    save_steps(tmp_path, [1])
    open(tmp_path / "1" / "_CHECKPOINT_METADATA", "w").close()
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="no checkpoint in .* can be loaded"):
        gyre.checkpoint(tmp_path).load_snapshot("latest", target())


@pytest.mark.filterwarnings(DAMAGE_READ)
@pytest.mark.usefixtures("damage_read")
def test_a_dtype_that_differs_is_an_error_not_a_cast(tmp_path):
    save_steps(tmp_path, [1])
    int_target = {"w": jnp.zeros((2, 3), jnp.int32), "b": jnp.zeros(3, jnp.int32)}
    with pytest.warns(UserWarning, match="dtype of w: saved float32, target int32"):
        with pytest.raises(ValueError) as info:
            gyre.checkpoint(tmp_path).restore(int_target)
    lines = str(info.value).splitlines()
    assert lines[0].startswith(f"the checkpoints in {tmp_path} do not fit target_state (they are not damaged")
    assert lines[2] == "  received: step 1: its state does not fit the target: dtype of w: saved float32, target int32"
    assert lines[3].startswith("  fix: build target_state as the run that saved them built it")


def test_a_newest_checkpoint_that_does_not_fit_falls_back_to_one_that_does(tmp_path):
    save_steps(tmp_path, [1])
    from gyre.callbacks._store import Store

    other = Store(str(tmp_path), keep=10)  # a later save of another structure (another model)
    other.save(Snapshot(step=2, state={"w": jnp.zeros(5)}, elapsed=gyre.Elapsed(steps=2)), metrics=None, wait=True)
    other.close()
    ckpt = gyre.checkpoint(tmp_path)
    with pytest.warns(UserWarning, match="2 is not loaded: its state does not fit the target"):
        assert ckpt.load_snapshot("latest", target()).step == 1
    # it is not damaged: it stays, and saving on would mix two runs, so the save refuses
    with pytest.raises(FileExistsError, match="holds checkpoints later than step 1"):
        ckpt(gyre.Elapsed(steps=3), make_state())


def test_a_failed_background_save_is_raised_at_the_next_save_naming_the_step(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    ckpt = gyre.checkpoint(tmp_path, keep=2)
    for step in (1, 2):
        ckpt(gyre.Elapsed(steps=step), make_state(float(step)))

    class Full:
        def result(self, timeout=None):
            import time

            time.sleep(0.2)
            raise OSError(28, "No space left on device")

    async def failing(self, directory, *args, **kwargs):
        return [Full()]

    monkeypatch.setattr(ocp.JsonCheckpointHandler, "async_save", failing)
    ckpt(gyre.Elapsed(steps=3), make_state(3.0))  # returns: it fails in the background
    assert ckpt.saved_step() == 3
    monkeypatch.undo()
    with pytest.raises(CheckpointError) as info:
        ckpt(gyre.Elapsed(steps=4), make_state(4.0))
    assert info.value.step == 3
    assert str(info.value).splitlines()[0] == f"checkpoint: the save of step 3 to {tmp_path} failed"
    assert "No space left on device" in str(info.value)
    assert ckpt.saved_step() == 2 and ckpt.all_steps() == [1, 2]  # step 1 was not rotated out
    assert float(ckpt.restore(target(), step=1)[0]["w"][0, 0]) == 1.0
    ckpt(gyre.Elapsed(steps=5), make_state(5.0))
    ckpt.close()
    assert sorted(os.listdir(tmp_path)) == ["2", "5"]


def test_a_background_save_failing_inside_a_loop_stops_it_at_once(tmp_path, monkeypatch):
    import time

    import orbax.checkpoint as ocp

    class Full:
        def result(self, timeout=None):
            raise OSError(28, "No space left on device")

    async def failing(self, directory, *args, **kwargs):
        return [Full()]

    ckpt = gyre.checkpoint(tmp_path, keep=2)
    seen = []

    def slow(elapsed):  # steps slow enough for the background save to end within a few
        seen.append(elapsed.steps)
        time.sleep(0.02)
        if elapsed.steps == 5:  # every(5) fires in steps 0, 5, 10: the save of step 6 will fail
            monkeypatch.setattr(ocp.JsonCheckpointHandler, "async_save", failing)

    with pytest.raises(CheckpointError) as info:
        gyre.loop(make_state(), [1.0] * 200, {gyre.every(1): [add_batch, slow], gyre.every(5): ckpt})
    monkeypatch.undo()
    assert info.value.step == 6
    # raised a few steps later, not at the next save (in step 10) nor at the end (step 200)
    assert max(seen) < 10
    assert info.value.elapsed.steps in (max(seen), max(seen) + 1)  # the state handed back
    assert ckpt.all_steps() == [1]  # the good one stays
    ckpt.close()


# -- one run per directory ----------------------------------------------------------------------


def test_a_new_run_refuses_another_runs_checkpoints(tmp_path):
    save_steps(tmp_path, [3, 6])
    ckpt = gyre.checkpoint(tmp_path)
    with pytest.raises(FileExistsError) as info:
        ckpt(gyre.Elapsed(steps=1), make_state())
    assert str(info.value).splitlines() == [
        f"checkpoint: {tmp_path} holds another run's checkpoints",
        "  expected: an empty directory, or checkpoints this run resumed from",
        "  received: the checkpoints of steps [3, 6], which this run did not resume from",
        "  fix: resume from them (resume='latest' on the loop, or ckpt.restore(state) first), start over "
        "with gyre.checkpoint(directory, overwrite=True), which deletes them, or use a new directory",
    ]
    with pytest.raises(FileExistsError):
        gyre.checkpoint(tmp_path).on_loop_start()  # before training, at once
    assert ckpt.all_steps() == [3, 6]
    ran = []
    with pytest.raises(FileExistsError):  # inside a loop too, before its first step
        gyre.loop(make_state(), [1.0] * 9, {gyre.every(1): [add_batch, ran.append], gyre.every(9): gyre.checkpoint(tmp_path)})
    assert ran == []


def test_a_resumed_run_saves_on(tmp_path):
    save_steps(tmp_path, [3, 6])
    ckpt = gyre.checkpoint(tmp_path)
    state, clock = ckpt.restore(target())
    gyre.loop(state, [1.0] * 2, {gyre.every(1): [add_batch, ckpt]}, elapsed=clock)
    ckpt.close()
    assert ckpt.all_steps() == gyre.checkpoint(tmp_path).all_steps() == [6, 7, 8]  # keep=3


def test_overwrite_deletes_another_runs_checkpoints_and_files(tmp_path):
    with gyre.checkpoint(tmp_path) as old:
        old.save_snapshot(Snapshot(step=5, state=make_state(), elapsed=gyre.Elapsed(steps=5),
                                   files={"history/000000000000.json": b"old"}))
    (tmp_path / "notes.txt").write_text("mine")
    ckpt = gyre.checkpoint(tmp_path, overwrite=True)
    ckpt(gyre.Elapsed(steps=1), make_state(1.0))
    ckpt.close()
    assert sorted(os.listdir(tmp_path)) == ["1", "notes.txt"]  # gyre deletes only what gyre wrote


def test_resuming_an_older_step_refuses_the_later_ones_unless_overwrite(tmp_path):
    save_steps(tmp_path, [2, 4, 6])
    ckpt = gyre.checkpoint(tmp_path)
    assert ckpt.load_snapshot(2, target()).step == 2
    with pytest.raises(FileExistsError) as info:
        ckpt(gyre.Elapsed(steps=3), make_state())
    assert str(info.value).splitlines()[0] == f"checkpoint: {tmp_path} holds checkpoints later than step 2, which this run resumed from"
    assert "received: the checkpoints of steps [4, 6]" in str(info.value)
    branch = gyre.checkpoint(tmp_path, overwrite=True)
    branch.load_snapshot(2, target())
    branch(gyre.Elapsed(steps=3), make_state(3.0))
    branch.close()
    assert gyre.checkpoint(tmp_path).all_steps() == [2, 3]


def test_a_directory_holding_only_leftovers_is_cleaned_for_a_new_run(tmp_path):
    (tmp_path / "4").mkdir()  # an empty step directory
    (tmp_path / "5.orbax-checkpoint-tmp").mkdir()  # a save cut short
    from gyre.callbacks._store import Files

    Files(str(tmp_path)).write({"history/000000000000.json": b"a dead run's block"})
    ckpt = gyre.checkpoint(tmp_path)
    assert ckpt.all_steps() == []
    with pytest.warns(UserWarning, match="step 4 of .* cannot be loaded .*: moved aside to .*4.corrupt"):
        ckpt(gyre.Elapsed(steps=1), make_state())
    ckpt.close()
    assert sorted(os.listdir(tmp_path)) == ["1", "4.corrupt"]


# -- shardings, abstract targets, train states --------------------------------------------------


def fsdp_params():
    return {"w": jnp.arange(64.0).reshape(16, 4), "b": jnp.arange(4.0), "k": jnp.ones((8, 8), jnp.bfloat16)}


def test_saved_on_8_devices_with_fsdp_restores_on_1_device_and_back(tmp_path):
    assert jax.device_count() == 8
    fsdp = gyre.FSDP()
    sharded = fsdp.place_state(fsdp_params())
    assert len(sharded["w"].sharding.device_set) == 8 and not sharded["w"].sharding.is_fully_replicated
    with gyre.checkpoint(tmp_path / "eight") as ckpt:
        ckpt(gyre.Elapsed(steps=1), sharded)
    one_device = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), fsdp_params())
    state, _ = gyre.restore(tmp_path / "eight", one_device)
    assert all(x.sharding.device_set == {jax.devices()[0]} for x in jax.tree_util.tree_leaves(state))
    assert leaves_equal(state, fsdp_params())
    # and back: saved on one device, restored into the fsdp shardings
    with gyre.checkpoint(tmp_path / "one") as ckpt:
        ckpt(gyre.Elapsed(steps=1), fsdp_params())
    abstract = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), fsdp_params(), fsdp.state_sharding(fsdp_params())
    )
    state, _ = gyre.restore(tmp_path / "one", abstract)
    assert state["w"].sharding == fsdp.state_sharding(fsdp_params())["w"]
    assert leaves_equal(state, fsdp_params())


def test_a_train_state_with_adam_and_a_typed_key_restores_into_an_abstract_target(tmp_path):
    def init():
        return gyre.TrainState.create(params={"w": jnp.ones((3, 2))}, tx=optax.adam(1e-3), rng=jax.random.key(7))

    state = init()
    grads = {"w": jnp.full((3, 2), 0.5)}
    state = state.replace(step=state.step + 1, opt_state=state.tx.update(grads, state.opt_state, state.params)[1])
    with gyre.checkpoint(tmp_path) as ckpt:
        ckpt(gyre.Elapsed(steps=1), state)
    restored, _ = gyre.restore(tmp_path, jax.eval_shape(init))
    assert jax.dtypes.issubdtype(restored.rng.dtype, jax.dtypes.prng_key)
    assert (jax.random.key_data(restored.rng) == jax.random.key_data(state.rng)).all()
    assert leaves_equal(
        jax.tree_util.tree_map(np.asarray, (restored.params, restored.opt_state, restored.step)),
        jax.tree_util.tree_map(np.asarray, (state.params, state.opt_state, state.step)),
    )


def test_a_monitor_without_keep_best_says_once_that_the_best_may_be_rotated_out(tmp_path):
    ckpt = gyre.checkpoint(tmp_path, keep=2, monitor="loss", mode="min")
    with pytest.warns(UserWarning, match=r"monitor='loss' with keep_best=0 .* keeps only the latest 2") as record:
        for step in (1, 2, 3):
            ckpt(gyre.Elapsed(steps=step), make_state(float(step)), gyre.logs().add_loss("loss", 1.0 / step))
    assert sum("keep_best=0" in str(w.message) for w in record) == 1
    ckpt.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gyre.checkpoint(tmp_path / "b", keep=2, keep_best=1, monitor="loss") as kept:
            kept(gyre.Elapsed(steps=1), make_state(), gyre.logs().add_loss("loss", 1.0))


# -- issue 23: a checkpoint of another optimizer is not damage; every file is checksummed -------


def test_adams_checkpoint_into_an_adamw_state_is_a_tree_mismatch_not_damage(tmp_path):
    params = {"w": jnp.ones(3)}
    with gyre.checkpoint(tmp_path) as ckpt:
        ckpt(gyre.Elapsed(steps=1), gyre.TrainState.create(params=params, tx=optax.adam(0.1), rng=0))
    adamw = gyre.TrainState.create(params=params, tx=optax.adamw(0.1), rng=0)
    with pytest.warns(UserWarning, match="not loaded: its state does not fit"), pytest.raises(ValueError) as info:
        gyre.checkpoint(tmp_path).restore(adamw)
    lines = str(info.value).splitlines()
    assert "not damaged" in lines[0] and "another tree" in lines[0]
    assert "1 target nodes not in the checkpoint (opt_state/2)" in lines[2]
    assert "same model, optimizer" in lines[3] and "overwrite" not in str(info.value)


def loss_step(state, batch):
    return gyre.logs().add_loss("loss", jnp.sum(state["w"]) * 0.37), {"w": state["w"] + batch.mean()}


def change_a_digit(path, after):
    """Adds 1 to the first digit that follows ``after`` in the file (the file stays valid JSON)."""
    text = open(path).read()
    at = text.index(after) + len(after)
    while not text[at].isdigit():
        at += 1
    open(path, "w").write(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :])


@pytest.mark.parametrize(
    ("where", "after"),
    [("7/gyre/metadata", '"position": '), ("7/gyre/metadata", '"samples": '), ("history/000000000004.json", '"loss", null, {"dtype": "float32", "shape": [], "bytes": "')],
    ids=["data-position", "clock", "history-loss"],
)
def test_one_digit_changed_in_the_record_or_a_history_block_is_damage(tmp_path, where, after):
    data = gyre.data.batches(np.arange(40.0).reshape(20, 2), batch_size=4, seed=0)
    with gyre.checkpoint(tmp_path, keep=5) as ckpt:
        gyre.loop({"w": jnp.zeros(2)}, data, {gyre.every(1): loss_step, gyre.every(3): ckpt}, stop=7)
    assert _saved_steps_in(tmp_path) == [1, 4, 7]
    change_a_digit(tmp_path / where, after)
    with pytest.warns(UserWarning, match=r"7 is not loaded: .*checksum mismatch") as said:
        snapshot = gyre.checkpoint(tmp_path).load_snapshot("latest", {"w": jnp.zeros(2)})
    assert snapshot.step == 4
    assert "gyre/metadata" in str(said[0].message) if "metadata" in where else "history" in str(said[0].message)


def monitored_step(state, batch):
    return gyre.logs().add_loss("loss", (jnp.sum(state["w"]) - 6.0) ** 2), {"w": state["w"] + batch}


def latest_and_best(root):
    latest = gyre.checkpoint(root / "latest", keep=2)
    best = gyre.checkpoint(root / "best", keep=1, keep_best=1, monitor="loss", mode="min")
    return {gyre.every(1): monitored_step, gyre.every(2): [latest, best]}, latest, best


@pytest.mark.filterwarnings("ignore:resuming. the dataset:gyre.LoopWarning")
def test_a_loop_with_a_latest_and_a_best_checkpoint_resumes(tmp_path):
    data = [jnp.ones(2)] * 8
    whole, _, _ = latest_and_best(tmp_path / "whole")
    expected, _, _ = gyre.loop({"w": jnp.zeros(2)}, data, whole, stop=8)
    tasks, latest, best = latest_and_best(tmp_path)
    gyre.loop({"w": jnp.zeros(2)}, data, tasks, stop=5)
    tasks, latest, best = latest_and_best(tmp_path)  # a new process
    state, history, elapsed = gyre.loop({"w": jnp.zeros(2)}, data, tasks, stop=8, resume="latest")
    assert elapsed.steps == 8 and leaves_equal(state, expected) and len(history) == 8
    assert latest.all_steps() == [7, 8] and 8 in best.all_steps()
    # both continue one run: a second resume loads either, with its whole history
    for ckpt in (gyre.checkpoint(tmp_path / "latest"), gyre.checkpoint(tmp_path / "best", monitor="loss")):
        snapshot = ckpt.load_snapshot("latest", {"w": jnp.zeros(2)})
        assert snapshot.step == 8 and leaves_equal(snapshot.state, expected)


def test_two_checkpoints_on_one_directory_are_refused_before_training(tmp_path):
    trained = []
    tasks = {gyre.every(1): lambda: trained.append(1), gyre.every(2): [gyre.checkpoint(tmp_path), gyre.checkpoint(tmp_path, keep=1)]}
    with pytest.raises(ValueError) as info:
        gyre.loop({"w": jnp.zeros(2)}, range(4), tasks)
    lines = str(info.value).splitlines()
    assert lines[0] == "two checkpoints of one loop write to the same directory"
    assert "keep_best=1" in lines[3] and trained == [] and os.listdir(tmp_path) == []


def test_resume_best_ranks_by_the_checksummed_record_not_orbaxs_metrics_file(tmp_path):
    with gyre.checkpoint(tmp_path, keep=3, keep_best=1, monitor="loss", mode="min") as ckpt:
        for step, loss in ((1, 0.5), (2, 0.9)):
            ckpt(gyre.Elapsed(steps=step), make_state(float(step)), gyre.logs().add_loss("loss", loss))
    change_a_digit(tmp_path / "2" / "metrics" / "metrics", '"loss": 0.')  # 0.9 -> 0.0, the best now
    assert gyre.checkpoint(tmp_path, monitor="loss").load_snapshot("best", target()).step == 1


def test_a_script_that_ends_right_after_a_save_by_hand_keeps_its_checkpoint(tmp_path):
    """ciclo's manual iteration saves by hand and may end at once: the background save finishes
    before the interpreter shuts its thread pools (it used to leave only orbax's tmp folder)."""
    import subprocess
    import sys

    script = ("import sys, gyre, jax.numpy as jnp\n"
              "gyre.checkpoint(sys.argv[1])(gyre.Elapsed.create(), {'w': jnp.arange(3.0)})\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ck")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    ckpt = gyre.checkpoint(tmp_path / "ck")
    assert ckpt.latest_step() == 0
    state, elapsed = ckpt.restore({"w": jnp.zeros(3)})
    assert np.array_equal(state["w"], np.arange(3.0)) and elapsed.steps == 0
    ckpt.close()
