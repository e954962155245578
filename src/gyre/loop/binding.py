"""Binding a callback's parameters to the loop's values, once, before the loop starts.

The loop offers five values, in this order: ``state``, ``batch``, ``elapsed``, ``logs``,
``loop``. A callback whose required parameters all carry those names gets them by name;
any other callback gets the first ``n`` of them by position, ``n`` being its number of
positional parameters. The signature is read once; each call is then a plain call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from gyre.core.errors import describe, explain

ARG_NAMES = ("state", "batch", "elapsed", "logs", "loop")
_INDEX = {name: i for i, name in enumerate(ARG_NAMES)}

Invoker = Callable[[Any, Any, Any, Any, Any], Any]


def _callback_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def bind(fn: Callable[..., Any], *, self_is_state: bool = False) -> Invoker:
    """Turns a callback into ``invoker(state, batch, elapsed, logs, loop)``.

    Args:
        fn: the callback.
        self_is_state: ``fn`` is a method taken from the state's class: its first parameter
            receives the state, the others are bound from the remaining four values.

    Example:
        >>> call = bind(lambda logs, state: (logs, state + 1))
        >>> call(1, "batch", "elapsed", {}, None)
        ({}, 2)
        >>> call = bind(lambda s, b: s + b)  # no known names: by position
        >>> call(1, 2, None, None, None)
        3
    """
    if not callable(fn):
        raise TypeError(
            explain(
                "a callback must be callable",
                expected="a function of (state, batch, elapsed, logs, loop), or any callable",
                received=describe(fn),
                fix="pass a function or an object with __call__",
            )
        )
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise TypeError(
            explain(
                f"cannot read the signature of callback {_callback_name(fn)}",
                expected="a Python callable whose parameters inspect.signature can read",
                received=describe(fn),
                fix="wrap it: lambda state, batch: fn(state, batch)",
            )
        ) from None
    offset = 0
    if self_is_state:
        if not params:
            raise TypeError(f"method {_callback_name(fn)} takes no self parameter")
        params = params[1:]
        offset = 1
    idx, kw = _plan(fn, params, offset)
    invoker = _make(fn, idx, kw, self_is_state)
    invoker.gyre_name = _callback_name(fn)  # type: ignore[attr-defined]
    return invoker


def _plan(
    fn: Any, params: list[inspect.Parameter], offset: int
) -> tuple[tuple[int, ...], tuple[tuple[str, int], ...]]:
    P = inspect.Parameter
    names = ARG_NAMES[offset:]
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind is P.VAR_POSITIONAL for p in params)
    required = [p for p in params if p.default is P.empty and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    by_name = any(p.name in names for p in params) and all(p.name in names for p in required)
    if by_name:
        idx: list[int] = []
        kw: list[tuple[str, int]] = []
        in_order = True
        for p in params:
            if p.name not in names or p.kind is P.POSITIONAL_ONLY:
                if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
                    in_order = False  # an unknown positional with a default: later ones by keyword
                continue
            if p.kind is P.POSITIONAL_OR_KEYWORD and in_order:
                idx.append(_INDEX[p.name])
            elif p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY):
                kw.append((p.name, _INDEX[p.name]))
        return tuple(idx), tuple(kw)
    if var_positional:
        count = len(names)
    else:
        count = len([p for p in positional if p.default is P.empty])
    missing_kw = [p.name for p in required if p.kind is P.KEYWORD_ONLY]
    if count > len(names) or missing_kw:
        raise TypeError(
            explain(
                f"cannot bind the parameters of callback {_callback_name(fn)}",
                expected=f"parameters named from {list(names)}, or at most {len(names)} positional ones",
                received=f"parameters {[p.name for p in params]}",
                fix="name the parameters state, batch, elapsed, logs, loop (any subset), "
                "or give the extra ones defaults",
            )
        )
    return tuple(range(offset, offset + count)), ()


def _make(fn: Any, idx: tuple[int, ...], kw: tuple[tuple[str, int], ...], self_is_state: bool) -> Invoker:
    if self_is_state:
        idx = (0, *idx)
    if kw:

        def call_kw(*args: Any) -> Any:
            return fn(*[args[i] for i in idx], **{name: args[i] for name, i in kw})

        return call_kw
    if idx == (0, 1):
        return lambda s, b, e, lg, lp: fn(s, b)
    if not idx:
        return lambda s, b, e, lg, lp: fn()
    if len(idx) == 1:
        (i,) = idx
        return lambda *args: fn(args[i])
    if len(idx) == 2:
        i, j = idx
        return lambda *args: fn(args[i], args[j])
    return lambda *args: fn(*[args[i] for i in idx])
