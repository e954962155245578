"""The check vocabulary: one call per value at a public door, each building the expected /
received / fix text of :func:`~gyre.core._errors.explain` from its fields; inside, the value
is trusted. ``name`` is the value's name as the user wrote it (``"steps"``,
``"EarlyStopping's patience"``); ``problem``, ``expected`` and ``fix`` replace the derived
lines when the call site knows better words (an example, the meaning of each option).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import jax

from gyre.core._errors import as_integer, describe, explain, suggest

T = TypeVar("T")


def _fail(error: type[Exception], problem: str, expected: str, value: object, fix: str) -> Exception:
    """The error ``error`` with the explained message (returned for the caller to raise)."""
    return error(explain(problem, expected=expected, received=describe(value), fix=fix))


def whole(
    value: Any, name: str, *, minimum: int = 0, maximum: int | None = None, none: bool = False,
    device: bool = False, unit: str = "", problem: str | None = None, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = ValueError,
) -> Any:
    """``value`` as a Python ``int`` when it is a whole number (``int``, ``numpy.int64``, a
    0-d integer array; not a bool, not ``2.0``) in ``[minimum, maximum]``, or ``None`` when
    ``none`` allows it; else ``error`` saying so (a whole number of ``unit``, when given).
    ``device``: a 0-d integer JAX array is returned unread (reading it would wait for the
    device; a writer's thread reads it later).

    Example:
        >>> import numpy as np
        >>> whole(np.int64(3), "steps", minimum=1)
        3
        >>> whole(0, "steps", minimum=1, fix="pass stop=100")
        Traceback (most recent call last):
        ValueError: steps must be a whole number >= 1
          expected: an int >= 1
          received: int 0
          fix: pass stop=100
    """
    if (value is None and none) or (device and _device_integer(value)):
        return value
    number = as_integer(value)
    if number is not None and number >= minimum and (maximum is None or number <= maximum):
        return number
    bound = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    wanted = f"an int {bound}" + (" or None" if none else "")
    unit = f"of {unit} " if unit else ""
    raise _fail(error, problem or f"{name} must be a whole number {unit}{bound}", expected or wanted, value,
                fix or f"pass {wanted}")


def _device_integer(value: object) -> bool:
    """Whether ``value`` is a 0-d integer JAX array."""
    return isinstance(value, jax.Array) and value.ndim == 0 and value.dtype.kind in "iu"


def path(value: Any, problem: str, *, expected: str, fix: str) -> str:
    """``value`` as a ``str`` when it is a non-empty ``str`` or ``os.PathLike`` naming a
    file or folder (bytes are refused), else a ``TypeError`` explaining ``problem``.

    Example:
        >>> import pathlib
        >>> path(pathlib.Path("runs"), "a writer needs a folder", expected="a str or Path", fix="pass 'runs'")
        'runs'
    """
    if isinstance(value, str | os.PathLike) and not isinstance(value, bytes) and os.fspath(value):
        return os.fspath(value)
    raise _fail(TypeError, problem, expected, value, fix)


def real(
    value: Any, name: str, *, minimum: float | None = None, above: float | None = None,
    maximum: float | None = None, below: float | None = None, none: bool = False,
    text: bool = False, unit: str = "", problem: str | None = None, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = ValueError,
) -> Any:
    """``value`` as a finite Python ``float`` within the bounds given (``minimum`` <= value,
    ``above`` < value, value <= ``maximum``, value < ``below``), or ``None`` when ``none``
    allows it; a numeric string such as ``"1e-3"`` counts when ``text`` is set (as PyYAML
    reads it). Else ``error`` saying so (a number of ``unit``, when given).

    Example:
        >>> real(3, "learning_rate", above=0)
        3.0
        >>> real(float("nan"), "learning_rate", above=0)
        Traceback (most recent call last):
        ValueError: learning_rate must be a finite number > 0
          expected: a float > 0
          received: float nan
          fix: pass a number > 0
    """
    if value is None and none:
        return None
    number: float | None = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
    elif text and isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    limits = ((minimum, ">=", float.__ge__), (above, ">", float.__gt__),
              (maximum, "<=", float.__le__), (below, "<", float.__lt__))
    if number is not None and math.isfinite(number) and all(
        limit is None or holds(number, float(limit)) for limit, _, holds in limits
    ):
        return number
    bound = " and ".join(f"{sign} {limit}" for limit, sign, _ in limits if limit is not None)
    bound = f" {bound}" if bound else ""
    unit = f" of {unit}" if unit else ""
    raise _fail(error, problem or f"{name} must be a finite number{unit}{bound}",
                expected or f"a float{bound}" + (" or None" if none else ""), value,
                fix or f"pass a number{bound}")


def choice(
    value: Any, name: str, options: Iterable[Any], *, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = ValueError,
) -> Any:
    """``value`` when it is one of ``options``, else ``error`` naming them and, for a
    misspelt string, the closest one.

    Example:
        >>> choice("min", "mode", ("min", "max"))
        'min'
        >>> choice("mni", "mode", ("min", "max"))
        Traceback (most recent call last):
        ValueError: mode must be 'min' or 'max'
          expected: 'min' or 'max'
          received: str 'mni'
          fix: pass one of them. Did you mean 'min'?
    """
    options = tuple(options)
    with contextlib.suppress(TypeError):  # an unhashable value is simply not an option
        if value in options:
            return value
    listing = " or ".join(map(repr, options)) if len(options) == 2 else "one of " + ", ".join(map(repr, options))
    hint = suggest(value, [o for o in options if isinstance(o, str)]) if isinstance(value, str) else ""
    raise _fail(error, f"{name} must be {listing}", expected or listing, value,
                (fix or "pass one of them.") + hint)


def instance(
    value: T, name: str, types: type | tuple[type, ...], *, none: bool = False,
    kind: str | None = None, problem: str | None = None, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = TypeError,
) -> T:
    """``value`` when it is an instance of ``types`` (or ``None`` when ``none`` allows it),
    else ``error`` (a ``TypeError``) saying what was expected; ``kind`` names the types in
    words (``"a mapping"``; by default their class names).

    Example:
        >>> instance("runs", "directory", str)
        'runs'
        >>> instance(3, "directory", (str, bytes), fix="pass directory='runs'")
        Traceback (most recent call last):
        TypeError: directory must be a str or bytes
          expected: a str or bytes
          received: int 3
          fix: pass directory='runs'
    """
    if isinstance(value, types) or (none and value is None):
        return value
    kinds = types if isinstance(types, tuple) else (types,)
    wanted = (kind or "a " + " or ".join(t.__name__ for t in kinds)) + (" or None" if none else "")
    raise _fail(error, problem or f"{name} must be {wanted}", expected or wanted, value, fix or f"pass {wanted}")


def mapping(
    value: Any, name: str, *, known: Iterable[str] | None = None, kind: str | None = None,
    expected: str | None = None, fix: str | None = None, error: type[Exception] = ValueError,
) -> dict[str, Any]:
    """``value`` as a ``dict`` when it is a mapping with string keys (else a ``TypeError``),
    each of them in ``known`` when given (else ``error`` naming the first unknown key and
    the closest known one).

    Example:
        >>> mapping({"loss": 1.0}, "metrics", known=["loss", "accuracy"])
        {'loss': 1.0}
        >>> mapping({"acuracy": 1.0}, "metrics", known=["loss", "accuracy"])
        Traceback (most recent call last):
        ValueError: unknown key 'acuracy' in metrics. Did you mean 'accuracy'?
          expected: keys among ['loss', 'accuracy']
          received: str 'acuracy'
          fix: use one of the known keys
    """
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        wanted = kind or "a mapping with string keys"
        raise _fail(TypeError, f"{name} must be {wanted}", expected or wanted, value, fix or "pass a dict")
    if known is not None:
        known = list(known)
        for key in value:
            if key not in known:
                raise _fail(error, f"unknown key {key!r} in {name}.{suggest(key, known)}", f"keys among {known}", key,
                            fix or "use one of the known keys")
    return dict(value)
