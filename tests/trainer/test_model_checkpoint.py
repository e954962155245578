"""ModelCheckpoint and load_from_checkpoint: exactly the top k, the test set scored with the best
validation checkpoint, a reloaded trainer reproduces its test metric."""


import numpy as np
import optax
import pytest

import gyre
from gyre.trainer import (
    Callback,
    ImgClassifierTrainer,
    ModelCheckpoint,
)
from tests.trainer.helpers import leaves, mlp, trainer


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


def test_a_monitor_never_logged_is_explained(tmp_path, digits):
    t = trainer(tmp_path, callbacks=[ModelCheckpoint(monitor="val/accuracy", mode="max")])
    with pytest.raises(KeyError, match=r"monitors 'val/accuracy'(.|\n)*'val/acc'"):
        t.train_model(digits.train_loader, digits.val_loader)


@pytest.mark.parametrize(("monitor", "mode", "implied"), [
    ("val/acc", "min", "max"), ("val/accuracy_top1", "min", "max"), ("val/f1", "min", "max"),
    ("val/loss", "max", "min"), ("val/mse", "max", "min"), ("val/error_rate", "max", "min"),
])
def test_a_mode_against_the_metrics_name_is_refused(monitor, mode, implied):
    # mode: min on val/acc kept, and tested, the worst model without a word
    with pytest.raises(ValueError, match=rf"(?s)ModelCheckpoint: mode {mode!r} on {monitor!r}.*"
                                         rf"its name says mode {implied!r}.*fix: set mode: {implied}"):
        ModelCheckpoint(monitor=monitor, mode=mode)


def test_a_mode_left_out_is_the_names():
    assert ModelCheckpoint(monitor="val/acc").mode == "max"
    assert ModelCheckpoint(monitor="train/accuracy_epoch").mode == "max"
    assert ModelCheckpoint(monitor="val/loss").mode == ModelCheckpoint().mode == "min"
    assert ModelCheckpoint(monitor="val/foo").mode == "min"  # a name that says nothing: lower is better
    assert ModelCheckpoint(monitor="val/foo", mode="max").mode == "max"  # given: taken


def test_no_validation_tests_the_final_model_and_says_so(tmp_path, digits):
    # check_val_every_n_epoch: 0 is jax_trainer's "no validation": nothing is ranked, and the
    # test scored the final model as if it were the best one
    t = trainer(tmp_path, train_epochs=1, check_val_every_n_epoch=0, callbacks=[ModelCheckpoint(monitor="val/acc")])
    with pytest.warns(gyre.LoopWarning, match=r"(?s)ModelCheckpoint saved no model.*check_val_every_n_epoch is 0.*"
                                             r"the test scores the final model"):
        out = t.train_model(digits.train_loader, digits.val_loader, digits.test_loader)
    assert "test/acc" in out["test"] and 1 not in out


def test_two_model_checkpoints_are_refused_before_training(tmp_path):
    # both saved into <log_dir>/checkpoints: the second save collided in orbax's temporary folder,
    # a CheckpointError (and, from gyre fit, a traceback) once training had ended
    with pytest.raises(ValueError, match=r"the trainer has 2 ModelCheckpoint callbacks(.|\n)*"
                                         r"ModelCheckpoint\(monitor='val/acc', mode='max'\), "
                                         r"ModelCheckpoint\(monitor='val/loss', mode='min'\)"):
        trainer(tmp_path, callbacks=[ModelCheckpoint(monitor="val/acc"), ModelCheckpoint(monitor="val/loss")])
    with pytest.raises(ValueError, match="2 ModelCheckpoint callbacks"):  # one from the config, one given
        trainer(tmp_path, callbacks=[ModelCheckpoint(monitor="val/acc")],
                trainer_config={"callbacks": {"ModelCheckpoint": {"monitor": "val/loss"}}})
    trainer(tmp_path, callbacks=[ModelCheckpoint(monitor="val/acc", save_top_k=3)])  # one is fine
