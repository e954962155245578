"""The ``--dispatch-wait-on call`` stand-in for a host-bound GPU: every ``jax.jit`` call waits.

On a virtualised GPU one call of a compiled function costs 170-290 us of host time, most of it
outside the GIL, whatever the function computes. :func:`install` replaces ``jax.jit`` so that
every function compiled afterwards sleeps ``wait_us`` microseconds (outside the GIL) before
each call: the user's step in a hand-written loop, and every compiled call gyre makes (the
step wrapped to write its history, a fused chunk, the history's transfers) alike. It must run
before gyre (or anything that compiles at import) is imported, so that gyre's own compiled
functions are made by it too: the benchmarks call :func:`install_from_argv` first.

A fused call of K steps pays one wait for K steps, as it pays one dispatch on a GPU: this is
the stand-in under which fusing's gain shows (``loop_overhead.py --fused-table``).

Example:
    >>> import jax
    >>> restore = install(10.0)
    >>> f = jax.jit(lambda x: x + 1)
    >>> type(f).__name__, int(f(1))
    ('SlowJit', 2)
    >>> install(10.0)()  # a second install changes nothing
    >>> restore()
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import jax


class SlowJit:
    """A ``jax.jit`` function whose every call first sleeps (see the module docs); anything
    else (``lower``, ``_cache_size``, ...) is the jitted function's."""

    def __init__(self, jitted: Any, wait: float) -> None:
        self._jitted = jitted
        self._wait = wait
        self.__wrapped__ = jitted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self._wait)
        return self._jitted(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jitted, name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # a jitted method
        return self if obj is None else (lambda *args, **kwargs: self(obj, *args, **kwargs))


def install(wait_us: float) -> Callable[[], None]:
    """Makes ``jax.jit`` return :class:`SlowJit` functions; returns the function that undoes it."""
    real = jax.jit
    if getattr(real, "_slow_jit", False):  # installed already (a module imported twice: once
        return lambda: None  # as __main__): a second wrapper would make every call wait twice
    wait = wait_us / 1e6

    def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:  # @jax.jit(static_argnums=...)
            return lambda f: jit(f, *args, **kwargs)
        return SlowJit(real(fun, *args, **kwargs), wait)

    jit._slow_jit = True  # type: ignore[attr-defined]
    jax.jit = jit

    def restore() -> None:
        jax.jit = real

    return restore


def install_from_argv(argv: list[str] | None = None) -> None:
    """:func:`install` when the command line has a nonzero ``--dispatch-wait-us`` and not
    ``--dispatch-wait-on data``; called before gyre is imported.

    Example:
        >>> install_from_argv(["bench.py", "--dispatch-wait-us", "0"])  # nothing to install
    """
    argv = sys.argv if argv is None else argv
    if "--dispatch-wait-us" not in argv:
        return
    wait = float(argv[argv.index("--dispatch-wait-us") + 1])
    on = argv[argv.index("--dispatch-wait-on") + 1] if "--dispatch-wait-on" in argv else "call"
    if wait and on == "call":
        install(wait)
