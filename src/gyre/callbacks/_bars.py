"""Progress bars: ``keras_bar`` and ``tqdm_bar``; they never wait for the device, rate-limit their
redraws, draw the final values at the loop's end, and draw on process 0 only. What they show is
read from the loop's history without waiting: as Keras, running means over the epoch, the last
value for stateful metrics and entries not logged this epoch."""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections import Counter
from typing import IO, Any

import numpy as np

from gyre.callbacks._wandb_logger import FollowsHistory
from gyre.core._checks import choice, real, whole
from gyre.core._clock import Elapsed, Period
from gyre.core._errors import describe, explain, keywords_checked, suggest
from gyre.core._history import Block
from gyre.core._host import numeric_dtype
from gyre.core._logs import Logs
from gyre.engine._tasks import ChunkSafe, LoopElement

DISPLAYED = ("losses", "metrics", "stateful_metrics")


def check_mode(values: Any, owner: str) -> str:
    """A bar's ``values=`` option: ``"mean"`` or ``"last"``."""
    return choice(values, f"{owner}(values=...)", ("mean", "last"), fix=f"{owner}(values='mean').",
                  expected="values='mean' (running means over the epoch, as Keras) or values='last'")


class RunningValues:
    """Running means over the current epoch (or last values) of the absorbed scalar entries."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.epoch: int | None = None
        self.sums: dict[tuple[str, str], float] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.last: dict[tuple[str, str], float] = {}

    def absorb(self, block: Block) -> None:
        """Adds records read from a history."""
        if not block.count:
            return
        epochs = np.asarray(block.clocks["epochs"])
        latest = int(epochs[-1])
        if latest != self.epoch:
            self.epoch, self.sums, self.counts = latest, {}, {}
        for key, (rows, values) in block.entries.items():
            values = _numbers(values)
            if key[0] not in DISPLAYED or values is None:
                continue
            # rows come grouped by record structure, not in record order: the newest row
            self.last[key] = float(values[int(np.argmax(rows))])
            if self.mode == "mean" and key[0] != "stateful_metrics":
                current = values[epochs[rows] == latest]
                if current.size:
                    self.sums[key] = self.sums.get(key, 0.0) + float(current.sum(dtype=np.float64))
                    self.counts[key] = self.counts.get(key, 0) + int(current.size)

    def shown(self) -> dict[str, float]:
        """``name: value`` per entry (``collection.name`` where two collections share a name)."""
        owners = Counter(name for _, name in self.last)
        out = {}
        for key, last in self.last.items():
            count = self.counts.get(key, 0)
            out[key[1] if owners[key[1]] == 1 else f"{key[0]}.{key[1]}"] = self.sums[key] / count if count else last
        return out


def _numbers(values: Any) -> np.ndarray | None:
    """An entry's values as a numpy column of scalar numbers, or ``None`` when they are not."""
    if isinstance(values, list) and values and all(np.ndim(v) == 0 and np.isreal(v) for v in values):
        try:
            values = np.asarray(values)
        except (TypeError, ValueError):
            return None
    ok = isinstance(values, np.ndarray) and values.ndim == 1 and numeric_dtype(values.dtype)
    return values if ok else None


class BarValues(RunningValues, FollowsHistory):
    """The values a bar shows: read from the loop's history (see the module docs)."""

    see = FollowsHistory._follow

    def _send(self, *, wait: bool) -> None:
        self.absorb(self._read(wait=wait))

    def read(self, *, wait: bool = False) -> dict[str, float]:
        """The values to show now (``wait``: every record so far, at the loop's end)."""
        self._send(wait=wait)
        return self.shown()

    def reset(self) -> None:
        """Forgets the history followed and the values seen."""
        self._history = self._own = None
        RunningValues.__init__(self, self.mode)


def _check_total(total: Any) -> int | None:
    if isinstance(total, Period):  # ciclo's total=Period.create(steps=n) / gyre.at(n)
        if total.items() and all(name == "steps" for name, _ in total.items()):
            return total.steps
        raise ValueError(explain(
            "a progress bar counts steps: its total must be a number of steps",
            expected="total=1000 or total=gyre.at(steps=1000)", received=f"total={total!r}",
            fix="give the number of steps the loop will run (a bar by samples or time, "
            "as ciclo's, is not drawn by gyre)"))
    return whole(total, "total", minimum=1, none=True, fix="pass the number of steps the loop will run",
                 problem="a progress bar's total must be a number of steps >= 1 or None",
                 expected="total=1000 (the loop's stop), or None for a bar without an end")


def _check_interval(interval: Any, *, owner: str, optional: bool) -> float | None:
    default = " (or None: 0.1 on a terminal, 10 in a log file)" if optional else ""
    return real(interval, "interval", minimum=0, none=optional,
                problem=f"{owner}'s interval must be a number of seconds >= 0{' or None' if optional else ''}",
                expected=f"interval=0.5 (seconds between redraws){default}",
                fix="pass the seconds between redraws as a number, e.g. interval=0.5")


def _check_file(file: Any, owner: str) -> Any:
    if file is None or callable(getattr(file, "write", None)):
        return file
    if isinstance(file, (str, bytes, os.PathLike)):
        raise TypeError(explain(
            f"{owner}'s file must be an open text file, not a path",
            expected="an object with a write() method: sys.stdout, sys.stderr, io.StringIO(), or a file you opened",
            received=describe(file), fix=f"open the file yourself and close it after the loop: "
            f"f = open({os.fsdecode(file)!r}, 'w'); {owner}(..., file=f)"))
    raise TypeError(explain(
        f"{owner}'s file must be an open text file or None",
        expected="an object with a write() method (sys.stdout, io.StringIO(), open(...)), "
        "or None for sys.stdout",
        received=describe(file), fix=f"{owner}(..., file=sys.stderr)"))


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


class _Bar(ChunkSafe, LoopElement):
    """What both bars share: they draw on process 0 only (decided at their first call)."""

    _silent: bool | None = None
    _reads_history = True  # in a loop, its values come from the history (BarValues)
    _skip = FollowsHistory._skipped


class KerasBar(_Bar):
    """A Keras-style progress line: ``80/100 [=====>...] - ETA: 4s - loss: 0.1234``.

    The ETA starts after the first step, so compilation does not inflate it. Losses and metrics
    are running means over the epoch (stateful metrics and occasional entries such as
    ``accuracy_test`` show their last value), read from the loop's history, so the bar sees every
    step wherever it sits. Called by hand (``bar(elapsed, logs)``) the line ends at ``total``.

    Args:
        total: steps the loop will run: a whole number >= 1 (numpy and 0-d JAX integers too) or
            ``gyre.at(steps=n)``; ``None`` shows a counter.
        interval: seconds between redraws (default 0.1 on a terminal, 10 otherwise).
        width: characters of the bar.
        file: an open text file (default ``sys.stdout``), not a path.
        values: ``"mean"`` (running means over the epoch) or ``"last"``.

    Example:
        >>> import gyre, io
        >>> out = io.StringIO()
        >>> bar = gyre.keras_bar(total=3, file=out)
        >>> _ = gyre.loop(None, range(3), {gyre.every(1): [lambda: gyre.logs().add_metric("m", 1.0), bar]})
        >>> out.getvalue().splitlines()[-1].startswith("3/3 [==============================]")
        True
    """

    @keywords_checked
    def __init__(
        self,
        total: int | Period | None = None,
        *,
        interval: float | None = None,
        width: int = 30,
        file: IO[str] | None = None,
        values: str = "mean",
    ) -> None:
        self.total = _check_total(total)
        self.file = _check_file(file, "keras_bar")
        self.width = whole(width, "width", minimum=1, problem="keras_bar's width must be a number of characters >= 1",
                           expected="width=30 (the characters between the brackets)", fix="pass width as an int, e.g. width=30")
        self._interval = _check_interval(interval, owner="keras_bar", optional=True)
        self._shown = BarValues(check_mode(values, "keras_bar"))
        self._in_loop = False
        self._t_first: float | None = None
        self._step_first = 0
        self._last_draw = -float("inf")
        self._steps = 0
        self._closed = False
        self._width_drawn = 0

    @property
    def _out(self) -> IO[str]:
        return self.file if self.file is not None else sys.stdout

    def _isatty(self) -> bool:
        isatty = getattr(self._out, "isatty", None)
        return bool(isatty and isatty())

    def __call__(self, elapsed: Elapsed, logs: Logs, loop: Any = None) -> None:
        if self._silent is not False and self._skip():
            return
        now = time.perf_counter()
        self._shown.see(elapsed, logs, loop)
        self._in_loop = loop is not None
        steps = self._steps = elapsed.steps + 1
        if self._t_first is None:
            self._t_first, self._step_first = now, steps
            self._closed = False
        interval = self._interval
        if interval is None:  # decided once: a terminal redraws often, a log file seldom
            interval = self._interval = 0.1 if self._isatty() else 10.0
        full = steps == self.total
        if full and self._in_loop:
            return  # the last line comes at the loop's end (on_loop_end), with every value
        if now - self._last_draw >= interval or full:
            self._draw(now, final=full)

    on_train_batch_end = __call__

    def on_loop_end(self) -> None:
        """Draws the final values and ends the line, once; ``on_train_end`` is the same.

        Example:
            >>> import gyre, io
            >>> out = io.StringIO()
            >>> bar = gyre.keras_bar(file=out)
            >>> bar(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 0.5))
            >>> bar.on_loop_end(); bar.on_loop_end()
            >>> out.getvalue().splitlines()[-1]
            '1 steps - 0s - loss: 0.5000'
        """
        if self._t_first is not None and not self._closed:
            self._draw(time.perf_counter(), final=True)

    on_train_end = on_loop_end

    def _draw(self, now: float, *, final: bool) -> None:
        values = self._shown.read(wait=final)
        self._last_draw = now
        steps, total = self._steps, self.total
        parts = []
        if total is not None:
            filled = int(self.width * min(steps, total) / total)
            arrow = ">" if filled < self.width else ""
            bar = "=" * max(filled - (1 if arrow else 0), 0) + arrow
            parts.append(f"{steps:>{len(str(total))}}/{total} [{bar:<{self.width}}]")
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
        if final:  # a later use starts a new line, drawn at once
            self._closed, self._t_first, self._last_draw = True, None, -float("inf")
            self._shown.reset()


keras_bar = KerasBar  # ciclo's name: one class, two spellings


def _check_tqdm_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    from tqdm.auto import tqdm
    from tqdm.std import tqdm as std_tqdm

    taken = {"iterable", "initial"}  # the bar sets them: it is called, the clock says where
    accepted: set[str] = set()
    for cls in {tqdm, std_tqdm}:
        params = inspect.signature(cls.__init__).parameters.values()
        accepted |= {p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD}
    accepted -= {"self", "total", *taken}  # total is tqdm_bar's own argument
    for name in kwargs:
        if name in taken:
            raise TypeError(explain(
                f"tqdm_bar sets tqdm's {name!r} itself",
                expected="tqdm options other than iterable and initial (the bar is called by the loop, and starts "
                "where the loop's clock does)", received=f"{name}={describe(kwargs[name])}",
                fix=f"remove {name}=; to continue a run, pass the loop its elapsed="))
        if name not in accepted:
            raise TypeError(explain(
                f"tqdm_bar got {name!r}, which tqdm does not take",
                expected=f"tqdm options: {', '.join(sorted(accepted))}",
                received=f"{name}={describe(kwargs[name])}", fix="check the name." + suggest(name, accepted)))
    if "file" in kwargs:
        _check_file(kwargs["file"], "tqdm_bar")
    return kwargs


class TqdmBar(_Bar):
    """A tqdm progress bar with the epoch's values as its postfix (shown as :func:`keras_bar` shows
    them).

    Args:
        total: as :func:`keras_bar`'s.
        interval: seconds between postfix updates.
        values: ``"mean"`` (running means over the epoch) or ``"last"``.
        **tqdm_kwargs: passed to ``tqdm`` (``desc``, ``file``, ``disable``...), checked when made.

    Example:
        >>> import gyre, io
        >>> bar = gyre.tqdm_bar(total=2, file=io.StringIO())
        >>> _ = gyre.loop(None, range(2), {gyre.every(1): bar})
    """

    def __init__(
        self, total: int | Period | None = None, *, interval: float = 0.5, values: str = "mean", **tqdm_kwargs: Any
    ) -> None:
        self.total = _check_total(total)
        self.interval = _check_interval(interval, owner="tqdm_bar", optional=False)
        self.tqdm_kwargs = _check_tqdm_kwargs(tqdm_kwargs)
        self._bar: Any = None
        self._shown = BarValues(check_mode(values, "tqdm_bar"))
        self._last_post = -float("inf")

    def __call__(self, elapsed: Elapsed, logs: Logs, loop: Any = None) -> None:
        if self._silent is not False and self._skip():
            return
        self._shown.see(elapsed, logs, loop)
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, initial=elapsed.steps, **self.tqdm_kwargs)
        steps = elapsed.steps + 1
        self._bar.update(steps - self._bar.n)
        now = time.perf_counter()
        if now - self._last_post >= self.interval:
            self._last_post = now
            self._bar.set_postfix(self._shown.read(), refresh=False)
        if self.total is not None and steps >= self.total and loop is None:
            self.on_loop_end()  # by hand; in a loop, at the loop's end

    on_train_batch_end = __call__

    def on_loop_end(self) -> None:
        """Shows the final values and closes the bar, once; ``on_train_end`` is the same.

        Example:
            >>> import gyre, io
            >>> out = io.StringIO()
            >>> bar = gyre.tqdm_bar(file=out, interval=0)
            >>> bar(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 0.5))
            >>> bar.on_loop_end(); bar.on_loop_end()
            >>> "loss=0.5" in out.getvalue()
            True
        """
        if self._bar is not None:
            self._bar.set_postfix(self._shown.read(wait=True), refresh=False)
            self._bar.close()
            self._bar = None
            self._shown.reset()

    on_train_end = on_loop_end


tqdm_bar = TqdmBar  # ciclo's name: one class, two spellings
