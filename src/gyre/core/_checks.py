"""The check vocabulary: one call per value at a public door, building the expected / received /
fix text of :func:`~gyre.core._errors.explain` from its fields; ``name`` is the value's name as
the user wrote it, and ``problem``/``expected``/``fix`` replace the derived lines when given.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import numbers
import os
from collections.abc import Iterable, Mapping
from types import ModuleType
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
    """``value`` as an ``int`` when a whole number in range (not a bool, not 2.0), else ``error``.

    ``none`` allows ``None``; ``device`` returns a 0-d JAX integer unread (no device wait).
    """
    device_integer = device and isinstance(value, jax.Array) and value.ndim == 0 and value.dtype.kind in "iu"
    if (value is None and none) or device_integer:
        return value
    number = as_integer(value)
    if number is not None and number >= minimum and (maximum is None or number <= maximum):
        return number
    bound = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    wanted = f"an int {bound}" + (" or None" if none else "")
    unit = f"of {unit} " if unit else ""
    raise _fail(error, problem or f"{name} must be a whole number {unit}{bound}", expected or wanted, value,
                fix or f"pass {wanted}")


def path(value: Any, problem: str, *, expected: str, fix: str) -> str:
    """``value`` as a ``str`` when a non-empty ``str`` or ``os.PathLike``, else a ``TypeError``."""
    if isinstance(value, str | os.PathLike) and not isinstance(value, bytes) and os.fspath(value):
        return os.fspath(value)
    raise _fail(TypeError, problem, expected, value, fix)


def real(
    value: Any, name: str, *, minimum: float | None = None, above: float | None = None,
    maximum: float | None = None, below: float | None = None, none: bool = False,
    text: bool = False, unit: str = "", problem: str | None = None, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = ValueError,
) -> Any:
    """``value`` as a finite ``float`` within the bounds given, else ``error``.

    ``text`` accepts numeric strings such as ``"1e-3"`` (as PyYAML reads them).
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


def scalar(
    value: Any, name: str, *, problem: str | None = None, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = ValueError,
) -> Any:
    """``value`` when it is one number (a Python number or a 0-d array: its shape is read, never
    its contents), else ``error``."""
    shape = getattr(value, "shape", ())
    if shape == ():
        return value
    raise error(explain(problem or f"{name} must be one number", expected=expected or "a number or a 0-d array",
                        received=f"a {name} of shape {tuple(shape)}", fix=fix or "pass one number"))


def choice(
    value: Any, name: str, options: Iterable[Any], *, expected: str | None = None,
    fix: str | None = None, error: type[Exception] = ValueError,
) -> Any:
    """``value`` when one of ``options``, else ``error`` naming them and the closest."""
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
    """``value`` when an instance of ``types`` (``kind``: them in words), else a ``TypeError``."""
    if isinstance(value, types) or (none and value is None):
        return value
    kinds = types if isinstance(types, tuple) else (types,)
    wanted = (kind or "a " + " or ".join(t.__name__ for t in kinds)) + (" or None" if none else "")
    raise _fail(error, problem or f"{name} must be {wanted}", expected or wanted, value, fix or f"pass {wanted}")


def mapping(
    value: Any, name: str, *, known: Iterable[str] | None = None, kind: str | None = None,
    expected: str | None = None, fix: str | None = None, error: type[Exception] = ValueError,
) -> dict[str, Any]:
    """``value`` as a ``dict`` with string keys, each in ``known`` when given, else the error."""
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


def require(module: str, who: str, *, extra: str | None = None, package: str | None = None,
            fix: str | None = None) -> ModuleType:
    """``module`` imported, or an ``ImportError`` saying that ``who`` needs ``package`` (default:
    the module's top name) and how to install it: the extra ``gyre[extra]``, or ``fix``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        package = package or module.partition(".")[0]
        where = f" (the extra gyre[{extra}])" if extra else " (gyre does not depend on it)"
        raise ImportError(explain(
            f"{who} needs {package}, which is not installed", expected=f"{package} importable{where}",
            received=f"{type(err).__name__}: {err}", fix=fix or f"pip install 'gyre[{extra}]'")) from err
