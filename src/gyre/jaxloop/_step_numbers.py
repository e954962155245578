"""jaxloop's step number action: ``StepNumberAction`` writes the state's step through a
``StepNumberWriter`` (kept in memory) or a ``LocalFileStepNumberWriter`` (a local file,
replaced atomically), so another job can read how far training got.
"""

from __future__ import annotations

import os
from typing import Any

from gyre.core._errors import describe, explain
from gyre.jaxloop._actions import Action, Output, _step_of


class StepNumberWriter:
    """Where :class:`StepNumberAction` writes the step number; this one keeps it in memory.

    Example:
        >>> import gyre
        >>> w = gyre.jaxloop.StepNumberWriter(); w.write(7); w.last
        7
    """

    def __init__(self) -> None:
        self.last: int | None = None

    def write(self, step: int) -> None:
        """Records ``step``.

        Example:
            >>> import gyre
            >>> gyre.jaxloop.StepNumberWriter().write(1)
        """
        self.last = int(step)


class LocalFileStepNumberWriter(StepNumberWriter):
    """Writes the step number to a local file (replaced atomically at each write).

    Example:
        >>> import os, tempfile, gyre
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     w = gyre.jaxloop.LocalFileStepNumberWriter(os.path.join(tmp, "step.txt"))
        ...     w.write(12)
        ...     open(os.path.join(tmp, "step.txt")).read()
        '12'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        if not isinstance(path, str | os.PathLike):
            raise TypeError(
                explain(
                    "LocalFileStepNumberWriter needs a file path",
                    expected="a str or os.PathLike path",
                    received=describe(path),
                    fix="pass LocalFileStepNumberWriter('runs/exp/step.txt')",
                )
            )
        self.path = os.fspath(path)

    def write(self, step: int) -> None:
        """Writes ``step`` to the file (its folder is created).

        Example:
            >>> import os, tempfile, gyre
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     gyre.jaxloop.LocalFileStepNumberWriter(os.path.join(tmp, "a", "s")).write(3)
        """
        super().write(step)
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            f.write(str(int(step)))
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
            raise TypeError(
                explain(
                    "StepNumberAction needs a step number writer",
                    expected="an object with write(step), e.g. LocalFileStepNumberWriter(path)",
                    received=describe(step_writer),
                    fix="pass StepNumberAction(gyre.jaxloop.LocalFileStepNumberWriter(path))",
                )
            )
        self._step_number_writer = step_writer

    def __call__(self, state: Any, outputs: Output | None = None, **kwargs: Any) -> None:
        """Writes the step number.

        Example:
            >>> import gyre
            >>> w = gyre.jaxloop.StepNumberWriter()
            >>> gyre.jaxloop.StepNumberAction(w)({"step": 2}); w.last
            2
        """
        self._step_number_writer.write(_step_of(state))
