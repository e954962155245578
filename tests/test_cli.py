"""The ``gyre`` command and the digits demo behind ``gyre fit``."""

import csv
import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gyre
from gyre import _demo as demo
from gyre import cli


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return out, demo.fit_digits(epochs=1, out=out, quiet=True)


def test_fit_digits_writes_a_run_folder(one_epoch):
    out, result = one_epoch
    assert result.run_dir.parent == out
    datetime.datetime.strptime(result.run_dir.name, "%Y%m%d-%H%M%S")
    with open(result.run_dir / "history.csv", newline="") as f:
        header = next(csv.reader(f))
    assert {"steps", "loss", "accuracy", "loss_test", "accuracy_test"} <= set(header)
    assert (result.run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any((result.run_dir / "checkpoints").iterdir())


def test_fit_digits_result(one_epoch):
    _, result = one_epoch
    assert result.elapsed.steps == 22 and result.elapsed.epochs == 1
    assert result.test_accuracy > 0.8
    assert result.test_accuracy == result.history.collect("accuracy_test")[-1]
    assert result.seconds > 0


def test_fit_digits_checkpoint_restores(one_epoch):
    _, result = one_epoch
    model, tx = demo.MLP(), demo.optax.adam(1e-3)
    target = demo.create_state(model, tx, features=64, seed=1)
    state, elapsed = gyre.checkpoint(result.run_dir / "checkpoints").restore(target)
    assert elapsed.steps == 22
    (_, _), (x_test, y_test) = gyre.data.digits()
    _, test_step = demo.make_steps(model, tx)
    accuracy = float(test_step(state, (x_test, y_test)).metrics.accuracy)
    assert accuracy == pytest.approx(result.test_accuracy, abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"epochs": 0}, "epochs"), ({"batch_size": 2.5}, "batch_size"), ({"learning_rate": -1.0}, "learning_rate")],
)
def test_fit_digits_bad_arguments(kwargs, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        demo.fit_digits(out=tmp_path, quiet=True, **kwargs)
    assert not any(tmp_path.iterdir())  # checked before a run folder is made


def test_make_run_dir_adds_a_suffix(tmp_path):
    when = datetime.datetime(2024, 1, 2, 3, 4, 5)
    names = [demo.make_run_dir(tmp_path / "runs", now=when).name for _ in range(3)]
    assert names == ["20240102-030405", "20240102-030405-1", "20240102-030405-2"]


def test_cli_fit_passes_options_and_prints_the_result(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake_fit(**kwargs):
        seen.update(kwargs)
        return demo.DemoResult(
            tmp_path / "run", 0.97361, gyre.history(), gyre.Elapsed(steps=44, epochs=2), 1.25
        )

    monkeypatch.setattr(demo, "fit_digits", fake_fit)
    code = cli.main(["fit", "--epochs", "2", "--batch-size", "32", "--learning-rate", "0.01",
                     "--seed", "3", "--out", str(tmp_path), "--quiet"])
    assert code == 0
    assert seen == {"epochs": 2, "batch_size": 32, "learning_rate": 0.01, "seed": 3,
                    "out": str(tmp_path), "quiet": True}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"run folder: {tmp_path / 'run'}"
    assert lines[-1] == "final test accuracy: 0.9736"


def test_cli_defaults():
    args = cli.build_parser().parse_args(["fit"])
    assert (args.epochs, args.batch_size, args.learning_rate, args.seed, args.out, args.quiet) == (
        15, 64, 1e-3, 0, "runs", False)


@pytest.mark.parametrize("argv", [["fit", "--epochs", "0"], ["fit", "--learning-rate", "x"], ["nope"]])
def test_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: gyre" in capsys.readouterr().err


def test_plain_gyre_prints_help(capsys):
    assert cli.main([]) == 0
    assert "fit" in capsys.readouterr().out


def test_python_m_gyre_help():
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "gyre", "--help"], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage: gyre" in done.stdout and "fit" in done.stdout


# -- usage errors: never a traceback ------------------------------------------------------


def _usage_error(argv, capsys):
    """Runs the command, expects argparse's usage error; returns its message line."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gyre fit") and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gyre fit: error: argument ")
    return last


def test_cli_out_naming_a_file(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("keep me")
    message = _usage_error(["fit", "--quiet", "--out", str(tmp_path / "notes.txt")], capsys)
    assert message.endswith(f"argument --out: {str(tmp_path / 'notes.txt')!r} is a file, not a "
                            "folder to hold the run folders")
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_cli_out_under_a_file(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("")
    out = tmp_path / "notes.txt" / "runs"
    message = _usage_error(["fit", "--quiet", "--out", str(out)], capsys)
    assert f"argument --out: {str(out)!r} cannot be created: " in message
    assert message.endswith("is a file")


def test_cli_out_that_cannot_be_written(tmp_path, capsys, monkeypatch):
    # Root writes anywhere a mode allows, so the refusal of the file system is simulated.
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(demo.Path, "mkdir", refuse)
    message = _usage_error(["fit", "--quiet", "--out", str(tmp_path / "runs")], capsys)
    assert message.endswith(f"cannot create a run folder in {str(tmp_path / 'runs')!r}: Permission denied")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write anywhere")
def test_cli_out_in_a_read_only_folder(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    message = _usage_error(["fit", "--quiet", "--out", str(locked / "runs")], capsys)
    assert "is not writable" in message


@pytest.mark.parametrize("seed", ["-1", "x", str(2**63)])
def test_cli_bad_seed(seed, capsys, tmp_path):
    message = _usage_error(["fit", "--seed", seed, "--out", str(tmp_path)], capsys)
    assert message.endswith(f"argument --seed: expected a whole number from 0 to {2**63 - 1}, "
                            f"received {seed!r}")
    assert not any(tmp_path.iterdir())
    assert cli.MAX_SEED == demo.MAX_SEED  # the CLI does not import the demo to check it


def test_cli_batch_larger_than_the_data(capsys, tmp_path):
    message = _usage_error(["fit", "--quiet", "--batch-size", "5000", "--out", str(tmp_path)], capsys)
    assert message.endswith("argument --batch-size: must be at most 1437, the number of digits "
                            "training samples, received 5000")
    assert not any(tmp_path.iterdir())  # no run folder for a run that cannot start


def test_cli_learning_rate_must_be_finite(capsys):
    message = _usage_error(["fit", "--learning-rate", "inf"], capsys)
    assert message.endswith("expected a finite number > 0, received 'inf'")


def test_fit_digits_explains_the_same_mistakes(tmp_path):
    with pytest.raises(demo.DemoArgumentError) as info:
        demo.fit_digits(batch_size=5000, out=tmp_path, quiet=True)
    assert info.value.argument == "batch_size"
    assert str(info.value).splitlines() == [
        "fit_digits: batch_size must be at most 1437, the number of digits training samples, received 5000",
        "  expected: batch_size <= 1437 (every training batch is full)",
        "  received: batch_size=5000",
        "  fix: pass batch_size=64 (or any value up to 1437)",
    ]
    with pytest.raises(demo.DemoArgumentError, match=r"seed must be a whole number from 0 to"):
        demo.fit_digits(seed=-1, out=tmp_path)
    with pytest.raises(demo.DemoArgumentError, match="learning_rate must be a finite number"):
        demo.fit_digits(learning_rate=float("nan"), out=tmp_path)
    with pytest.raises(demo.DemoArgumentError, match="out must be a folder name"):
        demo.fit_digits(out=3)
    assert not any(tmp_path.iterdir())


def test_fit_digits_accepts_numpy_integers(monkeypatch, tmp_path):
    import numpy as np

    def stop_here():
        raise RuntimeError("checked")

    monkeypatch.setattr(demo, "_require_plotting", stop_here)
    with pytest.raises(RuntimeError, match="checked"):  # got past every argument check
        demo.fit_digits(epochs=np.int64(2), batch_size=np.int32(32), seed=np.int64(1),
                        learning_rate=np.float32(1e-3), out=tmp_path)


def test_gyre_fit_usage_error_in_a_subprocess(tmp_path):
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "gyre", "fit", "--quiet", "--batch-size", "5000", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=root, timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: gyre fit") and "Traceback" not in done.stderr
    assert "gyre fit: error: argument --batch-size: must be at most 1437" in done.stderr
    assert done.stdout == ""
