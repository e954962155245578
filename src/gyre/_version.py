"""The version of gyre, written in this one place: ``gyre.__version__``, ``gyre --version`` and
the package's metadata (pyproject.toml's dynamic version, read without importing gyre) take it
from here."""

__version__ = "0.1.0"
