"""TrainerModule end to end on digits: nnx and linen reach the accuracy, a run killed
mid-epoch resumes bit-identical, a model checkpoint reproduces its test metric, callbacks see
their hooks in order, fused steps change nothing, and mistakes are explained."""

import json
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import gyre
from gyre.trainer import (
    Callback,
    DigitsDataset,
    ImgClassifierTrainer,
    ModelCheckpoint,
    SimpleClassifier,
    SimpleCNN,
    SimpleCNNLinen,
)
from tests.loggers.readers import tensorboard_values


@pytest.fixture
def digits():  # fresh loaders for each test: a loader's position carries over between runs
    return DigitsDataset(global_batch_size=32, val_size=200)


def mlp(seed=0, **kw):
    return SimpleClassifier(c_hid=16, num_classes=10, rngs=nnx.Rngs(seed), **kw)


def trainer(tmp_path, model=None, cls=ImgClassifierTrainer, **options):
    options.setdefault("enable_progress_bar", False)
    options.setdefault("train_epochs", 2)
    return cls(model=model if model is not None else mlp(), optimizer=optax.adam(1e-2),
               log_dir=str(tmp_path), **options)


def leaves(tree):
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("mode", ["nnx", "linen"])
def test_the_digits_cnn_reaches_095_test_accuracy(tmp_path, digits, mode):
    model = SimpleCNN(c_hid=16, rngs=nnx.Rngs(0)) if mode == "nnx" else SimpleCNNLinen(c_hid=16)
    t = ImgClassifierTrainer(model=model, optimizer=optax.adam(5e-3), train_epochs=8, enable_progress_bar=False,
                             log_dir=str(tmp_path), model_mode=mode)
    out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    assert t.model_mode == mode
    assert out["test"]["test/acc"] >= 0.95, out
    assert out["val"]["val/acc"] >= 0.9
    assert t.global_step == 8 * digits.train_loader.epoch_steps


class SigtermAt(Callback):
    """Sends this process a SIGTERM during a training step, as a cluster's preemption does."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_training_step(self, step_metrics, epoch_idx, global_step):
        if global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_run_killed_mid_epoch_resumes_bit_identical(tmp_path, digits):
    def run(log_dir, resume=None, callbacks=()):
        data = DigitsDataset(global_batch_size=32, val_size=200)  # fresh loaders: positions from 0
        model = mlp(dropout=0.2, batch_norm=True)  # dropout and batch statistics must resume too
        t = ImgClassifierTrainer(model=model, optimizer=optax.adam(1e-2), train_epochs=3, enable_progress_bar=False,
                                 log_dir=str(log_dir), resume=resume, log_steps_every=10,
                                 callbacks=[ModelCheckpoint(monitor="val/acc", mode="max"), *callbacks])
        out = t.train_model(data.train_loader, data.val_loader)
        return t, out

    whole, whole_out = run(tmp_path / "whole")
    steps_per_epoch = digits.train_loader.epoch_steps
    kill_at = steps_per_epoch + 7  # in the middle of epoch 2
    killed, _ = run(tmp_path / "killed", callbacks=[SigtermAt(kill_at)])
    assert killed.history.stop_reason == "preempted" and killed.global_step == kill_at
    resumed, resumed_out = run(tmp_path / "killed", resume="latest")
    assert resumed.global_step == whole.global_step == 3 * steps_per_epoch
    for a, b in zip(leaves(whole.state.params) + leaves(whole.state.opt_state) + leaves(whole.state.model_state),
                    leaves(resumed.state.params) + leaves(resumed.state.opt_state) + leaves(resumed.state.model_state),
                    strict=True):
        assert np.array_equal(a, b)
    assert resumed_out["val"]["val/acc"] == whole_out["val"]["val/acc"]
    # the same metric files, epoch by epoch, and every step logged once
    for name in sorted(os.listdir(tmp_path / "whole" / "metrics")):
        a = json.loads((tmp_path / "whole" / "metrics" / name).read_text())
        b = json.loads((tmp_path / "killed" / "metrics" / name).read_text())
        a.pop("train/time", None), b.pop("train/time", None), a.pop("val/time", None), b.pop("val/time", None)
        assert a == b, name
    written = tensorboard_values(str(tmp_path / "killed" / "tensorboard"))
    steps = sorted(step for step, _ in written["train/loss_step"])
    assert steps == list(range(9, 3 * steps_per_epoch, 10))


def test_load_from_checkpoint_reproduces_the_test_metric(tmp_path, digits):
    t = ImgClassifierTrainer(
        {"train_epochs": 3, "enable_progress_bar": False, "logger": {"log_dir": str(tmp_path)},
         "callbacks": {"ModelCheckpoint": {"monitor": "val/acc", "mode": "max", "save_top_k": 2}}},
        {"class_name": "SimpleClassifier", "c_hid": 16}, {"class_name": "Adam", "learning_rate": 1e-2},
    )
    out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert len(checkpoints) == 2  # exactly the top 2
    loaded = gyre.TrainerModule.load_from_checkpoint(tmp_path)  # the trainer class is stored too
    assert type(loaded) is ImgClassifierTrainer and loaded.model is not t.model
    again = loaded.test_model(digits.test_loader)
    assert abs(again["test/acc"] - out["test"]["test/acc"]) <= 1e-6
    assert abs(again["test/loss"] - out["test"]["test/loss"]) <= 1e-6
    # a trainer given its model as an object gets it again
    t2 = trainer(tmp_path / "objects", train_epochs=1, callbacks=[ModelCheckpoint(monitor="val/acc", mode="max")])
    t2.train_model(digits.train_loader, digits.val_loader)
    with pytest.raises(TypeError, match=r"cannot rebuild the trainer's model and optimizer(.|\n)*model=\.\.\., optimizer="):
        ImgClassifierTrainer.load_from_checkpoint(tmp_path / "objects")
    loaded = ImgClassifierTrainer.load_from_checkpoint(tmp_path / "objects", model=mlp(seed=5), optimizer=optax.sgd(0.1))
    for a, b in zip(leaves(loaded.state.params), leaves(t2.state.params), strict=True):  # its one checkpoint: the end
        assert np.array_equal(a, b)


def test_the_test_set_is_scored_with_the_best_validation_checkpoint(tmp_path, digits):
    best = {}

    class Spy(Callback):
        def on_validation_epoch_end(self, eval_metrics, epoch_idx):
            best[epoch_idx] = float(eval_metrics["val/acc"])

    t = trainer(tmp_path, train_epochs=3, callbacks=[ModelCheckpoint(monitor="val/acc", mode="max"), Spy()])
    t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    saved = t.callbacks[0].ranked
    assert saved[0][0] == max(best.values())


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


def test_fused_steps_change_nothing(tmp_path, digits):
    runs = []
    for k in (1, 3):
        data = DigitsDataset(global_batch_size=32, val_size=200)
        t = trainer(tmp_path / str(k), steps_per_call=k, log_steps_every=5)
        out = t.train_model(data.train_loader, data.val_loader)
        runs.append((t, out))
    (a, out_a), (b, out_b) = runs
    for x, y in zip(leaves(a.state.params), leaves(b.state.params), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)
    assert out_a["val"]["val/acc"] == out_b["val"]["val/acc"]
    np.testing.assert_allclose(np.asarray(a.history.collect("train/loss_step")),
                               np.asarray(b.history.collect("train/loss_step")), rtol=1e-5)


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
    assert "val/labels" not in written and sorted(s for s, _ in written["val/acc"]) == [
        digits.train_loader.epoch_steps - 1, 2 * digits.train_loader.epoch_steps - 1
    ]


def test_a_loss_function_that_returns_no_loss_is_explained(tmp_path, digits):
    class NoLoss(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            return {"acc": 1.0}

    with pytest.raises(TypeError, match=r"loss_function returned no scalar loss(.|\n)*received: dict"):
        trainer(tmp_path, cls=NoLoss).train_model(digits.train_loader)

    class VectorLoss(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            return model(batch[0]), {}

    with pytest.raises(TypeError, match=r"no scalar loss(.|\n)*an array of shape \(32, 10\)"):
        trainer(tmp_path, cls=VectorLoss).train_model(digits.train_loader)


def test_a_monitor_never_logged_is_explained(tmp_path, digits):
    t = trainer(tmp_path, callbacks=[ModelCheckpoint(monitor="val/accuracy", mode="max")])
    with pytest.raises(KeyError, match=r"monitors 'val/accuracy'(.|\n)*'val/acc'"):
        t.train_model(digits.train_loader, digits.val_loader)


def test_the_base_trainer_and_a_mismatched_model_mode_are_explained(tmp_path, digits):
    with pytest.raises(NotImplementedError, match="the trainer has no loss function"):
        trainer(tmp_path, cls=gyre.TrainerModule).train_model(digits.train_loader)
    with pytest.raises(ValueError, match=r"model_mode is 'linen' but the model is a nnx module"):
        trainer(tmp_path, model_mode="linen")
    with pytest.raises(TypeError, match="must be a flax module"):
        trainer(tmp_path, model=lambda x: x)


def test_detect_nans_stops_with_the_step_named(tmp_path, digits):
    class Diverges(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            loss, metrics = super().loss_function(model, batch, train)
            return loss * jnp.where(model.out.bias.value.sum() > -1e9, jnp.nan, 1.0), metrics

    with pytest.raises(gyre.NonFiniteError, match="step 0"):
        trainer(tmp_path, cls=Diverges, detect_nans=True).train_model(digits.train_loader)


def test_dropout_draws_fresh_masks_every_step(tmp_path, digits):
    masks = []

    class Masks(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            loss, metrics = super().loss_function(model, batch, train)
            return loss, {**metrics, "kept": (model.dropout(jnp.ones(64)) > 0).sum()}

    class Spy(Callback):
        def on_training_step(self, step_metrics, epoch_idx, global_step):
            masks.append(step_metrics["kept"])

    t = trainer(tmp_path, cls=Masks, model=mlp(dropout=0.5), train_epochs=1, callbacks=[Spy()])
    t.train_model(digits.train_loader)
    kept = [int(m) for m in masks]
    assert len(set(kept)) > 3 and all(10 < k < 54 for k in kept)


def test_data_parallel_over_num_devices_trains_like_one_device(tmp_path):
    results = []
    for n in (1, 4):
        data = DigitsDataset(global_batch_size=32, val_size=200)
        t = trainer(tmp_path / str(n), num_devices=n, train_epochs=1)
        out = t.train_model(data.train_loader, data.val_loader)
        results.append((t, out))
    (one, out1), (four, out4) = results
    assert four.strategy.name == "data_parallel" and four.strategy.data_size == 4
    assert len(jax.tree_util.tree_leaves(four.state.params)[0].sharding.device_set) == 4
    for a, b in zip(leaves(one.state.params), leaves(four.state.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    assert abs(out1["val"]["val/acc"] - out4["val"]["val/acc"]) <= 0.01
    with pytest.raises(ValueError, match="num_devices=64 but only"):
        _ = trainer(tmp_path, num_devices=64).strategy


def test_debug_runs_the_steps_without_jit(tmp_path, digits):
    t = trainer(tmp_path, debug=True, train_epochs=1)
    out = t.train_model(digits.train_loader, digits.val_loader)
    assert t.strategy.name == "eager" and not hasattr(t._compiled["train0"], "lower")  # not a jax.jit function
    assert out["val"]["val/acc"] > 0.5


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
    assert sorted(os.listdir(tmp_path / "metrics")) == [
        "train_epoch_0001.json", "train_epoch_0002.json", "train_epoch_0003.json", "train_epoch_0004.json",
        "val_epoch_0002.json", "val_epoch_0004.json",
    ]
    written = tensorboard_values(str(tmp_path / "tensorboard"))
    rates = [(step, value.simple_value) for step, value in written["optimizer/lr"]]
    assert [s for s, _ in rates] == [0, per_epoch, 2 * per_epoch, 3 * per_epoch]
    # the rate the last update used (optax.inject_hyperparams), read without a host sync
    assert rates[0][1] == pytest.approx(0.01, rel=1e-5)
    assert rates[1][1] == pytest.approx(0.01 * (1 - (per_epoch - 1) / 200), rel=1e-5)
    assert "grad/ema" in written and "train/grad_norm_step" in written
    assert (tmp_path / "grad_spikes.jsonl").exists()
    assert any((tmp_path / "profile").rglob("*.xplane.pb"))
    assert out["test"]["test/acc"] > 0.8 and "test/conf_matrix" in out["test"]


def test_a_wrong_loss_signature_or_a_misspelt_name_is_named_at_construction(tmp_path):
    class Misspelt(gyre.TrainerModule):
        def loss_fucntion(self, model, batch, train=True):
            return 0.0

    with pytest.raises(TypeError, match=r"Misspelt defines no loss_function\. Did you mean 'loss_fucntion'\?"):
        trainer(tmp_path, cls=Misspelt)

    class TwoArgs(gyre.TrainerModule):
        def loss_function(self, batch):
            return 0.0

    with pytest.raises(TypeError, match=r"TwoArgs\.loss_function cannot take the trainer's arguments "
                                        r"\(model, batch, train\)(.|\n)*received: def loss_function\(batch\)"):
        trainer(tmp_path, cls=TwoArgs)

    class NoTrainFlag(gyre.TrainerModule):
        def loss_function(self, model, batch):
            return 0.0

    with pytest.raises(TypeError, match=r"NoTrainFlag\.loss_function cannot take"):
        trainer(tmp_path, cls=NoTrainFlag)
