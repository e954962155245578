"""The orbax side of the checkpoint: what a step holds, rotation, failures, what is not loaded."""

import json
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.callbacks._store import (
    RECORD_FILE,
    RECORD_ITEM,
    CheckpointError,
    Store,
    Unreadable,
    as_json,
    record_crc,
)
from gyre.core._clock import Elapsed
from gyre.engine._snapshot import Snapshot


def snap(step, value=0.0, **kwargs):
    state = {"w": jnp.full((2, 3), value, jnp.float32), "n": jnp.int32(step)}
    return Snapshot(step=step, state=state, elapsed=Elapsed(steps=step, samples=4 * step), **kwargs)


def target():
    return {"w": jnp.zeros((2, 3), jnp.float32), "n": jnp.int32(0)}


def fail_background_writes(monkeypatch, message="No space left on device"):
    """Makes the background part of every save fail, as a full disk does."""
    import orbax.checkpoint as ocp

    class Failed:
        def result(self, timeout=None):
            time.sleep(0.2)  # a full disk fails every writer: let the others end first
            raise OSError(28, message)

    async def failing(self, directory, *args, **kwargs):
        return [Failed()]

    monkeypatch.setattr(ocp.JsonCheckpointHandler, "async_save", failing)


def record_of(root, step):
    return json.loads((root / str(step) / RECORD_ITEM / RECORD_FILE).read_text())


def test_a_step_holds_the_state_arrays_and_a_json_record(tmp_path):
    store = Store(str(tmp_path))
    arrays = {"resumables": {"best": {"w": jnp.ones(4)}}}
    store.save(snap(3, 1.5, meta={"history": 7, "data": {"epoch": 1}}, arrays=arrays), metrics=None, wait=True)
    assert sorted(os.listdir(tmp_path / "3")) == [
        "_CHECKPOINT_METADATA", "arrays", "commit_success.txt", RECORD_ITEM, "state"
    ]
    record = record_of(tmp_path, 3)
    assert record["format"] == 2 and record["step"] == 3 and record["processes"] == 1
    assert record["crc32"] == record_crc(record) and record["empty"] == []
    assert record["elapsed"]["steps"] == 3 and record["elapsed"]["samples"] == 12
    assert record["meta"] == {"history": 7, "data": {"epoch": 1}} and record["metrics"] is None
    assert [(d["path"], d["shape"], d["dtype"]) for d in record["state"]] == [("n", [], "int32"), ("w", [2, 3], "float32")]
    assert [d["path"] for d in record["arrays"]] == ["resumables/best/w"]
    assert all(isinstance(d["crc32"], int) for d in record["state"] + record["arrays"])
    loaded = store.read(3, target())
    assert loaded.step == 3 and loaded.elapsed == Elapsed(steps=3, samples=12)
    assert loaded.meta == {"history": 7, "data": {"epoch": 1}} and loaded.files == {}
    assert np.asarray(loaded.state["w"]).tolist() == [[1.5] * 3] * 2 and int(loaded.state["n"]) == 3
    # arrays come back as saved, onto the first local device, when no target is given
    best = loaded.arrays["resumables"]["best"]["w"]
    assert best.sharding.device_set == {jax.local_devices()[0]} and np.asarray(best).tolist() == [1.0] * 4
    into = {"resumables": {"best": {"w": jnp.zeros(4, jnp.float32)}}}
    assert np.asarray(store.read(3, target(), into).arrays["resumables"]["best"]["w"]).tolist() == [1.0] * 4
    store.close()


@pytest.mark.parametrize("value", [jnp.float32(2.5), jnp.arange(3.0), 7, 2.5], ids=["0-d", "1-d", "int", "float"])
def test_a_state_that_is_one_array_or_number_is_saved_and_restored(tmp_path, value):
    # orbax's StandardSave refuses a bare array or number; a small loop's state often is one
    store = Store(str(tmp_path))
    store.save(Snapshot(step=1, state=value, elapsed=Elapsed(steps=1)), metrics=None, wait=True)
    restored = store.read(1, jax.tree_util.tree_map(lambda x: x * 0, value)).state
    assert type(restored) is type(value) if isinstance(value, (int, float)) else restored.shape == value.shape
    assert np.asarray(restored).tolist() == np.asarray(value).tolist()
    store.close()


def test_no_arrays_no_arrays_item_and_no_checksums_when_off(tmp_path):
    store = Store(str(tmp_path))
    store.save(snap(1), metrics=None, checksums=False, wait=True)
    assert not (tmp_path / "1" / "arrays").exists()
    record = record_of(tmp_path, 1)
    assert record["arrays"] is None and all(d["crc32"] is None for d in record["state"])
    assert store.read(1, target()).arrays == {}
    store.close()


def test_files_are_written_before_the_step_and_survive_rotation(tmp_path):
    store = Store(str(tmp_path), keep=1)
    for step in (1, 2, 3):
        store.save(snap(step, files={f"history/{step:012d}.json": b"[]"}), metrics=None)
        assert (tmp_path / "history" / f"{step:012d}.json").exists()  # at once, before the save ends
    store.wait()
    assert store.steps() == [3]
    assert store.files.list("history") == [f"history/{s:012d}.json" for s in (1, 2, 3)]
    store.close()


def test_meta_that_json_cannot_hold_is_refused_before_anything_is_written(tmp_path):
    store = Store(str(tmp_path))
    with pytest.raises(TypeError) as info:
        store.save(snap(1, meta={"best": np.ones(3)}), metrics=None)
    lines = str(info.value).splitlines()
    assert lines[0] == "a checkpoint's Snapshot.meta must be JSON-able"
    assert "put arrays in Snapshot.arrays" in lines[3]
    assert store.on_disk() == [] and os.listdir(tmp_path) == []
    assert as_json({"a": np.int64(2), "b": [np.float32(0.5)]}, what="meta") == {"a": 2, "b": [0.5]}


def test_latest_and_best_are_kept_together(tmp_path):
    store = Store(str(tmp_path), keep=2, keep_best=1, score=lambda m: -m["loss"])
    for step, loss in [(1, 0.1), (2, 0.9), (3, 0.8), (4, 0.7), (5, 5.0)]:
        store.save(snap(step), metrics={"loss": loss})
    store.wait()
    assert store.steps() == [1, 4, 5]  # the best (0.1) and the latest two; the newest is the worst
    assert store.best_step() == 1 and store.ranked() == [1, 4, 5]
    # a step saved without a value (the end of a loop) is kept by recency only
    store.save(snap(6), metrics=None, wait=True)
    store.save(snap(7), metrics=None, wait=True)
    assert store.steps() == [1, 6, 7] and store.ranked() == [1]
    store.close()


def test_a_failed_background_write_names_its_step_and_rotates_nothing_out(tmp_path, monkeypatch):
    store = Store(str(tmp_path), keep=2)
    store.save(snap(1), metrics=None)
    store.save(snap(2), metrics=None, wait=True)
    fail_background_writes(monkeypatch)
    store.save(snap(3), metrics=None)  # returns: the failure happens in the background
    with pytest.raises(CheckpointError) as info:
        store.wait()
    assert info.value.step == 3
    lines = str(info.value).splitlines()
    assert lines[0] == f"checkpoint: the save of step 3 to {tmp_path} failed"
    assert lines[2] == "  received: OSError: [Errno 28] No space left on device"
    assert "intact ([1, 2])" in lines[3]
    # step 1 was due to rotate out with step 3's save: it stays, listed and on disk
    assert store.steps() == [1, 2] and store.on_disk() == [1, 2]
    monkeypatch.undo()
    store.save(snap(4), metrics=None, wait=True)  # the store works on
    assert store.steps() == [2, 4]
    assert not [n for n in os.listdir(tmp_path) if "tmp" in n]  # the unfinished save is gone
    store.close()


def test_a_failure_is_reported_at_the_next_save(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    fail_background_writes(monkeypatch)
    store.save(snap(1), metrics=None)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="the save of step 1 .* failed") as info:
        store.save(snap(2), metrics=None)
    assert info.value.step == 1
    assert store.on_disk() == []  # step 2 was not started either
    store.close()


def test_a_synchronous_failure_names_the_step(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    store = Store(str(tmp_path))

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ocp.CheckpointManager, "save", refuse)
    with pytest.raises(CheckpointError, match="the save of step 5") as info:
        store.save(snap(5), metrics=None)
    assert "PermissionError: [Errno 13] Permission denied" in str(info.value)
    monkeypatch.undo()
    store.close()


def test_listing_ignores_unfinished_and_empty_step_directories(tmp_path):
    store = Store(str(tmp_path))
    store.save(snap(2), metrics=None, wait=True)
    (tmp_path / "5").mkdir()
    (tmp_path / "3.orbax-checkpoint-tmp").mkdir()
    store.reload()
    assert store.on_disk() == [2, 5] and store.steps() == [2]
    assert not store.has_record(5) and store.has_record(2)
    store.delete_temporaries()
    assert sorted(os.listdir(tmp_path)) == ["2", "5"]
    assert store.set_aside(5).endswith("5.corrupt")
    (tmp_path / "5").mkdir()
    assert store.set_aside(5).endswith("5.corrupt-2")
    store.reload()
    assert store.on_disk() == [2] and store.steps() == [2]
    store.delete_steps([2])
    assert store.on_disk() == []
    store.close()


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: shutil.rmtree(d) or os.mkdir(d), "the step directory is empty"),
        (lambda d: os.remove(os.path.join(d, RECORD_ITEM, RECORD_FILE)), f"{RECORD_ITEM}/{RECORD_FILE} is missing"),
        (lambda d: open(os.path.join(d, RECORD_ITEM, RECORD_FILE), "w").close(), f"{RECORD_ITEM}/{RECORD_FILE} is empty"),
        (lambda d: open(os.path.join(d, RECORD_ITEM, RECORD_FILE), "w").write("{"), "is not valid JSON"),
        (lambda d: open(os.path.join(d, RECORD_ITEM, RECORD_FILE), "w").write("[1]"), "is not a gyre checkpoint record"),
        (lambda d: open(os.path.join(d, "_CHECKPOINT_METADATA"), "w").close(), "_CHECKPOINT_METADATA is empty"),
        (lambda d: open(os.path.join(d, "state", "_METADATA"), "w").close(), "state/_METADATA is empty"),
        (lambda d: open(os.path.join(d, "state", "manifest.ocdbt"), "w").close(), "state/manifest.ocdbt is empty"),
    ],
    ids=["empty-dir", "no-record", "empty-record", "bad-record", "not-a-record", "empty-ckpt-meta",
         "empty-metadata", "empty-manifest"],
)
def test_damaged_metadata_is_unreadable_with_a_reason(tmp_path, damage, problem):
    store = Store(str(tmp_path))
    store.save(snap(1), metrics=None, wait=True)
    damage(str(tmp_path / "1"))
    with pytest.raises(Unreadable) as info:
        store.read(1, target())
    assert info.value.kind == "corrupt" and problem in info.value.reason
    store.close()


def test_a_record_from_a_newer_gyre_does_not_fit(tmp_path):
    store = Store(str(tmp_path))
    store.save(snap(1), metrics=None, wait=True)
    path = tmp_path / "1" / RECORD_ITEM / RECORD_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": 99}))
    with pytest.raises(Unreadable, match="newer gyre") as info:
        store.read(1, target())
    assert info.value.kind == "fit"
    store.close()


def test_a_target_that_does_not_fit_is_refused_before_orbax_reads(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    store = Store(str(tmp_path))
    store.save(snap(1, arrays={"a": {"x": jnp.ones(2)}}), metrics=None, wait=True)
    monkeypatch.setattr(ocp.CheckpointManager, "restore", lambda *a, **k: pytest.fail("orbax read"))
    with pytest.raises(Unreadable) as info:
        store.read(1, {"w": jnp.zeros((2, 3), jnp.int32), "n": jnp.int32(0)})
    assert info.value.kind == "fit"
    assert info.value.reason == "its state does not fit the target: dtype of w: saved float32, target int32"
    with pytest.raises(Unreadable, match="its Snapshot.arrays do not fit the target: shape of a/x"):
        store.read(1, target(), {"a": {"x": jnp.ones(3)}})
    monkeypatch.undo()
    store.close()


def test_a_read_only_store_creates_and_deletes_nothing(tmp_path):
    Store(str(tmp_path / "ckpt")).save(snap(1), metrics=None, wait=True)
    reader = Store(str(tmp_path / "ckpt"), read_only=True)
    assert reader.steps() == [1] and int(reader.read(1, target()).state["n"]) == 1
    nowhere = Store(str(tmp_path / "nowhere"), read_only=True)
    assert nowhere.steps() == [] and nowhere.on_disk() == []
    assert not (tmp_path / "nowhere").exists()
    reader.close()
    nowhere.close()
