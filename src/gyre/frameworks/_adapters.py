"""Model adapters: a flax linen, flax nnx or equinox model as ``params``, ``model_state`` (mutable
collections such as ``batch_stats``) and a static, pure ``apply``::

    outputs, model_state = adapter.apply(params, model_state, inputs, training=..., rngs=...)

``rngs`` maps ``adapter.rng_streams`` to the step's keys (empty in evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core._errors import describe, explain
from gyre.frameworks._calling import _parameters

Rngs = Mapping[str, jax.Array]

#: Keyword names a model's ``__call__`` may use for the training flag (``True`` in training).
TRAINING_ARGS = ("training", "train")
#: ... and with its inverse, ``deterministic`` (``True`` in evaluation).
FLAG_ARGS = (*TRAINING_ARGS, "deterministic")


class Adapter:
    """Base class: ``apply(params, model_state, inputs, *, training, rngs)``; adapters compare by
    identity.

    Attributes:
        framework: ``"linen"``, ``"nnx"`` or ``"equinox"``.
        rng_streams: the rng streams the model draws from in training.

    Example:
        >>> import flax.linen as nn, jax.numpy as jnp
        >>> adapter, params, model_state = adapt(nn.Dense(2), inputs=jnp.zeros((1, 3)))
        >>> out, _ = adapter.apply(params, model_state, jnp.ones((4, 3)), training=False, rngs={})
        >>> adapter.framework, out.shape
        ('linen', (4, 2))
    """

    framework = "base"
    rng_streams: tuple[str, ...] = ()
    input_shapes: Any = None

    def apply(
        self, params: Any, model_state: Mapping[str, Any], inputs: Any, *, training: bool, rngs: Rngs
    ) -> tuple[Any, dict[str, Any]]:
        raise NotImplementedError

    def apply_collect(
        self, params: Any, model_state: Mapping[str, Any], inputs: Any, *, training: bool, rngs: Rngs
    ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """``apply``, plus what the model wrote in :data:`STEP_COLLECTIONS` (linen; else ``{}``)."""
        out, model_state = self.apply(params, model_state, inputs, training=training, rngs=rngs)
        return out, model_state, {}

    def __repr__(self) -> str:
        return f"<gyre {self.framework} adapter of {type(self.module).__name__}>"  # type: ignore[attr-defined]


def _flag_kwargs(fn: Callable[..., Any], training: bool, accepted: Sequence[str] = FLAG_ARGS) -> dict[str, bool]:
    """``{"training": training}`` (or ``train``/``deterministic``, among ``accepted``) when ``fn`` takes it."""
    names = {p.name for p in _parameters(fn) or ()}
    return next(({n: training if n in TRAINING_ARGS else not training} for n in accepted if n in names), {})


def shapes_of(inputs: Any) -> Any:
    """The shape of every leaf of ``inputs``, for messages and for checking later batches."""
    return jax.tree_util.tree_map(lambda x: tuple(jnp.shape(x)), inputs)


# -- flax linen --------------------------------------------------------------------------------


#: Linen collections that hold what a model reports on each call (``self.sow(...)`` or
#: ``self.put_variable(...)`` into them), not state: they start empty on every call, and
#: :func:`~gyre.create_flax_state` logs ``losses`` (as losses) and ``metrics``.
STEP_COLLECTIONS = ("losses", "metrics", "intermediates")


class LinenAdapter(Adapter):
    """A ``flax.linen`` module: ``params``, and the other collections in ``model_state`` (updated in
    training only).

    :data:`STEP_COLLECTIONS` are not state: :meth:`apply_collect` returns what the call wrote
    there. The training flag goes under the first of ``flags`` the module's ``__call__`` takes.

    Example:
        >>> import flax.linen as nn, jax.numpy as jnp
        >>> adapter, params, state = adapt(nn.BatchNorm(use_running_average=False), inputs=jnp.ones((2, 3)))
        >>> sorted(state), adapter.rng_streams
        (['batch_stats'], ('dropout',))
    """

    framework = "linen"

    def __init__(
        self, module: Any, *, rng_streams: Sequence[str], collections: Sequence[str], flags: Sequence[str] = FLAG_ARGS
    ) -> None:
        self.module = module
        self.rng_streams = tuple(rng_streams)
        self.collections = tuple(collections)
        self.flags = tuple(flags)  # the names of the training flag the module is called with
        self.reported: dict[str, Any] = {}  # what the model reported at initialisation, for the names

    def apply(
        self, params: Any, model_state: Mapping[str, Any], inputs: Any, *, training: bool, rngs: Rngs
    ) -> tuple[Any, dict[str, Any]]:
        out, model_state, _ = self.apply_collect(params, model_state, inputs, training=training, rngs=rngs)
        return out, model_state

    def apply_collect(
        self, params: Any, model_state: Mapping[str, Any], inputs: Any, *, training: bool, rngs: Rngs
    ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        from flax.core import DenyList

        variables = {"params": params, **model_state}
        flags = _flag_kwargs(self.module.__call__, training, self.flags)
        frozen = DenyList(["params"] if training else ["params", "batch_stats"])
        out, updates = self.module.apply(variables, inputs, rngs=dict(rngs) or None, mutable=frozen, **flags)
        updates = dict(updates)
        reported = {k: v for k, v in updates.items() if k not in model_state}
        if not training:
            return out, dict(model_state), reported
        return out, {k: updates.get(k, v) for k, v in model_state.items()}, reported


def init_linen(
    module: Any, inputs: Any, keys: Rngs, *, flags: Sequence[str] = FLAG_ARGS, compiled: bool = True
) -> tuple[Any, dict[str, Any]]:
    """``(params, other collections)`` of a linen module, initialised on ``inputs``."""
    kwargs = _flag_kwargs(module.__call__, True, flags)
    init = lambda k, x: module.init(k, x, **kwargs)  # noqa: E731
    variables = dict((jax.jit(init) if compiled else init)(dict(keys), inputs))
    return variables.pop("params", {}), variables


def _init_linen(module: Any, inputs: Any, key: jax.Array, rng_streams: Sequence[str]) -> tuple[Adapter, Any, dict[str, Any]]:
    streams = ("params", *[s for s in rng_streams if s != "params"])
    params, variables = init_linen(module, inputs, {name: jax.random.fold_in(key, i) for i, name in enumerate(streams)})
    reported = {k: variables.pop(k) for k in STEP_COLLECTIONS if k in variables}
    adapter = LinenAdapter(module, rng_streams=streams[1:], collections=list(variables))
    adapter.reported = reported
    return adapter, params, variables


# -- flax nnx ----------------------------------------------------------------------------------


class NnxAdapter(Adapter):
    """A ``flax.nnx`` module kept as ``graphdef`` + states: ``nnx.Param`` are the params, the rest
    ``model_state``.

    In training its rng streams are reseeded from the step's keys.

    Example:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> adapter, params, state = adapt(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))
        >>> out, _ = adapter.apply(params, state, jnp.ones((4, 3)), training=True, rngs={})
        >>> adapter.framework, out.shape
        ('nnx', (4, 2))
    """

    framework = "nnx"

    def __init__(self, module: Any, *, train_def: Any, eval_def: Any, key_impl: Any, rng_streams: Sequence[str]) -> None:
        self.module = module
        self.train_def = train_def
        self.eval_def = eval_def
        self.key_impl = key_impl
        self.rng_streams = tuple(rng_streams)

    def merge(self, *states: Any, training: bool) -> Any:
        """The module rebuilt from ``states`` in training or evaluation mode, its variables fresh at
        this trace level.

        Example:
            >>> from flax import nnx
            >>> adapter, params, state = adapt(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))
            >>> adapter.merge(params, state["other"], training=False).out_features
            2
        """
        from flax import nnx

        return nnx.merge(self.train_def if training else self.eval_def, *states, copy=True)

    def apply(
        self, params: Any, model_state: Mapping[str, Any], inputs: Any, *, training: bool, rngs: Rngs
    ) -> tuple[Any, dict[str, Any]]:
        from flax import nnx

        keys = jax.tree_util.tree_map(
            lambda k: jax.random.wrap_key_data(k, impl=self.key_impl), model_state["rng_keys"]
        )
        model = self.merge(params, keys, model_state["other"], training=training)
        if training and rngs:
            nnx.reseed(model, **{name: rngs[name] for name in self.rng_streams if name in rngs})
        out = model(inputs)
        if not training:
            return out, dict(model_state)
        _, _, keys, other = nnx.split(model, nnx.Param, nnx.RngKey, ...)
        return out, {"rng_keys": jax.tree_util.tree_map(jax.random.key_data, keys), "other": other}


def _init_nnx(module: Any) -> tuple[Adapter, Any, dict[str, Any]]:
    from flax import nnx

    train_model = nnx.clone(module)
    train_model.train()
    eval_model = nnx.clone(module)
    eval_model.eval()
    train_def, params, keys, other = nnx.split(train_model, nnx.Param, nnx.RngKey, ...)
    eval_def = nnx.graphdef(eval_model)
    leaves = jax.tree_util.tree_leaves(keys)
    key_impl = jax.random.key_impl(leaves[0]) if leaves else "threefry2x32"
    streams = sorted({v.tag for _, v in nnx.to_flat_state(keys) if getattr(v, "tag", None)})
    model_state = {"rng_keys": jax.tree_util.tree_map(jax.random.key_data, keys), "other": other}
    adapter = NnxAdapter(module, train_def=train_def, eval_def=eval_def, key_impl=str(key_impl), rng_streams=streams)
    return adapter, params, model_state


# -- equinox -----------------------------------------------------------------------------------


class EquinoxAdapter(Adapter):
    """An ``equinox.Module`` whose floating arrays are the params, mapped over the batch unless
    ``batched``.

    A ``key`` parameter gets one ``dropout`` key per example in training. Stateful layers
    (``eqx.nn.State``) are not handled: write the step with the managed API.

    Example:
        >>> import equinox as eqx, jax, jax.numpy as jnp
        >>> model = eqx.nn.Linear(3, 2, key=jax.random.key(0))
        >>> adapter, params, state = adapt(model)
        >>> out, _ = adapter.apply(params, state, jnp.ones((4, 3)), training=True, rngs={})
        >>> adapter.framework, out.shape
        ('equinox', (4, 2))
    """

    framework = "equinox"

    def __init__(self, module: Any, *, train_static: Any, eval_static: Any, takes_key: bool, batched: bool) -> None:
        self.module = module
        self.train_static = train_static
        self.eval_static = eval_static
        self.takes_key = takes_key
        self.batched = batched
        self.rng_streams = ("dropout",) if takes_key else ()

    def apply(
        self, params: Any, model_state: Mapping[str, Any], inputs: Any, *, training: bool, rngs: Rngs
    ) -> tuple[Any, dict[str, Any]]:
        import equinox as eqx

        model = eqx.combine(params, self.train_static if training else self.eval_static)
        key = rngs.get("dropout") if training and self.takes_key else None
        if self.batched:
            out = model(inputs, key=key) if key is not None else model(inputs)
        elif key is not None:
            n = jax.tree_util.tree_leaves(inputs)[0].shape[0]
            out = jax.vmap(lambda x, k: model(x, key=k))(inputs, jax.random.split(key, n))
        else:
            out = jax.vmap(model)(inputs)
        return out, dict(model_state)


def _init_equinox(module: Any, batched: bool) -> tuple[Adapter, Any, dict[str, Any]]:
    import equinox as eqx

    params, train_static = eqx.partition(module, eqx.is_inexact_array)
    _, eval_static = eqx.partition(eqx.nn.inference_mode(module), eqx.is_inexact_array)
    takes_key = any(p.name == "key" for p in _parameters(module.__call__) or ())
    adapter = EquinoxAdapter(module, train_static=train_static, eval_static=eval_static, takes_key=takes_key, batched=batched)
    return adapter, params, {}


# -- dispatch ----------------------------------------------------------------------------------


def framework_of(module: Any) -> str | None:
    """``"linen"``, ``"nnx"``, ``"equinox"`` or ``None`` for an unknown object.

    Example:
        >>> import flax.linen as nn
        >>> framework_of(nn.Dense(2)), framework_of(3)
        ('linen', None)
    """
    import flax.linen as nn
    from flax import nnx

    if isinstance(module, nn.Module):
        return "linen"
    if isinstance(module, nnx.Module):
        return "nnx"
    if "equinox" in __import__("sys").modules:
        import equinox as eqx

        if isinstance(module, eqx.Module):
            return "equinox"
    return None


def adapt(
    module: Any,
    *,
    inputs: Any = None,
    rng: jax.Array | None = None,
    rng_streams: Sequence[str] = ("dropout",),
    batched: bool = False,
) -> tuple[Adapter, Any, dict[str, Any]]:
    """``(adapter, params, model_state)`` for a linen, nnx or equinox model.

    Args:
        module: a linen module (initialised here from ``inputs``), an nnx or equinox module.
        inputs: an example batch; needed for linen, checked against the model for the others.
        rng: the key linen's ``init`` draws from (default ``PRNGKey(0)``).
        batched: equinox only: the model takes a whole batch (no ``vmap``).

    Raises:
        ValueError: the model cannot run on ``inputs``, or linen without ``inputs``.
        TypeError: an object of no supported framework.

    Example:
        >>> import flax.linen as nn, jax.numpy as jnp
        >>> adapter, params, _ = adapt(nn.Dense(2), inputs=jnp.zeros((1, 3)))
        >>> params["kernel"].shape
        (3, 2)
    """
    framework = framework_of(module)
    key = jax.random.PRNGKey(0) if rng is None else rng
    if framework is None:
        raise TypeError(explain(
            "create_flax_state got a model of no supported framework",
            expected="a flax.linen.Module, a flax.nnx.Module or an equinox.Module", received=describe(module),
            fix="pass the model object (e.g. MLP(), not MLP); for other frameworks build a "
            "gyre.managed.ManagedState yourself and write the step with @gyre.managed.train_step"))
    if framework == "linen" and inputs is None:
        raise ValueError(explain(
            "a linen model needs example inputs to initialise its parameters",
            expected="inputs= an example batch, e.g. inputs=jnp.zeros((1, 784))", received="inputs=None",
            fix="pass inputs= shaped like one batch of the data (a batch of 1 is enough)"))
    try:
        if framework == "linen":
            adapter, params, model_state = _init_linen(module, inputs, key, rng_streams)
        elif framework == "nnx":
            adapter, params, model_state = _init_nnx(module)
        else:
            adapter, params, model_state = _init_equinox(module, batched)
        if inputs is not None and framework != "linen":
            rngs = {name: jax.random.PRNGKey(0) for name in adapter.rng_streams}
            jax.eval_shape(lambda p, s, x: adapter.apply(p, s, x, training=True, rngs=rngs), params, model_state, inputs)
    except Exception as err:  # a user's model failing on the user's inputs
        raise ValueError(explain(
            f"the {framework} model {type(module).__name__} cannot run on the given inputs",
            expected="inputs= shaped like one batch the model accepts (batch dimension first)",
            received=f"inputs with shapes {shapes_of(inputs)}; the model raised "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
            fix="pass inputs of the shape your data has (e.g. jnp.zeros((1, 64)) for 64 "
            "features), or fix the model's layer sizes to match the data")) from err
    adapter.input_shapes = None if inputs is None else shapes_of(inputs)
    return adapter, params, model_state
