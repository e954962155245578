"""Every example runs end to end with a few steps and learns something."""

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import gyre

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STEPS = 30


@pytest.fixture
def load(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the examples import _digits_common

    def load(name):
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def _saved_steps(directory):
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def test_00_linear_regression(load, tmp_path):
    example = load("00_linear_regression")
    x, y = example.make_data()
    initial = float(np.mean(y**2))  # the error of the zero initial parameters
    final = example.main(steps=STEPS, workdir=str(tmp_path))
    assert final < initial / 4
    header = (tmp_path / "history.csv").read_text().splitlines()[0].split(",")
    assert "mse" in header and "mse_all" in header


def test_01_loop(load, tmp_path):
    accuracy = load("01_loop").main(steps=STEPS, workdir=str(tmp_path))
    assert accuracy > 0.5  # chance is 0.1
    # every(3) fires at steps 0, 3, ..., 27; each saves the clock once its step completes, and
    # the loop's end saves step 30: the latest 3 are kept.
    assert _saved_steps(tmp_path / "checkpoints") == [25, 28, 30]


def test_02_train_loop(load, tmp_path, capsys):
    accuracy = load("02_train_loop").main(steps=STEPS, workdir=str(tmp_path))
    assert accuracy > 0.5
    assert "1 epochs" in capsys.readouterr().out  # one evaluation, after 22 steps
    assert _saved_steps(tmp_path / "checkpoints") == [22, 30]  # the epoch's end, the loop's end


def test_03_manual_iteration(load, tmp_path, capsys):
    accuracy = load("03_manual_iteration").main(steps=STEPS, workdir=str(tmp_path))
    assert accuracy > 0.5
    out = capsys.readouterr().out
    assert f"{STEPS}/{STEPS} [" in out  # the bar reached its end
    first, last = (float(v) for v in out.split("loss: ")[-1].split(";")[0].split(" -> "))
    assert last < first
    # by hand too: the completed steps, as gyre.loop (the latest 3; no end-of-loop save by hand)
    assert _saved_steps(tmp_path / "checkpoints") == [22, 25, 28]


def test_examples_default_to_a_new_run_folder_under_runs(load, tmp_path, monkeypatch):
    common = load("_digits_common")
    assert common.RUNS == EXAMPLES.parent / "runs"  # the repository's runs/, gitignored
    assert "runs/" in (EXAMPLES.parent / ".gitignore").read_text().splitlines()
    monkeypatch.setattr(common, "RUNS", tmp_path / "runs")
    first, second = common.make_workdir(None, "x"), common.make_workdir(None, "x")
    assert first != second and os.path.isdir(first) and os.path.isdir(second)
    assert Path(first).parent == tmp_path / "runs" / "x"
    assert common.make_workdir("given", "x") == "given"


def test_an_example_writes_only_under_runs(load, tmp_path, monkeypatch):
    temporary = tmp_path / "system-tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # what tempfile.* would use
    example = load("01_loop")
    monkeypatch.setattr(sys.modules["_digits_common"], "RUNS", tmp_path / "runs")
    example.main(steps=4)
    assert list(temporary.iterdir()) == []
    (run,) = (tmp_path / "runs" / "01_loop").iterdir()
    assert _saved_steps(run / "checkpoints") == [2, 3, 4]


def test_examples_document_where_they_write():
    for path in sorted(EXAMPLES.glob("[0-9]*.py")):
        doc = path.read_text().split('"""')[1]
        assert "Writes no files" in doc or f"runs/{path.stem}/<timestamp>/" in doc, path.name


def test_04_managed_api(load, tmp_path, capsys):
    example = load("04_managed_api")
    accuracy = example.main(steps=STEPS, workdir=str(tmp_path))
    assert accuracy > 0.5
    assert "accuracy_valid" in capsys.readouterr().out
    # keep=1, keep_best=1: the best evaluation (saved after steps 10, 20, 30) and the latest
    ckpt = gyre.checkpoint(tmp_path / "checkpoints", keep=1, keep_best=1, monitor="accuracy_valid", mode="max")
    best = ckpt.best_step()
    assert best in (10, 20, 30) and _saved_steps(tmp_path / "checkpoints") == sorted({best, 30})


def test_05_flax_state(load, tmp_path, capsys):
    accuracy = load("05_flax_state").main(steps=STEPS, workdir=str(tmp_path))
    assert accuracy > 0.5
    assert "1 epochs" in capsys.readouterr().out
    assert _saved_steps(tmp_path / "checkpoints") == [22, 30]  # the epoch's end, the loop's end


def test_06_nnx(load, tmp_path):
    assert load("06_nnx").main(steps=STEPS, workdir=str(tmp_path)) > 0.5


def test_07_equinox(load, tmp_path):
    pytest.importorskip("equinox")
    assert load("07_equinox").main(steps=STEPS, workdir=str(tmp_path)) > 0.5


def test_08_jaxloop_step(load, tmp_path, capsys):
    accuracy = load("08_jaxloop_step").main(steps=STEPS, workdir=str(tmp_path))
    assert accuracy > 0.5
    assert f"{STEPS} steps on 8 device(s)" in capsys.readouterr().out  # data parallel


def test_09_jaxloop_outer_loop(tmp_path, monkeypatch, capsys):
    """Seed 002's experiment, run as a script: 300 steps in 30 train loops of 10, an evaluation
    after each, the summaries of the train and eval loops every 100th loop (never, in 30 loops,
    as in the seed), and a test accuracy of at least 0.95."""
    import runpy

    monkeypatch.setenv("GYRE_EXAMPLE_WORKDIR", str(tmp_path))
    monkeypatch.setenv("GYRE_EXAMPLE_STEPS", "300")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = runpy.run_path(str(EXAMPLES / "09_jaxloop_outer_loop.py"), run_name="__main__")
    assert int(example["state"].step) == 300 and example["train_loop"].loop_count == 30
    assert example["test_accuracy"] >= 0.95
    assert len(example["outputs"]["eval"]["accuracy"]) == 11  # 352 of the 360 test images
    # the writer's event file, holding no summary: the actions fire every 100th loop, as in the seed
    (events,) = tmp_path.glob("events.out.tfevents.*")
    assert events.stat().st_size > 0
    assert "300 steps, test accuracy" in capsys.readouterr().out


def test_11_cifar10_on_synthetic_data(load, tmp_path, capsys):
    """The CIFAR-10-shaped example on synthetic data (no --data): augmented batches, an
    lr_schedule, a validation split; above chance (0.1) by far, its files written."""
    example = load("11_cifar10")
    (x, y), (x_test, _) = example.synthetic_cifar(n_train=20, n_test=10)
    assert x.shape == (20, 32, 32, 3) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert y.dtype == np.int32 and x_test.shape == (10, 32, 32, 3)
    accuracy = example.main(epochs=2, n_train=1280, batch_size=64, workdir=str(tmp_path))
    assert accuracy > 0.6
    run = tmp_path / "cifar10"
    header = (run / "history.csv").read_text().splitlines()[0].split(",")
    assert {"loss", "learning_rate", "accuracy_val", "accuracy_test"} <= set(header)
    assert any(p.name.startswith("events.out.tfevents") and p.stat().st_size > 0 for p in run.iterdir())
    assert "36/36 [" in capsys.readouterr().out  # 2 epochs of 18 batches (1,152 training images)
