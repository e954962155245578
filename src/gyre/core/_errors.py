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
    """A teaching error message: ``problem``, then ``expected``, ``received`` and ``fix`` lines."""
    return f"{problem}\n  expected: {expected}\n  received: {received}\n  fix: {fix}"


def describe(value: object, limit: int = 80) -> str:
    """A value's type and clipped repr, for an error message."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(value).__name__} {text}"


def suggest(name: str, choices: Iterable[str]) -> str:
    """A ``" Did you mean 'x'?"`` hint for a misspelt name, or an empty string."""
    close = closest(name, choices)
    return f" Did you mean {close!r}?" if close else ""


def closest(name: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to ``name`` (difflib's ratio at least ``cutoff``), or ``None``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=cutoff)
    return close[0] if close else None


def as_pair(result: object, who: str, names: str = "(state, outputs)",
            example: str = "state, {'loss': loss}") -> tuple[object, object]:
    """``result`` as a pair, else a ``TypeError`` saying that ``who`` must return ``names``."""
    if isinstance(result, tuple | list) and len(result) == 2:
        return result[0], result[1]
    raise TypeError(explain(
        f"{who} must return {names}",
        expected=f"a pair {names}", received=describe(result),
        fix=f"end it with `return {example}` (a missing return gives None)"))


def as_integer(value: object) -> int | None:
    """``value`` as an ``int`` when integral (not a bool), else ``None``; reads device arrays."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    dtype = getattr(value, "dtype", None)
    if getattr(value, "shape", None) == () and getattr(dtype, "kind", None) in ("i", "u"):
        return int(value)  # type: ignore[call-overload]
    return None


def flag(value: object, name: str, who: str) -> bool:
    """``value`` as a ``bool`` when one (Python's or numpy's), else a ``TypeError``."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    note = " (a non-empty string is true in Python)" if isinstance(value, str) and value else ""
    raise TypeError(explain(
        f"{who}'s {name} must be True or False",
        expected="a bool", received=describe(value) + note, fix=f"pass {name}=True or {name}=False"))


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
    "elapsed": ("initial",),  # gyre.elapse continues a clock from initial= (the loops: elapsed=)
}


def unknown_keyword(who: str, name: str, known: Iterable[str]) -> str:
    """The message for a keyword ``who`` does not take: the closest name, and the known ones."""
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
    """Makes a function's unknown-keyword ``TypeError`` name the closest keyword it takes."""
    params = inspect.signature(func).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return func
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    known = frozenset(names)
    who = getattr(func, "__qualname__", func.__name__).removesuffix(".__init__")  # a class: its name

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for key in kwargs:
            if key not in known:
                raise TypeError(unknown_keyword(who, key, names))
        return func(*args, **kwargs)

    return checked  # type: ignore[return-value]


class ExplainedKeyError(KeyError):
    r"""A ``KeyError`` that prints its message as written, not as a one-line repr.

    Example:
        >>> str(ExplainedKeyError("no entry 'los'\n  fix: use 'loss'"))
        "no entry 'los'\n  fix: use 'loss'"
    """

    __module__ = "gyre.core"  # its public path, in tracebacks and reprs

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class LoopWarning(UserWarning):
    """Something a loop did that the user probably did not intend, said once.

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
    """Issues a warning attributed to the first caller outside gyre."""
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)
