"""What ``gyre.checkpoint`` accepts: each argument checked when the checkpoint is made, with an
error that says what was expected, what came and how to fix it."""

from __future__ import annotations

import os
from typing import Any

from gyre.callbacks._monitor import check_name, monitor_mode
from gyre.core._checks import instance, whole
from gyre.core._errors import describe, explain


def check_directory(directory: Any) -> str:
    path = os.fspath(instance(directory, "directory", (str, os.PathLike), problem="checkpoint's directory must be a path",
                              expected="a str or os.PathLike (pathlib.Path) naming a directory",
                              fix="gyre.checkpoint('runs/exp1/checkpoints')"))
    if not isinstance(path, str) or not path:
        raise ValueError(explain(
            "checkpoint's directory must be a non-empty path",
            expected="a directory name such as 'checkpoints'", received=describe(directory),
            fix="gyre.checkpoint('runs/exp1/checkpoints')"))
    path = os.path.abspath(os.path.expanduser(path))  # orbax requires an absolute path
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(explain(
            "checkpoint's directory exists and is not a directory",
            expected="a directory, or a path where one can be created", received=f"the file {path!r}",
            fix="choose another path, or remove the file"))
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(explain(
            "checkpoint's directory cannot be created: a file is in the way",
            expected="a directory, or a path where one can be created",
            received=f"{path!r}, under the file {existing!r}", fix="choose another path"))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(explain(
            "checkpoint's directory cannot be written",
            expected="a directory you can write to, or one that can be created",
            received=f"{path!r}" + (f", under {existing!r}" if existing != path else "")
            + ", which is not writable",
            fix="choose a directory you can write to, e.g. under runs/"))
    return path


def check_keep(keep: Any, keep_best: Any, monitor: Any) -> tuple[int, int]:
    kept = whole(keep, "checkpoint's keep", minimum=1, expected="keep=3 (how many of the latest checkpoints "
                 "to keep on disk; the newest is what a run resumes from, so at least 1)",
                 fix="pass keep as a positive int; keep=1 keeps only the latest")
    best = whole(keep_best, "checkpoint's keep_best", expected="keep_best=2 (how many of the best checkpoints "
                 "by monitor to keep as well)", fix="pass keep_best as an int >= 0 (0: keep only the latest)")
    if best and monitor is None:
        raise ValueError(explain(
            "checkpoint's keep_best needs a monitored value to rank checkpoints by",
            expected="keep_best=2 together with monitor='loss_test' (and mode=)",
            received=f"keep_best={best} without monitor=", fix="gyre.checkpoint(directory, keep_best=2, "
            "monitor='loss_test', mode='min'), or leave keep_best=0"))
    return kept, best


def check_monitor(monitor: Any, mode: Any) -> None:
    check_name(monitor, "checkpoint's monitor must be the name of a logged value, or None",
               "'loss_test' or 'metrics.accuracy_test'", "gyre.checkpoint(directory, monitor='loss_test', mode='min')",
               optional=True)
    monitor_mode("checkpoint", monitor, mode, strict=False, auto=False)
