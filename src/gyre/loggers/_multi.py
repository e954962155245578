"""``MultiWriter``: one writer that sends each write to several."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gyre.core._errors import describe, explain
from gyre.core._history import Block
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

    def _each(self, kind: str, call: Callable[[Writer], None]) -> None:
        if self._closed:
            self._submit(kind)  # raises: closed
        targets = [w for w in self.writers if kind in w.kinds]
        if not targets:
            raise self._unsupported(kind)
        for writer in targets:
            call(writer)

    def write_scalars(self, step: int, values: Mapping[str, Any]) -> None:
        """:meth:`gyre.Writer.write_scalars` on each writer that writes scalars."""
        self._each("scalars", lambda w: w.write_scalars(step, values))

    def write_histograms(self, step: int, arrays: Mapping[str, Any], num_buckets: int | None = None) -> None:
        """:meth:`gyre.Writer.write_histograms` on each writer that writes histograms."""
        self._each("histograms", lambda w: w.write_histograms(step, arrays, num_buckets))

    def write_images(self, step: int, images: Mapping[str, Any]) -> None:
        """:meth:`gyre.Writer.write_images` on each writer that writes images."""
        self._each("images", lambda w: w.write_images(step, images))

    def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
        """:meth:`gyre.Writer.write_texts` on each writer that writes texts."""
        self._each("texts", lambda w: w.write_texts(step, texts))

    def write_hparams(self, params: Mapping[str, Any], metrics: Mapping[str, Any] | None = None) -> None:
        """:meth:`gyre.Writer.write_hparams` on each writer that writes hyperparameters."""
        self._each("hparams", lambda w: w.write_hparams(params, metrics))

    def _write_block(self, block: Block, keep: Any = None) -> None:
        self._each("scalars", lambda w: w._write_block(block, keep))

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
