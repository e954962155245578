"""Writer: the contract every writer shares. Values are checked on the caller's thread by
shape only, moved to the host on the writer's thread, errors come back at the next call
naming the writer, unsupported kinds name the writers that write them, close is idempotent,
and only process 0 writes."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.loggers import _writer


class Recorder(gyre.Writer):
    kinds = frozenset({"scalars", "histograms", "images", "texts", "hparams"})

    def __init__(self):
        self.calls = []
        self.threads = set()
        self.opened = False
        super().__init__()

    def _open(self):
        self.opened = True

    def _record(self, *call):
        self.threads.add(threading.current_thread().name)
        self.calls.append(call)

    def _scalars(self, step, values):
        self._record("scalars", step, values)

    def _histograms(self, step, arrays, num_buckets):
        self._record("histograms", step, arrays, num_buckets)

    def _images(self, step, images):
        self._record("images", step, images)

    def _texts(self, step, texts):
        self._record("texts", step, texts)

    def _hparams(self, params, metrics):
        self._record("hparams", params, metrics)


def test_device_values_are_read_on_the_writer_thread(sync_detector):
    writer = Recorder()
    value = jnp.float32(0.5) * 2
    step = jnp.int32(4)
    with jax.transfer_guard_device_to_host("disallow"):
        writer.write_scalars(step, {"b": value, "a": np.float32(0.25)})
        writer.write_histograms(1, {"w": jnp.arange(4.0)})
        sync_detector.end()
        writer.close()
    assert writer.calls[0] == ("scalars", 4, {"b": 1.0, "a": 0.25})  # order kept
    assert isinstance(writer.calls[1][2]["w"], np.ndarray)
    assert writer.threads == {"gyre-Recorder"}


def test_images_become_uint8_nhwc_and_hparams_stringify_other_values():
    with Recorder() as writer:
        writer.write_images(0, {"float": np.ones((2, 2, 3), np.float32), "batch": np.zeros((5, 2, 2, 1), np.uint8)})
        writer.write_hparams({"lr": 0.1, "sizes": (2, 3), "flag": True}, {"acc": jnp.float32(0.5)})
    (_, _, images), (_, params, metrics) = writer.calls
    assert images["float"].dtype == np.uint8 and images["float"].shape == (1, 2, 2, 3) and images["float"].max() == 255
    assert images["batch"].shape == (5, 2, 2, 1)
    assert params == {"lr": 0.1, "sizes": "(2, 3)", "flag": True} and metrics == {"acc": 0.5}


def test_an_error_on_the_thread_comes_back_at_the_next_call_naming_the_writer():
    writer = Recorder()
    writer.write_images(0, {"bright": np.full((2, 2, 3), 7.0, np.float32)})  # floats outside [0, 1]
    with pytest.raises(gyre.WriterError, match=r"Recorder\(\) failed to write images") as info:
        writer.flush()
    assert "neither uint8 nor floats in [0, 1]" in str(info.value.__cause__)
    writer.write_scalars(1, {"x": 1.0})  # the writer goes on
    writer.close()
    assert writer.calls == [("scalars", 1, {"x": 1.0})]


def test_close_twice_is_fine_and_writing_after_close_is_an_error():
    writer = Recorder()
    writer.write_scalars(0, {"x": 1.0})
    writer.close()
    writer.close()
    with pytest.raises(RuntimeError, match=r"is closed(.|\n)*fix: make a new writer"):
        writer.write_scalars(1, {"x": 2.0})
    writer.flush()  # nothing to do
    assert writer.calls == [("scalars", 0, {"x": 1.0})]


def test_an_unsupported_kind_names_the_writer_and_those_that_write_it(tmp_path):
    with gyre.CSVWriter(tmp_path / "m.csv") as writer, pytest.raises(TypeError) as info:
        writer.write_histograms(0, {"w": np.ones(3)})
    message = str(info.value)
    assert "CSVWriter" in message and "does not write histograms" in message
    assert "TensorBoardWriter, WandbWriter" in message and "what CSVWriter writes: scalars" in message


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda w: w.write_scalars(-1, {"x": 1.0}), ValueError, "step must be a whole number"),
        (lambda w: w.write_scalars(1.5, {"x": 1.0}), ValueError, "step must be a whole number"),
        (lambda w: w.write_scalars(0, [1.0]), TypeError, r"fix: pass a dict, e\.g\. writer\.write_scalars\(step, \{"),
        (lambda w: w.write_scalars(0, {"x": np.ones(3)}), ValueError, "reduce arrays to one number"),
        (lambda w: w.write_scalars(0, {"x": "high"}), ValueError, "value of 'x' cannot be written"),
        (lambda w: w.write_histograms(0, {"w": np.ones(3)}, num_buckets=0), ValueError, "num_buckets"),
        (lambda w: w.write_histograms(0, {"w": np.ones(0)}), ValueError, "non-empty numeric array"),
        (lambda w: w.write_images(0, {"i": np.ones((4, 4))}), ValueError, r"image\[\.\.\., None\]"),
        (lambda w: w.write_texts(0, {"t": 3}), ValueError, "expected: a str"),
        (lambda w: w.write_hparams([("lr", 0.1)]), TypeError, r"writer\.write_hparams\(\{'learning_rate'"),
        (lambda w: w.write_hparams({"lr": 0.1}, 0.9), TypeError, r"writer\.write_hparams\(params, \{'loss'"),
    ],
)
def test_bad_values_are_refused_on_the_callers_thread(call, error, words):
    with Recorder() as writer:
        with pytest.raises(error, match=words):
            call(writer)
    assert writer.calls == []


def test_only_process_zero_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(_writer, "is_main_process", lambda: False)
    writer = Recorder()
    writer.write_scalars(0, {"x": 1.0})
    writer.close()
    assert not writer.active and not writer.opened and writer.calls == []
    with gyre.TensorBoardWriter(tmp_path / "tb") as tb:
        tb.write_scalars(0, {"x": 1.0})
    assert not (tmp_path / "tb").exists()
    with pytest.raises(TypeError, match="does not write images"):  # still checked
        gyre.CSVWriter(tmp_path / "m.csv").write_images(0, {"i": np.ones((2, 2, 3))})


def test_a_writer_left_open_is_closed_at_exit(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "m.csv"
    code = f"import gyre; w = gyre.CSVWriter({str(path)!r}); w.write_scalars(0, {{'loss': 1.0}})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert path.read_text().splitlines() == ["step,loss", "0,1.0"]


def test_a_writer_slower_than_the_loop_makes_it_wait_instead_of_queueing_without_limit():
    import time

    class Slow(gyre.Writer):
        kinds = frozenset({"scalars"})
        max_queued = 2

        def __init__(self):
            self.written = []
            super().__init__()

        def _scalars(self, step, values):
            time.sleep(0.01)
            self.written.append(step)

    writer = Slow()
    longest = 0
    for step in range(20):
        writer.write_scalars(step, {"loss": 1.0})
        longest = max(longest, writer._queue.qsize())
    assert longest <= 2  # each write waited for room
    writer.close()
    assert writer.written == list(range(20))  # nothing dropped, in order


def test_the_writers_that_support_a_kind_integer_dtypes_and_images_made_uint8():
    assert _writer.supporters("histograms") == ["TensorBoardWriter", "WandbWriter"]
    assert _writer.as_uint8_images("x", np.ones((2, 2, 1), np.float32)).shape == (1, 2, 2, 1)


@pytest.mark.parametrize(("make", "given", "meant"), [
    (lambda tmp: gyre.TensorBoardWriter(log_dir=str(tmp)), "log_dir", "logdir"),  # torch's SummaryWriter
    (lambda tmp: gyre.MLflowWriter(str(tmp / "ml"), experiment="e"), "experiment", "experiment_name"),
    (lambda tmp: gyre.CSVWriter(pth=str(tmp / "m.csv")), "pth", "path"),
    (lambda tmp: gyre.write_to(gyre.ConsoleWriter(), evry=10), "evry", "every"),
    (lambda tmp: gyre.keras_bar(totl=10), "totl", "total"),
])
def test_a_misspelt_keyword_names_the_closest_one(tmp_path, make, given, meant):
    # was: Python's bare "unexpected keyword argument", naming no keyword the writer takes
    with pytest.raises(TypeError, match=rf"(?s)unexpected keyword argument '{given}'.*did you mean {meant}="):
        make(tmp_path)
