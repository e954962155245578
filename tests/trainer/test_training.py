"""train_model end to end: a run killed mid-epoch resumes bit-identical, fused steps and data
parallelism change nothing, debug runs eagerly, NaNs stop the run, dropout draws fresh masks."""

import json
import os
import re
import signal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre.trainer import (
    Callback,
    DigitsDataset,
    ImgClassifierTrainer,
    ModelCheckpoint,
)
from gyre.trainer._module import host_values
from tests.loggers.readers import tensorboard_values
from tests.trainer.helpers import leaves, mlp, trainer


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
    with pytest.warns(gyre.LoopWarning, match=rf"preempted \(SIGTERM\) during step {kill_at - 1}"):
        killed, _ = run(tmp_path / "killed", callbacks=[SigtermAt(kill_at)])
    assert killed.history.stop_reason == "preempted" and killed.global_step == kill_at
    resumed, resumed_out = run(tmp_path / "killed", resume="latest")
    assert resumed.global_step == whole.global_step == 3 * steps_per_epoch
    for a, b in zip(leaves(whole.state.params) + leaves(whole.state.opt_state) + leaves(whole.state.model_state),
                    leaves(resumed.state.params) + leaves(resumed.state.opt_state) + leaves(resumed.state.model_state),
                    strict=True):
        assert np.array_equal(a, b)
    assert resumed_out["val"]["val/acc"] == whole_out["val"]["val/acc"]
    assert resumed.callbacks[0].ranked == whole.callbacks[0].ranked  # callback state resumed too
    assert "trainer" in (tmp_path / "killed" / "config.yaml").read_text()
    # the same metric files, epoch by epoch, and every step logged once
    for name in sorted(os.listdir(tmp_path / "whole" / "metrics")):
        a = json.loads((tmp_path / "whole" / "metrics" / name).read_text())
        b = json.loads((tmp_path / "killed" / "metrics" / name).read_text())
        a.pop("train/time", None), b.pop("train/time", None), a.pop("val/time", None), b.pop("val/time", None)
        assert a == b, name
    written = tensorboard_values(str(tmp_path / "killed" / "tensorboard"))
    steps = sorted(step for step, _ in written["train/loss_step"])
    assert steps == list(range(9, 3 * steps_per_epoch, 10))


def test_fused_steps_change_nothing(tmp_path, digits):
    runs = []
    for k in (1, 3, "auto"):
        data = DigitsDataset(global_batch_size=32, val_size=200)
        t = trainer(tmp_path / str(k), steps_per_call=k, log_steps_every=5)
        out = t.train_model(data.train_loader, data.val_loader)
        runs.append((t, out))
    (a, out_a), *others = runs
    for b, out_b in others:
        for x, y in zip(leaves(a.state.params), leaves(b.state.params), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)
        assert out_a["val"]["val/acc"] == out_b["val"]["val/acc"]
        np.testing.assert_allclose(np.asarray(a.history.collect("train/loss_step")),
                                   np.asarray(b.history.collect("train/loss_step")), rtol=1e-5)


def test_fused_steps_with_a_per_step_callback_say_so_in_the_trainers_words(tmp_path, digits):
    # the engine's warning named its own hooks (TrainingRun.on_train_batch_end,
    # WriteTo.on_train_batch_end) and told a trainer user to give them schedules
    class EveryStep(Callback):
        def __init__(self):
            super().__init__()
            self.steps = []

        def on_training_step(self, step_metrics, epoch_idx, global_step):
            self.steps.append(global_step)

    spy = EveryStep()
    t = trainer(tmp_path, steps_per_call=3, train_epochs=1, callbacks=[spy])
    with pytest.warns(gyre.LoopWarning) as caught:
        t.train_model(digits.train_loader, digits.val_loader)
    texts = [str(w.message) for w in caught if issubclass(w.category, gyre.LoopWarning)]
    assert any("trainer.steps_per_call=3" in m and "EveryStep overrides on_training_step" in m for m in texts)
    assert not any("TrainingRun" in m or "cannot fuse this table" in m for m in texts)
    assert spy.steps == list(range(1, digits.train_loader.epoch_steps + 1))


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
    step = t._compiled["train"]
    assert t.strategy.name == "eager" and not hasattr(step, "lower")  # not a jax.jit function
    assert out["val"]["val/acc"] > 0.5


def test_detect_nans_stops_with_the_step_named(tmp_path, digits):
    class Diverges(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            loss, metrics = super().loss_function(model, batch, train)
            return loss * jnp.where(model.out.bias.value.sum() > -1e9, jnp.nan, 1.0), metrics

    with pytest.raises(gyre.NonFiniteError, match="step 0"):
        trainer(tmp_path, cls=Diverges, detect_nans=True).train_model(digits.train_loader)


def test_detect_nans_false_only_stops_stopping_the_writers_get_every_steps_values_alike(tmp_path, digits):
    runs = {}
    for detect in (True, False):  # detect_nans sets the NaN policy: it changes nothing a run writes
        t = trainer(tmp_path / str(detect), train_epochs=1, detect_nans=detect, max_steps_per_epoch=6)
        t.train_model(DigitsDataset(global_batch_size=32, val_size=200).train_loader)
        runs[detect] = t, tensorboard_values(str(tmp_path / str(detect) / "tensorboard"))
    (on, written_on), (off, written_off) = runs[True], runs[False]
    assert [s for s, _ in written_off["loss"]] == [s for s, _ in written_on["loss"]] == list(range(6))
    assert written_off["loss"] == written_on["loss"] and written_off["acc"] == written_on["acc"]
    assert off.history.collect("loss") == on.history.collect("loss")


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


class CrashAt(Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_training_step(self, step_metrics, epoch_idx, global_step):
        if global_step == self.step:
            raise RuntimeError("the machine died")


def test_a_crashed_run_resumes_from_its_last_epoch_checkpoint_bit_identical(tmp_path, digits):
    def run(log_dir, resume=None, callbacks=()):
        data = DigitsDataset(global_batch_size=32, val_size=200)
        t = trainer(log_dir, train_epochs=3, resume=resume, resume_every_minutes=0, callbacks=list(callbacks))
        t.train_model(data.train_loader, data.val_loader)
        return t

    whole = run(tmp_path / "whole")
    per_epoch = digits.train_loader.epoch_steps
    with pytest.raises(RuntimeError, match="the machine died"):
        run(tmp_path / "crashed", callbacks=[CrashAt(2 * per_epoch + 3)])
    saved = sorted(int(p.name) for p in (tmp_path / "crashed" / "resume").iterdir() if p.name.isdigit())
    assert saved == [2 * per_epoch]  # saved at every epoch's end (keep=1): the crash lost 3 steps
    resumed = run(tmp_path / "crashed", resume="latest")
    for a, b in zip(leaves(whole.state.params), leaves(resumed.state.params), strict=True):
        assert np.array_equal(a, b)


def test_a_crashed_run_leaves_the_trainer_a_state_and_a_clock_that_belong_together(tmp_path, digits):
    # the trainer kept the loop's state (5 steps made) with the loop's clock of the step in
    # progress: global_step and elapsed.steps said 4
    t = trainer(tmp_path, train_epochs=1, callbacks=[CrashAt(5)])
    with pytest.raises(RuntimeError, match="the machine died") as info:
        t.train_model(digits.train_loader)
    assert int(t.state.step) == t.global_step == t.elapsed.steps == info.value.elapsed.steps == 5


# -- evaluation without recompiles: the last, smaller batch padded and masked -----------------


def _thousand_examples():
    """1,000 digits in batches of 64: 15 full ones and one of 40."""
    (x, y), _ = gyre.data.digits()
    x, y = x[:1000], y[:1000].astype(np.int32)
    return x, y, [(x[i : i + 64], y[i : i + 64]) for i in range(0, 1000, 64)]


def _exact_means(model, x, y):
    logits = np.asarray(model(jnp.asarray(x)), np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    losses = np.log(np.exp(shifted).sum(-1)) - shifted[np.arange(len(y)), y]
    return float(np.mean(logits.argmax(-1) == y)), float(losses.mean())


def _step_compilations(counter):
    return [n for n in counter.names if n == "jit(step)"]


def test_an_evaluation_pads_its_last_batch_compiles_once_and_its_means_are_exact(tmp_path):
    x, y, loader = _thousand_examples()
    assert [len(b[1]) for b in loader] == [64] * 15 + [40]
    model = mlp()
    t = trainer(tmp_path, model=model, num_classes=10)
    t.init_model(loader[0])
    with gyre.testing.count_compilations() as compiled:
        out = host_values(t.eval_model(loader))
    assert len(_step_compilations(compiled)) == 1, compiled.names  # the batch of 40 did not compile
    acc, loss = _exact_means(model, x, y)
    assert abs(out["val/acc"] - acc) <= 1e-6 and abs(out["val/loss"] - loss) <= 1e-6
    assert out["val/conf_matrix"].sum() == 1000  # the padded rows count nowhere
    with gyre.testing.count_compilations() as again:
        assert host_values(t.eval_model(loader))["val/acc"] == out["val/acc"]
    assert _step_compilations(again) == []


def test_a_loss_function_without_mask_gets_exact_means_with_one_more_compilation(tmp_path):
    sizes = []

    class Plain(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            x, y = batch
            sizes.append(len(y))  # when traced
            logits = model(x)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, {"acc": (logits.argmax(-1) == y).mean(), "pred": {"value": logits.argmax(-1), "mode": "concat"}}

    x, y, loader = _thousand_examples()
    model = mlp()
    t = trainer(tmp_path, model=model, cls=Plain)
    t.init_model(loader[0])
    sizes.clear()
    with gyre.testing.count_compilations() as compiled:
        out = host_values(t.eval_model(loader))
    assert sorted(set(sizes)) == [40, 64]  # no mask: the last batch reaches the loss unpadded
    assert len(_step_compilations(compiled)) == 2  # the batch of 40 is its own shape
    acc, loss = _exact_means(model, x, y)
    assert abs(out["val/acc"] - acc) <= 1e-6 and abs(out["val/loss"] - loss) <= 1e-6
    assert out["val/pred"].shape == (1000,)


def test_over_several_devices_a_batch_that_does_not_split_is_evaluated_whole(tmp_path):
    # 1,000 digits in batches of 60: the last holds 40; neither 60 nor 40 splits over 8 devices.
    # A loss function without mask got its short last batch refused over 8 devices (one device
    # evaluated it), and a masked one every batch; gyre.fit evaluates such batches whole.
    class Plain(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True):
            x, y = batch
            logits = model(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), {"acc": (logits.argmax(-1) == y).mean()}

    x, y, _ = _thousand_examples()
    loader = [(x[i : i + 60], y[i : i + 60]) for i in range(0, 1000, 60)]
    for cls in (Plain, ImgClassifierTrainer):
        model = mlp()
        t = trainer(tmp_path / cls.__name__, model=model, cls=cls, num_devices=8)
        t.init_model(loader[0])
        out = host_values(t.eval_model(loader))
        acc, loss = _exact_means(model, x, y)
        assert abs(out["val/acc"] - acc) <= 1e-6 and abs(out["val/loss"] - loss) <= 1e-5


def test_concat_values_of_a_padded_batch_keep_the_real_rows_only(tmp_path):
    masked = []

    class WithPredictions(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True, mask=None):
            if not train:
                masked.append(mask is not None)
            loss, metrics = super().loss_function(model, batch, train, mask)
            return loss, {**metrics, "pred": {"value": model(batch[0]).argmax(-1), "mode": "concat"}}

    x, _, loader = _thousand_examples()
    model = mlp()
    t = trainer(tmp_path, model=model, cls=WithPredictions)
    t.init_model(loader[0])
    out = host_values(t.eval_model(loader))
    assert masked and all(masked)  # the evaluation passed the loss function a mask
    assert out["val/pred"].tolist() == np.asarray(model(jnp.asarray(x)).argmax(-1)).tolist()


def test_a_linen_classifier_pads_and_masks_too(tmp_path):
    from gyre.trainer import SimpleClassifierLinen

    masked = []

    class Linen(ImgClassifierTrainer):
        def loss_function_linen(self, params, state, batch, rng, train=True, mask=None):
            if not train:
                masked.append(mask is not None)
            return super().loss_function_linen(params, state, batch, rng, train, mask)

    x, y, loader = _thousand_examples()
    loader = [(x[:8], y[:8]), (x[8:11], y[8:11])]
    t = trainer(tmp_path, model=SimpleClassifierLinen(c_hid=8), cls=Linen)
    t.init_model(loader[0])
    with gyre.testing.count_compilations() as compiled:
        out = host_values(t.eval_model(loader))
    assert masked and all(masked)  # the evaluation passed the loss function a mask
    assert len(_step_compilations(compiled)) == 1
    whole = host_values(t.eval_model([(x[:11], y[:11])]))
    assert abs(out["val/acc"] - whole["val/acc"]) <= 1e-6 and abs(out["val/loss"] - whole["val/loss"]) <= 1e-6


def test_several_validation_and_test_loaders_are_named_and_written(tmp_path, digits):
    from tests.trainer.helpers import trainer

    t = trainer(tmp_path, train_epochs=1)
    val, test = digits.val_loader, digits.test_loader
    seen = {}

    class Spy(Callback):
        def on_validation_epoch_end(self, eval_metrics, epoch_idx):
            seen.update(eval_metrics)

    t.callbacks.append(Spy())
    t.callbacks[-1].bind(t)
    out = t.train_model(digits.train_loader, val_loader={"val": val, "ood": test},
                        test_loader={"test": test, "held": val})
    assert {"val/acc", "val/loss", "val_ood/acc", "val_ood/loss"} <= set(out[1])
    assert {"val/acc", "val_ood/acc"} <= set(seen)  # the callbacks get every loader's metrics at once
    assert out["test"]["test/acc"] == pytest.approx(out[1]["val_ood/acc"])  # the same data, the same model
    assert out["test"]["test_held/acc"] == pytest.approx(out[1]["val/acc"])
    for name in ("val_epoch_0001", "val_ood_epoch_0001", "test_epoch_0001", "test_held_epoch_0001"):
        assert json.loads((tmp_path / "metrics" / f"{name}.json").read_text())["epoch"] == 1


@pytest.mark.parametrize("loaders, received", [
    ({}, "an empty dict"),
    ({"ood": np.zeros((4, 64))}, "entries ['ood']"),
    ({"Bad Name": [1]}, "entries ['Bad Name']"),
])
def test_a_bad_dict_of_validation_loaders_is_explained_before_training(tmp_path, digits, loaders, received):
    from tests.trainer.helpers import trainer

    t = trainer(tmp_path, train_epochs=1)
    with pytest.raises(TypeError, match=r"(?s)a dict given as the val loader must map names to loaders.*"
                       + re.escape(received)):
        t.train_model(digits.train_loader, val_loader=loaders)
    assert t.global_step == 0


def test_max_steps_per_epoch_makes_shorter_epochs_that_continue_the_loader(tmp_path, digits):
    from tests.trainer.helpers import trainer

    t = trainer(tmp_path, train_epochs=3, max_steps_per_epoch=4)
    t.train_model(digits.train_loader, val_loader=digits.val_loader)
    assert t.global_step == 12 and digits.train_loader.epoch_steps > 4
    written = sorted(p.name for p in (tmp_path / "metrics").iterdir())
    assert written == [f"{phase}_epoch_000{e}.json" for phase in ("train", "val") for e in (1, 2, 3)]


def test_nan_keys_pick_the_values_that_stop_the_run(tmp_path, digits):
    from tests.trainer.helpers import trainer

    class NaNMetric(ImgClassifierTrainer):
        def loss_function(self, model, batch, train=True, mask=None):
            loss, metrics = super().loss_function(model, batch, train, mask)
            return loss, {**metrics, "ratio": jnp.float32(jnp.nan)}

    calm = trainer(tmp_path / "calm", cls=NaNMetric, train_epochs=1, detect_nans=True, nan_keys=["train/loss"])
    calm.train_model(digits.train_loader)  # a NaN metric outside nan_keys does not stop it
    assert calm.global_step == digits.train_loader.epoch_steps
    strict = trainer(tmp_path / "strict", cls=NaNMetric, train_epochs=1, detect_nans=True)
    with pytest.raises(Exception, match="ratio"):
        strict.train_model(DigitsDataset(global_batch_size=32, val_size=200).train_loader)


def test_seed_eval_fixes_the_evaluations_key(tmp_path):
    from flax import linen

    from tests.trainer.helpers import trainer

    class Noisy(linen.Module):
        @linen.compact
        def __call__(self, x, train=False):
            return linen.Dense(10)(x) + jax.random.normal(self.make_rng("dropout"), (x.shape[0], 10))

    (x, y), _ = gyre.data.digits()
    data = [(x[:64], y[:64])]
    losses = []
    for seed_eval in (0, 0, 1):
        t = trainer(tmp_path, model=Noisy(), model_mode="linen", seed_eval=seed_eval)
        t.init_model(data[0])
        losses.append(t.test_model(data)["test/loss"])
    assert losses[0] == losses[1] != losses[2]
