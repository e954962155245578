"""``noop``: a callback that does nothing (a placeholder in a task table)."""

from __future__ import annotations

from typing import Any


def noop(*args: Any, **kwargs: Any) -> None:
    """Does nothing and returns ``None``.

    Example:
        >>> import gyre
        >>> _, _, elapsed = gyre.loop(None, range(3), {gyre.every(1): gyre.noop})
        >>> elapsed.steps
        3
    """
    return None
