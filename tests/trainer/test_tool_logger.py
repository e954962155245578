"""ToolLoggerInterface: the fork's method names over a gyre writer, tagged mode/key+postfix."""

import logging

import numpy as np
import pytest

from gyre.loggers import Writer
from gyre.trainer import ToolLoggerInterface


class Recording(Writer):
    def __init__(self):
        self.calls = []
        super().__init__()

    def write_scalars(self, step, values):
        self.calls.append(("scalars", step, dict(values)))

    def write_images(self, step, images):
        self.calls.append(("images", step, {k: np.shape(v) for k, v in images.items()}))

    def close(self):
        self.calls.append(("close",))


def test_each_method_reaches_the_writer():
    from matplotlib.figure import Figure

    writer = Recording()
    tool = ToolLoggerInterface(writer, {"class_name": "X"})
    tool.log_metrics({"loss": 1.0}, step=4)
    tool.log_image("img", np.zeros((4, 4, 3)), step=2, log_postfix="_a", logging_mode="val")
    figure = Figure(figsize=(1, 1), dpi=10)
    tool.log_figure("fig", figure, step=3, logging_mode="train")
    tool.finalize("success")
    assert writer.calls == [("scalars", 4, {"loss": 1.0}), ("images", 2, {"val/img_a": (4, 4, 3)}),
                            ("images", 3, {"train/fig": (10, 10, 3)}), ("close",)]
    assert tool.config == {"class_name": "X"} and tool.log_dir is None


def test_embeddings_go_to_a_tensorboard_folder_else_warn(tmp_path, caplog):
    from gyre.loggers import TensorBoardWriter

    with TensorBoardWriter(tmp_path) as writer:
        ToolLoggerInterface(writer).log_embedding("emb", np.eye(3), step=1, logging_mode="val")
    assert (tmp_path / "projector_config.pbtxt").exists()
    with caplog.at_level(logging.WARNING):
        ToolLoggerInterface(Recording()).log_embedding("emb", np.eye(3), step=1)
    assert "only implemented for TensorBoard" in caplog.text


def test_a_non_writer_is_explained():
    with pytest.raises(TypeError, match="writes through a gyre writer"):
        ToolLoggerInterface(print)
