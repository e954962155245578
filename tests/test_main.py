"""``python -m gyre`` (gyre.__main__): the ``gyre`` command as a module."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest


def test_running_the_module_calls_the_command(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["gyre"])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("gyre", run_name="__main__")
    assert info.value.code == 0  # plain gyre prints the help and succeeds
    assert "usage: gyre" in capsys.readouterr().out


def test_importing_the_module_runs_nothing(capsys):
    runpy.run_module("gyre.__main__", run_name="not_main")
    assert capsys.readouterr().out == ""


def test_python_m_gyre_help():
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "gyre", "--help"], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage: gyre" in done.stdout and "fit" in done.stdout


def test_gyre_fit_usage_error_in_a_subprocess(tmp_path):
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "gyre", "fit", "--quiet", "--batch-size", "5000", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=root, timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: gyre fit") and "Traceback" not in done.stderr
    assert "gyre fit: error: argument --batch-size: must be at most 1237" in done.stderr
    assert done.stdout == ""
