"""What :func:`gyre.fit` checks of a Jax Fit user's data and optimizer, once: at the door, or while
its step is traced for the first step (shapes only; nothing runs per step)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import jax

from gyre.core._errors import describe, explain
from gyre.data._source import EvalBatches


def split_batch(batch: Any) -> tuple[Any, Any]:
    """A training batch as ``(x, labels)``, or a ``TypeError`` explaining what fit needs."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    if isinstance(batch, Mapping):
        keys = list(batch)
        pair = ", ".join(f"b[{k!r}]" for k in keys[:2]) if len(keys) >= 2 else "b['image'], b['label']"
        raise TypeError(explain(
            "fit trains on (x, labels) batches, and train_ds gives dicts",
            expected="each batch a pair (x, labels), as Jax Fit's: the model's input and the labels loss_fn gets",
            received=f"a dict batch with keys {keys}",
            fix=f"map each batch to a pair: train_ds = [({pair}) for b in ds] for a list; for "
            f"tf.data, ds.map(lambda b: ({pair})) (eval_step gets the batches "
            "of test_ds as they are: a dict there is yours to read)"))
    raise TypeError(explain(
        "fit trains on (x, labels) batches",
        expected="each batch of train_ds a pair (x, labels)", received=f"a batch {describe(batch, 60)}",
        fix="give train_ds batches of two elements: [(x, y), ...] or gyre.data.batches((x, y), 64)"))


def check_labels(logits: Any, labels: Any) -> None:
    """Refuses labels of shape ``(..., 1)`` against logits ``(..., C)``, ``C > 1``: a one-hot
    loss broadcasts the column over the classes and trains at chance without an error. Reads
    shapes only (fit calls it while tracing its step). Other shapes pass: the loss decides.
    """
    logits, labels = _single(logits), _single(labels)
    if logits is None or labels is None:
        return
    lo, la = tuple(logits.shape), tuple(labels.shape)
    if len(lo) < 2 or len(la) != len(lo) or la[:-1] != lo[:-1] or la[-1] != 1 or lo[-1] == 1:
        return
    classes, flat = lo[-1], la[:-1]
    raise ValueError(explain(
        f"fit: labels of shape {la} against logits of shape {lo}: a one-hot loss "
        f"(optax.softmax_cross_entropy) broadcasts that one column over the {classes} classes "
        "and trains at chance, without an error",
        expected=f"integer class labels of shape {flat} (softmax_cross_entropy_with_integer_labels), "
        f"or one-hot labels of shape {lo}",
        received=f"labels {la} ({labels.dtype}), logits {lo}",
        fix="flatten the labels where the batches are made: y.reshape(-1) (a (N, 1) column "
        f"of class indices becomes (N,)); for a one-hot loss, jax.nn.one_hot(labels, {classes}) "
        "inside loss_fn. A loss_fn that indexes the logits with (B, 1) labels on purpose "
        "(take_along_axis) takes them flat and adds the axis itself"))


def _single(tree: Any) -> Any:
    """The one array of ``tree``, else ``None`` (a model with several outputs: not checked)."""
    leaves = jax.tree_util.tree_leaves(tree)
    return leaves[0] if len(leaves) == 1 and hasattr(leaves[0], "shape") else None


def is_pair_of_arrays(ds: Any) -> bool:
    """Whether ``ds`` is ``(x, y)``: a tuple of two arrays of one length (not batches)."""
    if not (isinstance(ds, tuple) and len(ds) == 2):
        return False
    shapes = [getattr(a, "shape", None) for a in ds]
    return all(s is not None and len(s) >= 1 for s in shapes) and shapes[0][0] == shapes[1][0]  # type: ignore[index]


def eval_batches(ds: Any, batch_size: int) -> Any:
    """``ds`` as fit evaluates it: ``(x, y)`` arrays as the list of their ``EvalBatches``, else as it is."""
    return list(EvalBatches(ds, max(int(batch_size), 1))) if is_pair_of_arrays(ds) else ds


def refuse_array_pair(train_ds: Any) -> None:
    """``train_ds=(x, y)`` arrays: explained (fit trains on batches it does not choose)."""
    if is_pair_of_arrays(train_ds):
        x, y = train_ds
        raise TypeError(explain(
            "fit trains on batches, and train_ds is a pair of arrays",
            expected="an iterable of (x, labels) batches: a list, a loader, or gyre.data.batches",
            received=f"(x, y) of shapes {tuple(x.shape)} and {tuple(y.shape)}",
            fix="batch them: train_ds=gyre.data.batches((x, y), 64) (shuffled each epoch, "
            "resumable); test_ds=(x, y) and val_ds=(x, y) are evaluated as they are"))


def _strings(obj: Any, seen: set[int], depth: int = 0) -> Iterable[str]:
    """The strings held by an optax transformation: in its functions' closures, partials,
    and the tuples, lists and dict values they hold."""
    if depth > 12 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, str):
        yield obj
        return
    inner: list[Any] = []
    if isinstance(obj, functools.partial):
        inner += [obj.func, *obj.args, *obj.keywords.values()]
    elif isinstance(obj, (tuple, list)):
        inner += list(obj)
    elif isinstance(obj, dict):
        inner += list(obj.values())
    elif callable(obj):
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                inner.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
    for item in inner:
        yield from _strings(item, seen, depth + 1)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == ""  # optax.adam("1e-3") keeps -1 * "1e-3", the empty string
    return True


def optimizer_error(err: Exception, tx: Any) -> TypeError | None:
    """The explanation of ``err``, raised by the optimizer's update, when the optimizer
    holds a number given as a string (``optax.adam("1e-3")``); else ``None``.
    """
    found = [s for s in _strings(tx, set()) if _numeric(s)]
    if not found:
        return None
    shown = ", ".join(repr(s) for s in found[:3])
    return TypeError(explain(
        "fit: the optimizer holds a number given as a string",
        expected="numbers (or optax schedules) for its hyperparameters: optax.adam(1e-3)",
        received=f"string values {shown} in state.tx (optax.adam('1e-3') keeps -1 * '1e-3', "
        f"the empty string, as its step size); the update raised {type(err).__name__}: {err}",
        fix="pass numbers: optax.adam(1e-3), or float(text) for a value read from a file or "
        "the command line"))

