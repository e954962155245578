"""The training step of :func:`gyre.fit`: the seed's ``loss_fn(logits, labels)`` as a compiled
``(state, batch) -> (logs, state)`` step, and the notes fit adds to the errors raised in it."""

from __future__ import annotations

import inspect
import re
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

from gyre.config import learning_rate_of
from gyre.core._errors import describe, explain
from gyre.core._logs import Logs
from gyre.core._train_state import TrainState
from gyre.fitting._fit_checks import check_labels, optimizer_error, split_batch
from gyre.parallel._strategies import Jit
from gyre.parallel._strategy import Strategy
from gyre.steps._compiled import StrategyStep
from gyre.steps._update import train_update


def _takes_step(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "step" in params


def _loss_pair(out: Any) -> tuple[Any, Mapping[str, Any]]:
    """``(loss, loss_dict)`` from what ``loss_fn`` returned, or a clear error saying what it
    returned instead."""
    expected = "(loss, loss_dict): a scalar loss and a dict of values to log, e.g. (loss, {'ce': loss})"
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping) and jnp.ndim(out[0]) == 0:
        return out[0], out[1]
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Mapping):
        problem, fix = "loss_fn returned (loss_dict, loss): the pair in reverse order", "return loss, loss_dict"
    elif isinstance(out, Mapping):
        problem, fix = "loss_fn returned a loss_dict alone, without the loss", "return loss, loss_dict"
    elif not isinstance(out, (tuple, list)) and jnp.ndim(out) == 0:
        problem, fix = "loss_fn returned a bare loss where a pair is expected", "return loss, {'loss': loss}"
    else:
        problem, fix = "loss_fn must return (loss, loss_dict) with a scalar loss", "return loss.mean(), {...}"
    raise TypeError(explain(problem, expected=expected, received=describe(out), fix=fix))


def make_train_step(loss_fn: Callable[..., Any], state: TrainState, strategy: Strategy | None = None) -> Any:
    """fit's compiled training step ``(state, (x, y)) -> (logs, state)``, cached per loss (a second fit
    call must not trace it again), model collections, step argument, strategy and ``train=``."""
    strategy = None if strategy is None or plain_jit(strategy) else strategy
    key = (tuple(state.model_state), _takes_step(loss_fn), strategy, model_takes_train(state.apply_fn))
    try:
        cached = _STEPS.setdefault(loss_fn, {})
    except TypeError:  # not weakly referable: compiled per call
        cached = {}
    if key not in cached:
        step = _train_step_fn(loss_fn, key[0], key[1], key[3])
        cached[key] = jax.jit(step, donate_argnums=0) if strategy is None else StrategyStep(step, strategy)
    return cached[key]


def model_takes_train(apply_fn: Any) -> bool:
    """Whether the model behind ``apply_fn`` (a linen module's ``__call__``, else itself) takes ``train=``."""
    module = getattr(apply_fn, "__self__", None)
    target = module.__call__ if module is not None and callable(module) else apply_fn
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # no signature to read: Jax Fit's convention
        return True
    return any(p.name == "train" or p.kind is p.VAR_KEYWORD for p in params)


def leaf_shapes(tree: Any) -> list[tuple[int, ...]]:
    """The shapes of a batch's leaves, for the notes fit adds to errors (no value is read)."""
    return [tuple(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]


def _call_note(x: Any, mutable: list[str], takes_train: bool) -> str:
    shapes = "[" + ", ".join(f"{tuple(np.shape(leaf))} {getattr(leaf, 'dtype', type(leaf).__name__)}"
                             for leaf in jax.tree_util.tree_leaves(x)) + "]"
    variables = ", ".join(repr(c) + ": ..." for c in ["params", *mutable])
    train = ", train=True" if takes_train else ""
    collections = f", mutable={mutable}" if mutable else ""
    return (
        f"(raised in gyre.fit's training step, which calls state.apply_fn({{{variables}}}, x{train}"
        f"{collections}, rngs={{'dropout': key}}) with x of shapes and dtypes {shapes}, then "
        "loss_fn(logits, labels))"
    )


def _loss_note(logits: Any, labels: Any, takes_step: bool) -> str:
    def shown(tree: Any) -> str:
        leaves = jax.tree_util.tree_leaves(tree)
        if len(leaves) == 1:
            return f"{leaves[0].dtype}{list(np.shape(leaves[0]))}"
        return f"a {type(tree).__name__} of shapes {leaf_shapes(tree)}"

    step = ", step=state.step" if takes_step else ""
    return (
        f"(raised in loss_fn, which gyre.fit calls as loss_fn(logits, labels{step}) with logits "
        f"{shown(logits)} (the model's output) and labels {shown(labels)} (the batch's second "
        "element): check the order of loss_fn's parameters)"
    )


_PARAM_SHAPE = re.compile(
    r'parameter "(?P<name>[^"]+)" in "(?P<layer>[^"]+)".*?generate shape (?P<wanted>\([^)]*\))'
    r".*?has shape (?P<has>\([^)]*\))",
    re.S,
)


def model_shape_error(err: Exception, batch: Any, where: str) -> ValueError | None:
    """The explained error for a batch the model cannot take (flax's ``ScopeParamShapeError``), else ``None``."""
    match = _PARAM_SHAPE.search(str(err)) if type(err).__name__ == "ScopeParamShapeError" else None
    if match is None:
        return None
    name, layer, wanted, has = match.group("name", "layer", "wanted", "has")
    return ValueError(explain(
        f"the model cannot take its input: layer {layer}'s {name!r} has shape {has}, and the input "
        f"asks for {wanted} (in {where})",
        expected=f"batches of the shapes the model was initialised with (its {name!r} of shape {has})",
        received=f"a batch with leaves of shapes {leaf_shapes(batch)}",
        fix="initialise the model with a batch of this data (model.init(key, x[:1])), or reshape the "
        "batches to the model's input"))


def reraise_explained(err: Exception, batch: Any, where: str, note: str) -> NoReturn:
    """Re-raises ``err`` (raised by the model or ``eval_step`` on ``batch``) explained where it can be,
    with ``note`` saying how fit called it."""
    explained = model_shape_error(err, batch, where)
    fix = apply_error_fix(err)
    if fix:
        err.add_note(f"gyre.fit: {fix}")
    (explained or err).add_note(note)
    if explained is not None:
        raise explained from err
    raise err


def apply_error_fix(err: Exception) -> str | None:
    """The fix for a model error a Jax Fit user meets, when ``err`` is one, else ``None``."""
    text = str(err)
    if "batch_stats" in text and "collection" in text:
        return ("the model has batch norm but the state has no batch statistics: pass "
                "batch_stats=variables['batch_stats'] to gyre.TrainState.create")
    if "rngs" in text.lower() and "dropout" in text.lower():
        return "the model draws from an rng stream other than 'dropout'; fit provides 'dropout' only"
    return None


def _train_step_fn(
    loss_fn: Callable[..., Any], collections: tuple[str, ...], takes_step: bool, takes_train: bool = True
) -> Any:
    """fit's training step, uncompiled: ``(state, (x, y)) -> (logs, state)``. An error while
    the model or the loss runs (at tracing) gets a note saying how fit called them."""
    mutable = list(collections)
    flags = {"train": True} if takes_train else {}

    def objective(inner: TrainState, batch: Any) -> tuple[Any, tuple[Mapping[str, Any], Any]]:
        x, labels = split_batch(batch)  # checks run while tracing: once, never per step
        rng = jax.random.fold_in(inner.rng, inner.step)
        variables = {"params": inner.params, **inner.model_state}
        try:
            if mutable:
                logits, updates = inner.apply_fn(variables, x, **flags, mutable=mutable, rngs={"dropout": rng})
            else:
                logits, updates = inner.apply_fn(variables, x, **flags, rngs={"dropout": rng}), {}
        except Exception as err:
            reraise_explained(err, batch, "gyre.fit's training step, on a batch of train_ds",
                              _call_note(x, mutable, takes_train))
        check_labels(logits, labels)
        try:
            out = loss_fn(logits, labels, step=inner.step) if takes_step else loss_fn(logits, labels)
        except Exception as err:
            err.add_note(_loss_note(logits, labels, takes_step))
            raise
        loss, loss_dict = _loss_pair(out)
        return loss, (loss_dict, inner.replace(model_state={**inner.model_state, **dict(updates)}))

    def apply(state: TrainState, grads: Any) -> TrainState:
        try:
            return state.apply_gradients(grads=grads)
        except Exception as err:
            explained = optimizer_error(err, state.tx)
            if explained is not None:
                raise explained from err
            raise

    def train_step(state: TrainState, batch: Any) -> tuple[Logs, TrainState]:
        loss, loss_dict, _, new_state = train_update(objective, state, batch, apply=apply)[:4]
        logs = Logs().add_loss("loss", loss)
        for name, value in loss_dict.items():
            if name != "loss":
                logs.add_loss(str(name), value)
        rate = learning_rate_of(new_state.opt_state)
        if rate is not None:
            logs.add_metric("learning_rate", rate)
        return logs, new_state

    return train_step


def plain_jit(strategy: Strategy) -> bool:
    """Whether ``strategy`` is the default: one ``jax.jit`` on the default device, donating
    (fit's own step, batches left for jit to move)."""
    return type(strategy) is Jit and strategy.device is None and strategy.donate


_STEPS: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()
