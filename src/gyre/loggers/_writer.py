"""The one writer contract, :class:`Writer`: public methods check shapes on the caller's thread
(no value is read) and queue; the writer's thread moves values to the host and writes them
(CLU's ``AsyncWriter`` is the model). Only process 0 writes. A new writer lists ``kinds`` and
defines the matching ``_scalars`` / ``_histograms`` / ... (``_scalar_block`` for a run at once).
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import numpy as np

from gyre.callbacks._wandb_logger import is_number, scalar_rows
from gyre.core._checks import mapping, whole
from gyre.core._errors import describe, explain
from gyre.core._history import Block
from gyre.core._host import numeric_dtype
from gyre.parallel.distributed import is_main_process

KINDS = ("scalars", "histograms", "images", "texts", "hparams")

#: A block is written in slices of about this many seconds, the writer's thread yielding the GIL
#: between them so a host-bound loop's thread is not starved.
SLICE_SECONDS = 0.001
_WRITERS: list[type[Writer]] = []  # every writer class, in the order they were defined
_OPEN: weakref.WeakSet[Writer] = weakref.WeakSet()  # writers with a thread, closed at exit
_UNCONVERTED = {"flush": "_flush", "close": "_close", "runs": "_scalar_block", "resumed": "_purge"}  # queued kind: method


@atexit.register
def _close_at_exit() -> None:
    """Writes what open writers still hold at exit (their daemon threads would die with it)."""
    for writer in list(_OPEN):
        with contextlib.suppress(Exception):  # nothing can be raised to anyone at exit
            writer.close()


class WriterError(RuntimeError):
    """A write that failed on a writer's thread, raised at the caller's next call; ``__cause__`` is
    the original.

    Example:
        >>> issubclass(WriterError, RuntimeError)
        True
    """

    __module__ = "gyre"  # its public path, in tracebacks and reprs


def supporters(kind: str) -> list[str]:
    """The names of gyre's writers that write ``kind`` (one of :data:`KINDS`), sorted."""
    return sorted(cls.__name__ for cls in _WRITERS if kind in cls.kinds and cls.__module__.startswith("gyre."))


def _step(who: str, step: Any) -> Any:
    """``step`` checked: an int >= 0, or a 0-d integer device array (read on the writer's thread)."""
    return whole(step, f"{who}: a step", device=True,
                 expected="step as an int >= 0 (or a 0-d integer array), e.g. 10",
                 fix="pass the step number, e.g. writer.write_scalars(10, {'loss': loss})")


def _checked(who: str, method: str, values: Any, what: str, example: str, before: str = "step, ",
             ok: Callable[[Any], Any] | None = None, expected: str = "", fix: str = "") -> dict[str, Any]:
    """``values`` as a dict from names to ``what``, each passing ``ok``, or the explained error."""
    out = mapping(values, f"{who}.{method}'s {what}", kind=f"a mapping from names to {what}",
                  expected=f"a dict with str keys, e.g. {example}",
                  fix=f"pass a dict, e.g. writer.{method}({before}{example})")
    for name, value in out.items() if ok is not None else ():
        if not ok(value):
            shape = f" (shape {np.shape(value)})" if hasattr(value, "shape") else ""
            raise ValueError(explain(f"{who}.{method}: the value of {name!r} cannot be written",
                                     expected=expected, received=describe(value) + shape, fix=fix))
    return out


def _scalars(who: str, method: str, values: Any, before: str = "step, ") -> dict[str, Any]:
    return _checked(who, method, values, "numbers", "{'loss': 0.5}", before, ok=is_number,
                    expected="a number: a Python or numpy scalar, or a 0-d array",
                    fix="reduce arrays to one number first (jnp.mean(x)), or write them as histograms")


def as_uint8_images(name: str, image: np.ndarray) -> np.ndarray:
    """An HWC or NHWC image (uint8, or floats in [0, 1]) as uint8 NHWC."""
    image = np.asarray(image)
    if image.ndim == 3:
        image = image[None]
    if image.dtype == np.uint8:
        return image
    if not np.issubdtype(image.dtype, np.floating) or image.size and not (
        np.nanmin(image) >= 0.0 and np.nanmax(image) <= 1.0
    ):
        lo, hi = (float(np.min(image)), float(np.max(image))) if image.size else (0.0, 0.0)
        raise ValueError(explain(
            f"image {name!r} is neither uint8 nor floats in [0, 1]",
            expected="uint8 values 0..255, or floats in [0, 1]",
            received=f"dtype {image.dtype}, values from {lo} to {hi}",
            fix="scale it first, e.g. (x - x.min()) / (x.max() - x.min())"))
    return np.round(np.nan_to_num(image) * 255).astype(np.uint8)


class Writer:
    """The base of every writer: checks, queues, and writes on its own thread.

    Attributes:
        kinds: what the writer writes, a subset of ``("scalars", "histograms", "images",
            "texts", "hparams")``; anything else raises a ``TypeError`` naming writers that do.
        active: False on processes other than 0, where the writer does nothing.
        max_queued: writes queued at most (10,000); past that a write waits, so a slow writer
            slows the loop instead of filling the memory.

    Example:
        >>> import gyre
        >>> class Printer(gyre.Writer):
        ...     kinds = frozenset({"scalars"})
        ...     def _scalars(self, step, values):
        ...         print(step, values)
        >>> with Printer() as writer:
        ...     writer.write_scalars(3, {"loss": np.float32(0.5)})
        3 {'loss': 0.5}
    """

    kinds: ClassVar[frozenset[str]] = frozenset()
    max_queued: ClassVar[int] = 10_000

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _WRITERS.append(cls)

    def __init__(self) -> None:
        self.active = is_main_process()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.max_queued)
        self._thread: threading.Thread | None = None
        self._error: tuple[str, BaseException] | None = None
        self._closed = False
        if self.active:
            self._open()

    def write_scalars(self, step: int, values: Mapping[str, Any]) -> None:
        """Queues numbers (Python, numpy, or 0-d device arrays) to be written at ``step``.

        Example:
            >>> import gyre, io, jax.numpy as jnp
            >>> out = io.StringIO()
            >>> with gyre.ConsoleWriter(out) as writer:
            ...     writer.write_scalars(0, {"loss": jnp.float32(0.25)})
            >>> out.getvalue()
            'step 0: loss=0.25\\n'
        """
        self._submit("scalars", _step(self._who, step), _scalars(self._who, "write_scalars", values))

    def write_histograms(self, step: int, arrays: Mapping[str, Any], num_buckets: int | None = None) -> None:
        """Queues arrays whose distributions are written at ``step`` (``num_buckets`` bins, or the
        writer's default).

        Example:
            >>> import gyre, tempfile, numpy as np
            >>> with tempfile.TemporaryDirectory() as logdir:
            ...     with gyre.TensorBoardWriter(logdir) as writer:
            ...         writer.write_histograms(0, {"w": np.arange(10.0)}, num_buckets=4)
        """
        arrays = _checked(self._who, "write_histograms", arrays, "arrays", "{'weights': w}",
                          ok=lambda v: hasattr(v, "shape") and np.size(v) and numeric_dtype(v.dtype),
                          expected="a non-empty numeric array", fix="pass a numpy or jax array of numbers")
        whole(num_buckets, f"{self._who}.write_histograms: num_buckets", minimum=1, none=True,
              expected="num_buckets=None (the writer's default) or an int such as 30",
              fix="pass num_buckets=30, or leave it out")
        self._submit("histograms", _step(self._who, step), arrays, num_buckets)

    def write_images(self, step: int, images: Mapping[str, Any]) -> None:
        """Queues images, each HWC or NHWC with 1, 3 or 4 channels, uint8 or floats in [0, 1].

        Example:
            >>> import gyre, tempfile, numpy as np
            >>> with tempfile.TemporaryDirectory() as logdir:
            ...     with gyre.TensorBoardWriter(logdir) as writer:
            ...         writer.write_images(0, {"noise": np.random.rand(8, 8, 3)})
        """
        images = _checked(
            self._who, "write_images", images, "images", "{'sample': image}",
            ok=lambda v: len(getattr(v, "shape", ())) in (3, 4) and v.shape[-1] in (1, 3, 4),
            expected="an array of shape (height, width, channels) or (n, height, width, channels), channels 1, 3 or 4",
            fix="add a channel axis to a greyscale image: image[..., None]")
        self._submit("images", _step(self._who, step), images)

    def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
        """Queues strings to be written at ``step``.

        Example:
            >>> import gyre, io
            >>> out = io.StringIO()
            >>> with gyre.ConsoleWriter(out) as writer:
            ...     writer.write_texts(2, {"note": "hello"})
            >>> out.getvalue()
            'step 2: note: hello\\n'
        """
        texts = _checked(self._who, "write_texts", texts, "strings", "{'note': 'hello'}",
                         ok=lambda v: isinstance(v, str), expected="a str", fix="pass str(value)")
        self._submit("texts", _step(self._who, step), texts)

    def write_hparams(self, params: Mapping[str, Any], metrics: Mapping[str, Any] | None = None) -> None:
        """Queues hyperparameters (numbers, bools, strings; else their ``str``) and, optionally, the
        final metrics.

        Example:
            >>> import gyre, io
            >>> out = io.StringIO()
            >>> with gyre.ConsoleWriter(out) as writer:
            ...     writer.write_hparams({"lr": 0.1, "layers": (2, 3)}, {"accuracy": 0.9})
            >>> print(out.getvalue(), end="")
            hparams: lr=0.1, layers=(2, 3)
            hparams metrics: accuracy=0.9
        """
        params = _checked(self._who, "write_hparams", params, "values", "{'learning_rate': 1e-3}", "")
        params = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in params.items()}
        found = None if metrics is None else _scalars(self._who, "write_hparams", metrics, "params, ")
        self._submit("hparams", params, found)

    def _write_block(self, block: Block, keep: np.ndarray | None = None) -> None:
        """Queues a history block's scalars (rows in ``keep``) as one item, converted on the
        writer's thread."""
        self._submit("scalars", block, keep, batched=True)

    def flush(self) -> None:
        """Waits until everything queued is written and flushed; raises :class:`WriterError` for a
        failed write.

        Example:
            >>> import gyre, os, tempfile
            >>> with tempfile.TemporaryDirectory() as root:
            ...     writer = gyre.JSONLWriter(os.path.join(root, "m.jsonl"))
            ...     writer.write_scalars(0, {"loss": 1.0}); writer.flush()
            ...     print(open(writer.path).read(), end="")
            ...     writer.close()
            {"step": 0, "loss": 1.0}
        """
        self._raise_pending()
        if self._closed or not self.active:
            return
        self._submit("flush")
        self._queue.join()
        self._raise_pending()

    def _flush_soon(self) -> None:
        """Queues a flush of what is queued before it, without waiting (see :meth:`flush`)."""
        if not self._closed and self.active and self._thread is not None:
            self._submit("flush")

    def close(self) -> None:
        """Writes what is queued, closes the backend and stops the thread; a second call does
        nothing, a write after raises.

        Example:
            >>> import gyre, io
            >>> writer = gyre.ConsoleWriter(io.StringIO())
            >>> writer.close(); writer.close()
        """
        if self._closed:
            return
        try:
            if self.active:
                self._submit("close")  # on the writer's thread (started here if need be)
                self._queue.put(None)
                if self._thread is not None:
                    self._thread.join()
        finally:
            self._closed = True
        self._raise_pending()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _resumed(self, step: int) -> None:
        """Queues word that a run resumed from a checkpoint of ``step`` completed steps: what it had
        written at ``step`` or later, before it stopped, is written again (``write_to`` says it)."""
        self._submit("resumed", int(step))

    def _open(self) -> None:
        """Opens the backend (on the caller's thread, process 0 only)."""

    def _purge(self, step: int) -> None:
        """Drops what an earlier run wrote at ``step`` or later, where the backend can (see :meth:`_resumed`)."""

    def _flush(self) -> None:
        """Flushes the backend."""

    def _close(self) -> None:
        """Closes the backend."""

    @property
    def _who(self) -> str:
        return type(self).__name__

    def _unsupported(self, kind: str) -> TypeError:
        others = supporters(kind)
        return TypeError(explain(
            f"{self!r} does not write {kind}",
            expected=f"what {self._who} writes: {', '.join(sorted(self.kinds)) or 'nothing'}",
            received=f"write_{kind}(...)",
            fix=(f"write {kind} with {', '.join(others)}" if others else f"no writer of gyre writes {kind}")
            + " (gyre.MultiWriter sends each kind to the writers that write it)"))

    def _submit(self, kind: str, *args: Any, batched: bool = False) -> None:
        if self._closed:
            raise RuntimeError(explain(
                f"{self!r} is closed",
                expected="writes before close()",
                received=f"a call to {'write_' + kind if kind in KINDS else kind} after close()",
                fix="make a new writer, or close it only when the run is over"))
        if kind in KINDS and kind not in self.kinds:
            raise self._unsupported(kind)
        self._raise_pending()
        if not self.active:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"gyre-{self._who}", daemon=True)
            self._thread.start()
            _OPEN.add(self)
        self._queue.put(("runs" if batched else kind, args))

    def _raise_pending(self) -> None:
        if self._error is None:
            return
        kind, err = self._error
        self._error = None
        raise WriterError(explain(
            f"{self!r} failed to write {kind} on its background thread",
            expected=f"a successful {kind} write", received=f"{type(err).__name__}: {err}",
            fix="see the error above this one; the failed values were not written")) from err

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                kind, args = item
                self._do(kind, args)
            except BaseException as err:  # kept for the caller's next call
                if self._error is None:
                    self._error = ("scalars" if kind == "runs" else kind, err)
            finally:
                self._queue.task_done()

    def _do(self, kind: str, args: tuple[Any, ...]) -> None:
        if kind in _UNCONVERTED:  # no values to move to the host
            getattr(self, _UNCONVERTED[kind])(*args)
            return
        args = _to_host(args)  # the one transfer, off the caller's thread
        if kind == "hparams":
            params, metrics = args
            metrics = None if metrics is None else {k: _number(v) for k, v in metrics.items()}
            self._hparams(params, metrics)
            return
        step, values, *rest = args
        step = int(step)
        if kind == "scalars":
            self._scalars(step, {k: _number(v) for k, v in values.items()})
        elif kind == "histograms":
            self._histograms(step, {k: _host_array(v) for k, v in values.items()}, *rest)
        elif kind == "images":
            self._images(step, {k: as_uint8_images(k, v) for k, v in values.items()})
        else:
            self._texts(step, values)

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        raise self._unsupported("scalars")

    def _scalar_block(self, block: Block, keep: np.ndarray | None) -> None:
        """Writes a queued block's scalars, one :meth:`_scalars` call per record (yielding the GIL
        every ``SLICE_SECONDS``); override to write a run at once."""
        clock = time.perf_counter
        until = clock() + SLICE_SECONDS
        for step, values in scalar_rows(block, keep):
            self._scalars(step, values)
            if clock() > until:
                time.sleep(0)  # lets the loop's thread take the GIL (see SLICE_SECONDS)
                until = clock() + SLICE_SECONDS

    def _histograms(self, step: int, arrays: dict[str, np.ndarray], num_buckets: int | None) -> None:
        raise self._unsupported("histograms")

    def _images(self, step: int, images: dict[str, np.ndarray]) -> None:
        raise self._unsupported("images")

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        raise self._unsupported("texts")

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        raise self._unsupported("hparams")


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

    def _resumed(self, step: int) -> None:
        for writer in self.writers:
            writer._resumed(step)

    def _flush_soon(self) -> None:
        for writer in self.writers:
            writer._flush_soon()

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


def _to_host(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with every device value on the host, in one ``jax.device_get``; dicts keep
    their order (``device_get`` of a dict would sort its keys)."""
    flat: list[Any] = []
    for arg in args:
        flat.extend(arg.values() if isinstance(arg, dict) else [arg])
    host = iter(jax.device_get(flat))
    return tuple({k: next(host) for k in arg} if isinstance(arg, dict) else next(host) for arg in args)


def _host_array(value: Any) -> np.ndarray:
    """A numeric array as numpy, low-precision floats (bfloat16, float8: kind ``'V'``, which
    backends do not read) as float32, which holds each of their values exactly."""
    value = np.asarray(value)
    return value if value.dtype.kind in "biuf" else value.astype(np.float32)


def _number(value: Any) -> float | int | bool:
    return np.asarray(value).item()
