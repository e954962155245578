"""``MultiWriter``: one writer that sends each write to several."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gyre.core._errors import describe, explain
from gyre.loggers._writer import Writer


class MultiWriter(Writer):
    """Sends every write to each of ``writers`` that writes that kind of value; a kind none writes
    raises.

    ``flush`` and ``close`` reach every writer; the first error is raised after all of them.

    Example:
        >>> import gyre, io, tempfile, os, numpy as np
        >>> out = io.StringIO()
        >>> with tempfile.TemporaryDirectory() as root:
        ...     path = os.path.join(root, "m.csv")
        ...     with gyre.MultiWriter([gyre.ConsoleWriter(out), gyre.CSVWriter(path)]) as writer:
        ...         writer.write_scalars(0, {"loss": 1.0})
        ...         writer.write_texts(0, {"note": "only the console writes texts"})
        ...     print(open(path).read(), end="")
        step,loss
        0,1.0
        >>> print(out.getvalue(), end="")
        step 0: loss=1
        step 0: note: only the console writes texts
    """

    def __init__(self, writers: Sequence[Writer]) -> None:
        writers = list(writers) if isinstance(writers, (list, tuple)) else writers  # type: ignore[assignment]
        if not isinstance(writers, list) or not all(isinstance(w, Writer) for w in writers):
            raise TypeError(explain(
                "MultiWriter takes a list of writers",
                expected="a list of gyre writers, e.g. [gyre.TensorBoardWriter(d), gyre.CSVWriter(p)]",
                received=describe(writers), fix="gyre.MultiWriter([writer_a, writer_b])"))
        self.writers: list[Writer] = writers
        self.kinds = frozenset().union(*(w.kinds for w in writers))  # type: ignore[misc]
        super().__init__()

    def _submit(self, kind: str, *args: Any, batched: bool = False) -> None:
        # the values were checked once, by this writer's public method: each writer takes them as they are
        if self._closed or kind not in self.kinds:
            super()._submit(kind)  # raises: closed, or a kind none of them writes
        for writer in self.writers:
            if kind in writer.kinds:
                writer._submit(kind, *args, batched=batched)

    def _all(self, method: str) -> None:
        first: BaseException | None = None
        for writer in self.writers:
            try:
                getattr(writer, method)()
            except Exception as err:  # the others still flush or close
                first = first or err
        if first is not None:
            raise first

    def flush(self) -> None:
        """Flushes every writer; the first error is raised after all of them."""
        if not self._closed:
            self._all("flush")

    def close(self) -> None:
        """Closes every writer (once); the first error is raised after all of them."""
        if self._closed:
            return
        self._closed = True
        self._all("close")

    def __repr__(self) -> str:
        return f"MultiWriter({self.writers!r})"
