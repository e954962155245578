"""WandbWriter: an offline run (no network) whose .wandb file holds every value at its step;
a missing wandb names the extra."""

import json
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import gyre

from .readers import wandb_records


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def test_an_offline_run_holds_every_value_at_its_step(offline):
    with gyre.WandbWriter(project="gyre-tests", run="t", dir=offline) as writer:
        writer.write_scalars(0, {"loss": 1.0})
        writer.write_scalars(2, {"loss": 0.5, "accuracy": np.float32(0.75)})
        writer.write_histograms(3, {"weights": np.arange(10.0)}, num_buckets=5)
        writer.write_images(3, {"digit": np.zeros((4, 4, 1), np.uint8)})
        writer.write_texts(3, {"note": "hello"})
        writer.write_hparams({"learning_rate": 0.1}, {"final": 0.9})
        writer.write_scalars(4, {"half": jnp.bfloat16(0.5)})  # a bfloat16 is a number too
        writer.write_histograms(4, {"low": jnp.arange(4, dtype=jnp.bfloat16)}, num_buckets=2)
    history = {}
    config, summary = {}, {}
    for record in wandb_records(str(offline)):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(row["gyre/step"], {}).update(row)  # each write its own row, at its step
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "summary":
            summary.update({item.key: json.loads(item.value_json) for item in record.summary.update})
    assert sorted(history) == [0, 2, 3, 4]
    assert history[4]["half"] == 0.5 and history[4]["low/_type"] == "histogram"
    assert history[0]["loss"] == 1.0 and history[2]["loss"] == 0.5 and history[2]["accuracy"] == 0.75
    assert history[3]["note"] == "hello" and history[3]["weights/_type"] == "histogram"
    assert len(history[3]["weights/values"]) == 5 and history[3]["digit/_type"] == "images/separated"
    assert config["learning_rate"] == 0.1 and summary["final"] == 0.9


def test_a_direct_write_of_a_later_step_does_not_drop_write_to_s_rows(offline):
    # was: W&B's step= drops a value whose step is below the last logged; write_to's rows arrive
    # late, after a callback's histogram of step 10, so the loss of steps 0..19 was lost
    writer = gyre.WandbWriter(project="gyre-tests", run="t", dir=offline)

    def histogram(elapsed):
        writer.write_histograms(elapsed.steps, {"w": np.arange(4.0)})

    def step(elapsed):
        return gyre.logs().add_loss("loss", float(elapsed.steps))

    gyre.loop(None, range(30), {gyre.every(1): step, gyre.every(10): histogram, **gyre.write_to(writer)})
    writer.close()
    loss, hist = {}, []
    for record in wandb_records(str(offline)):
        if record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            if "loss" in row:
                loss[row["gyre/step"]] = row["loss"]
            hist += [row["gyre/step"]] * ("w/_type" in row)
    assert loss == {s: float(s) for s in range(30)} and hist == [0, 10, 20]


def test_a_missing_wandb_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'gyre\[wandb\]'"):
        gyre.WandbWriter()


def test_a_misspelt_mode_is_refused_before_wandb_starts():
    with pytest.raises(ValueError, match="Did you mean 'offline'") as info:
        gyre.WandbWriter(mode="ofline")
    assert "received: str 'ofline'" in str(info.value) and "mode='offline'" in str(info.value)
