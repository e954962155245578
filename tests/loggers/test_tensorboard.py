"""TensorBoardWriter: the event file holds every value at its step (read back without
TensorFlow), and a missing tensorboardX names the extra."""

import itertools
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import gyre

from .readers import tensorboard_events, tensorboard_values


def test_scalars_histograms_images_texts_and_hparams_are_read_back(tmp_path):
    with gyre.TensorBoardWriter(tmp_path) as writer:
        for step in range(3):
            writer.write_scalars(step, {"loss": jnp.float32(1.0 / (step + 1)), "lr": 0.1})
        writer.write_histograms(2, {"weights": jnp.arange(100.0)}, num_buckets=5)
        writer.write_images(1, {"digit": np.full((4, 5, 1), 0.5, np.float32), "pair": np.zeros((2, 3, 3, 3), np.uint8)})
        writer.write_texts(2, {"note": "hello"})
        writer.write_hparams({"learning_rate": 0.1, "model": "mlp"}, {"final_accuracy": 0.9})
    assert tensorboard_events(str(tmp_path))[0].file_version == "brain.Event:2"
    values = tensorboard_values(str(tmp_path))
    assert [(s, v.simple_value) for s, v in values["loss"]] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    assert [s for s, _ in values["lr"]] == [0, 1, 2]
    (step, histogram), = values["weights"]
    assert step == 2 and histogram.histo.num == 100 and histogram.histo.max == 99.0
    (step, image), = values["digit"]
    assert step == 1 and (image.image.height, image.image.width) == (4, 5)
    assert [s for s, _ in values["pair"]] == [1]  # two images, one grid
    (step, text), = values["note/text_summary"]
    assert step == 2 and text.tensor.string_val == [b"hello"]
    assert "_hparams_/experiment" in values and values["final_accuracy"][0][1].simple_value == pytest.approx(0.9)


@pytest.mark.parametrize("by_block", [False, True])
def test_an_hparams_metric_that_has_a_curve_adds_no_point_at_step_0(tmp_path, by_block):
    # was: write_hparams wrote each metric at step 0, so gyre.fit(hparams=...) put the final
    # accuracy_test at the start of the accuracy_test curve (steps [19, 39, 0])
    writer = gyre.TensorBoardWriter(tmp_path)
    if by_block:
        gyre.loop(None, range(3), {gyre.every(1): lambda elapsed: gyre.logs().add_metric("acc", 0.5 + elapsed.steps),
                                   **gyre.write_to(writer)})
    else:
        for step in range(3):
            writer.write_scalars(step, {"acc": 0.5 + step})
    writer.write_hparams({"lr": 0.1}, {"acc": 2.5, "final_loss": 0.25})
    writer.close()
    values = tensorboard_values(str(tmp_path))
    assert [(s, v.simple_value) for s, v in values["acc"]] == [(0, 0.5), (1, 1.5), (2, 2.5)]
    assert [(s, v.simple_value) for s, v in values["final_loss"]] == [(0, 0.25)]  # a metric of its own: written
    assert "_hparams_/experiment" in values


def test_a_missing_tensorboardx_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ImportError, match=r"pip install 'gyre\[tensorboard\]'"):
        gyre.TensorBoardWriter(tmp_path)


def test_a_bad_logdir_is_refused():
    with pytest.raises(TypeError, match="folder for its event files"):
        gyre.TensorBoardWriter(None)


def test_two_writers_on_one_folder_write_two_files(tmp_path):
    for step in (0, 1):
        with gyre.TensorBoardWriter(tmp_path) as writer:
            writer.write_scalars(step, {"loss": float(step)})
    assert len(list(tmp_path.iterdir())) == 2
    assert [s for s, _ in tensorboard_values(str(tmp_path))["loss"]] == [0, 1]


def test_a_resumed_writers_file_sorts_after_the_crashed_ones_within_one_second(tmp_path, monkeypatch):
    # TensorBoard reads a folder's event files in name order, and a resume's purge drops only the
    # points read before it. The 10th file of a process, made in the same second as the 9th, was
    # named '...<pid>.10', before '...<pid>.9': the crashed run's points at the resumed step and
    # later were read after the purge, and TensorBoard showed steps 6 and 7 twice
    monkeypatch.setattr("gyre.loggers._tensorboard._FILES", itertools.count(9))
    monkeypatch.setattr("gyre.loggers._tensorboard.time.time", lambda: 1_700_000_000.5)
    with gyre.TensorBoardWriter(tmp_path) as crashed:  # checkpointed at 6, crashed during 8
        for step in range(8):
            crashed.write_scalars(step, {"loss": float(step)})
    with gyre.TensorBoardWriter(tmp_path) as resumed:
        resumed._resumed(6)
        for step in range(6, 10):
            resumed.write_scalars(step, {"loss": float(step)})
    assert [s for s, _ in tensorboard_values(str(tmp_path))["loss"]] == list(range(10))


def test_steps_with_changing_scalar_names_keep_each_value_at_its_step(tmp_path, monkeypatch):
    # the writer refills one event per set of names; sets that come and go, in another order,
    # and more sets than it keeps ready, must each still write their own numbers
    monkeypatch.setattr("gyre.loggers._tensorboard._TEMPLATES", 2)
    rows = [
        {"loss": 1.0, "accuracy": 0.5},
        {"loss": 2.0},
        {"accuracy": 0.25, "loss": 3.0},
        {"loss": 4.0, "accuracy": 0.75},
        {"loss_test": 5.0},
        {"loss": 6.0, "accuracy": np.float32(0.125)},
    ]
    with gyre.TensorBoardWriter(tmp_path) as writer:
        for step, values in enumerate(rows):
            writer.write_scalars(step, values)
    values = tensorboard_values(str(tmp_path))
    assert [(s, v.simple_value) for s, v in values["loss"]] == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0), (5, 6.0)]
    assert [(s, v.simple_value) for s, v in values["accuracy"]] == [(0, 0.5), (2, 0.25), (3, 0.75), (5, 0.125)]
    assert [(s, v.simple_value) for s, v in values["loss_test"]] == [(4, 5.0)]
    assert all(len(event.summary.value) == len(rows[event.step]) for event in tensorboard_events(str(tmp_path))[1:])


def test_bfloat16_scalars_and_histograms_are_written(tmp_path):
    def step(elapsed):
        return gyre.logs().add_loss("loss", jnp.bfloat16(1.0 / (elapsed.steps + 1)))

    with gyre.TensorBoardWriter(tmp_path) as writer:
        gyre.loop(None, range(2), {gyre.every(1): step, **gyre.write_to(writer)})
        writer.write_scalars(5, {"direct": jnp.bfloat16(0.25)})
        writer.write_histograms(5, {"w": jnp.arange(8, dtype=jnp.bfloat16)}, num_buckets=2)
    values = tensorboard_values(str(tmp_path))
    assert [(s, v.simple_value) for s, v in values["loss"]] == [(0, 1.0), (1, 0.5)]
    assert [(s, v.simple_value) for s, v in values["direct"]] == [(5, 0.25)]
    (step_, histogram), = values["w"]
    assert step_ == 5 and histogram.histo.num == 8 and histogram.histo.max == 7.0
