"""Binding a callback's parameters to the loop's values, once, before the loop starts.

A callback gets ``state``, ``batch``, ``elapsed``, ``logs``, ``loop`` (ciclo's ``loop_state``) by
name, or, when it uses none of these names, the first ``n`` by position; mixing the two, or a near
miss (``elapsd``), is refused. ``mask`` gets a padded evaluation batch's mask (:class:`Masked`).
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax

from gyre.core._checks import instance
from gyre.core._errors import closest, describe, explain, suggest

ARG_NAMES = ("state", "batch", "elapsed", "logs", "loop")
#: Other names accepted for the loop's values (ciclo's).
ALIASES = {"loop_state": "loop"}
_INDEX = {name: i for i, name in enumerate(ARG_NAMES)}
_INDEX.update({alias: _INDEX[name] for alias, name in ALIASES.items()})

#: How close (difflib's ratio) a positional parameter's name must be to a value's name to be
#: read as a misspelling of it: ``elapsd``, ``log``, ``bach`` are; ``logits`` (0.8), ``step`` are not.
TYPO_CUTOFF = 0.82

#: The parameter name under which a callback gets the mask of a padded batch.
MASK = "mask"

Call = Callable[[Any, Any, Any, Any, Any], Any]


class Masked:
    """A padded evaluation's batch and ``mask`` (``True``: a real row); ``rows``: the real rows
    the clock counts (``None`` once stacked or placed)."""

    __slots__ = ("batch", "mask", "rows")

    def __init__(self, batch: Any, mask: Any, rows: int | None = None) -> None:
        self.batch = batch
        self.mask = mask
        self.rows = rows

    def __repr__(self) -> str:
        return f"Masked(rows={self.rows}, batch={describe(self.batch)})"


jax.tree_util.register_pytree_node(Masked, lambda m: ((m.batch, m.mask), None), lambda _, kids: Masked(*kids))


def callback_name(fn: Any) -> str:
    """A readable name for a callback, for messages."""
    if isinstance(fn, Invoker):
        return fn.name
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type) and inspect.ismethod(fn):
        return f"{type(owner).__name__}.{fn.__name__}"
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class Invoker:
    """A bound callback: ``call(state, batch, elapsed, logs, loop)`` passes what ``fn`` asks for."""

    __slots__ = ("fn", "name", "call", "returned_state", "takes_mask", "read_only", "uses")

    def __init__(
        self, fn: Any, call: Call, name: str, *, takes_mask: bool = False, uses: frozenset[str] = frozenset(ARG_NAMES)
    ) -> None:
        self.fn = fn
        self.name = name
        self.call = call
        self.returned_state = False
        self.takes_mask = takes_mask
        self.read_only = False
        self.uses = uses

    def __repr__(self) -> str:
        return f"<gyre callback {self.name}>"


class StateMethod:
    """A method of the state's class registered at a named point: called as ``method(state, ...)``.

    Example:
        >>> class S(int):
        ...     def train_step(self, batch):
        ...         return S(self + batch)
        >>> bind(StateMethod(S.train_step)).call(S(1), 2, None, None, None)
        3
    """

    __slots__ = ("method",)

    def __init__(self, method: Callable[..., Any]) -> None:
        self.method = method

    def __repr__(self) -> str:
        return f"<state method {callback_name(self.method)}>"


def bind(fn: Any) -> Invoker:
    """Turns a callback into an :class:`Invoker` (see the module docs for the rules)."""
    if isinstance(fn, Invoker):
        return fn
    if isinstance(fn, StateMethod):
        target, offset = fn.method, 1
    else:
        loop_callback = getattr(fn, "__loop_callback__", None)
        if callable(loop_callback) and not isinstance(fn, type):
            return Invoker(fn, lambda s, b, e, lg, lp: loop_callback(lp), callback_name(fn), uses=frozenset({"loop"}))
        instance(fn, "a callback", Callable, kind="callable", fix="pass a function or an object with __call__",
                 expected="a function of (state, batch, elapsed, logs, loop), or any callable")
        target, offset = fn, 0
    idx, kw, mask = _planned(target, offset)
    idx = (0, *idx) if offset else idx  # a state's method: the state is its self
    name = callback_name(target)
    uses = frozenset(ARG_NAMES[i] for i in (*idx, *(i for _, i in kw)))
    return Invoker(fn, _make(target, idx, kw, mask, name), name, takes_mask=mask is not None, uses=uses)


_PLANS: weakref.WeakKeyDictionary[Any, dict[int, Plan]] = weakref.WeakKeyDictionary()


def _planned(fn: Any, offset: int) -> Plan:
    """:func:`_plan` of ``fn``'s parameters, cached per function or per class of a callable."""
    call = _class_call(fn)
    key, slot = (fn, offset) if call is None else (call, ("instance", offset))
    try:
        plans = _PLANS.setdefault(key, {})
    except TypeError:  # not weakly referenceable: planned each time
        plans = {}
    if slot not in plans:
        plans[slot] = _plan(fn, _params(fn)[offset:], offset)
    return plans[slot]


def _class_call(fn: Any) -> Any:
    """The class's ``__call__`` function when ``fn``'s signature is its own, else None."""
    if isinstance(fn, (types.FunctionType, types.MethodType)) or hasattr(fn, "__wrapped__"):
        return None
    if "__signature__" in getattr(fn, "__dict__", ()):
        return None
    for klass in type(fn).__mro__:
        call = klass.__dict__.get("__call__")
        if call is not None:
            return call if isinstance(call, types.FunctionType) else None
    return None


def _params(fn: Any) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise TypeError(explain(
            f"cannot read the signature of callback {callback_name(fn)}",
            expected="a Python callable whose parameters inspect.signature can read", received=describe(fn),
            fix="wrap it: lambda state, batch: fn(state, batch)")) from None


_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)


Plan = tuple[tuple[int, ...], tuple[tuple[str, int], ...], str | None]


def _plan(fn: Any, params: list[inspect.Parameter], offset: int) -> Plan:
    """Which values go to which parameter: (positional indices, keyword pairs, mask kind)."""
    found = next((p for p in params if p.name == MASK and p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)), None)
    mask = None if found is None else ("required" if found.default is _P.empty else "optional")
    names = {n for n, i in _INDEX.items() if i >= offset}
    _check_defaulted_misses(fn, [p for p in params if p.default is None and p.name not in names])
    required = [
        p for p in params
        if p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) and p is not found
    ]
    if any(p.name in names for p in params):
        unknown = [p for p in required if p.name not in names]
        if unknown:
            _mixed(fn, params, unknown, names)
        return (*_by_name(params, names), mask)
    if any(p.kind is _P.VAR_POSITIONAL for p in params):
        count = len(ARG_NAMES) - offset
    else:
        count = len([p for p in required if p.kind in _POSITIONAL])
    missing_kw = [p.name for p in required if p.kind is _P.KEYWORD_ONLY]
    if count > len(ARG_NAMES) - offset or missing_kw:
        raise TypeError(explain(
            f"cannot bind the parameters of callback {callback_name(fn)}",
            expected=f"parameters named from {list(ARG_NAMES[offset:])}, or at most "
            f"{len(ARG_NAMES) - offset} positional ones",
            received=f"parameters {[p.name for p in params]}",
            fix="name the parameters state, batch, elapsed, logs, loop (any subset), "
            "or give the extra ones defaults"))
    if found is not None and found.kind is _P.POSITIONAL_OR_KEYWORD:
        _check_mask_last(fn, params, params.index(found))
    _check_near_misses(fn, [p for p in required if p.kind in _POSITIONAL][:count], offset)
    return tuple(range(offset, offset + count)), (), mask


def _check_near_misses(fn: Any, positional: list[inspect.Parameter], offset: int) -> None:
    """Refuses a positional parameter whose name is a near miss of another value's name."""
    for position, p in enumerate(positional, start=offset):
        close = closest(p.name, _INDEX, cutoff=TYPO_CUTOFF)
        if close is None or _INDEX[close] == position:
            continue
        given = ARG_NAMES[position]
        raise TypeError(explain(
            f"callback {callback_name(fn)}: parameter {p.name!r} looks like a misspelling of {close!r}",
            expected=f"parameters named from {list(ARG_NAMES[offset:])} (bound by name), or "
            "names unlike them (bound by position: state, batch, elapsed, logs, loop)",
            received=f"parameters {[q.name for q in positional]}: bound by position, "
            f"{p.name!r} would get the {given}, not the {ARG_NAMES[_INDEX[close]]}",
            fix=f"rename it {close!r}; to take the {given} by position, give it a name unlike "
            f"the loop's values (e.g. def cb({'s' if given == 'state' else given[0]}))"))


def _check_defaulted_misses(fn: Any, defaulted: list[inspect.Parameter]) -> None:
    """Refuses a ``None``-defaulted parameter named like a near miss of a value (never passed)."""
    for p in defaulted:
        close = closest(p.name, _INDEX, cutoff=TYPO_CUTOFF)
        if close is None:
            continue
        raise TypeError(explain(
            f"callback {callback_name(fn)}: parameter {p.name!r} looks like a misspelling of {close!r}",
            expected=f"the loop's values named exactly: {list(ARG_NAMES)}",
            received=f"{p.name}={p.default!r}: the loop passes no {p.name!r}, so it always keeps its default",
            fix=f"rename it {close!r}; if it is a setting of your own, give it a name unlike the loop's values"))


def _check_mask_last(fn: Any, params: list[inspect.Parameter], at: int) -> None:
    """A ``mask`` before parameters bound by position would receive one of their values."""
    later = params[at + 1 :]
    if any(p.kind is _P.VAR_POSITIONAL or (p.kind in _POSITIONAL and p.default is _P.empty) for p in later):
        raise TypeError(explain(
            f"callback {callback_name(fn)} has its mask parameter before parameters bound by position",
            expected="mask after them (def step(s, b, mask=None)), or parameters named "
            "state, batch, ... (bound by name, in any order)",
            received=f"parameters {[p.name for p in params]}",
            fix="move mask to the end of the parameters, or make it keyword-only (*, mask=None)"))


def _by_name(params: list[inspect.Parameter], names: set[str]) -> tuple[tuple[int, ...], tuple[tuple[str, int], ...]]:
    idx: list[int] = []
    kw: list[tuple[str, int]] = []
    in_order = True
    for p in params:
        if p.name not in names or p.kind is _P.POSITIONAL_ONLY:
            if p.kind in _POSITIONAL:
                in_order = False  # an unknown positional with a default: later ones by keyword
            continue
        if p.kind is _P.POSITIONAL_OR_KEYWORD and in_order:
            idx.append(_INDEX[p.name])
        elif p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY):
            kw.append((p.name, _INDEX[p.name]))
    return tuple(idx), tuple(kw)


def _mixed(fn: Any, params: list[inspect.Parameter], unknown: list[inspect.Parameter], names: set[str]) -> None:
    hints = [f"{p.name!r}:{suggest(p.name, sorted(names)) or ' no close name'}" for p in unknown]
    raise TypeError(explain(
        f"callback {callback_name(fn)} names some of its parameters after the loop's "
        "values and not the others",
        expected=f"every required parameter named from {sorted(names)} (bound by name), or "
        "none of them (bound by position: state, batch, elapsed, logs, loop)",
        received=f"parameters {[p.name for p in params]}; not loop values: " + "; ".join(hints),
        fix="rename the parameters (e.g. def cb(elapsed, logs)), or give the others "
        "defaults; binding by position would hand them the wrong values"))


def _make(fn: Any, idx: tuple[int, ...], kw: tuple[tuple[str, int], ...], mask: str | None, name: str) -> Call:
    if mask is None:
        return lambda *args: fn(*[args[i] for i in idx], **{k: args[i] for k, i in kw})

    required = mask == "required"

    def call_masked(*args: Any) -> Any:  # a Masked batch is split in two
        batch = args[1]
        if type(batch) is Masked:
            args = (args[0], batch.batch, *args[2:])
            return fn(*[args[i] for i in idx], **{k: args[i] for k, i in kw}, mask=batch.mask)
        if required:
            raise TypeError(explain(
                f"callback {name} needs a mask (its mask parameter has no default), and this loop's "
                "batches are not padded",
                expected="a mask only where an evaluation pads its batches: the on_test_step callbacks "
                "of gyre.test_loop (or of train_loop's test_dataset=) that take mask",
                received=f"{name} called with an unpadded batch (a training step, a plain gyre.loop, or "
                "a point other than on_test_step and its batch callbacks)",
                fix="give mask a default (def step(state, batch, mask=None)) and read None as 'every "
                "row is real', or register the step at gyre.on_test_step"))
        return fn(*[args[i] for i in idx], **{k: args[i] for k, i in kw})

    return call_masked


def inject(fn: Callable[..., Any]) -> Callable[..., Any]:
    """ciclo's ``inject``: ``inject(fn)(*values)`` calls ``fn`` with as many of ``values`` as it
    has positional parameters (ciclo passes ``state, batch, elapsed, loop_state``).

    Example:
        >>> inject(lambda state, batch: state + batch)(1, 2, "elapsed", "loop")
        3
    """
    params = _params(fn)
    if any(p.kind is _P.VAR_POSITIONAL for p in params):
        return fn
    count = len([p for p in params if p.kind in _POSITIONAL])

    def injected(*args: Any) -> Any:
        return fn(*args[:count])

    injected.__wrapped__ = fn  # type: ignore[attr-defined]
    return injected
