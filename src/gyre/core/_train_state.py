"""``TrainState``: the default state pytree (step, params, optimizer state, rng, model state)."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from gyre.core._checks import instance
from gyre.core._errors import describe, explain, suggest


def as_key(rng: Any) -> jax.Array:
    """``rng`` (``None``, an int seed or a PRNG key) as a PRNG key; anything else raises."""
    if rng is None:
        return jax.random.PRNGKey(0)
    if isinstance(rng, int) and not isinstance(rng, bool):
        return jax.random.PRNGKey(rng)
    if isinstance(rng, jax.Array) and (
        jnp.issubdtype(rng.dtype, jax.dtypes.prng_key) or (rng.dtype == jnp.uint32 and rng.shape == (2,))
    ):
        return rng
    raise TypeError(explain(
        "rng= must be a seed or a PRNG key",
        expected="an int seed, jax.random.PRNGKey(seed) or jax.random.key(seed)", received=describe(rng),
        fix="pass rng=0 or rng=jax.random.PRNGKey(0)"))


def check_optimizer(value: Any, *, argument: str, none_means: str) -> None:
    """Raises a clear error unless ``value`` (the ``argument=``) is an optax optimizer or
    ``None`` (which means ``none_means``)."""
    instance(value, f"{argument}=", optax.GradientTransformation, none=True, kind="an optax optimizer",
             expected=f"e.g. optax.adam(1e-3), or None for {none_means}",
             fix=f"build it with optax: {argument}=optax.adamw(1e-3)")


class TrainState(struct.PyTreeNode, kw_only=True):
    """The training state: ``step``, ``params``, ``opt_state``, ``rng``, ``model_state`` (mutable
    collections such as ``batch_stats``) and ``extras``; ``apply_fn`` and ``tx`` are static.

    Subclasses may declare more fields (``class MyState(TrainState): ema: Any``). Collections
    and extras read as attributes (``state.ema``); ``state.batch_stats`` is ``None`` when the
    model has none. The key of step ``n`` is ``fold_in(rng, n)``, so a resumed run draws the
    same numbers.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> state = TrainState.create(params={"w": jnp.ones(2)}, tx=optax.sgd(0.5), rng=0)
        >>> state = state.apply_gradients(grads={"w": jnp.ones(2)})
        >>> state.params["w"].tolist(), int(state.step), state.batch_stats
        ([0.5, 0.5], 1, None)
        >>> state.parms
        Traceback (most recent call last):
        AttributeError: TrainState has no attribute 'parms'. Did you mean 'params'?...
    """

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array
    model_state: Mapping[str, Any] = struct.field(default_factory=dict)
    extras: Mapping[str, Any] = struct.field(default_factory=dict)
    apply_fn: Callable[..., Any] | None = struct.field(pytree_node=False, default=None)
    tx: optax.GradientTransformation | None = struct.field(pytree_node=False, default=None)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # flax's dataclass(), which sets its own replace: ours replaces it
        cls.replace = _replace  # type: ignore[method-assign]

    @classmethod
    def create(
        cls,
        *,
        params: Any,
        tx: optax.GradientTransformation | None = None,
        apply_fn: Callable[..., Any] | None = None,
        rng: Any = None,
        model_state: Mapping[str, Any] | None = None,
        batch_stats: Any = None,
        **extras: Any,
    ) -> Any:
        """A state at step 0, with the optimizer state initialised from ``params``.

        Args:
            params: the trainable parameters (any pytree; ``()`` for none).
            tx: an optax optimizer; ``None`` for a state that is never updated.
            apply_fn: the model's apply function, kept static.
            rng: a seed or PRNG key; per-step keys are folded from it.
            model_state: mutable model collections (``{"batch_stats": ...}``).
            batch_stats: shorthand for ``model_state={"batch_stats": ...}``.
            **extras: fields a subclass declares, or else extra values kept in ``extras``.

        Raises:
            TypeError: a declared field without a default is missing, ``batch_stats`` is given
                twice, or ``params`` is ``None``.

        Example:
            >>> import jax.numpy as jnp
            >>> s = TrainState.create(params=jnp.zeros(3), batch_stats={"mean": jnp.zeros(3)},
            ...                       ema=1.0)
            >>> sorted(s.model_state), s.batch_stats["mean"].shape, s.ema
            (['batch_stats'], (3,), 1.0)
        """
        check_optimizer(tx, argument="tx", none_means="a state that is not trained")
        if params is None:
            raise TypeError(explain(
                f"{cls.__name__}.create got params=None",
                expected="the model's parameters (a pytree of arrays: variables['params']), or "
                "params=() for a state without parameters",
                received="params=None",
                fix="pass params=model.init(key, x)['params']; for a state that holds no "
                "parameters, params=()"))
        _check_leaves(params, cls.__name__)
        model_state = dict(model_state or {})
        if batch_stats is not None:
            if "batch_stats" in model_state:
                raise TypeError(explain(
                    f"{cls.__name__}.create got batch_stats twice: as batch_stats= and in model_state",
                    expected="one of batch_stats=variables['batch_stats'] or model_state={'batch_stats': ...}",
                    received=f"batch_stats={describe(batch_stats)} and model_state keys {sorted(model_state)}", fix="drop "
                    "one of them (batch_stats= is the shorthand for model_state={'batch_stats': ...})"))
            model_state["batch_stats"] = batch_stats
        declared = {f: d for f, d in cls.__dataclass_fields__.items() if f not in TrainState.__dataclass_fields__}
        fields = {k: v for k, v in extras.items() if k in declared}
        rest = {k: v for k, v in extras.items() if k not in declared}
        missing = sorted(f for f, d in declared.items()
                         if f not in fields and d.default is dataclasses.MISSING is d.default_factory)
        if missing:
            raise TypeError(explain(
                f"{cls.__name__}.create is missing the field(s) {missing}",
                expected=f"a value for every field {cls.__name__} declares without a default",
                received=f"keywords {sorted(extras)}", fix=f"pass them: {cls.__name__}.create(params=..., "
                + ", ".join(f"{m}=..." for m in missing)
                + "), or give the fields defaults (struct.field(default_factory=...))"))
        return cls(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=tx.init(params) if tx is not None else None,
            rng=as_key(rng),
            model_state=model_state,
            extras=rest,
            apply_fn=apply_fn,
            tx=tx,
            **fields,
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: model collections and extras.
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            model_state = object.__getattribute__(self, "model_state")
            extras = object.__getattribute__(self, "extras")
        except AttributeError:  # not built yet (copy, unpickling)
            raise AttributeError(name) from None
        for values in (model_state, extras):
            if isinstance(values, Mapping) and name in values:
                return values[name]
        if name == "batch_stats":  # documented: None for a model without batch statistics
            return None
        raise _UnknownAttribute(self, name, model_state, extras)

    def apply_gradients(self, *, grads: Any, **changes: Any) -> Any:
        """One optimizer update: new params and optimizer state, ``step + 1``.

        ``**changes`` replaces other fields at the same time.

        Example:
            >>> import jax.numpy as jnp, optax
            >>> s = TrainState.create(params=jnp.ones(()), tx=optax.sgd(1.0))
            >>> float(s.apply_gradients(grads=jnp.ones(())).params)
            0.0
        """
        if self.tx is None:
            raise ValueError(explain(
                "this state has no optimizer",
                expected="a state created with tx=<an optax optimizer>", received="tx=None",
                fix="create the state with TrainState.create(params=..., tx=optax.adam(1e-3))"))
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(step=self.step + 1, params=params, opt_state=opt_state, **changes)

    def step_key(self, stream: int | str | None = None) -> jax.Array:
        """The PRNG key of the current step (``fold_in(rng, step)``), optionally of a named stream.

        Example:
            >>> s = TrainState.create(params=(), rng=0)
            >>> bool((s.step_key() == s.step_key()).all()), bool((s.step_key("a") != s.step_key()).any())
            (True, True)
        """
        key = jax.random.fold_in(self.rng, self.step)
        if stream is None:
            return key
        if isinstance(stream, str):  # a stable 31-bit id (Python's hash of strings is salted)
            stream = zlib.crc32(stream.encode()) & 0x7FFFFFFF
        return jax.random.fold_in(key, stream)

    def step_rngs(self, *streams: str) -> dict[str, jax.Array]:
        """Keys for flax's ``rngs=`` argument, one per named stream.

        Example:
            >>> sorted(TrainState.create(params=(), rng=0).step_rngs("dropout", "noise"))
            ['dropout', 'noise']
        """
        return {name: self.step_key(name) for name in streams}


def _replace(self: Any, **changes: Any) -> Any:
    """``state.replace(**changes)``: a copy with fields, model collections (``batch_stats=``, which
    may be new) and extras changed; a collection or extra together with ``model_state=`` or
    ``extras=``, or an unknown name (with the closest one), is a ``TypeError``.

    Example:
        >>> import jax.numpy as jnp
        >>> s = TrainState.create(params=jnp.zeros(2), batch_stats={"mean": jnp.zeros(2)}, ema=0.0)
        >>> s = s.replace(step=s.step + 1, batch_stats={"mean": jnp.ones(2)}, ema=0.5)
        >>> int(s.step), s.batch_stats["mean"].tolist(), s.ema
        (1, [1.0, 1.0], 0.5)
    """
    fields = type(self).__dataclass_fields__
    if all(name in fields for name in changes):  # the common case, kept fast
        return dataclasses.replace(self, **changes)
    model_state = self.model_state if isinstance(self.model_state, Mapping) else {}
    extras = self.extras if isinstance(self.extras, Mapping) else {}
    collections: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name in [n for n in changes if n not in fields]:
        if name == "batch_stats" or name in model_state:
            collections[name] = changes.pop(name)
        elif name in extras:
            extra[name] = changes.pop(name)
        else:
            message = _unknown_attribute(self, name, model_state, extras)
            raise TypeError(message.replace("has no attribute", "cannot replace", 1))
    for given, whole in ((collections, "model_state"), (extra, "extras")):
        if given and whole in changes:
            raise TypeError(explain(
                f"{type(self).__name__}.replace got {sorted(given)} and {whole}= together",
                expected=f"either {whole}={{...}} (the whole mapping) or {', '.join(f'{k}=' for k in sorted(given))}",
                received=f"{sorted(given)} and {whole}={describe(changes[whole])}",
                fix=f"put them in the mapping: {whole}={{**state.{whole}, ...}}"))
    if collections:
        changes["model_state"] = {**model_state, **collections}
    if extra:
        changes["extras"] = {**extras, **extra}
    return dataclasses.replace(self, **changes)


TrainState.replace = _replace  # type: ignore[method-assign]


class _UnknownAttribute(AttributeError):
    """A missing attribute of a state, its explanation (with suggestions) written when read:
    ``getattr(state, name, default)`` never reads it, and costs no suggestion search."""

    def __init__(self, state: Any, name: str, model_state: Any, extras: Any) -> None:
        super().__init__(name)
        self._parts = (state, name, model_state, extras)

    def __str__(self) -> str:
        return _unknown_attribute(*self._parts)


# shown as what it is to the user: an AttributeError (a traceback names the class)
_UnknownAttribute.__module__, _UnknownAttribute.__qualname__ = "builtins", "AttributeError"


def _unknown_attribute(state: Any, name: str, model_state: Any, extras: Any) -> str:
    fields = [f for f in type(state).__dataclass_fields__]
    collections = sorted(model_state) if isinstance(model_state, Mapping) else []
    extra = sorted(extras) if isinstance(extras, Mapping) else []
    methods = [m for m in dir(type(state)) if not m.startswith("_") and m not in fields]
    hint = suggest(name, [*fields, *collections, *extra, "batch_stats", *methods])
    return explain(
        f"{type(state).__name__} has no attribute {name!r}.{hint}",
        expected=f"a field ({', '.join(fields)}), a model_state collection ({collections or 'none'}) "
        f"or an extra ({extra or 'none'})",
        received=repr(name), fix=(f"use {hint.split(chr(39))[1]!r}" if hint else "check the name")
        + "; values passed to create() that are not fields are kept in extras")


def _check_leaves(params: Any, owner: str) -> None:
    """Refuses ``params`` with a leaf that is no array or number (a whole equinox model's
    functions), which optax's ``init`` would fail on with its own words."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if not (hasattr(leaf, "dtype") or isinstance(leaf, (bool, int, float, complex))):
            raise TypeError(explain(
                f"{owner}.create: params holds a leaf that is not an array, at params{jax.tree_util.keystr(path)}",
                expected="a pytree of arrays (or numbers) only: the values the optimizer updates",
                received=describe(leaf),
                fix="for an equinox model, split it: params, static = eqx.partition(model, "
                "eqx.is_inexact_array), pass params=params and call eqx.combine(state.params, static) in "
                "the step (or gyre.create_flax_state(model, ...), which splits it); else keep functions "
                "and settings out of params"))
