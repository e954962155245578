"""Preemption: SIGTERM (and a caught Ctrl-C) ends the outermost loop cleanly at a step boundary;
on several processes every one stops at the same step (JAX's preemption sync point)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax

#: Signals received and not handled yet (a list, so the handler only appends).
_RECEIVED: list[int] = []
_DEPTH = threading.local()  # loops running on this thread: only the outermost catches signals


def depth() -> int:
    """How many loops run on this thread (1 inside the outermost, 0 outside any)."""
    return getattr(_DEPTH, "value", 0)


@contextlib.contextmanager
def guarded(*, catch_interrupt: bool) -> Iterator[Preemption]:
    """Counts a running loop on this thread; the outermost installs the preemption handlers."""
    _DEPTH.value = depth() + 1
    try:
        with Preemption(catch_interrupt=catch_interrupt, outermost=_DEPTH.value == 1) as guard:
            yield guard
    finally:
        _DEPTH.value -= 1


def requested() -> bool:
    """Whether a preemption signal arrived (cheap: the step path asks it)."""
    return bool(_RECEIVED)


def _handler(signum: int, frame: Any) -> None:
    if _RECEIVED:  # the second signal: stop now
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        sys.exit(128 + signum)
    _RECEIVED.append(signum)


class Preemption:
    """Installs the handlers for the outermost loop; ``check(first, end=first + 1)``, asked after
    steps ``first`` to ``end - 1``, says whether to stop now."""

    def __init__(self, *, catch_interrupt: bool, outermost: bool) -> None:
        self.catch_interrupt = catch_interrupt
        self.outermost = outermost
        self.install = outermost and threading.current_thread() is threading.main_thread()
        self.previous: dict[int, Any] = {}
        self.check: Callable[..., bool] = lambda first, end=None: bool(_RECEIVED)

    def __enter__(self) -> Preemption:
        if not self.outermost:
            self.check = lambda first, end=None: False  # an evaluation inside a step runs to its end
            return self
        if jax.process_count() > 1:
            # JAX's runtime handles SIGTERM and agrees on the step (a Ctrl-C keeps its meaning)
            from jax.experimental import multihost_utils

            reached = multihost_utils.reached_preemption_sync_point  # asked at every step
            self.check = lambda first, end=None: any(map(reached, range(first, end or first + 1)))
            return self
        signals: tuple[int, ...] = (signal.SIGTERM,)
        if self.catch_interrupt:
            signals += (signal.SIGINT,)
        if self.install:
            _RECEIVED.clear()
            for signum in signals:
                self.previous[signum] = signal.signal(signum, _handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        if self.install:
            _RECEIVED.clear()

    @staticmethod
    def signal_name() -> str:
        """The signal received, for messages (``"SIGTERM"``)."""
        return signal.Signals(_RECEIVED[0]).name if _RECEIVED else "SIGTERM"
