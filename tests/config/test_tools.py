"""Tool loggers: each ``tool_config`` section builds its gyre writer into the run folder (or
``save_dir``/name/version), and what it writes can be read back; bad sections are refused."""

from __future__ import annotations

import inspect
import os
import re

import pytest

import gyre
from gyre.config import LOGGERS, ConfigError, build_tool_writer
from gyre.config._tools import (
    csv_tool_logger,
    mlflow_tool_logger,
    tensorboard_tool_logger,
    wandb_tool_logger,
)

from ..loggers.readers import tensorboard_values

COMMON = ["log_dir", "name", "save_dir", "use_timestamp_version", "version"]


def test_the_four_tool_loggers_are_registered_with_their_keys():
    assert {name: LOGGERS.get(name) for name in
            ("TensorboardToolLogger", "WandBToolLogger", "MLflowToolLogger", "CSVToolLogger")} == {
        "TensorboardToolLogger": tensorboard_tool_logger, "WandBToolLogger": wandb_tool_logger,
        "MLflowToolLogger": mlflow_tool_logger, "CSVToolLogger": csv_tool_logger}
    keys = {f.__name__: list(inspect.signature(f).parameters) for f in
            (tensorboard_tool_logger, wandb_tool_logger, mlflow_tool_logger, csv_tool_logger)}
    assert keys == {"tensorboard_tool_logger": COMMON, "wandb_tool_logger": [*COMMON, "project", "entity", "mode"],
                    "mlflow_tool_logger": [*COMMON, "tracking_uri"], "csv_tool_logger": COMMON}


def test_tensorboard_writes_into_the_run_folder(tmp_path):
    writer = build_tool_writer({"class_name": "TensorboardToolLogger", "name": "digits", "version": "0"},
                               log_dir=tmp_path)
    assert isinstance(writer, gyre.TensorBoardWriter)
    writer.write_scalars(3, {"train/loss": 0.5})
    writer.close()
    folder = tmp_path / "tensorboard" / "digits" / "0"
    assert writer.logdir == str(folder)
    values = tensorboard_values(str(folder))
    assert [(step, value.simple_value) for step, value in values["train/loss"]] == [(3, 0.5)]


def test_save_dir_replaces_the_run_folder_and_a_timestamp_can_be_the_version(tmp_path):
    writer = build_tool_writer({"class_name": "TensorboardToolLogger", "save_dir": str(tmp_path / "tb"),
                                "use_timestamp_version": True}, log_dir=tmp_path / "run")
    writer.close()
    relative = os.path.relpath(writer.logdir, tmp_path)
    assert re.fullmatch(r"tb/\d{8}_\d{6}_\d{3}", relative), relative
    assert not (tmp_path / "run").exists()
    explicit = tensorboard_tool_logger(log_dir=tmp_path, version="v1", use_timestamp_version=True)
    explicit.close()
    assert explicit.logdir == str(tmp_path / "tensorboard" / "v1")  # a given version wins


def test_a_save_dir_under_the_home_folder_is_there(tmp_path, monkeypatch):
    # the seed's tool_config.save_dir written as ~/tb made a folder named "~" in the working directory
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for section in ({"class_name": "TensorboardToolLogger", "save_dir": "~/tb", "version": "0"},
                    {"class_name": "CSVToolLogger", "save_dir": "~/tb", "version": "1"}):
        writer = build_tool_writer(section, log_dir=tmp_path / "run")
        writer.close()
    assert sorted(os.listdir(tmp_path / "home" / "tb")) == ["0", "1"] and not (tmp_path / "~").exists()


def test_csv_writes_metrics_csv(tmp_path):
    with build_tool_writer({"class_name": "CSVToolLogger", "name": "digits", "version": "1"},
                           log_dir=tmp_path) as writer:
        assert isinstance(writer, gyre.CSVWriter)
        writer.write_scalars(0, {"loss": 1.0})
        writer.write_scalars(5, {"loss": 0.25, "acc": 0.5})
    assert (tmp_path / "digits" / "1" / "metrics.csv").read_text() == "step,loss,acc\n0,1.0,\n5,0.25,0.5\n"


def test_wandb_runs_offline_in_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    writer = build_tool_writer({"class_name": "WandBToolLogger", "name": "digits", "version": "v7",
                                "project": "gyre-tests"}, log_dir=tmp_path)
    assert isinstance(writer, gyre.WandbWriter)
    assert (writer.project, writer.name, writer.mode, writer.dir) == ("gyre-tests", "digits", "offline", str(tmp_path))
    writer.write_scalars(0, {"loss": 1.0})
    writer.close()
    runs = os.listdir(tmp_path / "wandb")
    assert any(re.fullmatch(r"offline-run-\d{8}_\d{6}-v7", run) for run in runs), runs


def test_mlflow_uses_a_file_store_in_the_run_folder(tmp_path):
    from mlflow.tracking import MlflowClient

    with build_tool_writer({"class_name": "MLflowToolLogger", "name": "digits", "version": "0"},
                           log_dir=tmp_path) as writer:
        assert isinstance(writer, gyre.MLflowWriter)
        writer.write_scalars(2, {"loss": 0.5})
    client = MlflowClient(writer.tracking_uri)
    assert writer.tracking_uri == (tmp_path / "mlruns").resolve().as_uri()
    run = client.get_run(writer.run_id)
    assert run.info.run_name == "0" and client.get_experiment(run.info.experiment_id).name == "digits"
    assert [(m.step, m.value) for m in client.get_metric_history(writer.run_id, "loss")] == [(2, 0.5)]


@pytest.mark.parametrize(
    "section, message",
    [
        ({"class_name": "CSVToolLogger", "log_dir": "x"}, r"tool_config\.log_dir is not a key of a tool logger(.|\n)*"
                                                         r"fix: move it to trainer\.logger\.log_dir"),
        ({"class_name": "CSVToolLogger", "save_to": "x"}, r"unknown key trainer\.logger\.tool_config\.save_to .*"
                                                         r"Did you mean 'save_dir'\?"),
        ({"class_name": "WandBToolLogger", "mode": "offlin"}, r"invalid value at trainer\.logger\.tool_config\.mode\. "
                                                             r"Did you mean 'offline'\?"),
        ({"class_name": "CSVToolLogger", "use_timestamp_version": "yes"}, r"wrong type at trainer\.logger\.tool_config\.use_timestamp_version\."),
        ({"class_name": "CSVToolLogger", "version": 0}, r"(?s)wrong type at trainer\.logger\.tool_config\.version\..*quote it"),
        ({"class_name": "CsvToolLogger"}, r"unknown loggers name 'CsvToolLogger' .*Did you mean 'CSVToolLogger'\?"),
        ({"name": "x"}, r"trainer\.logger\.tool_config\.class_name is missing"),
    ],
)
def test_a_bad_tool_section_is_refused_before_anything_is_written(tmp_path, section, message):
    with pytest.raises(ConfigError, match=message):
        build_tool_writer(section, log_dir=tmp_path)
    assert os.listdir(tmp_path) == []


def test_the_run_folder_must_be_a_path():
    with pytest.raises(TypeError, match=r"CSVToolLogger needs the run folder as log_dir\n(.|\n)*received: NoneType None"):
        csv_tool_logger(log_dir=None)
