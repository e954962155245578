"""``create_flax_state``: a model, an optimizer, losses and metrics; steps that need no code.

The state it returns is a :class:`~gyre.managed.ManagedState` whose class defines
``train_step``, ``test_step``, ``predict_step`` (managed steps, compiled for the state's
strategy) and ``reset_step``, so ``gyre.train_loop(state, data, test_dataset=...)`` runs with
no task table, and ``logs, state = state.train_step(batch)`` works by hand.

Batches are Keras-style: ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from gyre.core.errors import describe, explain
from gyre.core.logs import Logs
from gyre.frameworks import metrics as _metrics
from gyre.frameworks.adapters import Adapter, adapt
from gyre.parallel.strategies import Strategy
from gyre.steps import managed
from gyre.steps.precision import Policy

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
    raise ValueError(
        explain(
            f"a batch of {len(batch)} parts is not understood",
            expected="x, (x,), (x, y) or (x, y, sample_weight)",
            received=f"a tuple of {len(batch)} values",
            fix="pack several inputs in one value (a dict or a tuple as x): ((x1, x2), y)",
        )
    )


class FlaxState(managed.ManagedState):
    """The state :func:`create_flax_state` returns: model params and collections, optimizer
    state, metric states, and the static model adapter, losses and metrics.

    ``train_step`` differentiates the sum of the losses and logs the metrics; ``test_step``
    logs losses and metrics as metrics; ``predict_step`` logs the model's outputs
    (``outputs.preds``); ``reset_step`` empties the metric objects.

    Example:
        >>> import flax.linen as nn, jax.numpy as jnp, optax
        >>> state = create_flax_state(nn.Dense(1), inputs=jnp.zeros((1, 2)), tx=optax.sgd(0.1),
        ...     losses={"mse": lambda p, y: (p[:, 0] - y) ** 2})
        >>> logs, state = state.train_step((jnp.ones((4, 2)), jnp.ones(4)))
        >>> sorted(logs.losses), int(state.step)
        (['mse'], 1)
    """

    metric_states: Mapping[str, Any] = struct.field(default_factory=dict)
    adapter: Adapter | None = struct.field(pytree_node=False, default=None)
    loss_fns: tuple[tuple[str, LossFn], ...] = struct.field(pytree_node=False, default=())
    metric_fns: tuple[tuple[str, LossFn], ...] = struct.field(pytree_node=False, default=())

    # -- the maths -------------------------------------------------------------------------
    def _forward(self, inputs: Any, training: bool) -> tuple[Any, Any]:
        assert self.adapter is not None
        rngs = self.step_rngs(*self.adapter.rng_streams) if training else {}
        try:
            return self.adapter.apply(self.params, self.model_state, inputs, training=training, rngs=rngs)
        except Exception as err:
            expected = self.adapter.input_shapes
            received = jax.tree_util.tree_map(lambda x: tuple(jnp.shape(x)), inputs)
            if expected is None or _trailing(expected) == _trailing(received):
                raise
            raise ValueError(
                explain(
                    "the batch's inputs do not fit the model",
                    expected=f"inputs shaped like {expected} (the inputs= the state was created "
                    "with), any batch size",
                    received=f"inputs shaped {received}; the model raised {type(err).__name__}",
                    fix="make the data match the model (reshape or preprocess it), or create the "
                    "state with inputs= shaped like the data",
                )
            ) from err

    def _evaluate(self, batch: Any, training: bool) -> tuple[Logs, Any]:
        inputs, labels, weight = unpack_batch(batch)
        if training and not self.loss_fns:
            raise ValueError(
                explain(
                    "train_step has no loss to minimise",
                    expected="create_flax_state(..., losses={'loss': fn}) with fn(preds, labels)",
                    received="losses=None",
                    fix="pass losses=, e.g. losses={'loss': optax.softmax_cross_entropy_with_integer_labels}",
                )
            )
        preds, model_state = self._forward(inputs, training)
        logs = Logs()
        values: dict[str, Any] = {}
        for name, fn in self.loss_fns:
            values[name] = _metrics.call_metric(fn, preds, labels, weight)
            if training:
                logs.add_loss(name, values[name])
            else:
                logs.add_metric(name, values[name])
        for name, fn in self.metric_fns:
            logs.add_metric(name, _metrics.call_metric(fn, preds, labels, weight))
        metric_states = {}
        for name, metric in self.metric_states.items():
            metric_states[name] = _metrics.update(metric, preds, labels, weight, values)
            logs.add_stateful_metric(name, metric_states[name].compute())
        changes: dict[str, Any] = {"metric_states": metric_states}
        if training:
            changes["model_state"] = model_state
        return logs, self.replace(**changes)

    def _train(self, batch: Any) -> tuple[Logs, Any]:
        return self._evaluate(batch, training=True)

    def _test(self, batch: Any) -> tuple[Logs, Any]:
        return self._evaluate(batch, training=False)

    def _predict(self, batch: Any) -> tuple[Logs, Any]:
        inputs, _, _ = unpack_batch(batch)
        preds, _ = self._forward(inputs, training=False)
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
        """The state with every metric object emptied (called at the start of each epoch and
        evaluation by the named loops).

        Example:
            >>> import flax.linen as nn, jax.numpy as jnp, optax
            >>> from gyre.frameworks import Accuracy
            >>> state = create_flax_state(nn.Dense(2), inputs=jnp.zeros((1, 2)), tx=optax.sgd(0.1),
            ...     losses={"l": lambda p, y: p.mean()}, metrics={"acc": Accuracy()})
            >>> _, state = state.test_step((jnp.ones((4, 2)), jnp.zeros(4, jnp.int32)))
            >>> float(state.metric_states["acc"].total), float(state.reset_step().metric_states["acc"].total)
            (4.0, 0.0)
        """
        if not self.metric_states:
            return self
        fresh = {name: _metrics.reset(m) for name, m in self.metric_states.items()}
        return self.replace(metric_states=self.strategy.place_state(fresh))


def _trailing(shapes: Any) -> Any:
    return jax.tree_util.tree_map(lambda s: s[1:], shapes, is_leaf=lambda s: isinstance(s, tuple))


_CLASSES: dict[Any, type[FlaxState]] = {}


def _state_class(accumulate_steps: int, clip_grad_norm: float | None, policy: str | Policy | None) -> type[FlaxState]:
    """FlaxState, or a subclass whose steps carry the managed options."""
    if accumulate_steps == 1 and clip_grad_norm is None and policy is None:
        return FlaxState
    key = (accumulate_steps, clip_grad_norm, policy)
    cls = _CLASSES.get(key)
    if cls is None:
        cls = type(
            "FlaxState",
            (FlaxState,),
            {
                "train_step": managed.train_step(
                    FlaxState._train, accumulate_steps=accumulate_steps, clip_grad_norm=clip_grad_norm, policy=policy
                ),
                "test_step": managed.step(FlaxState._test, policy=policy),
                "predict_step": managed.step(FlaxState._predict, policy=policy),
                "__module__": __name__,
            },
        )
        _CLASSES[key] = cls
    return cls


def _named(kind: str, given: Any) -> dict[str, Any]:
    if given is None:
        return {}
    if callable(given) and not isinstance(given, Mapping):
        name = "loss" if kind == "losses" else getattr(given, "__name__", "metric")
        return {name if name.isidentifier() and name != "<lambda>" else kind[:-1]: given}
    if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
        raise TypeError(
            explain(
                f"{kind}= must map names to {kind}",
                expected=f"a dict like {{'{'loss' if kind == 'losses' else 'accuracy'}': fn}}",
                received=describe(given),
                fix=f"name each of the {kind}: {kind}={{'name': fn}}",
            )
        )
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
    policy: str | Policy | None = None,
) -> FlaxState:
    """A trainable state for a flax linen, flax nnx or equinox model, with its steps built in.

    Args:
        module: a ``flax.linen.Module`` (initialised here from ``inputs``), a ``flax.nnx.Module``
            or an ``equinox.Module`` (already initialised; ``inputs`` checks them).
        inputs: an example batch of inputs (a batch of 1 is enough), e.g. ``jnp.zeros((1, 64))``.
        tx: the optax optimizer (``None`` for a state that is only evaluated).
        losses: ``{name: fn(preds, labels[, sample_weight])}`` (or one callable, named
            ``loss``); per-example values are averaged (weighted by ``sample_weight``). Their
            sum is minimised.
        metrics: ``{name: metric}``: callables like losses (logged per step), metric objects
            such as :class:`gyre.frameworks.Accuracy` (accumulated over an epoch, logged as
            stateful metrics), or ``clu.metrics.Metric`` classes.
        strategy: ``"jit"``, ``"eager"``, ``"data_parallel"``, ``"fsdp"`` or a ``gyre.Strategy``.
        rng: seed or key; linen params are drawn from it and each step's dropout keys are
            ``fold_in(rng, step)`` per stream.
        rng_streams: linen rng streams given to the model in training.
        batched: equinox only: the model takes whole batches (no ``jax.vmap``).
        accumulate_steps, clip_grad_norm, policy: options of :func:`gyre.managed.train_step`.

    Returns:
        A :class:`FlaxState`; ``state.train_step(batch)``, ``test_step``, ``predict_step`` and
        ``reset_step`` register themselves in ``gyre.train_loop``/``test_loop``/``predict_loop``.

    Raises:
        ValueError: the model cannot run on ``inputs`` (a shape mismatch), names clash, or a
            train step without losses.

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
    clash = sorted(set(losses_) & set(metrics_))
    if clash:
        raise ValueError(
            explain(
                f"{clash[0]!r} names both a loss and a metric",
                expected="distinct names (in evaluation losses are logged as metrics)",
                received=f"losses {sorted(losses_)} and metrics {sorted(metrics_)}",
                fix="rename one of them",
            )
        )
    for name, fn in losses_.items():
        if not callable(fn) or isinstance(fn, type):
            raise TypeError(
                explain(
                    f"loss {name!r} is not a function",
                    expected="a callable (preds, labels[, sample_weight]) -> value",
                    received=describe(fn),
                    fix="e.g. losses={'loss': optax.softmax_cross_entropy_with_integer_labels}",
                )
            )
    states: dict[str, Any] = {}
    fns: list[tuple[str, LossFn]] = []
    for name, spec in metrics_.items():
        initial = _metrics.metric_state(name, spec)
        if initial is None:
            fns.append((name, spec))
        else:
            states[name] = initial
    from gyre.core.state import _as_key

    key = _as_key(rng)
    adapter, params, model_state = adapt(module, inputs=inputs, rng=key, rng_streams=rng_streams, batched=batched)
    cls = _state_class(accumulate_steps, clip_grad_norm, policy)
    return cls.create(
        params=params,
        tx=tx,
        strategy=strategy,
        apply_fn=adapter.apply,
        rng=key,
        model_state=model_state,
        metric_states=states,
        adapter=adapter,
        loss_fns=tuple(losses_.items()),
        metric_fns=tuple(fns),
    )
