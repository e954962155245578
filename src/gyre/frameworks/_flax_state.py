"""``create_flax_state``: a model, an optimizer, losses and metrics; steps that need no code.

The state is a :class:`~gyre.managed.ManagedState` whose class defines ``train_step``,
``test_step``, ``predict_step`` and ``reset_step`` (managed steps, compiled for its strategy),
so ``gyre.train_loop(state, data, test_dataset=...)`` needs no task table. Batches are
Keras-style (:func:`unpack_batch`); losses and metrics are called as
:mod:`gyre.frameworks._calling` says, metric objects as :mod:`gyre.frameworks.metrics` does.

``test_step(batch, mask=mask)`` lets the loops pad the last, smaller batch and compile once:
the mask multiplies the batch's ``sample_weight`` (metric objects get ``sample_weight=``, CLU's
``mask=``), so per-example values are averaged over the real rows; a function's whole-batch
value without weights warns, and values the model reports itself count the padding.

It logs as ciclo's ``FlaxState``: each loss (``losses.<name>`` in training, ``metrics.<name>``
in evaluation) and its epoch mean ``avg_<name>``, each metric, and what a linen model writes
into its ``losses`` (minimised) and ``metrics`` collections, named by the last key of their
path (the whole path with ``logs_full_path=True``).
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
from gyre.frameworks._adapters import Adapter, adapt
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
        >>> sorted(logs.losses), sorted(logs.stateful_metrics), int(state.step)
        (['mse'], ['avg_mse'], 1)
    """

    metric_states: Mapping[str, Any] = struct.field(default_factory=dict)
    adapter: Adapter | None = struct.field(pytree_node=False, default=None)
    loss_fns: tuple[tuple[str, calling.Call], ...] = struct.field(pytree_node=False, default=())
    metric_fns: tuple[tuple[str, calling.Call], ...] = struct.field(pytree_node=False, default=())
    logs_full_path: bool = struct.field(pytree_node=False, default=False)

    # -- the maths -------------------------------------------------------------------------
    def _forward(self, inputs: Any, training: bool) -> tuple[Any, Any, dict[str, Any]]:
        assert self.adapter is not None
        rngs = self.step_rngs(*self.adapter.rng_streams) if training else {}
        try:
            return self.adapter.apply_collect(self.params, self.model_state, inputs, training=training, rngs=rngs)
        except Exception as err:
            expected = self.adapter.input_shapes
            received = jax.tree_util.tree_map(lambda x: tuple(jnp.shape(x)), inputs)
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
        """Warns (when the step compiles) about the losses and metrics that count a padded
        batch's padding rows: whole-batch values of functions that take no weights."""
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


def _masked_weight(weight: Any, mask: Any) -> jax.Array:
    """The batch's sample weights with its padded rows weighing 0 (the mask when it has none)."""
    m = jnp.asarray(mask, jnp.float32)
    if weight is None:
        return m
    w = jnp.asarray(weight)
    return w * m.reshape(m.shape + (1,) * (w.ndim - 1)).astype(jnp.result_type(w, jnp.float32))


def _whole_batch(call: calling.Call, args: Mapping[str, Any]) -> bool:
    """Whether a loss or metric function gives one value for the whole batch without taking
    the weights (so no mask can leave padded rows out of it): its result's shape, traced."""
    if call.plan.weighs:
        return False
    if call.plan.keyword:
        kwargs = calling.call_keywords(call.fn, args, call.plan)
        shape = jax.eval_shape(lambda: call.fn(**kwargs))
    else:
        shape = jax.eval_shape(lambda: call.fn(args["preds"], args["target"]))
    return all(len(s.shape) == 0 for s in jax.tree_util.tree_leaves(shape))


def _trailing(shapes: Any) -> Any:
    return jax.tree_util.tree_map(lambda s: s[1:], shapes, is_leaf=lambda s: isinstance(s, tuple))


def _unclaimed(name: str, taken: Mapping[str, Any], what: str) -> str:
    """``name`` for a value the model reported, or a clear error when a given loss or metric
    already has it."""
    if name in taken:
        raise ValueError(explain(
            f"the model reports a {what} named {name!r}, which another {what} already has",
            expected="distinct names", received=f"{what} names {sorted(taken)} and the model's {name!r}",
            fix="rename one of them, or pass logs_full_path=True to name the model's values "
            "by their whole path"))
    return name


def _check_same_collections(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """A clear error when a training step changes the structure of the model's state (a
    ``sow`` into a collection kept as state grows it by one value per step)."""
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

    **Losses and metric functions** are called in one of two conventions, chosen from the
    signature when the state is created (a signature that fits neither is refused here,
    with the accepted ones):

    * positional, gyre's and optax's: ``fn(preds, labels)`` or ``fn(preds, labels,
      sample_weight)``, e.g. ``optax.softmax_cross_entropy_with_integer_labels``;
    * keyword, ciclo's and jax_metrics': every parameter named from ``preds`` (or
      ``logits``, ``y_pred``), ``target`` (or ``labels``, ``y_true``), ``sample_weight``,
      ``mask``, ``inputs``, ``params``, ``batch_stats``, ``model_state``, ``state`` (or
      ``module``), ``key_seq``, the keys of a dict of labels or inputs, and, for metrics, the
      batch's losses by name; e.g. ``def loss(*, preds, target, **_)`` or
      ``gyre.frameworks.losses.Crossentropy()``. A ``**kwargs`` receives them all.

    A loss or metric function returns a scalar, or per-example values (batch first) that are
    averaged, weighted by ``sample_weight`` unless the function takes ``sample_weight`` or
    ``mask`` itself. Losses must be floating point (an integer loss has no gradient).
    ``state.test_step(batch, mask=mask)`` weighs the padded rows 0: the evaluations of
    ``gyre.test_loop`` and ``train_loop`` pad the last, smaller batch and compile it once,
    exact for per-example values and weight-taking functions (a whole-batch value warns).

    **Metric objects** accumulate over an epoch and are logged as stateful metrics:
    ``reset``/``update``/``compute`` objects (:class:`gyre.frameworks.Accuracy`,
    :class:`gyre.frameworks.Mean`, jax_metrics-style ``Accuracy()``), whose ``update`` gets
    the keywords above it takes, and CLU metrics (``clu.metrics.Accuracy``, your subclass of
    ``clu.metrics.Metric``, a ``clu.metrics.Collection``; a class or an instance), whose
    ``from_model_output`` gets the keywords it declares (``logits=``/``labels=`` or
    ``preds=``/``target=``; ``mask=`` is ``sample_weight > 0``).

    Args:
        module: a ``flax.linen.Module`` (initialised here from ``inputs``), a ``flax.nnx.Module``
            or an ``equinox.Module`` (already initialised; ``inputs`` checks them).
        inputs: an example batch of inputs (a batch of 1 is enough), e.g. ``jnp.zeros((1, 64))``.
        tx: the optax optimizer (``None`` for a state that is only evaluated).
        losses: ``{name: fn}`` (or one callable, named ``loss``); their sum is minimised, and
            each is also logged as ``avg_<name>``, its running mean over the epoch.
        metrics: ``{name: metric}``: functions like losses (logged per step) or metric objects
            (accumulated, logged as stateful metrics).
        strategy: ``"jit"``, ``"eager"``, ``"data_parallel"``, ``"fsdp"`` or a ``gyre.Strategy``.
        rng: seed or key; linen params are drawn from it and each step's dropout keys are
            ``fold_in(rng, step)`` per stream.
        rng_streams: linen rng streams given to the model in training.
        batched: equinox only: the model takes whole batches (no ``jax.vmap``).
        accumulate_steps, clip_grad_norm, policy: options of :func:`gyre.managed.train_step`.
        logs_full_path: name the values a linen model reports in its ``losses``/``metrics``
            collections by their whole path (``"Encoder_0/kl"``) instead of the last key.

    Returns:
        A :class:`FlaxState`; ``state.train_step(batch)``, ``test_step``, ``predict_step`` and
        ``reset_step`` register themselves in ``gyre.train_loop``/``test_loop``/``predict_loop``.

    Raises:
        ValueError: the model cannot run on ``inputs`` (a shape mismatch), names clash, or a
            train step without losses.
        TypeError: a loss or metric gyre cannot call (its signature and the conventions are
            in the message).

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

        ciclo's keyword convention works as well:

        >>> def ciclo_loss(*, preds, target, **_):
        ...     return optax.softmax_cross_entropy_with_integer_labels(preds, target).mean()
        >>> state = gyre.create_flax_state(nn.Dense(2), inputs=jnp.zeros((1, 3)), tx=optax.sgd(0.1),
        ...     losses={"loss": ciclo_loss})
        >>> logs, state = state.train_step((x, y))
        >>> sorted(logs.losses), sorted(logs.stateful_metrics)
        (['loss'], ['avg_loss'])
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
        loss_fns=loss_calls,
        metric_fns=tuple(fns),
        logs_full_path=bool(logs_full_path),
    )


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
