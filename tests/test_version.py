"""The version is written once (gyre/_version.py): the package, the command and the package's
metadata read it from there (tests/test_release.py checks the built wheel's metadata too)."""

import pathlib
import re
import tomllib

import gyre
from gyre import _version, cli

PYPROJECT = tomllib.loads((pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())


def test_the_version_is_written_once_and_read_by_the_package_the_command_and_the_metadata():
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", _version.__version__)  # PEP 440
    assert gyre.__version__ is _version.__version__
    assert cli.build_parser().format_usage().startswith("usage: gyre [-h] [--version]")
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gyre._version.__version__"}
