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


def test_a_validations_images_are_at_its_scalars_step(tmp_path):
    # was: the confusion matrix and a log_image of on_validation_epoch_end were written at
    # global_step (4, 8), one step after the validation's scalars (3, 7)
    from gyre.trainer import Callback, ConfusionMatrixCallback, confusion_matrix

    class Sample(Callback):
        def on_validation_epoch_end(self, eval_metrics, epoch_idx):
            self.trainer.log_image("val/sample", np.ones((4, 4, 3)))
            self.trainer.log_embedding("val/features", np.eye(2))  # (was at global_step too)

    class T(gyre.TrainerModule):
        def loss_function(self, model, batch, train=True):
            x, y = batch
            logits = model(x)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, {"conf_matrix": {"value": confusion_matrix(y, logits.argmax(-1), 2), "mode": "sum",
                                          "log_mode": "eval"}}

    x = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    loader = [(x[i:i + 8], (x[i:i + 8, 0] > 0).astype(np.int32)) for i in range(0, 32, 8)]
    t = T(model=nnx.Linear(3, 2, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1), log_dir=str(tmp_path),
          enable_progress_bar=False, callbacks=[ConfusionMatrixCallback(figsize=(2, 2), dpi=20), Sample()])
    t.train_model(loader, loader, num_epochs=2)
    t.close_writer()
    written = {k: [s for s, _ in v] for k, v in tensorboard_values(str(tmp_path / "tensorboard")).items()}
    assert written["val/loss"] == [3, 7]
    assert written["val/confusion_matrix"] == written["val/sample"] == [3, 7]
    projector = (tmp_path / "tensorboard" / "projector_config.pbtxt").read_text()
    assert 'tensor_name: "val/features:3"' in projector and 'tensor_name: "val/features:7"' in projector
