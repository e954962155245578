"""TensorboardConfig / WandbConfig: the fork's fields and defaults, a mapping that is the
tool_config section, accepted by LoggerConfig and built by gyre's tool loggers."""

import os

import pytest

from gyre.config import LoggerConfig, TensorboardConfig, WandbConfig, build_tool_writer


def test_defaults_stamp_a_version_and_the_section_leaves_an_empty_folder_out():
    config = TensorboardConfig()
    assert config.save_dir == "" and config.name == "" and config.use_timestamp_version is True
    assert len(config.version) == len("20250101_120000_123")
    assert "save_dir" not in config and config["class_name"] == "TensorboardToolLogger"
    assert TensorboardConfig(use_timestamp_version=False).version == ""
    wandb = WandbConfig(project="p", version="v1")
    assert dict(wandb) == {"class_name": "WandBToolLogger", "version": "v1", "use_timestamp_version": True,
                           "project": "p"}


def test_logger_config_takes_it_as_its_section_and_gyre_builds_the_writer(tmp_path):
    config = LoggerConfig(tool_config=TensorboardConfig(save_dir=str(tmp_path), name="n", version="v"))
    assert config.tool_config["save_dir"] == str(tmp_path)
    writer = build_tool_writer(config.tool_config, log_dir=tmp_path / "run")
    writer.close()
    assert writer.logdir == os.path.join(str(tmp_path), "n", "v")


@pytest.mark.parametrize("make", [lambda: TensorboardConfig(version=3), lambda: WandbConfig(project=1),
                                  lambda: TensorboardConfig(use_timestamp_version="yes")])
def test_a_wrong_type_is_explained(make):
    with pytest.raises(TypeError, match="has the wrong type") as info:
        make()
    assert "expected" in str(info.value) and "fix" in str(info.value)
