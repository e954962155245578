"""jaxloop's ``StepNumberAction`` and its writers: how far training got, for another job to read."""

from __future__ import annotations

import os
import time
from typing import Any

from gyre.core import _checks as checks
from gyre.core._errors import describe, explain
from gyre.jaxloop._actions import Action, Output, _step_of


class StepNumberWriter:
    """Where :class:`StepNumberAction` writes the step number; this one keeps it in memory.

    Example:
        >>> import gyre
        >>> w = gyre.jaxloop.StepNumberWriter(); w.write(step_number=7); w.last
        7
    """

    def __init__(self) -> None:
        self.last: int | None = None

    def write(self, step_number: int) -> None:
        """Records ``step_number`` (jaxloop's argument name)."""
        self.last = int(step_number)


class LocalFileStepNumberWriter(StepNumberWriter):
    """Writes the step number to a local file as ``timestamp_ms:<ms>,step_number:<n>`` (jaxloop's
    entry). The file is created empty at construction and replaced atomically by each write,
    so it holds the latest entry only (jaxloop appends a line each time).

    Example:
        >>> import os, tempfile, gyre
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     w = gyre.jaxloop.LocalFileStepNumberWriter(os.path.join(tmp, "step.txt"))
        ...     w.write(step_number=12)
        ...     open(os.path.join(tmp, "step.txt")).read().split(",")[1].strip()
        'step_number:12'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = checks.path(path, "LocalFileStepNumberWriter needs a file path", expected="a str or os.PathLike path",
                                fix="pass LocalFileStepNumberWriter('runs/exp/step.txt')")
        self._replace("")

    def write(self, step_number: int) -> None:
        """Writes ``step_number`` to the file, with the time (its folder is created)."""
        super().write(step_number)
        self._replace(f"timestamp_ms:{time.time() * 1000.0},step_number:{int(step_number)}\n")

    def _replace(self, text: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.path)


class StepNumberAction(Action):
    """Writes the state's step number through a :class:`StepNumberWriter`.

    Example:
        >>> import gyre
        >>> writer = gyre.jaxloop.StepNumberWriter()
        >>> gyre.jaxloop.StepNumberAction(writer)({"step": 40}, None)
        >>> writer.last
        40
    """

    def __init__(self, step_writer: StepNumberWriter, interval: int = 1) -> None:
        super().__init__(interval=interval)
        if not callable(getattr(step_writer, "write", None)):
            raise TypeError(explain(
                "StepNumberAction needs a step number writer",
                expected="an object with write(step_number), e.g. LocalFileStepNumberWriter(path)",
                received=describe(step_writer),
                fix="pass StepNumberAction(gyre.jaxloop.LocalFileStepNumberWriter(path))"))
        self._step_number_writer = step_writer

    def __call__(self, state: Any, outputs: Output | None = None, **kwargs: Any) -> None:
        """Writes the step number."""
        self._step_number_writer.write(step_number=_step_of(state))
