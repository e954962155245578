"""What a run hands its callbacks, files and writers: hook order, metric routing, every callback
from a config."""

import json
import os

import numpy as np
import optax
import pytest

from gyre.trainer import (
    Callback,
    ImgClassifierTrainer,
)
from tests.loggers.readers import tensorboard_values
from tests.trainer.helpers import trainer


class Recorder(Callback):
    def __init__(self, calls, **kw):
        super().__init__(**kw)
        self.calls = calls

    def on_training_start(self):
        self.calls.append("training_start")

    def on_filtered_training_epoch_start(self, epoch_idx):
        self.calls.append(f"train_start {epoch_idx}")

    def on_filtered_training_epoch_end(self, train_metrics, epoch_idx):
        self.calls.append(f"train_end {epoch_idx} {sorted(train_metrics)}")

    def on_filtered_validation_epoch_start(self, epoch_idx):
        self.calls.append(f"val_start {epoch_idx}")

    def on_filtered_validation_epoch_end(self, eval_metrics, epoch_idx):
        self.calls.append(f"val_end {epoch_idx} {sorted(eval_metrics)}")

    def on_test_epoch_start(self, epoch_idx):
        self.calls.append(f"test_start {epoch_idx}")

    def on_test_epoch_end(self, test_metrics, epoch_idx):
        self.calls.append(f"test_end {epoch_idx} {sorted(test_metrics)}")

    def on_training_end(self):
        self.calls.append("training_end")

    def finalize(self, status):
        self.calls.append(f"finalize {status}")


def test_callbacks_see_their_hooks_in_order_filtered_by_every_n_epochs(tmp_path, digits):
    calls = []
    steps = []

    class Steps(Callback):
        def on_training_step(self, step_metrics, epoch_idx, global_step):
            steps.append((epoch_idx, global_step, sorted(step_metrics)))

    t = trainer(tmp_path, train_epochs=4, num_classes=None, callbacks=[Recorder(calls, every_n_epochs=2), Steps()])
    t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    train = "['train/acc_epoch', 'train/loss_epoch', 'train/time']"
    val = "['val/acc', 'val/loss', 'val/time']"
    test = "['test/acc', 'test/loss', 'test/time']"
    assert calls == [
        "training_start",
        "train_start 2", f"train_end 2 {train}", "val_start 2", f"val_end 2 {val}",
        "train_start 4", f"train_end 4 {train}", "val_start 4", f"val_end 4 {val}",
        "training_end", "finalize success",
        "test_start 4", f"test_end 4 {test}",
    ]
    per_epoch = digits.train_loader.epoch_steps
    assert [s[1] for s in steps] == list(range(1, 4 * per_epoch + 1))
    assert [s[0] for s in steps] == [1 + i // per_epoch for i in range(4 * per_epoch)]
    assert steps[0][2] == ["acc", "loss"]


def test_an_epochs_last_step_reaches_on_training_step_before_the_epochs_end(tmp_path, digits):
    # was: the engine runs on_epoch_end before that step's on_train_batch_end, so its on_training_step
    # came after on_training_epoch_end and the validation, with their values in step_metrics
    # (train/loss_epoch, val/acc, epoch, ...); GradientSpikeMonitor counted it in the next epoch
    calls = []

    class Both(Callback):
        def on_training_step(self, step_metrics, epoch_idx, global_step):
            calls.append((global_step, epoch_idx, {"acc", "loss"} <= set(step_metrics) and not any(
                k == "epoch" or k.startswith("val/") or k.endswith(("_epoch", "/time")) for k in step_metrics)))

        def on_training_epoch_end(self, train_metrics, epoch_idx):
            calls.append(f"train_end {epoch_idx}")

        def on_validation_epoch_end(self, eval_metrics, epoch_idx):
            calls.append(f"val_end {epoch_idx}")

    t = trainer(tmp_path, train_epochs=2, num_classes=None, callbacks=[Both()])
    t.train_model(digits.train_loader, digits.val_loader)
    n = digits.train_loader.epoch_steps
    assert calls == [*[(g, 1, True) for g in range(1, n + 1)], "train_end 1", "val_end 1",
                     *[(g, 2, True) for g in range(n + 1, 2 * n + 1)], "train_end 2", "val_end 2"]


class ModeMetrics(ImgClassifierTrainer):
    """Every metric mode and routing in one loss function."""

    def loss_function(self, model, batch, train=True):
        x, y = batch
        logits = model(x)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        n = y.shape[0]
        return loss, {
            "acc": (logits.argmax(-1) == y).mean(),
            "seen": {"value": n, "mode": "sum"},
            "biggest_label": {"value": y.max(), "mode": "max"},
            "val_only": {"value": 1.0, "log_mode": "val"},
            "test_only": {"value": 2.0, "log_mode": "test"},
            "per_epoch": {"value": 3.0, "log_freq": "epoch"},
            "labels": {"value": y, "mode": "concat", "log_mode": "eval"},
        }


def test_metric_modes_route_to_their_phases_files_and_writers(tmp_path, digits):
    t = trainer(tmp_path, cls=ModeMetrics, train_epochs=2, log_steps_every=4)
    seen = {}

    class Spy(Callback):
        def on_validation_epoch_end(self, eval_metrics, epoch_idx):
            seen["val"] = eval_metrics

        def on_test_epoch_end(self, test_metrics, epoch_idx):
            seen["test"] = test_metrics

    t.callbacks.append(Spy())
    t.callbacks[-1].bind(t)
    out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    n_train = digits.train_loader.epoch_steps * 32
    epoch1 = json.loads((tmp_path / "metrics" / "train_epoch_0001.json").read_text())
    assert epoch1["epoch"] == 1 and epoch1["train/seen_epoch"] == n_train and epoch1["train/biggest_label_epoch"] == 9
    assert epoch1["train/per_epoch_epoch"] == 3.0
    assert not any("only" in k or "labels" in k for k in epoch1)
    val1 = json.loads((tmp_path / "metrics" / "val_epoch_0001.json").read_text())
    assert val1["val/val_only"] == 1.0 and "val/test_only" not in val1 and "val/labels" not in val1
    assert val1["val/seen"] == 200
    assert out["test"]["test/test_only"] == 2.0 and "test/val_only" not in out["test"]
    assert np.asarray(seen["val"]["val/labels"]).shape == (200,)  # CONCAT: for callbacks only
    assert np.asarray(seen["test"]["test/labels"]).tolist() == digits.test_loader[0][1].tolist()
    names = t.history.names()["metrics"]
    assert "train/per_epoch_step" not in names and "train/seen_step" in names
    assert np.asarray(t.history.collect("train/seen_step")).tolist()[:2] == [32 * 4, 32 * 4]
    written = tensorboard_values(str(tmp_path / "tensorboard"))
    # was: each training step wrote them all under their bare names (detect_nans' per-step logs)
    assert {"val_only", "test_only", "per_epoch"}.isdisjoint(written) and {"acc", "seen"} <= set(written)
    assert "val/labels" not in written and sorted(s for s, _ in written["val/acc"]) == [
        digits.train_loader.epoch_steps - 1, 2 * digits.train_loader.epoch_steps - 1
    ]


def test_every_callback_from_a_config_in_one_run(tmp_path, digits):
    t = ImgClassifierTrainer(
        {
            "train_epochs": 6, "enable_progress_bar": False, "log_grad_norm": True, "num_classes": 10,
            "check_val_every_n_epoch": 2, "logger": {"log_dir": str(tmp_path), "log_steps_every": 20},
            "callbacks": {
                "ModelCheckpoint": {"monitor": "val/acc", "mode": "max"},
                "LearningRateMonitor": {},
                "GradientSpikeMonitor": {"threshold": 1.5},
                "ConfusionMatrixCallback": {"figsize": [3, 3], "dpi": 20},
                "EarlyStopping": {"monitor": "val/loss", "patience": 1, "min_delta": 10.0},
                "DisableGC": {},
                "JAXProfiler": {"first_step": 3, "profile_n_steps": 2},
            },
        },
        {"class_name": "SimpleClassifier", "c_hid": 16},
        {"class_name": "AdamW", "learning_rate": {"class_name": "Linear", "init_value": 0.01, "end_value": 0.0, "steps": 200}},
    )
    out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    per_epoch = digits.train_loader.epoch_steps
    # early stopping: no improvement by 10.0 after the first validation (epoch 2), patience 1: stops after
    # epoch 4 of 6
    assert t.global_step == 4 * per_epoch and t.history.stop_reason
    assert sorted(p.name for p in (tmp_path / "confusion_matrix").iterdir()) == [
        "test_epoch_0004.png", "val_epoch_0002.png", "val_epoch_0004.png"
    ]
    assert sorted(os.listdir(tmp_path / "metrics")) == [  # the test of the best model too, as jax_trainer writes it
        "test_epoch_0004.json", "train_epoch_0001.json", "train_epoch_0002.json", "train_epoch_0003.json", "train_epoch_0004.json",
        "val_epoch_0002.json", "val_epoch_0004.json",
    ]
    written = tensorboard_values(str(tmp_path / "tensorboard"))
    rates = [(step, value.simple_value) for step, value in written["optimizer/lr"]]
    # at the step of the update that used it (was: one step later, at the next epoch's first step)
    assert [s for s, _ in rates] == [0, per_epoch - 1, 2 * per_epoch - 1, 3 * per_epoch - 1]
    # the rate the last update used (optax.inject_hyperparams), read without a host sync
    assert rates[0][1] == pytest.approx(0.01, rel=1e-5)
    assert rates[1][1] == pytest.approx(0.01 * (1 - (per_epoch - 1) / 200), rel=1e-5)
    assert "grad/ema" in written and "train/grad_norm_step" in written
    assert (tmp_path / "grad_spikes.jsonl").exists()
    assert any((tmp_path / "profile").rglob("*.xplane.pb"))
    assert out["test"]["test/acc"] > 0.8 and "test/conf_matrix" in out["test"]
