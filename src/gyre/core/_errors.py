"""One format for every error a user can cause: what was expected, what came, how to fix it."""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])


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
    close = closest(name, choices)
    return f" Did you mean {close!r}?" if close else ""


def closest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to ``name`` (difflib's ratio at least ``cutoff``), or ``None``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def as_pair(result: object, who: str, names: str = "(state, outputs)",
            example: str = "state, {'loss': loss}") -> tuple[object, object]:
    """``result`` as a pair, else a ``TypeError`` saying that ``who`` must return ``names``
    (a missing ``return`` is the usual cause: it gives ``None``).
    """
    if isinstance(result, tuple | list) and len(result) == 2:
        return result[0], result[1]
    raise TypeError(explain(
        f"{who} must return {names}",
        expected=f"a pair {names}", received=describe(result),
        fix=f"end it with `return {example}` (a missing return gives None)"))


def as_integer(value: object) -> int | None:
    """``value`` as a Python ``int`` when it is an integral number of any kind (``int``,
    ``numpy.int64``, a 0-d integer numpy or JAX array), else ``None``. Booleans are not
    numbers here. Call it at construction time: reading a JAX array waits for the device.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    dtype = getattr(value, "dtype", None)
    if getattr(value, "shape", None) == () and getattr(dtype, "kind", None) in ("i", "u"):
        return int(value)  # type: ignore[call-overload]
    return None


def flag(value: object, name: str, who: str) -> bool:
    """``value`` as a ``bool`` when it is one (Python's or numpy's), else a ``TypeError``: a
    flag given ``"no"``, ``"False"``, ``0`` or ``None`` is refused, not taken for its truth.
    """
    if isinstance(value, bool | np.bool_):
        return bool(value)
    note = " (a non-empty string is true in Python)" if isinstance(value, str) and value else ""
    raise TypeError(explain(
        f"{who}'s {name} must be True or False",
        expected="a bool", received=describe(value) + note, fix=f"pass {name}=True or {name}=False"))


def whole_number(value: object, *, minimum: int, problem: str, expected: str, fix: str) -> int:
    """``value`` as an ``int`` when it is an integral number (see :func:`as_integer`) of at
    least ``minimum``, else a ``ValueError`` built by :func:`explain` from the caller's words.

    Example:
        >>> import numpy as np
        >>> whole_number(np.int64(3), minimum=1, problem="steps", expected="an int", fix="pass 3")
        3
        >>> whole_number(0, minimum=1, problem="steps must be >= 1", expected="an int >= 1",
        ...              fix="pass 1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: steps must be >= 1...
    """
    number = as_integer(value)
    if number is not None and number >= minimum:
        return number
    raise ValueError(explain(problem, expected=expected, received=describe(value), fix=fix))


# Other libraries' names for gyre's keywords: a keyword not in a signature but listed here is
# named with its gyre counterpart, when the signature has it (Keras, Lightning, orbax, ciclo).
KEYWORD_ALIASES: dict[str, tuple[str, ...]] = {
    "max_to_keep": ("keep",),
    "save_top_k": ("keep_best",),
    "num_epochs": ("stop", "epochs"),
    "n_epochs": ("stop", "epochs"),
    "max_epochs": ("stop", "epochs"),
    "epochs": ("stop",),
    "num_steps": ("stop",),
    "max_steps": ("stop",),
    "steps": ("stop",),
    "total_steps": ("stop",),
    "validation_data": ("test_dataset",),
    "val_dataset": ("test_dataset",),
    "eval_dataset": ("test_dataset",),
    "valid_dataset": ("test_dataset",),
    "train_dataset": ("dataset",),
    "steps_per_epoch": ("epoch_duration",),
    "validation_steps": ("test_duration",),
    "shuffle_seed": ("seed",),
    "drop_last": ("drop_remainder",),
    "metric": ("monitor",),
    "ckpt_dir": ("directory",),
    "checkpoint_dir": ("directory",),
    "path": ("directory",),
}


def unknown_keyword(who: str, name: str, known: Iterable[str]) -> str:
    """The message for a keyword ``who`` does not take: the closest known name (a misspelling,
    or another library's name for it, from :data:`KEYWORD_ALIASES`), and the known names.
    """
    known = list(known)
    alias = next((a for a in KEYWORD_ALIASES.get(name, ()) if a in known), None)
    if alias is not None:
        fix = f"use {alias}= (gyre's name for {name})"
    else:
        close = closest(name, known)
        fix = f"did you mean {close}=?" if close else "use one of the expected names"
    return explain(
        f"{who}() got an unexpected keyword argument {name!r}",
        expected=f"one of {known}", received=f"{name}=...", fix=fix,
    )


def keywords_checked(func: F) -> F:
    """Decorates a public function so that an unknown keyword raises a ``TypeError`` naming
    the closest keyword it takes (see :func:`unknown_keyword`) instead of Python's bare
    "unexpected keyword argument". The check is one set lookup per keyword given.
    """
    params = inspect.signature(func).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return func
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    known = frozenset(names)
    who = getattr(func, "__qualname__", func.__name__)

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for key in kwargs:
            if key not in known:
                raise TypeError(unknown_keyword(who, key, names))
        return func(*args, **kwargs)

    return checked  # type: ignore[return-value]


class ExplainedKeyError(KeyError):
    """A ``KeyError`` that prints its message as written (Python prints a plain
    ``KeyError``'s message as its repr: one line with literal ``\\n``).

    Example:
        >>> str(ExplainedKeyError("no entry 'los'\\n  fix: use 'loss'"))
        "no entry 'los'\\n  fix: use 'loss'"
    """

    __module__ = "gyre.core"  # its public path, in tracebacks and reprs

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class LoopWarning(UserWarning):
    """Something a loop did that the user probably did not intend (the data ended before
    ``stop``, a Ctrl-C, fused chunks cut short, a train step that returns no state): said
    once, never silent.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("the data ended early", LoopWarning)
        >>> caught[0].category.__name__
        'LoopWarning'
    """

    __module__ = "gyre"  # its public path, in tracebacks and reprs


def warn(message: str, category: type[Warning] = LoopWarning) -> None:
    """Issues a warning attributed to the user's code: the first caller outside gyre (so the
    warning shows the user's line, and ``-W error`` filters on their module work).
    """
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)
