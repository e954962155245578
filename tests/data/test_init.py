"""The gyre.data facade: its public names, ``import gyre`` is enough, the README section."""

import subprocess
import sys

import numpy as np

import gyre.data


def test_public_names():
    assert set(gyre.data.__all__) >= {"batches", "digits", "steps_per_epoch"}


def test_import_gyre_is_enough_and_does_not_import_scikit_learn():
    # A fresh interpreter: this one has scikit-learn loaded already.
    code = (
        "import sys, gyre\n"
        "assert 'sklearn' not in sys.modules, 'import gyre loaded scikit-learn'\n"
        "(x, y), _ = gyre.data.digits()\n"
        "assert 'sklearn' in sys.modules\n"
        "print(x.shape, gyre.data.steps_per_epoch(len(x), 64))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1437, 64) 22"


def test_gyre_data_is_a_facade():
    import gyre

    assert gyre.data is sys.modules["gyre.data"] and "data" in gyre.__all__
    assert gyre.data.__all__ == sorted(gyre.data.__all__)
    for name in gyre.data.__all__:
        assert callable(getattr(gyre.data, name)), name
        assert getattr(gyre.data, name).__doc__, name


def test_readme_data_section_runs(run_readme):
    namespace = run_readme("Data: `gyre.data`", page="docs/how-to/datasets.md")
    assert namespace["x"].shape == (64, 64) and namespace["y"].dtype == np.int32
    assert namespace["steps"] == 22 and len(list(namespace["test"]())) == 6
