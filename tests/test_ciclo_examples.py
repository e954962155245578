"""ciclo's eight examples, ported with only the import and the data loading changed
(``examples/ciclo/``), run in this process, each in a temporary working folder (they write
``runs/ciclo/...`` under the folder they run from).

Each test checks what the example produced: the history's entries and a loss that went down,
the checkpoints where the example asks for them, the plot file. ``GYRE_EXAMPLE_STEPS`` (the
examples' length knob) keeps the long one short; the others run ciclo's own 100 steps.
"""

import os
import runpy
from pathlib import Path

import numpy as np
import pytest

import gyre

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "ciclo"


@pytest.fixture
def run_example(tmp_path, monkeypatch):
    """Runs an example as a script in tmp_path; returns its globals."""

    def run(name, steps=None):
        monkeypatch.chdir(tmp_path)
        if steps is None:
            monkeypatch.delenv("GYRE_EXAMPLE_STEPS", raising=False)
        else:
            monkeypatch.setenv("GYRE_EXAMPLE_STEPS", str(steps))
        return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")

    return run


def _runs(tmp_path, name):
    return tmp_path / "runs" / "ciclo" / name


def _saved_steps(folder):
    (run,) = [p for p in folder.iterdir() if p.is_dir()]  # the <unix time> folder of this run
    return sorted(int(p.name) for p in run.iterdir() if p.name.isdigit())


def _is_png(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _went_down(values, window=10):
    values = np.asarray(values, np.float64)
    return values[-window:].mean() < 0.8 * values[:window].mean()


def test_examples_are_the_eight_ports_and_say_where_they_come_from():
    names = sorted(p.stem for p in EXAMPLES.glob("[0-9]*.py"))
    assert names == [
        "00_linear_regression_pure_jax", "01_mnist_equinox", "01_mnist_haiku", "01_mnist_simple",
        "02_mnist_train_loop", "03_mnist_manual_iteration", "04_mnist_managed_api",
        "05_mnist_flax_state",
    ]
    for name in names:
        doc = (EXAMPLES / f"{name}.py").read_text().split('"""')[1]
        assert "Adapted from ciclo's examples/" in doc and "MIT License" in doc, name
        assert "only the import" in doc and "runs/ciclo/" in doc and "GYRE_EXAMPLE_STEPS" in doc, name


def test_00_linear_regression_pure_jax(run_example, tmp_path):
    np.random.seed(0)  # the example draws its data with numpy's global generator
    with pytest.warns(gyre.LoopWarning, match="the data ended after 300 steps"):
        g = run_example("00_linear_regression_pure_jax", steps=300)
    steps, loss = g["history"].collect("steps", "loss")
    assert steps == list(range(300)) and _went_down(loss)
    mse_steps, mse = g["history"].collect("steps", "mse")
    assert mse_steps == [0, 100, 200] and mse[-1] < mse[0] / 4  # the test step every 100 steps
    assert g["elapsed"].steps == 300
    assert abs(float(g["state"]["w"]) - 0.8) < 0.3 and abs(float(g["state"]["b"]) - 0.1) < 0.15
    assert _is_png(_runs(tmp_path, "00_linear_regression_pure_jax") / "fit.png")


def test_01_mnist_simple(run_example, tmp_path):
    g = run_example("01_mnist_simple")
    steps, loss, accuracy = g["history"].collect("steps", "loss", "accuracy")
    assert steps == list(range(100)) and _went_down(loss)
    assert np.mean(accuracy[-10:]) > 0.5  # chance is 0.1
    # every(10) saves after steps 0, 10, ..., 90 (the completed clock) and the loop's end
    # saves step 100: the latest 3 are kept
    assert _saved_steps(_runs(tmp_path, "01_mnist_simple")) == [81, 91, 100]
    assert _is_png(_runs(tmp_path, "01_mnist_simple") / "history.png")


def test_02_mnist_train_loop(run_example, tmp_path):
    pytest.importorskip("clu")
    g = run_example("02_mnist_train_loop")
    history = g["history"]
    steps_test, loss_test, accuracy_test = history.collect("steps", "loss_test", "accuracy_test")
    assert steps_test == list(range(9, 100, 10))  # an evaluation at the end of every epoch of 10
    assert loss_test[-1] < loss_test[0] and accuracy_test[-1] > 0.5
    assert len(history.collect("loss")) == 100
    # keep=1, keep_best=1: the best evaluation by accuracy_test and the end of training (100)
    best = steps_test[int(np.argmax(accuracy_test))] + 1
    assert _saved_steps(_runs(tmp_path, "02_mnist_train_loop")) == sorted({best, 100})
    assert _is_png(_runs(tmp_path, "02_mnist_train_loop") / "history.png")


def test_03_mnist_manual_iteration(run_example, tmp_path, capsys):
    g = run_example("03_mnist_manual_iteration")
    steps, loss = g["history"].collect("steps", "loss")
    # ciclo's loop breaks once elapsed >= at(100): the step with 100 steps done before it runs
    assert steps == list(range(101)) and _went_down(loss)
    assert _saved_steps(_runs(tmp_path, "03_mnist_manual_iteration")) == [1]  # every(steps=1000)
    assert "100/100 [" in capsys.readouterr().out
    assert _is_png(_runs(tmp_path, "03_mnist_manual_iteration") / "history.png")


def test_04_mnist_managed_api(run_example, tmp_path):
    pytest.importorskip("clu")
    g = run_example("04_mnist_managed_api")
    history = g["history"]
    steps, losses = history.collect("steps", "losses.loss")
    assert steps == list(range(100)) and _went_down(losses)
    valid_steps, accuracy_valid = history.collect("steps", "accuracy_valid")
    assert valid_steps == list(range(1, 100, 10))  # after(1).every(10)
    assert accuracy_valid[-1] > 0.5
    # keep_best=3 by accuracy_valid, each saved with the completed clock (step + 1), and the
    # latest (keep=1): the end of training, saved when the loop stops at step 100
    best = np.asarray(valid_steps)[np.argsort(accuracy_valid, kind="stable")[-3:]] + 1
    assert _saved_steps(_runs(tmp_path, "04_mnist_managed_api")) == sorted({*map(int, best), 100})
    # the metrics in the state were reset after the evaluation at step 91: they hold the
    # training batches of steps 92..99 (the train step logs them as stateful metrics)
    assert int(g["state"].accuracy.count) == 8 * 32


def test_05_mnist_flax_state(run_example, tmp_path):
    g = run_example("05_mnist_flax_state")
    steps, avg_loss, avg_loss_test, accuracy_test = g["history"].collect(
        "steps", "avg_loss", "avg_loss_test", "accuracy_test"
    )
    assert steps == list(range(9, 100, 10)) and avg_loss[-1] < avg_loss[0]
    assert avg_loss_test[-1] < avg_loss_test[0] and accuracy_test[-1] > 0.5
    best = steps[int(np.argmax(accuracy_test))] + 1  # keep_best=1, and the latest: the end
    assert _saved_steps(_runs(tmp_path, "05_mnist_flax_state")) == sorted({best, 100})
    assert _is_png(_runs(tmp_path, "05_mnist_flax_state") / "history.png")


@pytest.mark.filterwarnings("ignore:`equinox.static_field` is deprecated")  # ciclo's code
def test_01_mnist_equinox(run_example, tmp_path):
    pytest.importorskip("equinox")
    g = run_example("01_mnist_equinox")
    steps, loss, accuracy = g["history"].collect("steps", "loss", "accuracy")
    assert steps == list(range(100)) and _went_down(loss) and np.mean(accuracy[-10:]) > 0.5
    assert _is_png(_runs(tmp_path, "01_mnist_equinox") / "history.png")


def test_01_mnist_haiku(run_example, tmp_path):
    pytest.importorskip("haiku")
    pytest.importorskip("simple_pytree")
    g = run_example("01_mnist_haiku")
    steps, loss, accuracy = g["history"].collect("steps", "loss", "accuracy")
    assert steps == list(range(100)) and _went_down(loss) and np.mean(accuracy[-10:]) > 0.5
    assert _saved_steps(_runs(tmp_path, "haiku_mnist_simple")) == [81, 91, 100]
    assert _is_png(_runs(tmp_path, "haiku_mnist_simple") / "history.png")


def test_the_length_knob_ends_the_data(run_example, tmp_path):
    with pytest.warns(gyre.LoopWarning, match="the data ended after 12 steps, before stop=Period"):
        g = run_example("01_mnist_simple", steps=12)
    assert g["history"].collect("steps", "loss")[0] == list(range(12))
    assert _saved_steps(_runs(tmp_path, "01_mnist_simple")) == [1, 11, 12]  # and the end
    assert os.environ["GYRE_EXAMPLE_STEPS"] == "12"
