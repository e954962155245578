"""Helpers for tests of JAX training code: count compilations, assert a step compiles once.

They count the programs XLA builds through ``jax.monitoring`` events, so they work for anything
that compiles (``jax.jit`` functions, managed steps, ``gyre.Step``); a program taken from the
persistent compilation cache counts too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import jax
import numpy as np

from gyre.core._errors import describe, explain

__all__ = [
    "Compilation",
    "CompilationCounter",
    "CompiledOnceCheck",
    "assert_compiled_once",
    "count_compilations",
]

#: The ``jax.monitoring`` event of each program built (or taken from the persistent cache).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@dataclass(frozen=True)
class Compilation:
    """One program built by JAX; ``call`` is the checked function's call index (``None`` outside
    one).

    Example:
        >>> Compilation("jit(step)", 0.5, call=0).name
        'jit(step)'
    """

    name: str
    seconds: float
    call: int | None = None


class CompilationCounter:
    """Counts the programs JAX builds in this thread during a ``with`` block
    (:func:`count_compilations`).

    Example:
        >>> import gyre, jax, jax.numpy as jnp
        >>> f = jax.jit(lambda x: x + 1)
        >>> two, five = jnp.ones(2), jnp.ones(5)
        >>> with gyre.testing.count_compilations() as compiled:
        ...     _ = f(two); _ = f(two); _ = f(five)
        >>> compiled.count, compiled.names
        (2, ['jit(<lambda>)', 'jit(<lambda>)'])
    """

    def __init__(self) -> None:
        self.compilations: list[Compilation] = []
        self._thread: int | None = None
        self._listening = False

    @property
    def count(self) -> int:
        """How many programs were built."""
        return len(self.compilations)

    @property
    def names(self) -> list[str]:
        """The names of the programs built, in order."""
        return [c.name for c in self.compilations]

    def report(self) -> str:
        """One line per program built (name and seconds)."""
        if not self.compilations:
            return "no compilation"
        return "\n".join(f"{c.name} ({c.seconds:.2f}s)" for c in self.compilations)

    def __repr__(self) -> str:
        return f"<CompilationCounter count={self.count} names={self.names}>"

    def _record(self, name: str, seconds: float) -> None:
        self.compilations.append(Compilation(name, seconds))

    def _on_event(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == COMPILE_EVENT and threading.get_ident() == self._thread:
            self._record(str(kwargs.get("fun_name", "?")), float(duration))

    def __enter__(self) -> CompilationCounter:
        if self._listening:
            raise RuntimeError(explain(
                "this compilation counter is already counting",
                expected="one with-block per counter", received="a second `with` on the same counter",
                fix="create a new one with gyre.testing.count_compilations()"))
        self._thread = threading.get_ident()
        self._listening = True
        jax.monitoring.register_event_duration_secs_listener(self._on_event)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._listening:
            jax.monitoring.unregister_event_duration_listener(self._on_event)
            self._listening = False


def count_compilations() -> CompilationCounter:
    """A :class:`CompilationCounter` of every program JAX builds in this thread during the block.

    Eager operations count too (``jnp.zeros(...)`` compiles once per shape); to attribute
    compilations to one function, use :func:`assert_compiled_once`.

    Example:
        >>> import gyre, jax, jax.numpy as jnp
        >>> step = jax.jit(lambda s, b: s + b.sum())
        >>> _ = step(0.0, jnp.ones(4))  # compiled here
        >>> with gyre.testing.count_compilations() as compiled:
        ...     for _ in range(3):
        ...         _ = step(1.0, jnp.ones(4))
        >>> compiled.count  # no recompilation
        0
    """
    return CompilationCounter()


# -- argument signatures ------------------------------------------------------------------------


def _sharding_text(sharding: Any) -> str:
    spec = getattr(sharding, "spec", None)
    if spec is not None:
        mesh = getattr(sharding, "mesh", None)
        shape = dict(getattr(mesh, "shape", {}) or {})
        return f"{spec} on mesh {shape}"
    devices = getattr(sharding, "device_set", None)
    if devices and len(devices) == 1:
        return f"on {next(iter(devices))}"
    return type(sharding).__name__


def _leaf_signature(leaf: Any) -> tuple[str, str]:
    """(type, placement) of one argument leaf, as a compilation sees it."""
    if isinstance(leaf, jax.Array):
        weak = " (weakly typed)" if getattr(leaf, "weak_type", False) else ""
        try:
            placed = _sharding_text(leaf.sharding)
        except Exception:  # noqa: BLE001 - a deleted or abstract array
            placed = "?"
        return f"{leaf.dtype}{list(leaf.shape)}{weak}", placed
    if isinstance(leaf, np.ndarray | np.generic):
        return f"{leaf.dtype}{list(np.shape(leaf))} (numpy)", "host"
    if isinstance(leaf, bool | int | float | complex | str):
        return f"{type(leaf).__name__} {leaf!r}", "host"
    return type(leaf).__name__, "host"


@dataclass
class _Signature:
    treedef: Any
    leaves: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Signature:
        pairs, treedef = jax.tree_util.tree_flatten_with_path((args, kwargs))
        return cls(treedef, {  # a leaf's path: args[1][0], kwargs['x']
            ("args" if getattr(head, "idx", None) == 0 else "kwargs") + jax.tree_util.keystr(tuple(rest)):
                _leaf_signature(leaf) for (head, *rest), leaf in pairs})

    def changes_since(self, before: _Signature, limit: int = 8) -> list[str]:
        lines = [f"{path}: gone (was {before.leaves[path][0]})" for path in before.leaves.keys() - self.leaves.keys()]
        lines += [f"{path}: new ({self.leaves[path][0]})" for path in self.leaves.keys() - before.leaves.keys()]
        for path, (kind, placed) in self.leaves.items():
            old = before.leaves.get(path)
            if old is None:
                continue
            if old[0] != kind:
                lines.append(f"{path}: {old[0]} -> {kind}")
            elif old[1] != placed:
                lines.append(f"{path}: placed {old[1]} -> {placed}")
        if not lines and self.treedef != before.treedef:
            lines.append("same leaves, but the tree structure or a static field changed (a container "
                         "type, a flax struct's static field such as a state's strategy or apply_fn)")
        lines.sort()
        if len(lines) > limit:
            lines = [*lines[:limit], f"... and {len(lines) - limit} more"]
        return lines


# -- assert_compiled_once ---------------------------------------------------------------------


class CompiledOnceCheck(CompilationCounter):
    """The checker :func:`assert_compiled_once` returns; it passes on the function's attributes and
    signature.

    Example:
        >>> import gyre, jax, jax.numpy as jnp
        >>> with gyre.testing.assert_compiled_once(jax.jit(jnp.sin)) as sin:
        ...     _ = sin(jnp.zeros(2)); _ = sin(jnp.ones(2))
        >>> sin.calls, sin.count
        (2, 1)
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        self.calls = 0
        self._current: int | None = None
        self._signatures: dict[int, _Signature] = {}
        functools.update_wrapper(self, fn, updated=())  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # the wrapped function's attributes
        if name.startswith("__") or name == "fn":
            raise AttributeError(name)
        return getattr(self.fn, name)

    def _record(self, name: str, seconds: float) -> None:
        if self._current is not None:
            self.compilations.append(Compilation(name, seconds, call=self._current))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._listening:
            raise RuntimeError(explain(
                "the compiled-once checker is called outside its with-block",
                expected="calls inside `with gyre.testing.assert_compiled_once(fn) as fn:`",
                received=f"a call of {_name_of(self.fn)} after (or before) the block",
                fix="call the function itself outside the block, or move the call inside"))
        index, outer = self.calls, self._current
        self.calls += 1
        before = self.count
        signature = _Signature.of(args, kwargs)
        self._current = index if outer is None else outer  # a nested call counts for the outer
        try:
            return self.fn(*args, **kwargs)
        finally:
            self._current = outer
            if self.count > before or not self._signatures:
                self._signatures[index] = signature

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        super().__exit__(exc_type, *exc)  # type: ignore[arg-type]
        if exc_type is None:
            self.check()

    def check(self) -> None:
        """Raises ``AssertionError`` unless exactly one compilation happened so far."""
        name = _name_of(self.fn)
        if self.calls == 0:
            raise AssertionError(explain(
                f"{name} was never called through the checker",
                expected="calls of the object the with-statement gives", received="no call",
                fix=f"write `with gyre.testing.assert_compiled_once({name}) as {name}:` and "
                f"call {name}(...) (or put it in the loop's task table) inside the block"))
        if self.count == 1:
            return
        if self.count == 0:
            raise AssertionError(explain(
                f"{name} was not compiled during its {self.calls} call(s)",
                expected="one compilation, at the first call",
                received="none: it was compiled before the block (an earlier call with the "
                "same argument types), or it does not compile (run eagerly)",
                fix="check a fresh function, or, to check that an already compiled function does not "
                "compile again, assert `.count == 0` on gyre.testing.count_compilations()"))
        raise AssertionError(explain(
            f"{name} compiled {self.count} times in {self.calls} calls, expected once",
            expected="one compilation, at the first call, and none after",
            received=f"{self.count} compilations:\n" + self._explain_calls(),
            fix="give every call the same shapes, dtypes, shardings and tree structure (pad or drop a short "
            "last batch; keep Python scalars and static fields the same), build the function once outside "
            "the loop, and run no new operation eagerly inside it"))

    def _explain_calls(self) -> str:
        by_call: dict[int, list[Compilation]] = {}
        for c in self.compilations:
            by_call.setdefault(c.call if c.call is not None else -1, []).append(c)
        first = min(by_call)
        lines = []
        for call, compiled in sorted(by_call.items()):
            names = ", ".join(f"{c.name} ({c.seconds:.2f}s)" for c in compiled)
            lines.append(f"    call {call}: compiled {names}")
            if call != first and call in self._signatures and first in self._signatures:
                changes = self._signatures[call].changes_since(self._signatures[first])
                if changes:
                    lines.append(f"      changed since call {first}:")
                    lines.extend(f"        {change}" for change in changes)
                else:
                    lines.append(f"      the arguments look as at call {first}: the function was "
                                 "re-created (a new jax.jit per call?), a Python value it closes over or "
                                 "a static argument changed, or an operation ran eagerly for the first time")
            elif call == first and len(compiled) > 1:
                lines.append("      several programs in one call: the function runs operations outside "
                             "jit (eagerly, each compiled once per shape), or calls several jitted functions")
        return "\n".join(lines)


def assert_compiled_once(fn: Callable[..., Any]) -> CompiledOnceCheck:
    """A context manager asserting ``fn`` compiles exactly once during the calls made through it in
    the block.

    Use what the ``with`` statement gives in place of ``fn`` (call it, or put it in a task
    table); only compilations during its calls count.

    Raises:
        AssertionError: at the block's end, on zero or several compilations (saying at which
            calls and what changed in the arguments), or when ``fn`` was never called.

    Example:
        >>> import gyre, jax, jax.numpy as jnp, optax
        >>> from gyre import managed
        >>> @managed.train_step
        ... def fit(state, x):
        ...     return gyre.logs().add_loss("l", jnp.sum((state.params - x) ** 2)), state
        >>> state = managed.ManagedState.create(params=jnp.zeros(2), tx=optax.sgd(0.1))
        >>> with gyre.testing.assert_compiled_once(fit) as fit:
        ...     for _ in range(3):
        ...         logs, state = fit(state, jnp.ones(2))
        >>> with gyre.testing.assert_compiled_once(jax.jit(lambda x: x.sum())) as total:
        ...     _ = total(jnp.ones(3)); _ = total(jnp.ones(4))
        Traceback (most recent call last):
        AssertionError: <lambda> compiled 2 times in 2 calls, expected once
        ...
                args[0]: float32[3] -> float32[4]
        ...
    """
    if not callable(fn):
        raise TypeError(explain(
            "assert_compiled_once needs the function to check",
            expected="a callable: a jax.jit function, a managed step, a gyre.Step", received=describe(fn),
            fix="pass the step itself: `with assert_compiled_once(step) as step: ...`"))
    return CompiledOnceCheck(fn)


def _name_of(fn: Any) -> str:
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None)
    return str(name) if name else type(fn).__name__
