"""Progress bars: ``keras_bar`` (Keras-style line) and ``tqdm_bar``.

Both run on ``on_train_batch_end`` when given to a named loop, or on any schedule in a task
table. They never wait for the device: the values shown are those of the newest step that
has finished computing (see :class:`~gyre.callbacks.lagged.LaggedValues`), and redraws are
rate-limited.

In a multi-process run (:mod:`gyre.distributed`) only process 0 draws; on the others a bar
does nothing (the values it would show are the same global ones everywhere).
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

from gyre.callbacks.lagged import LaggedValues
from gyre.core.clock import Elapsed
from gyre.core.errors import whole_number
from gyre.core.logs import Logs
from gyre.parallel.distributed import is_main_process


def _check_total(total: Any) -> int | None:
    if total is None:
        return None
    return whole_number(
        total,
        minimum=1,
        problem="a progress bar's total must be a number of steps >= 1 or None",
        expected="total=1000 (the loop's stop), or None for a bar without an end",
        fix="pass the number of steps the loop will run",
    )


def _format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    if seconds >= 60:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds}s"


def _format_value(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    magnitude = abs(value)
    return f"{value:.4e}" if (magnitude and (magnitude < 1e-3 or magnitude >= 1e5)) else f"{value:.4f}"


class KerasBar:
    """The callback :func:`keras_bar` returns."""

    def __init__(
        self,
        total: int | None,
        *,
        interval: float | None,
        width: int,
        file: IO[str] | None,
    ) -> None:
        self.total = _check_total(total)
        self.file = file
        self.width = width
        self._interval = interval
        self._lagged = LaggedValues()
        self._t_first: float | None = None
        self._step_first = 0
        self._last_draw = -float("inf")
        self._steps = 0
        self._closed = False
        self._width_drawn = 0
        self._silent: bool | None = None  # decided at the first call: not process 0

    @property
    def _out(self) -> IO[str]:
        return self.file if self.file is not None else sys.stdout

    def _isatty(self) -> bool:
        isatty = getattr(self._out, "isatty", None)
        return bool(isatty and isatty())

    def __call__(self, elapsed: Elapsed, logs: Logs) -> None:
        if self._silent is not False:
            if self._silent is None:
                self._silent = not is_main_process()
            if self._silent:
                return
        now = time.perf_counter()
        self._lagged.push(logs)
        steps = self._steps = elapsed.steps + 1
        if self._t_first is None:
            # The first call comes after the first step compiled: time the rate from here.
            self._t_first, self._step_first = now, steps
            self._closed = False
        interval = self._interval
        if interval is None:  # decided once: a terminal redraws often, a log file seldom
            interval = self._interval = 0.1 if self._isatty() else 10.0
        if now - self._last_draw >= interval or steps == self.total:
            self._draw(now, final=steps == self.total)

    on_train_batch_end = __call__

    def on_train_end(self) -> None:
        """Draws the final values and ends the line."""
        if self._t_first is not None and not self._closed:
            self._lagged.read(wait=True)
            self._draw(time.perf_counter(), final=True)

    def _draw(self, now: float, *, final: bool) -> None:
        values = self._lagged.read(wait=final)
        self._last_draw = now
        steps, total = self._steps, self.total
        parts = []
        if total is not None:
            done = min(steps, total)
            filled = int(self.width * done / total)
            arrow = ">" if filled < self.width else ""
            bar = "=" * max(filled - (1 if arrow else 0), 0) + arrow
            digits = len(str(total))
            parts.append(f"{steps:>{digits}}/{total} [{bar:<{self.width}}]")
        else:
            parts.append(f"{steps} steps")
        spent = now - self._t_first if self._t_first is not None else 0.0
        rate_steps = steps - self._step_first
        if final or total is None:
            parts.append(_format_seconds(spent))
        elif rate_steps > 0 and spent > 0:
            eta = (total - steps) * spent / rate_steps
            parts.append(f"ETA: {_format_seconds(eta)}")
        else:
            parts.append("ETA: ?")
        for name, value in values.items():
            parts.append(f"{name}: {_format_value(value)}")
        line = " - ".join(parts)
        out = self._out
        if self._isatty():
            pad = max(self._width_drawn - len(line), 0)
            out.write("\r" + line + " " * pad + ("\n" if final else ""))
            self._width_drawn = len(line)
        else:
            out.write(line + "\n")
        out.flush()
        if final:
            self._closed = True
            self._t_first = None


def keras_bar(
    total: int | None = None,
    *,
    interval: float | None = None,
    width: int = 30,
    file: IO[str] | None = None,
) -> KerasBar:
    """A Keras-style progress line: ``80/100 [=====>...] - ETA: 4s - loss: 0.1234``.

    The ETA is measured from the end of the first step, so compilation does not inflate it.
    Values are those of the newest step the device has finished (never a wait), and entries
    logged only now and then (``accuracy_test``) stay shown until updated.

    Args:
        total: steps the loop will run (the bar's end); ``None`` shows a counter.
        interval: seconds between redraws (default 0.1 on a terminal, 10 otherwise, where
            each redraw is a new line).
        width: characters of the bar.
        file: where to write (default ``sys.stdout``).

    Example:
        >>> import gyre, io
        >>> out = io.StringIO()
        >>> bar = gyre.keras_bar(total=3, file=out)
        >>> _ = gyre.loop(None, range(3), {gyre.every(1): [lambda: gyre.logs().add_metric("m", 1.0), bar]})
        >>> out.getvalue().splitlines()[-1].startswith("3/3 [==============================]")
        True
    """
    return KerasBar(total, interval=interval, width=width, file=file)


class TqdmBar:
    """The callback :func:`tqdm_bar` returns."""

    def __init__(self, total: int | None, *, interval: float, **tqdm_kwargs: Any) -> None:
        self.total = _check_total(total)
        self.interval = interval
        self.tqdm_kwargs = tqdm_kwargs
        self._bar: Any = None
        self._lagged = LaggedValues()
        self._last_post = -float("inf")
        self._silent: bool | None = None  # decided at the first call: not process 0

    def __call__(self, elapsed: Elapsed, logs: Logs) -> None:
        if self._silent is not False:
            if self._silent is None:
                self._silent = not is_main_process()
            if self._silent:
                return
        self._lagged.push(logs)
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, initial=elapsed.steps, **self.tqdm_kwargs)
        steps = elapsed.steps + 1
        self._bar.update(steps - self._bar.n)
        now = time.perf_counter()
        if now - self._last_post >= self.interval:
            self._last_post = now
            self._bar.set_postfix(self._lagged.read(), refresh=False)
        if self.total is not None and steps >= self.total:
            self.on_train_end()

    on_train_batch_end = __call__

    def on_train_end(self) -> None:
        """Shows the final values and closes the bar."""
        if self._bar is not None:
            self._bar.set_postfix(self._lagged.read(wait=True), refresh=False)
            self._bar.close()
            self._bar = None


def tqdm_bar(total: int | None = None, *, interval: float = 0.5, **tqdm_kwargs: Any) -> TqdmBar:
    """A tqdm progress bar with the latest finished step's values as its postfix.

    Args:
        total: steps the loop will run.
        interval: seconds between postfix updates.
        **tqdm_kwargs: passed to ``tqdm`` (``desc``, ``file``, ``disable``, ...).

    Example:
        >>> import gyre, io
        >>> bar = gyre.tqdm_bar(total=2, file=io.StringIO())
        >>> _ = gyre.loop(None, range(2), {gyre.every(1): bar})
    """
    return TqdmBar(total, interval=interval, **tqdm_kwargs)
