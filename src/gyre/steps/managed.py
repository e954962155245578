"""The managed API: write the maths of a step, gyre compiles, differentiates and shards it.

``ManagedState`` is a :class:`~gyre.TrainState` that carries a strategy. ``train_step``
turns ``(state, batch) -> (logs, state)`` into a full training step: it differentiates the
sum of the losses the function logged with ``add_loss`` with respect to ``state.params``,
applies the optimizer, and compiles the whole for the state's strategy (donating the state).
``step`` compiles without gradients (evaluation, prediction).

The function may take ``(state, batch)`` or just ``(state)``, and return ``(logs, state)``
(``None`` for either means "none" / "unchanged"), the logs alone or the state alone.

A function that also takes ``mask`` (``def test_step(state, batch, mask=None)``) gets the
mask of a padded batch: ``step(state, batch, mask=mask)`` by hand, or in an evaluation
(``gyre.test_loop``, ``train_loop``'s ``test_dataset``), which then pads its last, smaller
batch to the batch size, so the step compiles once. ``mask`` is a boolean vector over the
batch (``True`` for the real rows); the function computes its means over the real rows
(``jnp.sum(x * mask) / jnp.sum(mask)``) and passes ``mask=`` to the metric objects it logs
(``clu.metrics.Accuracy.from_model_output(..., mask=mask)``). Without a padded batch it gets
its default.
Metric objects logged as stateful metrics (``logs.add_stateful_metric("accuracy",
clu.metrics.Accuracy.from_model_output(...))``, or any object with ``merge`` and
``compute``) are merged into the state's accumulator of the same name (a field or extra
``state.accuracy``), which is replaced, and logged as its ``compute()`` (a dict adds one entry
per key), as ciclo's managed API does, on the device.

Non-finite updates: ``train_step(nan_policy="skip")``, or a loop run with
``nan_policy="skip"``, drops an update whose loss or gradients are NaN or infinite inside the
compiled step (the whole state is kept as it was, ``state.step`` included: it counts the
updates applied) and adds one to ``state.skipped_steps``, logged as the stateful metric
``skipped_steps``.

Example:
    >>> import gyre, jax.numpy as jnp, optax
    >>> from gyre import managed
    >>> @managed.train_step
    ... def train_step(state, batch):
    ...     x, y = batch
    ...     loss = jnp.mean((x * state.params["w"] - y) ** 2)
    ...     return gyre.logs().add_loss("mse", loss), state
    >>> state = managed.ManagedState.create(params={"w": jnp.float32(0.0)}, tx=optax.sgd(0.1))
    >>> batch = (jnp.ones(8), 2 * jnp.ones(8))
    >>> for _ in range(50):
    ...     logs, state = train_step(state, batch)
    >>> round(float(state.params["w"]), 3), int(state.step)
    (2.0, 50)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from gyre.core import metrics
from gyre.core._compat import cache_size
from gyre.core._errors import describe, explain, whole_number
from gyre.core._logs import Logs
from gyre.core._state import TrainState
from gyre.data._padding import accepts_mask
from gyre.loop._binding import Masked
from gyre.loop._fuse import scanned
from gyre.loop._nan import SKIPPED_STEPS
from gyre.loop._tasks import LoopElement
from gyre.parallel._strategies import Jit, Strategy, get_strategy
from gyre.steps._precision import MixedPrecision, get_policy

StepFn = Callable[[Any, Any], tuple[Logs, Any]]


def _no_skipped_steps() -> jax.Array:
    return jnp.zeros((), jnp.int32)


class ManagedState(TrainState, kw_only=True):
    """A :class:`~gyre.TrainState` with a strategy (static), placed on its devices.

    Subclasses may declare fields with or without defaults (``ema_params: Any``); ``create``
    takes them as keywords. ``skipped_steps`` (an int32 scalar, 0 at creation) counts the
    updates a train step dropped because its loss or gradients were not finite
    (``nan_policy="skip"``); it is part of the state, so a checkpoint keeps it.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> s = ManagedState.create(params=jnp.zeros(4), tx=optax.adam(1e-3), strategy="jit")
        >>> s.strategy.name, s.with_strategy("eager").strategy.name
        ('jit', 'eager')
    """

    strategy: Strategy = struct.field(pytree_node=False, default_factory=Jit)
    skipped_steps: jax.Array = struct.field(default_factory=_no_skipped_steps)

    @classmethod
    def create(  # type: ignore[override]
        cls,
        *,
        params: Any,
        tx: optax.GradientTransformation | None = None,
        strategy: str | Strategy = "jit",
        apply_fn: Callable[..., Any] | None = None,
        rng: Any = None,
        model_state: Any = None,
        **extra: Any,
    ) -> Any:
        """A state at step 0 placed for ``strategy`` (``"eager"``, ``"jit"``,
        ``"data_parallel"``, ``"fsdp"`` or a :class:`~gyre.Strategy`).

        Example:
            >>> import jax.numpy as jnp
            >>> ManagedState.create(params=jnp.zeros(2), strategy="fsdp").strategy.name
            'fsdp'
        """
        chosen = get_strategy(strategy)
        state = super().create(
            params=params, tx=tx, apply_fn=apply_fn, rng=rng, model_state=model_state,
            strategy=chosen, **extra,
        )
        return chosen.place_state(state)

    def with_strategy(self, strategy: str | Strategy) -> Any:
        """The same state under another strategy, moved onto its devices.

        Example:
            >>> import jax.numpy as jnp
            >>> ManagedState.create(params=jnp.zeros(2)).with_strategy("data_parallel").strategy.name
            'data_parallel'
        """
        chosen = get_strategy(strategy)
        return chosen.place_state(self.replace(strategy=chosen))


def _strategy_of(state: Any) -> Strategy:
    strategy = getattr(state, "strategy", None)
    return strategy if isinstance(strategy, Strategy) else _DEFAULT


_DEFAULT = Jit()


class ManagedStep(LoopElement):
    """A step compiled per strategy; built by :func:`train_step` and :func:`step`.

    Call it as ``step(state, batch)``, as a method ``state.train_step(batch)`` when it is a
    class attribute of the state, or put it in a loop's task table, where it spreads under
    ``every(1)`` as in ciclo (``{**train_step, gyre.every(100): [...]}``). ``fuse(k)`` gives
    the ``lax.scan`` of ``k`` steps over stacked batches (used by ``steps_per_call``).
    ``step(state, batch, mask=mask)`` passes the mask of a padded batch to a function that
    takes ``mask`` (:attr:`takes_mask`; the signature of the step is its function's, so the
    loops see it).

    ``nan_policy`` is ``"skip"`` when the step drops updates whose loss or gradients are not
    finite, else ``None``; ``with_nan_policy("skip")`` gives the step that does (what a loop
    run with ``nan_policy="skip"`` uses).

    Example:
        >>> import gyre
        >>> count = step(lambda s, b: (gyre.logs().add_metric("b", b), s))
        >>> [repr(k) for k in {**count}]
        ['every(steps=1)']
    """

    def __init__(
        self,
        fn: StepFn,
        pure: StepFn,
        *,
        kind: str,
        nan_policy: str | None = None,
        make: Callable[[bool], StepFn] | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self.pure = pure
        self.kind = kind
        self.nan_policy = nan_policy
        self._make = make  # builds the pure step, skipping or not (train steps only)
        self.takes_mask = accepts_mask(fn)
        self._variants: dict[str, ManagedStep] = {}
        # A training step replaces the state: donate it. Other steps (evaluation, prediction)
        # return it unchanged and callers keep using the one they passed: never donate.
        self.donates: bool | None = None if kind == "train_step" else False
        # One compiled function per strategy; jax.jit itself retraces for states of another
        # structure (the strategy constrains shardings inside the trace).
        self._compiled: dict[tuple[Strategy, bool], StepFn] = {}
        self._last: tuple[Strategy | None, StepFn | None] = (None, None)

    def __repr__(self) -> str:
        return f"<gyre managed {self.kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _get(self, strategy: Strategy, state: Any, fused: bool) -> StepFn:
        run = self._compiled.get((strategy, fused))
        if run is None:
            if fused:
                run = strategy.compile(scanned(self.pure), state, batch_axis=1, donate=self.donates)
            else:
                run = strategy.compile(self.pure, state, donate=self.donates)
            self._compiled[(strategy, fused)] = run
        return run

    def __call__(self, state: Any, batch: Any = None, mask: Any = None) -> tuple[Logs, Any]:
        if mask is not None:
            if not self.takes_mask:
                raise TypeError(_takes_no_mask(self._fn))
            batch = Masked(batch, mask)
        strategy = _strategy_of(state)
        last_strategy, run = self._last
        if strategy is not last_strategy or run is None:
            run = self._get(strategy, state, fused=False)
            self._last = (strategy, run)
        if strategy.data_size > 1:  # one device: jax.jit moves host batches itself
            batch = strategy.place_batch(batch)
        return run(state, batch)

    def fuse(self, steps: int) -> StepFn:
        """``(state, batches) -> (logs, state)`` running one step per row of ``batches``
        (leaves stacked on a new leading axis) in one ``lax.scan``; logs come back stacked.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> from gyre import managed
            >>> count = managed.step(lambda s, b: (gyre.logs().add_metric("b", b.sum()), s))
            >>> logs, _ = count.fuse(3)(managed.ManagedState.create(params=()), jnp.ones((3, 2)))
            >>> logs.metrics.b.tolist()
            [2.0, 2.0, 2.0]
        """

        def fused(state: Any, batches: Any) -> tuple[Logs, Any]:
            strategy = _strategy_of(state)
            run = self._get(strategy, state, fused=True)
            if strategy.data_size > 1:  # one device: jax.jit moves host batches itself
                batches = strategy.place_batch(batches, axis=1)
            return run(state, batches)

        return fused

    def with_nan_policy(self, policy: str) -> ManagedStep:
        """This step as it runs in a loop with ``nan_policy=policy``: under ``"skip"``, a train
        step that drops updates whose loss or gradients are not finite (built once, then
        reused); otherwise, or for a step that makes no update, this step.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> fit = train_step(lambda s, b: (gyre.logs().add_loss("l", jnp.sum(s.params * b)), s))
            >>> fit.nan_policy, fit.with_nan_policy("skip").nan_policy, fit.with_nan_policy("raise") is fit
            (None, 'skip', True)
        """
        if policy != "skip" or self.nan_policy == "skip" or self._make is None:
            return self
        variant = self._variants.get(policy)
        if variant is None:
            variant = ManagedStep(self._fn, self._make(True), kind=self.kind, nan_policy="skip", make=self._make)
            self._variants[policy] = variant
        return variant

    def compiled_count(self) -> int:
        """How many programs the compiled functions of this step hold (for tests), its
        skipping form's (:meth:`with_nan_policy`) included.

        Example:
            >>> step(lambda s, b: (None, s)).compiled_count()
            0
        """
        own = sum(cache_size(f) for f in self._compiled.values())
        return own + sum(v.compiled_count() for v in self._variants.values())


# -- losses ------------------------------------------------------------------------------------


def check_floating_loss(name: str, value: Any, where: str) -> None:
    """A clear error for an integer or bool loss, whose gradient is silently zero.

    Example:
        >>> check_floating_loss("hits", 3, "train_step")
        Traceback (most recent call last):
        TypeError: loss 'hits' of train_step is int32...
    """
    dtype = jnp.result_type(value)
    if not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(
            explain(
                f"loss {name!r} of {where} is {dtype}: its gradient would be zero",
                expected="a floating-point loss (float32, bfloat16, ...)",
                received=f"a loss of dtype {dtype}",
                fix="compute the loss in floating point (cast its inputs with .astype(jnp.float32) "
                "before the arithmetic); log counts and accuracies with add_metric instead",
            )
        )


def total_loss(logs: Any, where: str = "train_step") -> jax.Array:
    """The sum of the losses in ``logs``, in float32; a clear error when there are none, or
    one is not a floating-point scalar.

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> float(total_loss(gyre.logs().add_loss("a", jnp.float32(1)).add_loss("b", 2.0)))
        3.0
    """
    losses = logs.get("losses") if isinstance(logs, dict) else None
    if not losses:
        raise ValueError(
            explain(
                f"{where} logged no loss to differentiate",
                expected="the step to log at least one scalar with logs.add_loss(name, value)",
                received="logs with collections " + (repr(sorted(logs)) if isinstance(logs, dict) else describe(logs)),
                fix="return (gyre.logs().add_loss('loss', loss), state); metrics logged with "
                "add_metric are not differentiated",
            )
        )
    total = jnp.zeros((), jnp.float32)
    for name, value in losses.items():
        shape = jnp.shape(value)
        if shape != ():
            raise ValueError(
                explain(
                    f"loss {name!r} is not a scalar",
                    expected="a scalar loss (shape ()) per add_loss",
                    received=f"shape {shape}",
                    fix=f"reduce it before logging, e.g. logs.add_loss({name!r}, per_example.mean())",
                )
            )
        check_floating_loss(name, value, where)
        total = total + jnp.asarray(value, jnp.float32)
    return total


# -- calling the user's function -----------------------------------------------------------------


def _takes_batch(fn: Callable[..., Any], where: str) -> bool:
    """Whether ``fn`` takes ``(state, batch)`` (else ``(state)``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    P = inspect.Parameter
    if any(p.kind is P.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    if not positional:
        raise TypeError(
            explain(
                f"{where} cannot be a managed step: it takes no state",
                expected="fn(state, batch) -> (logs, state), or fn(state) -> state",
                received=f"signature {inspect.signature(fn)}",
                fix="def step(state, batch): ...",
            )
        )
    required = [p for p in positional if p.default is P.empty]
    if len(required) > 2:
        raise TypeError(
            explain(
                f"{where} takes {len(required)} arguments; a managed step gets (state, batch)",
                expected="fn(state, batch) or fn(state)",
                received=f"signature {inspect.signature(fn)}",
                fix="drop the other parameters (ciclo's elapsed: the state's step counter is "
                "state.step, and its per-step key state.step_key()), or give them defaults",
            )
        )
    return len(positional) >= 2


def _as_pair(out: Any, state: Any, where: str) -> tuple[Any, Any]:
    """``(logs, state)`` from what the function returned: the pair (``None`` parts meaning
    none / unchanged), the logs alone or the state alone."""
    if isinstance(out, tuple) and len(out) == 2:
        logs, new = out
        if type(logs) is type(state) and isinstance(new, Mapping) and type(new) is not type(state):
            raise TypeError(
                explain(
                    f"{where} returned (state, logs): the pair is in the wrong order",
                    expected="(logs, state)",
                    received=f"({type(logs).__name__}, {type(new).__name__})",
                    fix="return logs, state",
                )
            )
        if logs is not None and not isinstance(logs, Mapping):
            raise TypeError(
                explain(
                    f"{where} must return (logs, state)",
                    expected="a pair: (gyre.logs().add_loss(...), state)",
                    received=f"a pair whose first value is {describe(logs)}",
                    fix="return logs, state",
                )
            )
        return (Logs() if logs is None else logs), (state if new is None else new)
    if out is None:
        return Logs(), state
    if type(out) is type(state):
        return Logs(), out
    if isinstance(out, Mapping):
        return out, state
    raise TypeError(
        explain(
            f"{where} must return (logs, state)",
            expected="a pair: (gyre.logs().add_loss(...), state), the logs, or the state",
            received=describe(out),
            fix="return logs, state",
        )
    )


def _call(fn: Callable[..., Any], takes_batch: bool, state: Any, batch: Any, where: str) -> tuple[Any, Any]:
    if type(batch) is Masked:  # a padded batch: its mask goes to the function
        if not accepts_mask(fn):
            raise TypeError(_takes_no_mask(fn))
        out = fn(state, batch.batch, mask=batch.mask)
    else:
        out = fn(state, batch) if takes_batch else fn(state)
    return _as_pair(out, state, where)


def _takes_no_mask(fn: Any) -> str:
    where = getattr(fn, "__qualname__", "the step")
    return explain(
        f"{where} got the mask of a padded batch, and takes no mask",
        expected="a function with a mask parameter: def step(state, batch, mask=None)",
        received=f"signature {inspect.signature(fn)}",
        fix="add mask=None to the function and leave the padded rows out of its means "
        "(jnp.sum(x * mask) / jnp.sum(mask)), or call the step without mask=",
    )


def _shapes(tree: Any, limit: int = 300) -> str:
    text = str(jax.tree_util.tree_map(lambda x: f"{jnp.result_type(x)}{list(jnp.shape(x))}", tree))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_params(given: Any, returned: Any, where: str) -> None:
    """A clear error when the function returned params unlike those it received (they would
    be dropped: the step computes the params update itself)."""
    if returned is given:
        return
    same = jax.tree_util.tree_structure(given) == jax.tree_util.tree_structure(returned) and all(
        jnp.shape(a) == jnp.shape(b) and jnp.result_type(a) == jnp.result_type(b)
        for a, b in zip(jax.tree_util.tree_leaves(given), jax.tree_util.tree_leaves(returned), strict=True)
    )
    if not same:
        raise ValueError(
            explain(
                f"{where} returned params of another structure or shape than it received",
                expected=f"the params it received: {_shapes(given)}",
                received=_shapes(returned),
                fix="a managed train step computes the params update itself from the logged "
                "losses: return the state you received, changing only model_state or extras "
                "(return logs, state); to update params yourself write a plain jax.jit step",
            )
        )


# -- stateful metric objects --------------------------------------------------------------------


def _is_metric(value: Any) -> bool:
    return not isinstance(value, jax.Array) and all(
        callable(getattr(value, m, None)) for m in ("merge", "compute")
    )


def _accumulator(state: Any, name: str, value: Any, where: str) -> tuple[Any, bool]:
    """The state's accumulator ``name`` and whether it is a field (else an extra)."""
    fields = getattr(type(state), "__dataclass_fields__", {})
    extras = getattr(state, "extras", None) if "extras" in fields else None
    if name in fields and name != "extras":
        found, is_field = getattr(state, name), True
    elif isinstance(extras, Mapping) and name in extras:
        found, is_field = extras[name], False
    else:
        kind = type(value).__name__
        raise ValueError(
            explain(
                f"{where} logged the metric object {name!r} ({kind}) as a stateful metric, but the "
                f"state has no {name!r} to accumulate it in",
                expected=f"a state field or extra named {name!r} holding an empty {kind}",
                received=f"a {type(state).__name__} with fields {sorted(f for f in fields if f != 'extras')}",
                fix=f"create the state with {name}={kind}.empty() (ManagedState.create(..., {name}=...)) "
                f"or declare `{name}: {kind}` in your state class; reset it with "
                f"state.replace({name}={kind}.empty()); or log {name}.compute() for this batch alone",
            )
        )
    if type(found) is not type(value):
        raise TypeError(
            explain(
                f"state.{name} cannot accumulate the stateful metric {name!r} logged by {where}",
                expected=f"state.{name} of the logged metric's type, {type(value).__name__}",
                received=f"state.{name} = {describe(found)}",
                fix=f"initialise it with {type(value).__name__}.empty()",
            )
        )
    return found, is_field


def merge_stateful_metrics(logs: Any, state: Any, where: str = "step") -> tuple[Any, Any]:
    """Merges each metric object of ``logs.stateful_metrics`` into the state's accumulator of
    the same name and logs the accumulator's ``compute()`` instead (a dict: one entry per
    key), as ciclo's managed steps do. Other entries are left as they are.

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> from gyre.core.metrics import Mean
        >>> state = ManagedState.create(params=(), acc=Mean.empty().update(1.0))
        >>> logs, state = merge_stateful_metrics(gyre.logs().add_stateful_metric("acc", Mean.from_value(0.0)), state)
        >>> float(logs.stateful_metrics.acc), float(state.acc.count)
        (0.5, 2.0)
    """
    entries = logs.get("stateful_metrics") if isinstance(logs, Mapping) else None
    if not entries or not any(_is_metric(v) for v in entries.values()):
        return logs, state
    values: dict[str, Any] = {}
    for name, value in entries.items():
        if not _is_metric(value):
            values[name] = value
            continue
        accumulator, is_field = _accumulator(state, name, value, where)
        merged = accumulator.merge(value)
        state = state.replace(**{name: merged}) if is_field else state.replace(extras={**state.extras, name: merged})
        result = merged.compute()
        if isinstance(result, Mapping):
            values.update({str(k): v for k, v in result.items()})
        else:
            values[name] = result
    out = Logs().merge({c: v for c, v in logs.items() if c != "stateful_metrics"})
    return out.add_stateful_metrics(values), state


# -- the train step ----------------------------------------------------------------------------


def _split_micro(batch: Any, k: int) -> Any:
    def split(x: Any) -> Any:
        x = jnp.asarray(x)
        if x.ndim == 0 or x.shape[0] % k != 0:
            raise ValueError(
                explain(
                    f"a batch of {x.shape[0] if x.ndim else 'a scalar'} cannot be split into "
                    f"{k} microbatches",
                    expected=f"every batch leaf with a leading dimension divisible by accumulate_steps={k}",
                    received=f"a leaf of shape {x.shape}",
                    fix="use a batch size that is a multiple of accumulate_steps",
                )
            )
        return x.reshape((k, x.shape[0] // k, *x.shape[1:]))

    return jax.tree_util.tree_map(split, batch)


def _merge_rows(stacked: Any) -> Any:
    """One metric object from a metric object stacked over microbatches (merged in order)."""
    first = jax.tree_util.tree_map(lambda x: x[0], stacked)
    rest = jax.tree_util.tree_map(lambda x: x[1:], stacked)
    merged, _ = jax.lax.scan(lambda acc, m: (acc.merge(m), None), first, rest)
    return merged


def _mean_logs(stacked: Logs) -> Logs:
    """Microbatch logs: losses and metrics averaged (:class:`gyre.core.metrics.Mean`), metric
    objects merged, everything else from the last microbatch (:class:`~gyre.core.metrics.Last`)."""
    out = Logs()
    for collection, values in stacked.items():
        reduction = metrics.Mean if collection in ("losses", "metrics") else metrics.Last
        for name, value in values.items():
            if _is_metric(value):
                out.add_entry(collection, name, _merge_rows(value))
            else:
                out.add_entry(
                    collection, name, jax.tree_util.tree_map(lambda v, r=reduction: r.from_stacked(v).compute(), value)
                )
    return out


def _skip_counter(state: Any, where: str) -> tuple[Any, Callable[[Any, Any], Any]]:
    """The state's count of skipped steps and how to replace it (a field, or an extra)."""
    fields = getattr(type(state), "__dataclass_fields__", {})
    if SKIPPED_STEPS in fields:
        return getattr(state, SKIPPED_STEPS), lambda s, count: s.replace(**{SKIPPED_STEPS: count})
    extras = getattr(state, "extras", None) if "extras" in fields else None
    if isinstance(extras, Mapping) and SKIPPED_STEPS in extras:
        return extras[SKIPPED_STEPS], lambda s, count: s.replace(extras={**s.extras, SKIPPED_STEPS: count})
    raise TypeError(
        explain(
            f"{where} skips non-finite updates (nan_policy='skip'), but its state has no "
            "skipped_steps to count them in",
            expected="a gyre.managed.ManagedState (its field skipped_steps starts at 0), or a "
            "state with a skipped_steps field or extra",
            received=f"a {type(state).__name__} with fields {sorted(f for f in fields if f != 'extras')}"
            + (f" and extras {sorted(extras)}" if isinstance(extras, Mapping) else ""),
            fix="create the state with gyre.managed.ManagedState.create(...); or "
            "TrainState.create(..., skipped_steps=jnp.zeros((), jnp.int32)), which keeps it in "
            "extras; or declare `skipped_steps: jax.Array` in your state class",
        )
    )


def _all_finite(tree: Any) -> jax.Array:
    """Whether every floating value of ``tree`` is finite (a boolean scalar on the device)."""
    ok = jnp.array(True)
    for leaf in jax.tree_util.tree_leaves(tree):
        if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact):
            ok = ok & jnp.all(jnp.isfinite(leaf))
    return ok


def _keep(ok: jax.Array, new: Any, old: Any) -> Any:
    if new is old:  # unchanged by the step (the rng, a counter): nothing to choose
        return new
    kept = jnp.where(ok, new, old)
    return kept if kept.dtype == jnp.result_type(new) else kept.astype(jnp.result_type(new))


def skip_non_finite(before: Any, after: Any, loss: Any, grads: Any, logs: Logs, where: str = "train_step") -> Any:
    """``after`` when ``loss`` and ``grads`` are finite, else ``before`` (every leaf: params,
    optimizer state, ``step``, model state, metric accumulators), with the state's
    ``skipped_steps`` grown by one; logs the count as the stateful metric ``skipped_steps``.
    Runs inside the compiled step: no host sync.

    Example:
        >>> import jax.numpy as jnp
        >>> before = ManagedState.create(params=jnp.ones(2))
        >>> after = before.replace(params=jnp.full(2, jnp.nan), step=before.step + 1)
        >>> logs = Logs()
        >>> kept = skip_non_finite(before, after, jnp.float32(jnp.nan), after.params, logs)
        >>> kept.params.tolist(), int(kept.step), int(kept.skipped_steps), int(logs.stateful_metrics.skipped_steps)
        ([1.0, 1.0], 0, 1, 1)
    """
    count, put = _skip_counter(before, where)
    if jax.tree_util.tree_structure(before) != jax.tree_util.tree_structure(after):
        raise ValueError(
            explain(
                f"{where} skips non-finite updates, and returned a state of another structure "
                "than it received, so the previous one cannot be kept",
                expected=f"a state structured like the one it received: {_shapes(before)}",
                received=_shapes(after),
                fix="return the state you received, changing only the values of its fields "
                "(state.replace(...)); create every field and extra before the loop",
            )
        )
    ok = jnp.isfinite(jnp.asarray(loss)) & _all_finite(grads)
    kept = jax.tree_util.tree_map(lambda new, old: _keep(ok, new, old), after, before)
    count = jnp.asarray(count) + jnp.where(ok, 0, 1).astype(jnp.result_type(count))
    logs.add_stateful_metric(SKIPPED_STEPS, count)
    return put(kept, count)


def _make_train(
    fn: StepFn,
    *,
    accumulate_steps: int,
    clip_grad_norm: float | None,
    policy: MixedPrecision,
    skip: bool = False,
) -> StepFn:
    where = getattr(fn, "__qualname__", "train_step")
    takes_batch = _takes_batch(fn, where)

    def grads_of(state: Any, batch: Any) -> tuple[Any, Any, Any]:
        def loss_fn(params: Any) -> tuple[jax.Array, tuple[Any, Any]]:
            inner = state.replace(params=policy.cast_to_compute(params))
            logs, new_state = _call(fn, takes_batch, inner, policy.cast_to_compute(batch), where)
            _check_params(inner.params, getattr(new_state, "params", None), where)
            return total_loss(logs, where), (logs, new_state)

        (_, (logs, new_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        return grads, logs, new_state

    def train(state: Any, batch: Any) -> tuple[Logs, Any]:
        if accumulate_steps == 1:
            grads, logs, new_state = grads_of(state, batch)
        else:
            micro = _split_micro(batch, accumulate_steps)
            zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)

            # The state each microbatch returns (model_state, extras, metric states...) is
            # carried to the next one; params and rng stay those of the step.
            def body(carry: tuple[Any, Any], xs: tuple[jax.Array, Any]) -> tuple[tuple[Any, Any], Any]:
                acc, current = carry
                i, mb = xs
                grads, logs, new_state = grads_of(current.replace(rng=jax.random.fold_in(state.rng, i)), mb)
                acc = jax.tree_util.tree_map(jnp.add, acc, grads)
                return (acc, new_state.replace(params=current.params, rng=current.rng)), logs

            index = jnp.arange(accumulate_steps)
            (acc, new_state), stacked = jax.lax.scan(body, (zeros, state), (index, micro))
            grads = jax.tree_util.tree_map(lambda g: g / accumulate_steps, acc)
            logs = _mean_logs(stacked)
        logs, new_state = merge_stateful_metrics(logs, new_state, where)
        if not isinstance(logs, Logs):
            logs = Logs().merge(logs)
        if clip_grad_norm is not None:
            norm = optax.global_norm(grads)
            scale = jnp.minimum(1.0, clip_grad_norm / (norm + 1e-6))
            grads = jax.tree_util.tree_map(lambda g: g * scale.astype(g.dtype), grads)
            logs.add_metric("grad_norm", norm)
        # The function saw compute-dtype params; the update applies to the float32 ones.
        new_state = new_state.replace(params=state.params, rng=state.rng)
        updated = new_state.apply_gradients(grads=grads)
        if skip:
            updated = skip_non_finite(state, updated, total_loss(logs, where), grads, logs, where)
        return logs, updated

    return train


def _check_nan_policy(nan_policy: Any) -> None:
    if nan_policy is None or nan_policy == "skip":
        return
    raising = nan_policy in ("raise", "ignore")
    raise ValueError(
        explain(
            "train_step's nan_policy= must be None or 'skip'",
            expected="None (follow the loop's nan_policy: skip under a loop's 'skip', else apply "
            "every update) or 'skip' (always drop an update whose loss or gradients are not "
            "finite, also when called by hand)",
            received=describe(nan_policy),
            fix="pass nan_policy='raise' or 'ignore' to the loop, not to the step (a compiled step "
            "cannot stop the loop without waiting for the device): gyre.train_loop(..., "
            "nan_policy=...)"
            if raising
            else "pass nan_policy='skip', or leave it out",
        )
    )


def _check_options(accumulate_steps: Any, clip_grad_norm: Any) -> None:
    whole_number(
        accumulate_steps,
        minimum=1,
        problem="accumulate_steps= must be a whole number >= 1",
        expected="e.g. accumulate_steps=4 to average the gradients of 4 microbatches",
        fix="pass a positive int",
    )
    if clip_grad_norm is not None and not (isinstance(clip_grad_norm, (int, float)) and clip_grad_norm > 0):
        raise ValueError(
            explain(
                "clip_grad_norm= must be a positive number or None",
                expected="e.g. clip_grad_norm=1.0",
                received=describe(clip_grad_norm),
                fix="pass a positive float, or None for no clipping",
            )
        )


def train_step(
    fn: StepFn | None = None,
    *,
    accumulate_steps: int = 1,
    clip_grad_norm: float | None = None,
    policy: str | MixedPrecision | None = None,
    nan_policy: str | None = None,
) -> Any:
    """Makes ``fn(state, batch) -> (logs, state)`` a compiled training step.

    The sum of the losses ``fn`` logs with ``add_loss`` is differentiated with respect to
    ``state.params``; the optimizer update is applied and ``state.step`` grows by one.

    Args:
        fn: the step's maths (usable bare, ``@train_step``, or with options,
            ``@train_step(accumulate_steps=4)``).
        accumulate_steps: split each batch into this many microbatches and average their
            gradients inside the compiled step (a ``lax.scan``; each microbatch gets its
            own rng, ``fold_in(rng, i)``); losses and metrics are averaged.
        clip_grad_norm: clip gradients to this global norm (logs ``grad_norm``).
        policy: mixed precision, e.g. ``"bfloat16"``: ``fn`` sees params and floating batch
            values in bfloat16, the update is applied to float32 params.
        nan_policy: ``"skip"``: when the summed loss or a gradient is NaN or infinite, the
            update is dropped inside the compiled step (the whole state is kept as it was;
            ``state.step`` counts applied updates) and ``state.skipped_steps`` grows by one,
            logged as the stateful metric ``skipped_steps``. ``None`` (default): follow the
            loop (skip under a loop's ``nan_policy="skip"``; by hand, apply every update).

    Example:
        >>> import gyre, jax.numpy as jnp, optax
        >>> @train_step(clip_grad_norm=1.0)
        ... def fit(state, batch):
        ...     return gyre.logs().add_loss("l", jnp.sum((state.params - batch) ** 2)), state
        >>> state = ManagedState.create(params=jnp.zeros(2), tx=optax.sgd(0.1))
        >>> logs, state = fit(state, jnp.ones(2))
        >>> round(float(logs.metrics.grad_norm), 3)
        2.828
    """
    _check_options(accumulate_steps, clip_grad_norm)
    _check_nan_policy(nan_policy)
    chosen = get_policy(policy)

    def wrap(f: StepFn) -> ManagedStep:
        def make(skip: bool) -> StepFn:
            return _make_train(
                f, accumulate_steps=accumulate_steps, clip_grad_norm=clip_grad_norm, policy=chosen, skip=skip
            )

        return ManagedStep(f, make(nan_policy == "skip"), kind="train_step", nan_policy=nan_policy, make=make)

    return wrap if fn is None else wrap(fn)


def step(fn: StepFn | None = None, *, policy: str | MixedPrecision | None = None) -> Any:
    """Makes ``fn(state, batch) -> (logs, state)`` (or ``fn(state) -> state``) a compiled step
    without gradients.

    A function that takes ``mask`` gets the mask of a padded batch (see the module docs): in
    an evaluation loop the last, smaller batch is padded and the step compiles once.

    Example:
        >>> import gyre, jax.numpy as jnp
        >>> @step
        ... def evaluate(state, batch):
        ...     return gyre.logs().add_metric("mean", batch.mean()), state
        >>> logs, _ = evaluate(ManagedState.create(params=()), jnp.arange(4.0))
        >>> float(logs.metrics.mean)
        1.5
        >>> @step
        ... def masked_mean(state, batch, mask=None):
        ...     return gyre.logs().add_metric("mean", jnp.sum(batch * mask) / jnp.sum(mask)), state
        >>> logs, _ = masked_mean(ManagedState.create(params=()), jnp.array([1.0, 2.0, 2.0]),
        ...                       mask=jnp.array([True, True, False]))
        >>> float(logs.metrics.mean)
        1.5
    """
    chosen = get_policy(policy)

    def wrap(f: StepFn) -> ManagedStep:
        where = getattr(f, "__qualname__", "step")
        takes_batch = _takes_batch(f, where)

        def pure(state: Any, batch: Any) -> tuple[Logs, Any]:
            inner = state.replace(params=chosen.cast_to_compute(state.params)) if chosen.casts else state
            logs, new_state = _call(f, takes_batch, inner, chosen.cast_to_compute(batch), where)
            if chosen.casts:
                _check_params(inner.params, getattr(new_state, "params", None), where)
                new_state = new_state.replace(params=state.params)
            logs, new_state = merge_stateful_metrics(logs, new_state, where)
            return (logs if isinstance(logs, Logs) else Logs().merge(logs)), new_state

        return ManagedStep(f, pure, kind="step")

    return wrap if fn is None else wrap(fn)
