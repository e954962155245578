"""``noop``: a callback that does nothing (a placeholder in a task table)."""

from __future__ import annotations

from typing import Any

from gyre.engine._tasks import LoopElement


class NoOp(LoopElement):
    """The type of :data:`noop`: called with anything, does nothing and returns ``None``;
    ``{**gyre.noop}`` spreads into a table.

    Example:
        >>> import gyre
        >>> gyre.noop(1, 2, x=3) is None, repr(gyre.noop)
        (True, 'gyre.noop')
        >>> _, _, elapsed = gyre.loop(None, range(3), {gyre.every(1): gyre.noop})
        >>> elapsed.steps
        3
        >>> [repr(k) for k in {**gyre.noop}]
        ['every(steps=1)']
    """

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "gyre.noop"


#: A callback that does nothing (the one instance of :class:`NoOp`).
noop = NoOp()
