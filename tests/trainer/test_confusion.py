"""confusion_matrix and ConfusionMatrixCallback: exact counts, the PNG and the TensorBoard image
read back, and every bad input."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.trainer._callback import ConfusionMatrixCallback, _cell, _normalize, confusion_matrix

from ..loggers.readers import tensorboard_values
from .fakes import FakeTrainer, RecordingWriter, drive

PNG = b"\x89PNG\r\n\x1a\n"
SMALL = {"figsize": (3, 2), "dpi": 20}  # 60 x 40 pixels: width 3 in, height 2 in


# -- confusion_matrix ---------------------------------------------------------------------------


def test_rows_are_true_labels_columns_predictions():
    labels = jnp.array([0, 0, 1, 2, 2, 2])
    preds = jnp.array([0, 1, 1, 2, 0, 2])
    m = confusion_matrix(labels, preds, 3)
    assert m.dtype == jnp.int32
    assert m.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]


def test_jitted_any_shape_and_out_of_range_ignored():
    count = jax.jit(confusion_matrix, static_argnums=2)
    labels = jnp.array([[0, 1], [-1, 3]])  # -1: padding, 3: out of range
    preds = jnp.array([[1, 1], [0, 0]])
    assert count(labels, preds, 3).tolist() == [[0, 1, 0], [0, 1, 0], [0, 0, 0]]
    assert confusion_matrix(jnp.array([0]), jnp.array([-1]), 2).tolist() == [[0, 0], [0, 0]]


def test_summing_batches_is_the_matrix_of_all():
    labels, preds = np.arange(12) % 4, (np.arange(12) * 7) % 4
    whole = confusion_matrix(labels, preds, 4)
    parts = confusion_matrix(labels[:6], preds[:6], 4) + confusion_matrix(labels[6:], preds[6:], 4)
    reference = np.zeros((4, 4), np.int64)
    np.add.at(reference, (labels, preds), 1)
    assert whole.tolist() == parts.tolist() == reference.tolist()


@pytest.mark.parametrize("n", [0, -1, True, 2.0, "3"])
def test_bad_num_classes(n):
    with pytest.raises(ValueError, match="num_classes must be a whole number >= 1"):
        confusion_matrix(jnp.array([0]), jnp.array([0]), n)


def test_logits_instead_of_classes():
    with pytest.raises(TypeError, match=r"(?s)predictions must hold integer classes.*argmax"):
        confusion_matrix(jnp.array([0, 1]), jnp.ones((2, 3)), 3)


def test_shapes_differ():
    with pytest.raises(ValueError, match=r"(?s)differ in shape.*labels \(2,\), predictions \(2, 1\)"):
        confusion_matrix(jnp.array([0, 1]), jnp.array([[0], [1]]), 2)


# -- the callback -------------------------------------------------------------------------------


def _metrics(phase, epoch):
    return {f"{phase}/loss": jnp.float32(epoch),
            f"{phase}/conf_matrix": confusion_matrix(jnp.array([0, 1, 1, 2]), jnp.array([0, 1, epoch % 3, 2]), 3)}


def _run(tmp_path, writer, **kwargs):
    trainer = FakeTrainer(tmp_path, writer=writer)
    drive([ConfusionMatrixCallback(**kwargs)], trainer, epochs=4, steps=2,
          val=lambda e: _metrics("val", e), test=lambda e: _metrics("test", e))
    return trainer


def test_pngs_at_filtered_validation_epochs_and_test_with_the_right_size(tmp_path):
    import matplotlib.image

    trainer = _run(tmp_path, RecordingWriter(), every_n_epochs=2, **SMALL)
    folder = tmp_path / "confusion_matrix"
    assert sorted(p.name for p in folder.iterdir()) == ["test_epoch_0004.png", "val_epoch_0002.png",
                                                       "val_epoch_0004.png"]
    images = trainer.writer.of("images")
    assert [(step, list(values)) for step, values in images] == [
        (3, ["val/confusion_matrix"]), (7, ["val/confusion_matrix"]), (7, ["test/confusion_matrix"])]  # the last step's index
    for path, (_, values) in zip(["val_epoch_0002.png", "val_epoch_0004.png", "test_epoch_0004.png"], images,
                                 strict=True):
        assert (folder / path).read_bytes()[:8] == PNG
        pixels = matplotlib.image.imread(folder / path)
        assert pixels.shape == (40, 60, 4)  # height = 2 in * 20 dpi, width = 3 in * 20 dpi
        sent = values[next(iter(values))]
        assert sent.shape == (40, 60, 3) and sent.dtype == np.uint8
        assert np.array_equal(np.round(pixels[..., :3] * 255).astype(np.uint8), sent)  # the same picture
    # epoch 2 predicts one 1 as 2, epoch 4 as 1: different pictures
    assert not np.array_equal(images[0][1]["val/confusion_matrix"], images[1][1]["val/confusion_matrix"])


def test_default_size_is_800_by_800(tmp_path):
    import matplotlib.image

    callback = ConfusionMatrixCallback()
    callback.bind(FakeTrainer(tmp_path))
    callback.on_test_epoch_end(_metrics("test", 1), 0)
    assert matplotlib.image.imread(tmp_path / "confusion_matrix" / "test_epoch_0000.png").shape == (800, 800, 4)


def test_the_image_is_read_back_from_tensorboard(tmp_path):
    writer = gyre.TensorBoardWriter(str(tmp_path / "tb"))
    _run(tmp_path, writer, **SMALL)
    writer.close()
    values = tensorboard_values(str(tmp_path / "tb"))
    assert sorted(values) == ["test/confusion_matrix", "val/confusion_matrix"]
    assert [step for step, _ in values["val/confusion_matrix"]] == [1, 3, 5, 7]  # beside each validation's scalars
    (step, value), = values["test/confusion_matrix"]
    assert step == 7 and (value.image.height, value.image.width) == (40, 60)
    assert value.image.encoded_image_string[:8] == PNG


def test_a_writer_without_images_gets_nothing_and_files_are_still_written(tmp_path):
    _run(tmp_path, gyre.MultiWriter([]), every_n_epochs=4, **SMALL)
    assert sorted(p.name for p in (tmp_path / "confusion_matrix").iterdir()) == ["test_epoch_0004.png",
                                                                               "val_epoch_0004.png"]


def test_several_matrices_are_each_drawn(tmp_path):
    callback = ConfusionMatrixCallback(normalize=False, **SMALL)
    trainer = FakeTrainer(tmp_path)
    callback.bind(trainer)
    m = confusion_matrix(jnp.array([0, 1]), jnp.array([0, 0]), 2)
    callback.on_validation_epoch_end({"val/conf_matrix": m, "val/top_conf_matrix": m}, 7)
    assert sorted(p.name for p in (tmp_path / "confusion_matrix").iterdir()) == [
        "val_conf_matrix_epoch_0007.png", "val_top_conf_matrix_epoch_0007.png"]
    (_, images), = trainer.writer.of("images")
    assert sorted(images) == ["val/conf_matrix", "val/top_conf_matrix"]


def test_normalize_divides_rows_and_keeps_empty_rows_zero():
    m = np.array([[2.0, 2.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 3.0]])
    assert _normalize(m).tolist() == [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [0.25, 0.0, 0.75]]


def test_cell_formats():
    assert (_cell(3.0, "d"), _cell(0.256, ".2f"), _cell(0.5, ".1%")) == ("3", "0.26", "50.0%")
    assert (ConfusionMatrixCallback().format, ConfusionMatrixCallback(normalize=False).format) == (".2f", "d")
    assert ConfusionMatrixCallback(format=".3f").format == ".3f"


def test_no_conf_matrix_names_the_keys(tmp_path):
    callback = ConfusionMatrixCallback()
    callback.bind(FakeTrainer(tmp_path))
    with pytest.raises(KeyError, match=r"(?s)no confusion matrix in the test metrics of epoch 3.*\['test/acc', "
                                       r"'test/loss'\].*confusion_matrix"):
        callback.on_test_epoch_end({"test/loss": 1.0, "test/acc": 0.5}, 3)


def test_a_matrix_that_is_not_square(tmp_path):
    callback = ConfusionMatrixCallback()
    callback.bind(FakeTrainer(tmp_path))
    with pytest.raises(ValueError, match=r"(?s)'val/conf_matrix' is not a square matrix.*\(2, 3\)"):
        callback.on_validation_epoch_end({"val/conf_matrix": jnp.zeros((2, 3))}, 1)


def test_unknown_colormap_suggests_one(tmp_path):
    callback = ConfusionMatrixCallback(cmap="Blus", **SMALL)
    callback.bind(FakeTrainer(tmp_path))
    with pytest.raises(ValueError, match=r"unknown colormap 'Blus'. Did you mean 'Blues'"):
        callback.on_test_epoch_end(_metrics("test", 1), 1)


def test_missing_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    callback = ConfusionMatrixCallback()
    callback.bind(FakeTrainer(tmp_path))
    with pytest.raises(ImportError, match=r"gyre\[plot\]"):
        callback.on_test_epoch_end(_metrics("test", 1), 1)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"normalize": "yes"}, "bad normalize"), ({"cmap": ""}, "bad cmap"), ({"cmap": 3}, "bad cmap"),
    ({"figsize": (8,)}, "bad figsize"), ({"figsize": (0, 8)}, "bad figsize"), ({"figsize": "8x8"}, "bad figsize"),
    ({"dpi": 0}, "bad dpi"), ({"dpi": 72.5}, "bad dpi"), ({"format": "q!"}, "bad format"),
    ({"every_n_epochs": 0}, "every_n_epochs"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ConfusionMatrixCallback(**kwargs)
