"""One format for every error a user can cause: what was expected, what came, how to fix it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def explain(problem: str, *, expected: str, received: str, fix: str) -> str:
    """Builds a teaching error message.

    Args:
        problem: one line naming what went wrong.
        expected: what gyre expected.
        received: what it got instead.
        fix: how to fix it.

    Returns:
        The message, one fact per line.

    Example:
        >>> print(explain("bad stop", expected="an int >= 1", received="0", fix="pass stop=100"))
        bad stop
          expected: an int >= 1
          received: 0
          fix: pass stop=100
    """
    return f"{problem}\n  expected: {expected}\n  received: {received}\n  fix: {fix}"


def describe(value: object, limit: int = 80) -> str:
    """A short description of a value for an error message: its type and a clipped repr.

    Example:
        >>> describe(3)
        'int 3'
    """
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(value).__name__} {text}"


def suggest(name: str, choices: Iterable[str]) -> str:
    """A 'did you mean' hint for a misspelt name, or an empty string.

    Example:
        >>> suggest("on_trian_step", ["on_train_step", "on_test_step"])
        " Did you mean 'on_train_step'?"
    """
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def whole_number(value: object, *, minimum: int, problem: str, expected: str, fix: str) -> int:
    """``value`` when it is an ``int`` (not a ``bool``) of at least ``minimum``, else a
    ``ValueError`` built by :func:`explain` from the caller's words.

    Example:
        >>> whole_number(3, minimum=1, problem="steps", expected="an int", fix="pass 3")
        3
        >>> whole_number(0, minimum=1, problem="steps must be >= 1", expected="an int >= 1",
        ...              fix="pass 1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: steps must be >= 1...
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise ValueError(explain(problem, expected=expected, received=describe(value), fix=fix))
