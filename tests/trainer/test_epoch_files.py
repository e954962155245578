"""EpochMetricFiles: metrics/<phase>_epoch_NNNN.json, scalars only, written off the caller's
thread, read back here."""

import json
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.trainer._logger import EpochMetricFiles
from gyre.trainer._metrics import MetricSpec, metric_names, scalars_for_writers


def read(path):
    with open(path) as f:
        return json.load(f)


def test_files_per_phase_and_epoch_read_back(tmp_path):
    files = EpochMetricFiles(tmp_path)
    assert os.path.isdir(tmp_path / "metrics")
    for epoch, step in ((1, 50), (2, 100)):
        files.write("train", epoch, step, {"train/loss_epoch": jnp.float32(1.0 / epoch), "train/time": 2.5})
        files.write("val", epoch, step, {"val/acc": jnp.float32(0.25 * epoch), "val/n": jnp.int32(7)})
    files.write("test", 2, jnp.int32(100), {"test/acc": np.float64(0.875), "test/ok": True})
    files.flush()
    assert sorted(os.listdir(tmp_path / "metrics")) == [
        "test_epoch_0002.json", "train_epoch_0001.json", "train_epoch_0002.json",
        "val_epoch_0001.json", "val_epoch_0002.json",
    ]
    first = read(tmp_path / "metrics" / "train_epoch_0001.json")
    assert first == {"epoch": 1, "step": 50, "train/loss_epoch": 1.0, "train/time": 2.5}
    assert list(first) == ["epoch", "step", "train/loss_epoch", "train/time"]
    assert read(tmp_path / "metrics" / "train_epoch_0002.json")["train/loss_epoch"] == 0.5
    val = read(files.path("val", 2))
    assert val == {"epoch": 2, "step": 100, "val/acc": 0.5, "val/n": 7.0}
    assert isinstance(val["val/n"], float)
    assert read(files.path("test", 2)) == {"epoch": 2, "step": 100, "test/acc": 0.875, "test/ok": 1.0}
    files.close()
    files.close()  # twice is safe
    with pytest.raises(RuntimeError, match=r"is closed"):
        files.write("val", 3, 150, {})


def test_concat_and_arrays_stay_out_of_the_files(tmp_path):
    specs = {"acc": MetricSpec("acc"), "preds": MetricSpec("preds", "concat"), "per_class": MetricSpec("per_class")}
    computed = {"acc": jnp.float32(0.75), "preds": jnp.arange(3), "per_class": jnp.ones(2)}
    full = {**{name: computed[key] for key, name in metric_names(specs, "val").items()}, "val/time": 1.5}
    assert set(full) == {"val/acc", "val/preds", "val/per_class", "val/time"}  # callbacks get all
    with EpochMetricFiles(tmp_path) as files:
        files.write("val", 1, 10, scalars_for_writers(full, specs))
    assert read(tmp_path / "metrics" / "val_epoch_0001.json") == {
        "epoch": 1, "step": 10, "val/acc": 0.75, "val/time": 1.5,
    }


def test_a_rewritten_epoch_replaces_its_file_and_non_finite_values(tmp_path):
    with EpochMetricFiles(tmp_path) as files:
        files.write("train", 1, 5, {"train/a": 1.0})
        files.write("train", 1, 5, {"train/b": jnp.float32(jnp.nan), "train/c": -jnp.inf})
        files.flush()
        assert os.listdir(tmp_path / "metrics") == ["train_epoch_0001.json"]  # no .tmp left
    record = read(tmp_path / "metrics" / "train_epoch_0001.json")
    assert list(record) == ["epoch", "step", "train/b", "train/c"]
    assert math.isnan(record["train/b"]) and record["train/c"] == -math.inf


def test_values_are_read_off_the_callers_thread(tmp_path):
    value = jnp.float32(3.0) * 2
    with EpochMetricFiles(tmp_path) as files, jax.transfer_guard_device_to_host("disallow"):
        files.write("train", 1, 1, {"train/x": value})
    assert read(tmp_path / "metrics" / "train_epoch_0001.json")["train/x"] == 6.0


def test_an_error_on_the_writer_thread_is_raised_at_the_next_call(tmp_path):
    files = EpochMetricFiles(tmp_path)
    shutil.rmtree(tmp_path / "metrics")
    files.write("val", 1, 1, {"val/acc": 1.0})
    with pytest.raises(gyre.WriterError, match=r"(?s)failed to write epoch metrics.*FileNotFoundError"):
        files.flush()
    files.close()


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("Val", 1, 1, {}), ValueError, r"(?s)the phase names the file.*received: str 'Val'"),
        (("../x", 1, 1, {}), ValueError, r"the phase names the file"),
        (("val", -1, 1, {}), ValueError, r"(?s)epoch must be a whole number >= 0.*numbered from 1"),
        (("val", 1.0, 1, {}), ValueError, r"epoch must be a whole number >= 0"),
        (("val", 1, -1, {}), ValueError, r"step must be a whole number >= 0"),
        (("val", 1, jnp.float32(1), {}), ValueError, r"step must be a whole number >= 0"),
        (("val", 1, 1, [("val/acc", 1.0)]), TypeError, r"takes a dict of metrics"),
        (("val", 1, 1, {"step": 1.0}), ValueError, r"a metric is named 'step'"),
        (("val", 1, 1, {"val/p": jnp.ones(3)}), ValueError,
         r"(?s)metric 'val/p' is not one number.*shape \(3,\).*scalars_for_writers"),
        (("val", 1, 1, {"val/p": "high"}), ValueError, r"metric 'val/p' is not one number"),
    ],
)
def test_bad_arguments(tmp_path, args, error, match):
    with EpochMetricFiles(tmp_path) as files:
        with pytest.raises(error, match=match):
            files.write(*args)
    assert os.listdir(tmp_path / "metrics") == []


def test_the_folder_must_be_a_path():
    with pytest.raises(TypeError, match=r"EpochMetricFiles needs the run folder"):
        EpochMetricFiles(3)  # type: ignore[arg-type]
