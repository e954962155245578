"""Logger: the fork's step/epoch bookkeeping over update_metrics entries, written through the
tool_config's gyre writer, with the TrainerModule's epoch files."""

import csv
import json
import os

import pytest

from gyre.config import ConfigError, LoggerConfig, TensorboardConfig
from gyre.trainer import Logger, update_metrics


def csv_logger(tmp_path, **keys):
    return Logger(LoggerConfig(log_dir=str(tmp_path), tool_config={"class_name": "CSVToolLogger"}, **keys),
                  {"model": {"width": 8}})


def rows(tmp_path):
    with open(tmp_path / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_step_window_and_epoch_are_written_and_reset(tmp_path):
    logger = csv_logger(tmp_path, log_steps_every=2)
    logger.start_epoch(1)
    metrics = None
    for loss in (1.0, 3.0, 5.0):
        metrics = update_metrics(metrics, {"loss": loss}, train=True, batch_size=2)
        metrics = logger.log_step(metrics)
    assert metrics["loss_step"]["count"] == 2  # the first window was written and reset
    logger.log_epoch_scalar("lr", 0.1)
    metrics, final = logger.end_epoch(metrics, save_metrics=True)
    assert final["train/loss"] == 3.0 and final["train/lr"] == 0.1 and "train/time" in final
    assert metrics["loss_epoch"]["count"] == 0
    logger.finalize("success")
    written = rows(tmp_path)
    assert written[0]["step"] == "2" and float(written[0]["train/loss_step"]) == 2.0
    assert float(written[-1]["train/loss_epoch"]) == 3.0
    with open(tmp_path / "metrics" / "train_epoch_0001.json") as f:
        record = json.load(f)
    assert record["epoch"] == 1 and record["step"] == 3 and record["train/loss"] == 3.0


def test_the_fork_s_reset_methods_are_kept(tmp_path):
    # the fork's own tests call these private names (kpoeppel/jax_trainer tests/logger)
    logger = csv_logger(tmp_path, log_steps_every=5)
    logger.start_epoch(1)
    logger.log_step(update_metrics(None, {"loss": 1.0}, train=True, batch_size=2))
    assert logger.step_count == 1
    logger._reset_step_metrics()
    assert logger.step_count == 0
    logger._reset_epoch_metrics()
    assert logger.epoch_metrics == {} and logger.epoch_step_count == 0
    logger.finalize("success")


def test_evaluation_epochs_have_no_postfix_and_log_dir_is_the_run_folder(tmp_path):
    logger = csv_logger(tmp_path)
    logger.start_epoch(2, mode="val")
    metrics = update_metrics(None, {"acc": 0.5}, train=False, batch_size=4)
    metrics = logger.log_step(metrics)
    _, final = logger.end_epoch(metrics)
    logger.finalize("success")
    assert final["val/acc"] == 0.5 and "val/acc" in rows(tmp_path)[-1]
    assert logger.log_dir == str(tmp_path)


def test_without_log_dir_the_folder_is_the_writers(tmp_path):
    board = TensorboardConfig(save_dir=str(tmp_path), version="v")
    logger = Logger(LoggerConfig(tool_config=board), {})
    assert logger.log_dir == os.path.join(str(tmp_path), "v")
    # the tool logger keeps the typed config it was given (the fork reads .config.save_dir)
    assert logger.logger.config is board
    assert logger.log_dir == os.path.join(logger.logger.config.save_dir, logger.logger.config.version)
    logger.save_metrics("best", {"val/acc": 0.5, "skip": [1]})
    logger.finalize("success")
    with open(tmp_path / "v" / "metrics" / "best.json") as f:
        assert json.load(f) == {"val/acc": 0.5}


def test_mistakes_are_explained(tmp_path):
    logger = csv_logger(tmp_path)
    with pytest.raises(AssertionError, match="unknown logging mode"):
        logger.start_epoch(1, mode="training")
    with pytest.raises(ValueError, match="save_metrics: the file's name"):
        logger.save_metrics("a/b", {})
    logger.finalize("success")
    with pytest.raises(TypeError, match="Logger takes a LoggerConfig"):
        Logger(42, {})
    with pytest.raises(ConfigError, match="log_step_every"):
        Logger({"log_step_every": 3}, {})


def test_the_trainers_test_metrics_reach_its_writer_as_jax_trainers_logger_writes_them(tmp_path):
    """test_model and eval_model wrote their metrics to metrics/<mode>_epoch_NNNN.json only: the
    event file of a run with a test had no test/* tag (jax_trainer's eval_model logs them through
    its tool logger). They are written at the last trained step, the step of the validations."""
    import numpy as np
    import optax
    from flax import nnx

    import gyre
    from tests.loggers.readers import tensorboard_values

    class Mean(gyre.TrainerModule):
        def loss_function(self, model, batch, train=True):
            return (model(batch[0]) ** 2).mean(), {}

    x = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    loader = [(x[i:i + 8],) for i in range(0, 32, 8)]
    t = Mean(model=nnx.Linear(3, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), log_dir=str(tmp_path / "tb"),
             enable_progress_bar=False)
    t.init_model(loader[0])
    before = t.test_model(loader)  # before training: step 0
    out = t.train_model(loader, loader, test_loader=loader, num_epochs=1)  # its test: at step 3
    again = t.eval_model(loader, mode="val", epoch_idx=1)
    t.close_writer()
    written = tensorboard_values(str(tmp_path / "tb" / "tensorboard"))
    assert [s for s, _ in written["test/loss"]] == [0, 3] and [s for s, _ in written["test/time"]] == [0, 3]
    assert [v.simple_value for _, v in written["test/loss"]] == pytest.approx([before["test/loss"], out["test"]["test/loss"]])
    assert [s for s, _ in written["val/loss"]] == [3, 3]  # the training's validation, then eval_model's
    assert [v.simple_value for _, v in written["val/loss"]] == pytest.approx([out["val"]["val/loss"], float(again["val/loss"])])

    csv_trainer = Mean(model=nnx.Linear(3, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
                       logger={"log_dir": str(tmp_path / "csv"), "tool_config": {"class_name": "CSVToolLogger"}})
    csv_trainer.init_model(loader[0])
    tested = csv_trainer.test_model({"test": loader, "half": loader[:2]})
    csv_trainer.close_writer()
    first, second = rows(tmp_path / "csv")  # a row per loader, at step 0
    assert first["step"] == second["step"] == "0" and float(first["test/loss"]) == pytest.approx(tested["test/loss"])
    assert float(second["test_half/loss"]) == pytest.approx(tested["test_half/loss"])
