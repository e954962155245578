"""Images, figures and embeddings from a trainer: through its writer and into TensorBoard's
projector files; bad arguments explained."""

import numpy as np
import optax
import pytest
from flax import nnx
from matplotlib.figure import Figure

import gyre
from gyre.trainer._logger import figure_image, write_embedding
from tests.loggers.readers import tensorboard_values


def _trainer(tmp_path):
    return gyre.TrainerModule(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
                              log_dir=str(tmp_path))


def test_figures_and_images_reach_the_writer_at_their_step(tmp_path):
    t = _trainer(tmp_path)
    fig = Figure(figsize=(2, 1), dpi=40)
    fig.subplots().plot([0, 1], [1, 0])
    t.log_figure("val/curve", fig, step=7)
    t.log_image("val/sample", np.ones((4, 4, 3)))
    t.writer.flush()
    written = tensorboard_values(str(tmp_path / "tensorboard"))
    assert [step for step, _ in written["val/curve"]] == [7] and [s for s, _ in written["val/sample"]] == [0]
    image = figure_image(fig)
    assert image.shape == (40, 80, 3) and image.dtype == np.uint8 and image.min() < 255  # the line is drawn


def test_embeddings_are_projector_files_with_labels_and_a_sprite(tmp_path):
    t = _trainer(tmp_path)
    vectors = np.arange(12.0).reshape(4, 3)
    t.log_embedding("val/features", vectors, step=3, metadata=["a", "b", "a", "b"], images=np.zeros((4, 5, 6, 1)))
    t.log_embedding("val/features", vectors, step=4)
    folder = tmp_path / "tensorboard"
    config = (folder / "projector_config.pbtxt").read_text()
    assert config.count("embeddings {") == 2 and 'tensor_name: "val/features:3"' in config
    assert "single_image_dim: 6 single_image_dim: 5" in config
    first = folder / "val_features_00000003"
    np.testing.assert_allclose(np.loadtxt(first / "tensors.tsv", delimiter="\t"), vectors)
    assert (first / "metadata.tsv").read_text().split() == ["a", "b", "a", "b"]
    assert (first / "sprite.png").is_file() and not (folder / "val_features_00000004" / "sprite.png").exists()


@pytest.mark.parametrize("args, match", [
    ((np.zeros(3),), r"(?s)one vector per point.*shape \(3,\)"),
    ((np.zeros((2, 3)), ["a"]), r"(?s)metadata must label each point.*received: 1 labels"),
    ((np.zeros((2, 3)), None, np.zeros((3, 4, 4, 1))), r"(?s)images must picture each point.*shape \(3, 4, 4, 1\)"),
])
def test_bad_embeddings_are_explained(tmp_path, args, match):
    with pytest.raises(ValueError, match=match):
        write_embedding(tmp_path, "e", 0, *args)


def test_a_figure_that_is_not_one_is_explained(tmp_path):
    with pytest.raises(TypeError, match=r"(?s)log_figure takes a matplotlib figure.*received: ndarray"):
        _trainer(tmp_path).log_figure("x", np.zeros((2, 2)))
