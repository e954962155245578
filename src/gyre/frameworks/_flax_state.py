"""``create_flax_state``: a model, an optimizer, losses and metrics; steps that need no code.

It logs as ciclo's ``FlaxState``: each loss (a metric in evaluation) and its epoch mean
``avg_<name>``, each metric, and what a linen model writes into its ``losses`` (minimised) and
``metrics`` collections.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from gyre.core._errors import describe, explain, warn
from gyre.core._logs import Logs
from gyre.frameworks import _calling as calling
from gyre.frameworks import metrics as _metrics
from gyre.frameworks._adapters import Adapter, adapt, shapes_of
from gyre.parallel._strategy import Strategy
from gyre.steps import managed
from gyre.steps._precision import MixedPrecision

LossFn = Callable[..., Any]


def unpack_batch(batch: Any) -> tuple[Any, Any, Any]:
    """``(inputs, labels, sample_weight)`` of a Keras-style batch (missing parts are ``None``).

    Example:
        >>> unpack_batch("x"), unpack_batch(("x", "y")), unpack_batch(("x", "y", "w"))
        (('x', None, None), ('x', 'y', None), ('x', 'y', 'w'))
    """
    if not isinstance(batch, tuple):
        return batch, None, None
    if 1 <= len(batch) <= 3:
        x, y, w = (*batch, None, None)[:3]
        return x, y, w
    raise ValueError(explain(
        f"a batch of {len(batch)} parts is not understood",
        expected="x, (x,), (x, y) or (x, y, sample_weight)", received=f"a tuple of {len(batch)} values",
        fix="pack several inputs in one value (a dict or a tuple as x): ((x1, x2), y)"))


class FlaxState(managed.ManagedState, kw_only=True):
    """The state :func:`create_flax_state` returns, with ``train_step``, ``test_step``,
    ``predict_step`` and ``reset_step``.

    ``predict_step`` logs the model's outputs as ``outputs.preds``.

    Example:
        >>> import flax.linen as nn, jax.numpy as jnp, optax
        >>> state = create_flax_state(nn.Dense(1), inputs=jnp.zeros((1, 2)), tx=optax.sgd(0.1),
        ...     losses={"mse": lambda p, y: (p[:, 0] - y) ** 2})
        >>> logs, state = state.train_step((jnp.ones((4, 2)), jnp.ones(4)))
        >>> sorted(logs.losses), sorted(logs.stateful_metrics), int(state.step)
        (['mse'], ['avg_mse'], 1)
    """

    metric_states: Mapping[str, Any] = struct.field(default_factory=dict)
    adapter: Adapter | None = struct.field(pytree_node=False, default=None)
    loss_fns: tuple[tuple[str, calling.Call], ...] = struct.field(pytree_node=False, default=())
    metric_fns: tuple[tuple[str, calling.Call], ...] = struct.field(pytree_node=False, default=())
    logs_full_path: bool = struct.field(pytree_node=False, default=False)

    def _forward(self, inputs: Any, training: bool) -> tuple[Any, Any, dict[str, Any]]:
        assert self.adapter is not None
        rngs = self.step_rngs(*self.adapter.rng_streams) if training else {}
        try:
            return self.adapter.apply_collect(self.params, self.model_state, inputs, training=training, rngs=rngs)
        except Exception as err:
            expected = self.adapter.input_shapes
            received = shapes_of(inputs)
            if expected is None or _trailing(expected) == _trailing(received):
                raise
            raise ValueError(explain(
                "the batch's inputs do not fit the model",
                expected=f"inputs shaped like {expected} (the inputs= the state was created "
                "with), any batch size",
                received=f"inputs shaped {received}; the model raised {type(err).__name__}",
                fix="make the data match the model (reshape or preprocess it), or create the "
                "state with inputs= shaped like the data")) from err

    def _evaluate(self, batch: Any, training: bool, mask: Any = None) -> tuple[Logs, Any]:
        inputs, labels, weight = unpack_batch(batch)
        if mask is not None:
            weight = _masked_weight(weight, mask)
        preds, model_state, reported = self._forward(inputs, training)
        aux_losses = calling.flatten_names(reported.get("losses", {}), full_path=self.logs_full_path)
        if training and not self.loss_fns and not aux_losses:
            raise ValueError(explain(
                "train_step has no loss to minimise",
                expected="create_flax_state(..., losses={'loss': fn}) with fn(preds, labels)",
                received="losses=None, and the model reports no 'losses' collection",
                fix="pass losses=, e.g. losses={'loss': optax.softmax_cross_entropy_with_integer_labels}"))
        args = calling.arguments(
            preds=preds, labels=labels, sample_weight=weight, inputs=inputs, state=self,
            key=self.step_key("losses"),
        )
        losses = {name: call(args) for name, call in self.loss_fns}
        for name, value in aux_losses.items():
            losses[_unclaimed(name, losses, "loss")] = jnp.asarray(value)
        logs = Logs()
        for name, value in losses.items():
            if training:
                calling.check_loss_dtype(name, value)
                logs.add_loss(name, value)
            else:
                logs.add_metric(name, value)
        keywords = {**args, **losses}
        for name, call in self.metric_fns:
            logs.add_metric(name, call(keywords))
        for name, value in calling.flatten_names(reported.get("metrics", {}), full_path=self.logs_full_path).items():
            logs.add_metric(_unclaimed(name, logs.get("metrics", {}), "metric"), jnp.asarray(value))
        if mask is not None:
            self._warn_unmasked(keywords)
        metric_states, stateful = {}, {}
        for name, metric in self.metric_states.items():
            metric_states[name] = _metrics.update(metric, keywords)
            _metrics.spread(stateful, name, metric_states[name].compute())
        if stateful:
            logs.add_stateful_metrics(stateful)
        changes: dict[str, Any] = {"metric_states": metric_states}
        if training:
            _check_same_collections(self.model_state, model_state)
            changes["model_state"] = model_state
        return logs, self.replace(**changes)

    def _warn_unmasked(self, keywords: dict[str, Any]) -> None:
        """Warns (when the step compiles) of whole-batch values that count a batch's padding."""
        probe = {**keywords, "key_seq": calling.KeySeq(self.step_key("mask_probe"))}  # (the real keys untouched)
        whole = [name for name, call in (*self.loss_fns, *self.metric_fns) if _whole_batch(call, probe)]
        if whole:
            warn(
                f"create_flax_state's test step: {whole} give one value for the whole batch and take "
                "neither sample_weight nor mask, so in an evaluation whose last batch is padded they "
                "count its padding rows (repeats of its last real row): return per-example values "
                "(gyre averages them over the real rows), or take mask= (or sample_weight=) and "
                "leave the padded rows out"
            )

    def _train(self, batch: Any) -> tuple[Logs, Any]:
        return self._evaluate(batch, training=True)

    def _test(self, batch: Any, mask: Any = None) -> tuple[Logs, Any]:
        return self._evaluate(batch, training=False, mask=mask)

    def _predict(self, batch: Any) -> tuple[Logs, Any]:
        inputs, _, _ = unpack_batch(batch)
        preds, _, _ = self._forward(inputs, training=False)
        logs = Logs()
        if isinstance(preds, Mapping):
            logs.add_outputs({str(k): v for k, v in preds.items()})
        else:
            logs.add_output("preds", preds)
        return logs, self

    train_step = managed.train_step(_train)
    test_step = managed.step(_test)
    predict_step = managed.step(_predict)

    def reset_step(self) -> Any:
        """The state with every metric object emptied (the loops call it each epoch)."""
        if not self.metric_states:
            return self
        fresh = {name: _metrics.reset(m) for name, m in self.metric_states.items()}
        return self.replace(metric_states=self.strategy.place_state(fresh))


def _masked_weight(weight: Any, mask: Any) -> jax.Array:
    """The batch's sample weights with its padded rows weighing 0 (the mask when it has none)."""
    m = jnp.asarray(mask, jnp.float32)
    if weight is None:
        return m
    w = jnp.asarray(weight)
    return w * m.reshape(m.shape + (1,) * (w.ndim - 1)).astype(jnp.result_type(w, jnp.float32))


def _whole_batch(call: calling.Call, args: Mapping[str, Any]) -> bool:
    """Whether a loss or metric gives one value for the whole batch without taking the weights."""
    if call.plan.weighs:
        return False
    shape = jax.eval_shape(lambda: call.result(args))
    return all(len(s.shape) == 0 for s in jax.tree_util.tree_leaves(shape))


def _trailing(shapes: Any) -> Any:
    return jax.tree_util.tree_map(lambda s: s[1:], shapes, is_leaf=lambda s: isinstance(s, tuple))


def _unclaimed(name: str, taken: Mapping[str, Any], what: str) -> str:
    """``name`` for a value the model reported, or an error when a given loss or metric has it."""
    if name in taken:
        raise ValueError(explain(
            f"the model reports a {what} named {name!r}, which another {what} already has",
            expected="distinct names", received=f"{what} names {sorted(taken)} and the model's {name!r}",
            fix="rename one of them, or pass logs_full_path=True to name the model's values "
            "by their whole path"))
    return name


def _check_same_collections(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """An error when a training step changes the model state's structure (a ``sow`` into it)."""
    old, new = jax.tree_util.tree_structure(dict(before)), jax.tree_util.tree_structure(dict(after))
    if old != new:
        grown = sorted(k for k in before if jax.tree_util.tree_structure(before[k]) != jax.tree_util.tree_structure(after.get(k)))
        raise ValueError(explain(
            f"the model changed the structure of its collection(s) {grown} in a training step",
            expected="collections of a fixed structure (the state is compiled once)",
            received=f"{old} became {new}",
            fix="self.sow(...) appends a value per call: sow into 'losses', 'metrics' or "
            "'intermediates' (reported per step, not kept), or use self.put_variable to "
            "overwrite a state value"))


_CLASSES: dict[Any, type[FlaxState]] = {}


def _state_class(accumulate_steps: int, clip_grad_norm: float | None, policy: str | MixedPrecision | None) -> type[FlaxState]:
    """FlaxState, or a subclass whose steps carry the managed options."""
    if accumulate_steps == 1 and clip_grad_norm is None and policy is None:
        return FlaxState
    key = (accumulate_steps, clip_grad_norm, policy)
    if key not in _CLASSES:
        train = managed.train_step(FlaxState._train, accumulate_steps=accumulate_steps, clip_grad_norm=clip_grad_norm,
                                   policy=policy)
        _CLASSES[key] = type("FlaxState", (FlaxState,), {
            "train_step": train, "test_step": managed.step(FlaxState._test, policy=policy),
            "predict_step": managed.step(FlaxState._predict, policy=policy), "__module__": __name__})
    return _CLASSES[key]


def _named(kind: str, given: Any) -> dict[str, Any]:
    if given is None:
        return {}
    if callable(given) and not isinstance(given, Mapping):
        name = "loss" if kind == "losses" else getattr(given, "__name__", "metric")
        return {name if name.isidentifier() and name != "<lambda>" else kind[:-1]: given}
    if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
        raise TypeError(explain(
            f"{kind}= must map names to {kind}",
            expected=f"a dict like {{'{'loss' if kind == 'losses' else 'accuracy'}': fn}}",
            received=describe(given), fix=f"name each of the {kind}: {kind}={{'name': fn}}"))
    return dict(given)


def create_flax_state(
    module: Any,
    *,
    inputs: Any = None,
    tx: optax.GradientTransformation | None,
    losses: Mapping[str, LossFn] | LossFn | None = None,
    metrics: Mapping[str, Any] | None = None,
    strategy: str | Strategy = "jit",
    rng: Any = 0,
    rng_streams: Sequence[str] = ("dropout",),
    batched: bool = False,
    accumulate_steps: int = 1,
    clip_grad_norm: float | None = None,
    policy: str | MixedPrecision | None = None,
    logs_full_path: bool = False,
) -> FlaxState:
    """A trainable state for a flax linen, flax nnx or equinox model, with its steps built in.

    Loss and metric functions are called positionally (``fn(preds, labels[, sample_weight])``,
    optax's) or by keyword (``fn(*, preds, target, **_)``, ciclo's; the names are
    :data:`~gyre.frameworks.KEYWORDS`), chosen from the signature now. They return a scalar or
    per-example values, averaged with ``sample_weight`` unless they take it (or ``mask``).
    Metric objects (``reset``/``update``/``compute``, or CLU metrics) accumulate over an epoch.
    Batches are Keras-style (:func:`unpack_batch`); ``test_step(batch, mask=mask)`` weighs
    padded rows 0.

    Args:
        module: a linen module (initialised here from ``inputs``), an nnx or equinox module.
        inputs: an example batch of inputs (a batch of 1 is enough).
        tx: the optax optimizer (``None`` for a state that is only evaluated).
        losses: ``{name: fn}`` (or one callable, named ``loss``); their sum is minimised.
        metrics: ``{name: fn or metric object}``.
        rng: seed or key; each step's keys are ``fold_in(rng, step)`` per stream.
        rng_streams: linen rng streams given to the model in training.
        batched: equinox only: the model takes whole batches (no ``jax.vmap``).
        accumulate_steps, clip_grad_norm, policy: options of :func:`gyre.managed.train_step`.
        logs_full_path: name a linen model's reported values by their whole path, not the last key.

    Raises:
        ValueError: the model cannot run on ``inputs``, names clash, or no loss to train.
        TypeError: a loss or metric gyre cannot call.

    Example:
        >>> import flax.linen as nn, gyre, jax.numpy as jnp, numpy as np, optax
        >>> state = gyre.create_flax_state(
        ...     nn.Dense(2), inputs=jnp.zeros((1, 3)), tx=optax.adam(0.1),
        ...     losses={"loss": optax.softmax_cross_entropy_with_integer_labels},
        ...     metrics={"accuracy": gyre.frameworks.Accuracy()})
        >>> x = np.eye(3, dtype=np.float32); y = np.array([0, 1, 1])
        >>> state, history, _ = gyre.train_loop(state, [(x, y)] * 20, stop=20)
        >>> loss = history.collect("loss")
        >>> bool(loss[-1] < loss[0]), float(state.metric_states["accuracy"].total)  # 20 x 3 seen
        (True, 60.0)
    """
    losses_ = _named("losses", losses)
    metrics_ = _named("metrics", metrics)
    _check_names(losses_, metrics_)
    from gyre.core._train_state import as_key

    key = as_key(rng)
    adapter, params, model_state = adapt(module, inputs=inputs, rng=key, rng_streams=rng_streams, batched=batched)
    reported = getattr(adapter, "reported", {})
    aux_losses = list(calling.flatten_names(reported.get("losses", {}), full_path=logs_full_path))
    for name in aux_losses:
        _unclaimed(name, losses_, "loss")
    for name in calling.flatten_names(reported.get("metrics", {}), full_path=logs_full_path):
        _unclaimed(name, metrics_, "metric")
    loss_names = frozenset(losses_) | frozenset(aux_losses)
    loss_calls = tuple((name, calling.bind(name, fn, what="loss")) for name, fn in losses_.items())
    states: dict[str, Any] = {}
    fns: list[tuple[str, calling.Call]] = []
    for name, spec in metrics_.items():
        initial = _metrics.metric_state(name, spec, loss_names)
        if initial is None:
            fns.append((name, calling.bind(name, spec, what="metric", extra=loss_names)))
        else:
            states[name] = initial
    for name in [*losses_, *aux_losses]:  # ciclo's running means of the losses
        if f"avg_{name}" not in metrics_:
            states[f"avg_{name}"] = _metrics.Mean(name)
    # a linen state's apply_fn is flax's own (apply_fn({"params": p}, x), as ciclo's and flax's
    # TrainState hold it); the steps call the adapter
    apply_fn = adapter.module.apply if adapter.framework == "linen" else adapter.apply
    return _state_class(accumulate_steps, clip_grad_norm, policy).create(
        params=params, tx=tx, strategy=strategy, apply_fn=apply_fn, rng=key, model_state=model_state,
        metric_states=states, adapter=adapter, loss_fns=loss_calls, metric_fns=tuple(fns),
        logs_full_path=bool(logs_full_path))


def _check_names(losses: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
    clash = sorted(set(losses) & set(metrics))
    if clash:
        raise ValueError(explain(
            f"{clash[0]!r} names both a loss and a metric",
            expected="distinct names (in evaluation losses are logged as metrics)",
            received=f"losses {sorted(losses)} and metrics {sorted(metrics)}", fix="rename one of them"))
    reserved = sorted(set(losses) & set(calling.KEYWORDS))
    if reserved:
        raise ValueError(explain(
            f"loss name {reserved[0]!r} is one of the keywords metrics receive",
            expected=f"loss names other than {', '.join(calling.KEYWORDS)} (metrics receive "
            "the losses by name, next to those keywords)",
            received=f"losses {sorted(losses)}", fix=f"rename it, e.g. {reserved[0] + '_loss'!r}"))
