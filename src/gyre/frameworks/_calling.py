"""How :func:`~gyre.create_flax_state` calls a loss or a metric (its docstring says the two
conventions). A function taking a :data:`KEYWORDS` name (or ``**kwargs``) whose required
parameters are such names or keyword-only is called by keyword; one with two or three
positional parameters by position; anything else is refused at creation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core._errors import describe, explain, suggest

#: The keyword names a loss or metric may take, and what each receives. Aliases receive the
#: same value as the name they follow. Entries of a dict of labels or of inputs are passed
#: under their own keys too, and a metric also receives each loss of the batch by its name.
KEYWORDS: dict[str, str] = {
    "preds": "the model's outputs",
    "logits": "= preds (CLU's name)",
    "y_pred": "= preds (Keras' name)",
    "target": "the batch's labels (None when the batch has none)",
    "labels": "= target (gyre's and CLU's name)",
    "y_true": "= target (Keras' name)",
    "sample_weight": "the batch's weights, or None",
    "mask": "sample_weight > 0 (CLU's name), or None",
    "inputs": "the batch's inputs",
    "params": "the model's parameters (differentiated in training)",
    "batch_stats": "the model's batch statistics, or None",
    "model_state": "the model's mutable collections",
    "state": "the FlaxState itself",
    "module": "= state (ciclo's name)",
    "key_seq": "a KeySeq of this step: key_seq.next() gives a new key",
}

_WEIGHT_NAMES = ("sample_weight", "mask")
_P = inspect.Parameter


class KeySeq:
    """PRNG keys drawn from one key: ``next()`` gives a new one each call; losses take it as
    ``key_seq=``.

    Example:
        >>> import jax
        >>> seq = KeySeq(jax.random.key(0))
        >>> bool((jax.random.key_data(seq.next()) != jax.random.key_data(seq.next())).any())
        True
    """

    def __init__(self, key: jax.Array) -> None:
        self.key = key
        self.index = 0

    def next(self) -> jax.Array:
        """A key not returned before by this sequence."""
        key = jax.random.fold_in(self.key, self.index)
        self.index += 1
        return key

    __next__ = next


def arguments(
    *, preds: Any, labels: Any, sample_weight: Any, inputs: Any, state: Any, key: jax.Array | None
) -> dict[str, Any]:
    """Every keyword value of one batch (see :data:`KEYWORDS`)."""
    model_state = getattr(state, "model_state", None)
    out: dict[str, Any] = {
        **dict.fromkeys(("preds", "logits", "y_pred"), preds),
        **dict.fromkeys(("target", "labels", "y_true"), labels),
        "sample_weight": sample_weight,
        "mask": None if sample_weight is None else jnp.asarray(sample_weight) > 0,
        "inputs": inputs,
        "params": getattr(state, "params", None),
        "batch_stats": None if not isinstance(model_state, Mapping) else model_state.get("batch_stats"),
        "model_state": model_state,
        **dict.fromkeys(("state", "module"), state),
        "key_seq": None if key is None else KeySeq(key),
    }
    for spread in (labels, inputs):
        if isinstance(spread, Mapping):
            out.update({k: v for k, v in spread.items() if isinstance(k, str) and k not in out})
    return out


# -- signatures ----------------------------------------------------------------------------------


def signature_text(fn: Any) -> str:
    """``fn``'s signature for a message (``(...)`` when Python cannot tell it)."""
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _parameters(fn: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Plan:
    """How to call a function: by keyword (``names``; ``None``: all) or by position."""

    keyword: bool
    names: frozenset[str] | None
    required: frozenset[str]
    weighs: bool


def plan(fn: Any, known: frozenset[str], *, positional: bool = True) -> Plan | None:
    """How ``fn`` is called given the keyword names ``known`` (``None``: it cannot be)."""
    params = _parameters(fn)
    if params is None:  # a builtin or extension: gyre's convention
        return Plan(not positional, None, frozenset(), False)
    var_kw = any(p.kind is _P.VAR_KEYWORD for p in params)
    var_pos = any(p.kind is _P.VAR_POSITIONAL for p in params)
    required = [p for p in params if p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)]
    by_name = [p.name for p in params if p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)]
    required_positional = [p for p in required if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
    keyword_only = any(p.kind is _P.KEYWORD_ONLY for p in required)
    no_positional_only = not any(p.kind is _P.POSITIONAL_ONLY for p in required)
    all_known = all(p.name in known for p in required)
    takes_known = var_kw or any(n in known for n in by_name)
    # other keyword-only names may be keys of a dict of labels or inputs: checked per batch
    if no_positional_only and takes_known and (keyword_only or all_known or not required_positional):
        names = None if var_kw else frozenset(by_name)
        weighs = any(n in by_name for n in _WEIGHT_NAMES)
        return Plan(True, names, frozenset(p.name for p in required), weighs)
    positionals = [p for p in params if p.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
    if positional and (len(positionals) >= 2 or var_pos) and len(required_positional) <= 3 and not keyword_only:
        # it takes sample_weight by name, or as a required third positional
        weighs = any(p.name == "sample_weight" for p in params) or (
            len(positionals) >= 3 and positionals[2].default is _P.empty)
        return Plan(False, None, frozenset(), weighs)
    return None


def conventions(what: str) -> str:
    """The accepted conventions, for messages."""
    extra = " and the batch's losses by name" if what == "metric" else ""
    return (
        "fn(preds, labels) or fn(preds, labels, sample_weight) (positional, e.g. optax's "
        f"losses), or keyword parameters among {', '.join(KEYWORDS)}{extra} "
        "(e.g. def fn(*, preds, target, **_))"
    )


def refuse(what: str, name: str, fn: Any, known: frozenset[str], *, via: str = "") -> TypeError:
    """The error for a function gyre cannot call."""
    params = _parameters(fn) or []
    unknown = [p.name for p in params if p.default is _P.empty and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)
               and p.name not in known]
    hint = next((h for h in (suggest(u, known) for u in unknown) if h), "")
    return TypeError(explain(
        f"{what} {name!r} cannot be called by create_flax_state{via}",
        expected=conventions(what),
        received=f"{describe(fn, 60)} with signature {signature_text(fn)}"
        + (f"; unknown parameter(s) {unknown}.{hint}" if unknown else ""),
        fix="rename its parameters to those names (e.g. def loss(*, preds, target, **_)), "
        "or wrap it: lambda preds, labels: fn(...)"))


# -- calling -------------------------------------------------------------------------------------


def weighted_mean(value: Any, sample_weight: Any = None) -> jax.Array:
    """A scalar from a callable's result: per-example values averaged, weighted by ``sample_weight``."""
    value = jnp.asarray(value)
    if value.dtype == jnp.bool_ or jnp.issubdtype(value.dtype, jnp.integer):
        value = value.astype(jnp.float32)
    if value.ndim == 0:
        return value
    if sample_weight is None:
        return jnp.mean(value)
    w = jnp.asarray(sample_weight, value.dtype)
    w = jnp.broadcast_to(w.reshape(w.shape + (1,) * (value.ndim - w.ndim)), value.shape)
    return jnp.sum(value * w) / jnp.maximum(jnp.sum(w), jnp.finfo(value.dtype).tiny)


@dataclass(frozen=True, eq=False)
class Call:
    """A loss or metric bound to its convention by :func:`bind`; ``call(args)`` gives its value."""

    name: str
    fn: Callable[..., Any]
    what: str
    plan: Plan

    def __call__(self, args: Mapping[str, Any]) -> jax.Array:
        value = self.result(args)
        if self.what == "loss":
            check_loss_dtype(self.name, value)
        return weighted_mean(value, None if self.plan.weighs else args.get("sample_weight"))

    def result(self, args: Mapping[str, Any]) -> Any:
        """What ``fn`` itself returns for the batch's keywords ``args`` (not yet averaged)."""
        weight = args.get("sample_weight")
        if self.plan.keyword:
            kwargs = call_keywords(args, self.plan)
            missing = sorted(self.plan.required - set(kwargs))
            if missing:
                raise TypeError(explain(
                    f"{self.what} {self.name!r} takes {missing}, which this batch does not provide",
                    expected=f"parameters among {sorted(args)}",
                    received=f"signature {signature_text(self.fn)}",
                    fix="give the batch's labels (or inputs) as a dict with those keys, or "
                    f"rename the parameters.{suggest(missing[0], args)}"))
            return self.fn(**kwargs)
        if weight is not None and self.plan.weighs:
            return self.fn(args["preds"], args["target"], weight)
        return self.fn(args["preds"], args["target"])


def check_loss_dtype(name: str, value: Any) -> None:
    """An error for an integer or bool loss of create_flax_state (its gradient is zero)."""
    from gyre.steps.managed import check_floating_loss

    check_floating_loss(name, value, "create_flax_state")


def bind(name: str, fn: Any, *, what: str, extra: frozenset[str] = frozenset()) -> Call:
    """``fn`` bound to its signature's convention (``extra``: more keywords), or a ``TypeError``."""
    if not callable(fn) or isinstance(fn, type):
        raise TypeError(explain(
            f"{what} {name!r} is not a function",
            expected=conventions(what), received=describe(fn),
            fix="e.g. losses={'loss': optax.softmax_cross_entropy_with_integer_labels}"))
    known = frozenset(KEYWORDS) | extra
    found = plan(fn, known)
    if found is None:
        raise refuse(what, name, fn, known)
    return Call(name, fn, what, found)


def call_keywords(args: Mapping[str, Any], found: Plan) -> dict[str, Any]:
    """The keyword arguments a function takes among ``args`` (by its keyword ``found`` plan)."""
    if found.names is None:
        return dict(args)
    return {n: v for n, v in args.items() if n in found.names}


def flatten_names(tree: Any, *, full_path: bool = False) -> dict[str, Any]:
    """Unique names for a ``losses``/``metrics`` collection's leaves: last keys, or whole paths."""
    out: dict[str, Any] = {}

    def walk(path: tuple[str, ...], node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk((*path, str(key)), value)
        elif isinstance(node, (tuple, list)):
            for value in node:
                walk(path, value)
        else:
            base = ("/".join(path) if full_path else path[-1]) if path else "value"
            name, i = base, 0
            while name in out:
                i += 1
                name = f"{base}_{i}"
            out[name] = node

    walk((), tree)
    return out
