"""``ConsoleWriter``: scalars, texts and hyperparameters printed as lines of text."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from gyre.loggers._writer import Writer


def _pairs(values: dict[str, Any]) -> str:
    """``name=value, ...``, floats to 6 significant digits."""
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


class ConsoleWriter(Writer):
    """Prints ``step 3: loss=0.25, accuracy=0.9`` lines (and texts, and hyperparameters) to ``file``
    (default: ``sys.stdout`` at each write).

    Example:
        >>> import gyre
        >>> with gyre.ConsoleWriter() as writer:
        ...     writer.write_scalars(3, {"loss": 0.25, "accuracy": 0.9})
        step 3: loss=0.25, accuracy=0.9
    """

    kinds = frozenset({"scalars", "texts", "hparams"})

    def __init__(self, file: TextIO | None = None) -> None:
        self.file = file
        super().__init__()

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        print(f"step {step}: {_pairs(values)}", file=self.file)

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        for name, text in texts.items():
            print(f"step {step}: {name}: {text}", file=self.file)

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        print(f"hparams: {_pairs(params)}", file=self.file)
        if metrics:
            print(f"hparams metrics: {_pairs(metrics)}", file=self.file)

    def _flush(self) -> None:
        (self.file if self.file is not None else sys.stdout).flush()

    def __repr__(self) -> str:
        return "ConsoleWriter()" if self.file is None else f"ConsoleWriter({self.file!r})"
