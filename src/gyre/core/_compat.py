"""Every use of a private JAX API in gyre, each behind a small function with a fallback and a
test in ``tests/core/test_compat.py``, so a JAX upgrade that breaks one fails one test.
"""

from __future__ import annotations

import types
from typing import Any

import jax


def is_jitted(fn: Any) -> bool:
    """True when ``fn`` is a ``jax.jit``-wrapped function (public: ``jax.stages.Wrapped``)."""
    if type(fn) is JITTED:  # the common cases, without the slow protocol check
        return True
    if isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    return callable(getattr(fn, "lower", None)) and isinstance(fn, jax.stages.Wrapped)  # cheap test first


#: The type of a ``jax.jit`` function itself (not of a wrapper around one).
JITTED = type(jax.jit(lambda x: x))


def donated_argnums(fn: Any) -> tuple[int, ...] | None:
    """The arguments a ``jax.jit`` function donates, or ``None`` (private ``_jit_info``)."""
    info = getattr(fn, "_jit_info", None)
    donated = getattr(info, "donate_argnums", None)
    return None if donated is None else tuple(donated)


def cache_size(fn: Any) -> int:
    """How many compiled programs a ``jax.jit`` function holds (private); 0 for anything else."""
    size = getattr(fn, "_cache_size", None)
    return int(size()) if callable(size) else 0


def backends_started() -> bool:
    """True once JAX started its backends (private ``backends_are_initialized``; else False)."""
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - a JAX without the module
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else False
