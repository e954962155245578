"""Reading logged values for display without ever waiting for the device.

``LaggedValues.push`` keeps a reference to each step's logs (no transfer, no look inside).
The engine hands the same ``Logs`` object to every callback of a step, and the callbacks
after a bar may still fill it: so the logs are sorted by their *shape* (which entries they
hold) only once their step is over, when the next step's logs arrive, and the newest logs
are read as they are at reading time. A bar listed before the step in a task table thus
shows the step's entries as well as one listed after it.

``read`` picks, for each shape, the newest logs whose values are all computed, fetches them
in one explicit transfer (:func:`gyre.core.host.fetch`), and merges them into the values
shown so far, so an entry logged only at epoch ends (``accuracy_test``) stays visible
between epochs.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gyre.core.host import fetch, is_ready, to_python
from gyre.core.logs import Logs

DISPLAYED = ("losses", "metrics", "stateful_metrics")

Shape = tuple[Any, ...]


class LaggedValues:
    """The latest *ready* scalar values of a stream of logs, for bars and console writers.

    Logs are remembered by their shape (which entries they hold), a few of each, so entries
    logged now and then (an evaluation at the end of an epoch) are not pushed out by the
    per-step ones before a redraw reads them. The newest logs are kept apart until the next
    push, since the callbacks after the reader may still be adding to them.

    Args:
        depth: how many logs of each shape are remembered while their values are computed.

    Example:
        >>> from gyre.core.logs import Logs
        >>> lagged = LaggedValues()
        >>> logs = Logs()
        >>> lagged.push(logs)  # pushed while still empty...
        >>> logs.add_loss("loss", 0.5)  # ...and filled afterwards by the step
        Logs(losses={'loss': 0.5})
        >>> lagged.read()
        {'loss': 0.5}
    """

    def __init__(self, depth: int = 4) -> None:
        self._depth = depth
        self._by_shape: dict[Shape, deque[Logs]] = {}
        self._pushed: dict[Shape, int] = {}
        self._count = 0
        self._open: Logs | None = None  # the newest logs: its step may still be logging
        self._seen_entries = False  # some earlier step logged something to display
        self.values: dict[str, Any] = {}

    def push(self, logs: Logs) -> None:
        """Remembers a step's logs (a reference only; pushing the same object again does
        nothing)."""
        if logs is self._open:
            return
        if self._open is not None:
            self._file(self._open)  # its step is over: its shape is final
        self._open = logs

    def awaiting_entries(self) -> bool:
        """True when the newest logs hold nothing to display yet while earlier ones did:
        the reader runs before the step that fills them (a bar listed before the step).

        Example:
            >>> from gyre.core.logs import Logs
            >>> lagged = LaggedValues()
            >>> lagged.push(Logs().add_loss("loss", 1.0)); lagged.push(Logs())
            >>> lagged.awaiting_entries()
            True
        """
        return self._seen_entries and self._open is not None and not _shown(self._open)

    def _file(self, logs: Logs) -> None:
        shape = tuple((c, tuple(v)) for c, v in logs.items() if c in DISPLAYED and v)
        if not shape:
            return
        self._seen_entries = True
        pending = self._by_shape.get(shape)
        if pending is None:
            pending = self._by_shape[shape] = deque(maxlen=self._depth)
        pending.append(logs)
        self._count += 1
        self._pushed[shape] = self._count

    def read(self, *, wait: bool = False) -> dict[str, Any]:
        """Updates and returns the values from the newest logs of each shape that are ready.

        Args:
            wait: take the newest logs even if the device is still computing them (use only
                when the loop is over).
        """
        chosen = []
        for shape in sorted(self._by_shape, key=self._pushed.__getitem__):
            pending = self._by_shape[shape]
            for i in range(len(pending) - 1, -1, -1):
                if wait or is_ready(_shown(pending[i])):
                    chosen.append(_shown(pending[i]))
                    for _ in range(i + 1):  # it and everything older are done with
                        pending.popleft()
                    break
        if self._open is not None:  # newest of all, read as it is now (it stays open)
            newest = _shown(self._open)
            if newest:
                self._seen_entries = True
                if wait or is_ready(newest):
                    chosen.append(newest)
        if chosen:
            for host in fetch(chosen):
                self._absorb(host)
        return self.values

    def _absorb(self, host: dict[str, Any]) -> None:
        names: dict[str, int] = {}
        for values in host.values():
            for name in values:
                names[name] = names.get(name, 0) + 1
        for collection, values in host.items():
            for name, value in values.items():
                value = to_python(value)
                if isinstance(value, (int, float)):
                    key = name if names[name] == 1 else f"{collection}.{name}"
                    self.values[key] = value


def _shown(logs: Logs) -> dict[str, Any]:
    return {c: dict(v) for c, v in logs.items() if c in DISPLAYED and v}
