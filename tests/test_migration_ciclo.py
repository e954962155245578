"""The gyre versions of ciclo's README examples (``examples/from_ciclo/``, shown beside the
seed's code in ``docs/migration/ciclo.md``) run, learn, and write what they say they write.

Each example's ``main`` runs in this process with a short length and a temporary folder.
"""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import gyre

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "from_ciclo"
GUIDE = ROOT / "docs" / "migration" / "ciclo.md"
SHARED = ("_from_ciclo", "loop_language")  # modules the examples import from each other


@pytest.fixture
def load(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    loaded = []

    def load(name):
        import importlib

        for module in (*SHARED, name):  # another folder's module of the same name must not answer
            sys.modules.pop(module, None)
        loaded.append(name)
        return importlib.import_module(name)

    yield load
    for module in {*SHARED, *loaded}:
        sys.modules.pop(module, None)


def _saved_steps(folder):
    return sorted(int(p.name) for p in Path(folder).iterdir() if p.name.isdigit())


def _is_png(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _went_down(values, window=10):
    values = np.asarray(values, np.float64)
    return values[-window:].mean() < 0.8 * values[:window].mean()


def test_loop_language(load, tmp_path, capsys):
    state, history, elapsed = load("loop_language").main(workdir=str(tmp_path))
    steps, loss, accuracy = history.collect("steps", "loss", "accuracy")
    assert steps == list(range(100)) and _went_down(loss) and np.mean(accuracy[-10:]) > 0.5
    assert elapsed.steps == 100 and int(state.step) == 100
    # every(steps=10) fires after steps 0, 10, ..., 90 and saves the completed clock (1, 11,
    # ..., 91); the loop's end saves 100; the latest 3 are kept
    assert _saved_steps(tmp_path / "model") == [81, 91, 100]
    assert _is_png(tmp_path / "history.png")
    assert "100/100 [" in capsys.readouterr().out


def test_loop_language_when_the_data_ends_first(load, tmp_path):
    with pytest.warns(gyre.LoopWarning, match="the data ended after 12 steps"):
        _, history, elapsed = load("loop_language").main(workdir=str(tmp_path), batches=12)
    assert history.collect("steps") == list(range(12)) and elapsed.steps == 12
    assert _saved_steps(tmp_path / "model") == [1, 11, 12]  # and the end, where the data ended


def test_train_loop(load, tmp_path, capsys):
    _, history, elapsed = load("train_loop").main(total_steps=40, workdir=str(tmp_path))
    assert elapsed.steps == 40 and len(history.collect("loss")) == 40
    # an evaluation after the last step of every epoch of 10, averaged over the test set
    steps, loss_test, accuracy_test = history.collect("steps", "loss_test", "accuracy_test")
    assert steps == [9, 19, 29, 39] and loss_test[-1] < loss_test[0] and accuracy_test[-1] > 0.5
    assert history.collect("steps", "params_norm")[0] == [0, 20]  # every(20): some_callback
    assert _saved_steps(tmp_path / "model") == [20, 30, 40]  # on_epoch_end: the latest 3
    assert "40/40 [" in capsys.readouterr().out


def test_managed_api(load, tmp_path, capsys):
    state, history, elapsed = load("managed_api").main(manual_steps=5, total_steps=40, workdir=str(tmp_path))
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("loss: ")]
    assert len(printed) == 5  # the plain for loop over managed.train_step
    assert int(state.step) == 45 and elapsed.steps == 40  # the loop's clock starts at 0
    steps, loss = history.collect("steps", "loss")
    assert steps == list(range(40)) and loss[-1] < loss[0]
    steps_valid, loss_valid = history.collect("steps", "loss_valid")
    assert steps_valid == [0, 10, 20, 30] and loss_valid[-1] < loss_valid[0]
    # keep=1, keep_best=2 by loss_valid (each saved with the completed clock, step + 1) and the
    # latest: the end of training
    best = np.asarray(steps_valid)[np.argsort(loss_valid, kind="stable")[:2]] + 1
    assert _saved_steps(tmp_path / "model") == sorted({*map(int, best), 40})


@pytest.mark.parametrize("version", ["000", "001"])
def test_flax_state(load, version, capsys):
    state, history, elapsed = load("flax_state").main(version, total_steps=30, manual_steps=5)
    steps, accuracy_test, avg_loss_test = history.collect("steps", "accuracy_test", "avg_loss_test")
    assert steps == [9, 19, 29] and accuracy_test[-1] > 0.5 and avg_loss_test[-1] < avg_loss_test[0]
    assert len(history.collect("loss")) == 30 and elapsed.steps == 30
    assert int(state.step) == 35  # and 5 steps by hand, after the loop
    assert capsys.readouterr().out.count("\nloss: ") == 5


def test_manual_iteration(load, tmp_path, capsys):
    _, history = load("manual_iteration").main(workdir=str(tmp_path))
    steps, loss = history.collect("steps", "loss")
    assert steps == list(range(100)) and _went_down(loss)
    # every(steps=1000) fires at step 0 only, saved as the completed clock: 1
    assert _saved_steps(tmp_path / "model") == [1]
    assert "100/100 [" in capsys.readouterr().out
    assert _is_png(tmp_path / "history.png")


def test_the_guide_shows_every_example_file():
    guide = GUIDE.read_text()
    files = sorted(p.name for p in EXAMPLES.glob("[a-z]*.py"))
    assert files == ["flax_state.py", "loop_language.py", "managed_api.py", "manual_iteration.py", "train_loop.py"]
    named = set(re.findall(r"examples/from_ciclo/([a-z][a-z_]*\.py)", guide))
    assert named == set(files)
    assert "examples/ciclo/" not in guide


def _python_blocks(text):
    """``(label, code)`` for each python block; ``label`` is the text since the block before."""
    parts = re.split(r"^```(\w*)\n(.*?)^```\n", text, flags=re.S | re.M)
    # parts: text, lang, code, text, lang, code, ..., text
    blocks, label = [], ""
    for i in range(1, len(parts) - 1, 3):
        label = parts[i - 1] if parts[i - 1].strip() else label  # consecutive blocks share it
        if parts[i] == "python":
            blocks.append((label, parts[i + 1]))
    return blocks


def test_the_guides_gyre_code_is_the_example_files_code():
    """Every python block the guide labels as gyre's is made of lines of the file it names, so
    the guide shows what the suite runs."""
    sources = {p.name: {line.strip() for line in p.read_text().splitlines()} for p in EXAMPLES.glob("*.py")}
    checked = 0
    for label, code in _python_blocks(GUIDE.read_text()):
        if "ciclo's README" in label or "seed 001's version" in label:
            continue  # ciclo's own code, quoted
        names = re.findall(r"examples/from_ciclo/([a-z_]+\.py)", label)
        candidates = [sources[names[0]]] if names else list(sources.values())
        for line in filter(None, (line.strip() for line in code.splitlines())):
            assert any(line in lines for lines in candidates), (names, line)
        checked += 1
    assert checked >= 10
