"""resume= resolved to checkpoints on disk, the fallback past bad ones, and gyre.restore."""

import os
import pathlib
import shutil
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.callbacks import _checkpoint
from gyre.callbacks._store import CheckpointError, Store, Unreadable
from gyre.core._clock import Elapsed
from gyre.engine._snapshot import Snapshot


def save_steps(root, steps, dtype=jnp.float32):
    store = Store(str(root), keep=10)
    for step in steps:
        state = {"w": jnp.full(3, float(step), dtype)}
        store.save(Snapshot(step=step, state=state, elapsed=Elapsed(steps=step)), metrics=None)
    store.close()
    return Store(str(root), read_only=True)


def target():
    return {"w": jnp.zeros(3)}


def empty_step(root, step):
    shutil.rmtree(root / str(step))
    (root / str(step)).mkdir()


def test_resolve_each_kind_of_request(tmp_path):
    assert _checkpoint.resolve("latest") == ("latest", None)
    assert _checkpoint.resolve("best") == ("best", None)
    assert _checkpoint.resolve(np.int64(40)) == ("step", 40)
    assert _checkpoint.resolve(0) == ("step", 0)
    assert _checkpoint.resolve(tmp_path / "ckpt" / "40") == ("path", str(tmp_path / "ckpt" / "40"))
    assert _checkpoint.resolve("ckpt/40")[1] == os.path.abspath("ckpt/40")


@pytest.mark.parametrize("resume", [True, -1, 1.5, b"latest", "", ["latest"]])
def test_resolve_refuses_what_names_no_checkpoint(resume):
    with pytest.raises(TypeError) as info:
        _checkpoint.resolve(resume)
    lines = str(info.value).splitlines()
    assert lines[0] == "resume= names the checkpoint to continue from"
    assert lines[3] == "  fix: resume='latest'"


def test_step_of_path(tmp_path):
    save_steps(tmp_path, [4]).close()
    assert _checkpoint.step_of_path(str(tmp_path / "4")) == (str(tmp_path), 4)
    assert _checkpoint.step_of_path(str(tmp_path / "4") + "/") == (str(tmp_path), 4)
    for bad in (tmp_path, tmp_path / "5"):
        with pytest.raises(FileNotFoundError, match="resume= names a path that is not a checkpoint"):
            _checkpoint.step_of_path(str(bad))


def test_the_first_readable_step_is_loaded_and_the_bad_ones_said_once(tmp_path):
    store = save_steps(tmp_path, [1, 2, 3])
    empty_step(tmp_path, 3)
    said, warned = [], set()

    def say(step, problem, more):
        said.append((step, problem.reason, more))

    snapshot, failures = _checkpoint.pick(store, "latest", target(), None, say)
    assert snapshot.step == 2 and [s for s, _ in failures] == [3]
    assert said == [(3, "the step directory is empty", True)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        once = _checkpoint.saying(str(tmp_path), warned)
        problem = Unreadable("corrupt", "a file is missing (state/d/ab)")
        once(3, problem, True)
        once(3, problem, True)
        once(1, problem, False)
    assert [str(w.message) for w in caught] == [
        f"checkpoint {tmp_path / '3'} is not loaded: a file is missing (state/d/ab); trying the previous one",
        f"checkpoint {tmp_path / '1'} is not loaded: a file is missing (state/d/ab)",
    ]
    store.close()


def test_when_no_step_fits_one_error_says_why(tmp_path):
    store = save_steps(tmp_path, [1, 2], dtype=jnp.int32)
    with pytest.warns(UserWarning, match="dtype of w: saved int32, target float32"):
        with pytest.raises(ValueError) as info:
            _checkpoint.pick(store, "latest", target(), None, _checkpoint.saying(str(tmp_path), set()))
    lines = str(info.value).splitlines()
    assert lines[0] == (
        f"the checkpoints in {tmp_path} do not fit target_state (they are not damaged: the state given has another tree)"
    )
    assert lines[1] == (
        "  expected: a target_state with the tree, leaves, shapes and dtypes of the saved state (a dtype is never cast)"
    )
    assert lines[2] == (
        "  received: step 2: its state does not fit the target: dtype of w: saved int32, target float32; "
        "step 1: its state does not fit the target: dtype of w: saved int32, target float32"
    )
    assert "init function" in lines[3] and "new directory" in lines[3]
    assert "overwrite" not in str(info.value)  # never advise deleting intact checkpoints
    store.close()


def test_when_every_step_is_damaged_one_error_lists_them(tmp_path):
    store = save_steps(tmp_path, [1, 2])
    empty_step(tmp_path, 1)
    empty_step(tmp_path, 2)
    with pytest.raises(CheckpointError) as info:
        _checkpoint.pick(store, "latest", target(), None, lambda *a: None)
    assert str(info.value).splitlines()[:3] == [
        f"no checkpoint in {tmp_path} can be loaded",
        "  expected: at least one intact checkpoint",
        "  received: step 2: the step directory is empty; step 1: the step directory is empty",
    ]
    store.close()


def test_a_named_step_loads_or_raises_without_fallback(tmp_path):
    store = save_steps(tmp_path, [1, 2])
    assert np.asarray(_checkpoint.pick(store, 1, target(), None, None)[0].state["w"]).tolist() == [1.0] * 3
    with pytest.raises(FileNotFoundError) as info:
        _checkpoint.pick(store, 7, target(), None, None)
    assert str(info.value).splitlines()[:3] == [
        f"no checkpoint for step 7 in {tmp_path}",
        "  expected: one of the saved steps [1, 2]",
        "  received: int 7",
    ]
    empty_step(tmp_path, 2)
    with pytest.raises(CheckpointError, match="the checkpoint of step 2 .* cannot be loaded") as info:
        _checkpoint.pick(store, 2, target(), None, None)
    assert "received: the step directory is empty" in str(info.value) and info.value.step == 2
    with pytest.raises(ValueError, match="do not fit target_state"):
        _checkpoint.pick(store, 1, {"w": jnp.zeros(4)}, None, None)
    store.close()


def test_best_without_a_monitor_and_without_values(tmp_path):
    with pytest.raises(ValueError) as info:
        gyre.checkpoint(tmp_path).load_snapshot("best", target())
    assert str(info.value).splitlines() == [
        "resume= 'best' needs a checkpoint that monitors a value",
        "  expected: gyre.checkpoint(directory, monitor='loss_test', mode='min')",
        "  received: a checkpoint without monitor=",
        "  fix: pass monitor= to gyre.checkpoint, or resume='latest'",
    ]
    assert str(_checkpoint.no_best("/c", "loss_test")).splitlines()[0] == (
        "no checkpoint in /c has a value of 'loss_test' to rank it by"
    )


# -- gyre.restore ------------------------------------------------------------------------------


def test_restore_the_newest_a_step_or_a_step_directory(tmp_path):
    save_steps(tmp_path, [1, 2, 3]).close()
    state, elapsed = gyre.restore(tmp_path, target())
    assert elapsed.steps == 3 and np.asarray(state["w"]).tolist() == [3.0] * 3
    assert gyre.restore(str(tmp_path), target(), step=np.int32(2))[1].steps == 2
    assert gyre.restore(tmp_path / "1", target())[1].steps == 1
    assert gyre.restore(pathlib.Path(tmp_path), target(), step=1)[1].steps == 1


def test_restore_skips_a_damaged_newest_one_with_a_warning(tmp_path):
    save_steps(tmp_path, [1, 2]).close()
    (tmp_path / "2" / "_CHECKPOINT_METADATA").write_text("")
    with pytest.warns(UserWarning, match=r"/2 is not loaded: _CHECKPOINT_METADATA is empty; trying the previous one"):
        assert gyre.restore(tmp_path, target())[1].steps == 1
    assert (tmp_path / "2").is_dir()  # a reader changes nothing


def _add_one(state):
    return gyre.logs().add_metric("w0", state["w"][0]), {"w": state["w"] + 1.0}


def test_restore_loads_a_step_directory_copied_without_the_history_and_resume_says_what_is_missing(tmp_path):
    """A loop's checkpoint keeps its history beside the step directories (history/): the latest
    step directory copied alone (to another machine) could not be loaded, even by gyre.restore,
    which returns no history, and the reason said a file "was changed after the save"."""
    run = tmp_path / "run"
    ckpt = gyre.checkpoint(run)
    gyre.loop(target(), range(4), {gyre.every(1): _add_one, gyre.every(2): ckpt})
    ckpt.close()
    copy = tmp_path / "copy"
    shutil.copytree(run / "4", copy / "4")
    for where, step in ((copy, None), (copy / "4", None), (copy, 4)):
        state, elapsed = gyre.restore(where, target(), step=step)
        assert elapsed.steps == 4 and np.asarray(state["w"]).tolist() == [4.0] * 3
    with pytest.warns(UserWarning, match=r"history blocks \(history/, beside the step directories\) are missing: a "
                      r"step directory copied without them.*gyre.restore\(directory, target\) still loads"), \
            pytest.raises(CheckpointError, match="no checkpoint in .* can be loaded"):
        gyre.loop(target(), range(6), {gyre.every(1): _add_one, gyre.every(2): gyre.checkpoint(copy)},
                  resume="latest")
    block = sorted((run / "history").iterdir())[-1]
    block.write_bytes(block.read_bytes().replace(b'"bytes": "', b'"bytes": "A', 1))  # altered, not missing
    with pytest.warns(UserWarning, match=r"history blocks \(history/\) differ from those saved \(checksum mismatch"):
        assert gyre.checkpoint(run).restore(target())[1].steps == 3  # a loop's restore checks the history


def test_restore_with_nothing_there(tmp_path):
    for where in (tmp_path, tmp_path / "missing"):
        with pytest.raises(FileNotFoundError) as info:
            gyre.restore(where, target())
        assert str(info.value).splitlines()[0] == f"no checkpoint to restore in {where}"
    assert not (tmp_path / "missing").exists()
    with pytest.raises(TypeError, match="gyre.restore's directory must be a path"):
        gyre.restore(None, target())
    with pytest.raises(TypeError, match="step= must be a saved step number"):
        save_steps(tmp_path / "c", [1]).close()
        gyre.restore(tmp_path / "c", target(), step="1")
