"""Reading logged values for display without ever waiting for the device.

``LaggedValues.push`` keeps a reference to each step's logs (no transfer). ``read`` picks the
newest pushed logs whose values are all computed, fetches them in one explicit transfer, and
merges them into the values shown so far, so an entry logged only at epoch ends
(``accuracy_test``) stays visible between epochs.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gyre.core.host import fetch, is_ready, to_python
from gyre.core.logs import Logs

DISPLAYED = ("losses", "metrics", "stateful_metrics")


class LaggedValues:
    """The latest *ready* scalar values of a stream of logs, for bars and console writers.

    Logs are remembered by their shape (which entries they hold), a few of each, so entries
    logged now and then (an evaluation at the end of an epoch) are not pushed out by the
    per-step ones before a redraw reads them.

    Example:
        >>> from gyre.core.logs import Logs
        >>> lagged = LaggedValues()
        >>> lagged.push(Logs().add_loss("loss", 0.5))
        >>> lagged.read()
        {'loss': 0.5}
    """

    def __init__(self, depth: int = 4) -> None:
        self._depth = depth
        self._by_shape: dict[tuple[Any, ...], deque[Logs]] = {}
        self._pushed: dict[tuple[Any, ...], int] = {}
        self._count = 0
        self.values: dict[str, Any] = {}

    def push(self, logs: Logs) -> None:
        """Remembers a step's logs (a reference only)."""
        if not logs:
            return
        shape = (*logs, *map(tuple, logs.values()))
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
                if wait or is_ready(pending[i]):
                    chosen.append(pending[i])
                    for _ in range(i + 1):  # it and everything older are done with
                        pending.popleft()
                    break
        if chosen:
            for host in fetch([_shown(c) for c in chosen]):
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
    return {c: dict(v) for c, v in logs.items() if c in DISPLAYED}
