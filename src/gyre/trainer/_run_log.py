"""A run's ``run.log`` and console threshold (jax_trainer's ``log_file_verbosity`` and
``stderrthreshold``), applied while :func:`gyre.trainer._run.run_config` trains."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gyre.core._errors import describe, explain

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
LOG_FILE = "run.log"


def _level(key: str, name: object) -> int:
    if name not in LEVELS:
        raise ValueError(explain(
            f"trainer.logger.{key} must be one of {', '.join(LEVELS)}",
            expected="debug, info, warning or error", received=describe(name), fix=f"write {key}: warning"))
    return LEVELS[name]  # type: ignore[index]


@contextlib.contextmanager
def run_logging(log_dir: str | Path, *, file_level: str = "info", stderr_level: str = "warning") -> Iterator[logging.Logger]:
    """Within the block ``<log_dir>/run.log`` records logging from ``file_level`` (and warnings),
    stderr from ``stderr_level``; yields the ``gyre.run`` logger."""
    file_at, console_at = _level("log_file_verbosity", file_level), _level("stderrthreshold", stderr_level)
    root, log = logging.getLogger(), logging.getLogger("gyre.run")
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    file_handler = logging.FileHandler(Path(log_dir) / LOG_FILE, encoding="utf-8", delay=True)
    file_handler.setLevel(file_at)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(console_at)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers = [file_handler] if root.handlers else [file_handler, console]  # a configured root keeps its own console
    old_level, show = root.level, warnings.showwarning

    def show_and_log(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        record = log.makeRecord(log.name, logging.WARNING, filename, lineno, "%s: %s", (category.__name__, message), None)
        if file_handler.level <= logging.WARNING:  # to the file only: Python shows it on stderr
            file_handler.handle(record)
        show(message, category, filename, lineno, file, line)

    root.setLevel(min(file_at, console_at, root.level or logging.WARNING))
    for handler in handlers:
        root.addHandler(handler)
    warnings.showwarning = show_and_log
    try:
        yield log
    finally:
        warnings.showwarning = show
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(old_level)
        file_handler.close()


__all__ = ["LEVELS", "LOG_FILE", "run_logging"]
