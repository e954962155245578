"""``gyre.fit``: Jax Fit's one call (seed 004) as one :func:`gyre.train_loop`, with Jax Fit's
bugs fixed (fresh dropout keys, batch-weighted evaluation, the best model chosen on ``val_ds``,
NaN stops, exact resume, one folder per run); docs/migration/jax_fit.md lists them.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp

from gyre.core._checks import choice, whole
from gyre.core._clock import infer_batch_size
from gyre.core._errors import describe, explain, keywords_checked
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.core._schedules import EpochEnds, periodic
from gyre.core._train_state import TrainState
from gyre.data._padding import accepts_mask, padded
from gyre.data._source import refuse_sources
from gyre.engine import _named
from gyre.engine._engine import refuse_donated
from gyre.engine._epochs import (
    EpochLength,
    check_split,
    first_batch,
    is_iterator,
    refuse_unsplit_evaluation,
    training_data,
)
from gyre.engine._inner import inner_loop
from gyre.engine._masked import MaskedBatches, largest_batch
from gyre.engine._nan import check_nan_policy
from gyre.engine._resume import PastStopError
from gyre.fitting._fit_checks import eval_batches, is_pair_of_arrays, refuse_array_pair
from gyre.fitting._fit_steps import (
    leaf_shapes,
    make_train_step,
    plain_jit,
    reraise_explained,
)
from gyre.parallel._registry import get_strategy
from gyre.parallel._strategy import Strategy, refuse_one_device

BARE_METRIC = "accuracy"
"""The name a bare value returned by ``eval_step`` is recorded under (``accuracy_test``)."""


@keywords_checked
def fit(
    state: TrainState,
    train_ds: Iterable[Any],
    test_ds: Iterable[Any] | None = None,
    *,
    loss_fn: Callable[..., tuple[Any, Mapping[str, Any]]],
    eval_step: Callable[[Any, Any], Any] | None = None,
    eval_freq: int = 1,
    num_epochs: int,
    log_name: str = "default",
    hparams: Mapping[str, Any] | None = None,
    val_ds: Iterable[Any] | None = None,
    resume: str | None = None,
    steps_per_call: int | Literal["auto"] = 1,
    log_dir: str | os.PathLike[str] = "runs",
    progress: bool = True,
    save_every_minutes: float = 10.0,
    monitor: str | None = None,
    mode: str = "max",
    strategy: str | Strategy = "jit",
    nan_policy: str = "raise",
    batch_size_fn: Callable[[Any], int] | None = None,
) -> tuple[TrainState, History]:
    """Trains ``state`` for ``num_epochs`` epochs of ``train_ds``, as Jax Fit's ``fit``.

    Each step (one compiled call, the state donated) applies
    ``state.apply_fn({"params": p, **model_state}, x, train=True, rngs={"dropout": key})``
    with the model state (``batch_stats``) mutable and ``key = fold_in(state.rng,
    state.step)``, differentiates ``loss_fn(logits, y)``'s loss, updates the parameters and
    the model state, and logs ``loss``, every ``loss_dict`` entry and, when the optimizer
    injects one (``optax.inject_hyperparams``), ``learning_rate``.

    Args:
        state: a :class:`gyre.TrainState` with ``apply_fn`` and ``tx``.
        train_ds: the training batches ``(x, y)``: a list, a re-iterable loader (iterated
            once per epoch) or ``gyre.data.batches(...)`` (its own epochs; resumable).
            Labels of shape ``(B, 1)`` against logits ``(B, C)`` are refused at the first
            step (a one-hot loss would broadcast them and train at chance): flatten them.
        test_ds: evaluation batches, recorded as ``<name>_test``; never used to choose.
            A pair of arrays ``(x, y)`` (as Keras's ``validation_data``) is evaluated in
            batches of the training batch size; so is ``val_ds``.
        loss_fn: ``(logits, labels) -> (loss, loss_dict)``; may take ``step=`` (the step).
        eval_step: ``(state, batch) -> metric or {name: metric}`` (scalars); a bare value
            is recorded as ``accuracy``. Needed with ``test_ds`` or ``val_ds``. One that
            accepts a keyword ``mask`` gets every batch padded to one size (it compiles once:
            a list's largest batch, else the first one's) and ``mask``, a bool vector of its
            real rows: it must return means over them (``sum(x * mask) / mask.sum()``), and
            each batch weighs its real rows.
        eval_freq: evaluate every this many epochs (and after the last one).
        num_epochs: epochs to train (>= 1).
        log_name: the run's folder under ``log_dir`` (TensorBoard events, checkpoints): one
            folder name. Run again, the same name trains in a new folder, ``<log_name>-1``,
            ``-2``...; ``resume`` continues the newest.
        hparams: hyperparameters written to TensorBoard with the final metrics: a mapping
            ``{name: value}`` (checked before training).
        val_ds: validation batches, recorded as ``<name>_val``; the best checkpoint by
            ``monitor`` is kept in ``<log_dir>/<log_name>/checkpoints``.
        resume: ``"latest"`` continues exactly from the newest checkpoint of this run.
        steps_per_call: fuse this many training steps into one call, or ``"auto"`` (fuse 100 per
            call when that measured faster on the first steps).
        log_dir: the folder holding the runs.
        progress: show a Keras-style progress bar.
        save_every_minutes: minutes between two checkpoints for resuming (one is also saved
            when training ends or is preempted; with ``val_ds`` the best model is saved where
            the validation runs); ``0``: at every epoch's end.
        monitor: the validation metric ranking checkpoints (default: ``eval_step``'s first
            one), with or without the ``_val`` suffix.
        mode: ``"max"`` (default: higher ``monitor`` is better) or ``"min"``.
        strategy: how the steps run, a registered name (``"jit"``, the default: one device;
            ``"data_parallel"``, ``"fsdp"``, ``"spmd"``, ``"eager"``) or a :class:`gyre.Strategy`.
            Under data parallelism every training batch must hold a multiple of the device
            count (checked before training); batch norm statistics and means are over the
            whole batch, as on one device.
        nan_policy: ``"raise"`` (the default): a NaN or infinite loss or metric stops the run
            with :class:`gyre.NonFiniteError`, before any checkpoint holds a state trained after
            it; ``"ignore"`` trains through (Jax Fit's behaviour). ``"skip"`` is refused.
        batch_size_fn: the examples in a batch (``lambda batch: len(batch[1])``): they weigh
            the evaluation means and count the samples. By default the leading dimension the
            batch's arrays share (arrays that disagree are refused before training).

    Returns:
        ``(state, history)``: the final state and the run's :class:`gyre.History`.

    Example:
        >>> import tempfile, gyre, jax, jax.numpy as jnp, optax, flax.linen as nn
        >>> model = nn.Dense(2)
        >>> apply = lambda v, x, train=False, rngs=None: model.apply(v, x)
        >>> params = model.init(jax.random.key(0), jnp.ones((1, 3)))["params"]
        >>> state = gyre.TrainState.create(apply_fn=apply, params=params, tx=optax.adam(0.1))
        >>> x, y = jnp.ones((4, 3)), jnp.array([1, 1, 1, 1])
        >>> def loss_fn(logits, labels):
        ...     loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        ...     return loss, {"ce": loss}
        >>> def eval_step(state, batch):
        ...     logits = state.apply_fn({"params": state.params}, batch[0])
        ...     return jnp.mean(jnp.argmax(logits, -1) == batch[1])
        >>> tmp = tempfile.TemporaryDirectory()
        >>> state, history = gyre.fit(state, [(x, y)] * 5, [(x, y)], loss_fn=loss_fn,
        ...     eval_step=eval_step, num_epochs=2, log_dir=tmp.name, progress=False)
        >>> int(state.step), history.collect("accuracy_test")
        (10, [1.0, 1.0])
        >>> tmp.cleanup()
    """
    from gyre.callbacks import checkpoint, keras_bar
    from gyre.core import on_train_step
    from gyre.loggers import TensorBoardWriter, write_to

    policy = check_nan_policy(nan_policy, "gyre.fit", no_skip=(
        "its training step applies every one",
        "pass tx=optax.apply_if_finite(optax.adam(1e-3), max_consecutive_errors=5) to "
        "TrainState.create with nan_policy='ignore', or use gyre.train_loop with "
        "@gyre.managed.train_step and nan_policy='skip'",
    ))
    refuse_array_pair(train_ds)
    if is_pair_of_arrays(test_ds) or is_pair_of_arrays(val_ds):  # Keras's validation_data=(x, y)
        rows = infer_batch_size(first_batch(train_ds), strict=False, default=0)
        test_ds, val_ds = eval_batches(test_ds, rows), eval_batches(val_ds, rows)
    evaluated = {n: ds for n, ds in (("test", test_ds), ("val", val_ds)) if ds is not None}
    epochs = _check_arguments(state, num_epochs, eval_freq, evaluated, eval_step, mode)
    _check_run_options(log_name, hparams)
    chosen = get_strategy(strategy)  # an unknown name: the registered ones, the closest first
    refuse_one_device(chosen)  # several processes: before training, not at the first save
    if not plain_jit(chosen):
        check_split(chosen, train_ds, who="fit", name="train_ds", single="strategy='jit'")
        state = chosen.place_state(state)  # a copy: the caller's arrays are not donated
    data, epoch_steps = training_data(train_ds, epochs, what="train_ds")
    run_dir = run_folder(log_dir, log_name, resume)
    if progress and resume is None and os.path.basename(run_dir) != log_name:
        print(f"gyre.fit: {log_name!r} holds an earlier run; this one is in {run_dir}")
    names = {n: _eval_names(eval_step, state, ds, n, batch_size_fn) for n, ds in evaluated.items()}
    monitor_name = _monitor_name(monitor, names["val"]) if "val" in names else None

    if isinstance(save_every_minutes, bool) or not isinstance(save_every_minutes, (int, float)) or not (
        save_every_minutes >= 0
    ):
        raise ValueError(explain(
            "fit needs save_every_minutes >= 0",
            expected="save_every_minutes=10 (minutes between checkpoints), or 0 for every epoch's end",
            received=describe(save_every_minutes), fix="pass save_every_minutes=10"))
    evaluations = [
        _evaluation(eval_step, ds, n, chosen, batch_size_fn) for n, ds in evaluated.items()  # type: ignore[arg-type]
    ]
    ckpt = checkpoint(
        os.path.join(run_dir, "checkpoints"), keep=1,
        keep_best=1 if monitor_name else 0, monitor=monitor_name, mode=mode,
    )
    step = make_train_step(loss_fn, state, chosen)
    tasks: dict[Any, Any] = {on_train_step: step}
    # saves for resuming: on a clock (a save costs tens of ms, an epoch may take less), at the
    # end and on preemption (the engine's final save); every epoch's end with save_every_minutes=0
    seconds = 60.0 * float(save_every_minutes)
    clock = periodic(seconds) if seconds else None
    evaluation = EpochEnds(epoch_steps, "evaluation", every=eval_freq, last=epochs)
    if monitor_name is None:
        if evaluations:
            tasks[evaluation] = evaluations
        tasks[clock or EpochEnds(epoch_steps, "save")] = [ckpt]
    else:  # ranked where the validation ran (model selection); elsewhere saved for resuming only

        def save(loop: Any) -> None:  # kept by recency
            loop.request_save(ckpt, None)

        tasks[evaluation] = [*evaluations, ckpt]
        tasks[clock or EpochEnds(epoch_steps, "save", every=eval_freq, last=epochs, others=True)] = [save]
    writer = TensorBoardWriter(run_dir)
    callbacks: list[Any] = [write_to(writer, every=epoch_steps), EpochLength(epoch_steps, who="fit", data="train_ds",
                fix="start a new run (resume=None trains in a new folder, <log_name>-<n>)")]
    if progress:
        callbacks.insert(0, keras_bar(total=epochs * epoch_steps))
    try:
        state, history, _ = _named.train_loop(
            state, data, tasks, callbacks=callbacks, stop=epochs * epoch_steps,
            epoch_duration=epoch_steps, steps_per_call=steps_per_call, resume=resume,
            nan_policy=policy, batch_size_fn=batch_size_fn,
        )
        if hparams is not None:
            writer.write_hparams(dict(hparams), final_metrics(history))
    except PastStopError as err:  # the engine's words: stop is fit's, not the user's
        err.note_epochs("gyre.fit", epochs, epoch_steps,
                        "pass a larger num_epochs to continue the saved run, or resume=None to start a new one")
        raise
    finally:
        ckpt.close()
        writer.close()
    return state, history


def run_folder(log_dir: str | os.PathLike[str], log_name: str, resume: str | None) -> str:
    """This run's folder: ``log_dir/<log_name>``, the next free ``<log_name>-<n>`` when taken, the newest with ``resume``."""
    root = Path(os.fspath(log_dir))
    pattern = re.compile(re.escape(log_name) + r"(?:-(\d+))?")
    used = []
    if root.is_dir():
        for entry in root.iterdir():
            match = pattern.fullmatch(entry.name)
            checkpoints = entry / "checkpoints"
            if match and checkpoints.is_dir() and any(c.name.isdigit() for c in checkpoints.iterdir()):
                used.append(int(match.group(1) or 0))
    number = (max(used) if resume is not None else max(used) + 1) if used else 0
    return os.fspath(root / (log_name if number == 0 else f"{log_name}-{number}"))


def _check_run_options(log_name: Any, hparams: Any) -> None:
    """``log_name`` is one folder name inside ``log_dir``; ``hparams`` a mapping with string
    keys (else TensorBoard refuses it after the whole training)."""
    if (
        not isinstance(log_name, str) or log_name in ("", ".", "..")
        or any(sep in log_name for sep in ("/", "\\", os.sep)) or os.path.isabs(log_name)
    ):
        raise ValueError(explain(
            "fit's log_name must be one folder name inside log_dir (the run's folder)",
            expected="a name such as log_name='mnist' (no '/', '\\', '..' or absolute path)",
            received=f"log_name={log_name!r}",
            fix="pass the parent folder as log_dir= and the run's name as log_name=, e.g. "
            "log_dir='runs', log_name='mnist'"))
    if hparams is not None and not (isinstance(hparams, Mapping) and all(isinstance(k, str) for k in hparams)):
        raise TypeError(explain(
            "fit's hparams must map names to values (written to TensorBoard after training)",
            expected="a dict such as hparams={'lr': 0.01, 'batch_size': 64}", received=describe(hparams),
            fix="name each hyperparameter: hparams={'lr': 0.01}"))


def _check_arguments(
    state: Any, num_epochs: Any, eval_freq: Any, evaluated: dict[str, Any], eval_step: Any, mode: Any
) -> int:
    if not isinstance(state, TrainState) or state.apply_fn is None or state.tx is None:
        missing = "a gyre.TrainState" if not isinstance(state, TrainState) else (
            "apply_fn" if state.apply_fn is None else "tx"
        )
        raise TypeError(explain(
            f"fit needs a gyre.TrainState with apply_fn and tx (missing: {missing})",
            expected="gyre.TrainState.create(apply_fn=model.apply, params=..., tx=optax.adam(1e-3))",
            received=describe(state), fix="create the state with apply_fn=model.apply and an optax optimizer tx="))
    refuse_donated(state, "fit", "state, history = gyre.fit(state, ...)")
    epochs = whole(num_epochs, "num_epochs", minimum=1, problem="fit needs a whole number num_epochs >= 1",
                   expected="num_epochs=10", fix="pass a whole number of epochs, e.g. num_epochs=10")
    whole(eval_freq, "eval_freq", minimum=1, problem="fit needs a whole number eval_freq >= 1 (epochs between evaluations)",
          expected="eval_freq=1", fix="pass a whole number of epochs, e.g. eval_freq=1")
    choice(mode, "fit: mode", ("min", "max"), expected="'max' (accuracy) or 'min' (a loss)",
           fix="pass mode='max' or mode='min'.")
    if eval_step is not None:
        _check_eval_signature(eval_step)
    for split, ds in evaluated.items():
        name = f"{split}_ds"
        refuse_sources(ds, name)
        if eval_step is None:
            raise ValueError(explain(
                f"fit got {name} but no eval_step to run on it",
                expected="eval_step=lambda state, batch: accuracy (a scalar or a dict of them)",
                received=f"{name}={describe(ds, 60)}, eval_step=None", fix=f"pass eval_step=, or leave {name} out"))
        if is_iterator(ds):
            raise TypeError(explain(
                f"fit iterates {name} once per evaluation, and it is an iterator (one pass only)",
                expected="a list of (x, y) batches, a loader, or gyre.data.batches(..., epochs=1)",
                received=describe(ds), fix=f"pass a list: {name}=list(batches)"))
    return epochs


def eval_entries(out: Any) -> dict[str, Any]:
    """``eval_step``'s result as ``{name: scalar}`` (a bare value is ``accuracy``), or the explained error."""
    entries = dict(out) if isinstance(out, Mapping) else {BARE_METRIC: out}
    for name, value in entries.items():
        if isinstance(value, (tuple, list, Mapping)) or jnp.ndim(value) != 0:
            shape = getattr(value, "shape", None)
            raise TypeError(explain(
                f"eval_step returned a non-scalar for {name!r}",
                expected="a scalar metric (the batch's mean) or a dict {name: scalar}",
                received=describe(value) + (f" of shape {tuple(shape)}" if shape is not None else ""),
                fix="reduce it over the batch: return jnp.mean(correct)"))
    return entries


def _evaluation(
    eval_step: Callable[..., Any], ds: Any, name: str, strategy: Strategy | None = None, batch_size_fn: Any = None
) -> Any:
    """One evaluation of ``eval_step`` over ``ds`` (an inner :func:`gyre.test_loop`), entries named
    ``<metric>_<name>``, batch-size weighted means (see fit's ``eval_step`` and ``strategy``). Under a
    mesh, batches are placed on its devices: masked ones padded to a multiple of them, an unpadded
    batch that does not split passed whole; weights are read from the host batches."""
    share = strategy.lift_batch_size(1) if strategy is not None and strategy.mesh is not None else 0
    if share and jax.process_count() > 1 and not accepts_mask(eval_step) and isinstance(ds, (list, tuple)):
        for batch in ds:  # said before training, not at the first evaluation
            _refuse_unsplit(infer_batch_size(batch, strict=False, default=0), share, name)

    def place(batch: Any) -> Any:
        if not share:
            return batch
        rows = infer_batch_size(batch, strict=False, default=0)
        if rows % share:
            _refuse_unsplit(rows, share, name)  # several processes: it cannot run whole
            return batch
        return strategy.place_batch(batch)  # type: ignore[union-attr]

    if accepts_mask(eval_step):
        def size_of(batch: Any) -> int:
            return infer_batch_size(batch, strict=False, default=0)

        rows = largest_batch(ds, size_of) or size_of(first_batch(ds))
        size = -(-rows // share) * share if share else (rows or None)
        data: Any = MaskedBatches(ds, batch_size_fn=batch_size_fn, batch_size=size)  # re-iterable as ds is

        def test_step(state: Any, batch: Any, mask: Any = None) -> Logs:
            batch, mask = place((batch, mask))
            return Logs().add_metrics(eval_entries(_call_eval(eval_step, name, state, batch, mask=mask)))
    else:
        data = ds

        def test_step(state: Any, batch: Any) -> Logs:  # type: ignore[misc]
            return Logs().add_metrics(eval_entries(_call_eval(eval_step, name, state, place(batch))))

    def evaluate(state: Any) -> Any:
        return _named.test_loop(state, data, {"on_test_step": test_step}, nan_policy="ignore", batch_size_fn=batch_size_fn)

    return inner_loop(name, evaluate, aggregation=_named.DEFAULT_TEST_AGGREGATION)


def _refuse_unsplit(rows: int, share: int, name: str) -> None:
    refuse_unsplit_evaluation(
        rows, share, f"fit: a {name}_ds batch",
        expected=", or an eval_step that takes mask= (every batch padded to one size, the padding masked)",
        fix="def eval_step(state, batch, mask): return means over the real rows "
        "(jnp.sum(x * mask) / mask.sum()), or drop the short last batch")


def _call_eval(eval_step: Callable[..., Any], name: str, state: Any, batch: Any, **mask: Any) -> Any:
    """``eval_step(state, batch[, mask=])``; an error it raises gets a note saying how fit
    called it (a misplaced argument otherwise reads as a riddle deep in the model)."""
    try:
        result = eval_step(state, batch, **mask)
    except Exception as err:
        reraise_explained(err, batch, f"eval_step, on a batch of {name}_ds", (
            f"(raised in eval_step, which gyre.fit calls as eval_step(state, batch"
            f"{', mask=mask' if mask else ''}) with state a {type(state).__name__} and batch one "
            f"element of {name}_ds, leaves of shapes {leaf_shapes(batch)})"))
    if result is None:
        raise TypeError(explain(
            "eval_step returned None",
            expected="a metric (e.g. jnp.mean(predictions == labels)) or a dict of metrics", received="None",
            fix="end eval_step with `return accuracy` or `return {'accuracy': accuracy}` "
            "(a missing return gives None)"))
    return result


def _check_eval_signature(eval_step: Any) -> None:
    """The seed's order is ``eval_step(state, batch)``; ``(batch, state)`` is refused at once."""
    try:
        names = [p.name for p in inspect.signature(eval_step).parameters.values()][:2]
    except (TypeError, ValueError):
        return
    if names == ["batch", "state"]:
        raise TypeError(explain(
            "eval_step takes (batch, state), but fit calls eval_step(state, batch)",
            expected="def eval_step(state, batch): ... (the state first, as Jax Fit's)",
            received=f"eval_step{inspect.signature(eval_step)}",
            fix="swap the two parameters: def eval_step(state, batch)"))


def _eval_names(eval_step: Any, state: Any, ds: Any, name: str, batch_size_fn: Any = None) -> list[str]:
    """The names ``eval_step`` records, checked (scalars) on one batch's shapes before training,
    and the batch's examples countable (the weight of its means)."""
    try:
        batch = first_batch(ds)
    except StopIteration:  # else a bare StopIteration from deep in the engine
        raise ValueError(explain(
            f"fit got an empty {name}_ds: it gives no batch to evaluate",
            expected=f"{name}_ds with at least one (x, y) batch",
            received=f"{name}_ds={describe(ds, 60)}, which gives no batch",
            fix=f"check the split that made it, or leave {name}_ds out")) from None
    if batch_size_fn is None:
        infer_batch_size(batch)  # refuses arrays that disagree on their leading dimension
    if accepts_mask(eval_step):
        batch, mask = next(iter(padded([batch])))  # a mask of ones
        shapes = jax.eval_shape(lambda s, b, m: _call_eval(eval_step, name, s, b, mask=m), state, batch, mask)
    else:
        shapes = jax.eval_shape(lambda s, b: _call_eval(eval_step, name, s, b), state, batch)
    return list(eval_entries(shapes))


def _monitor_name(monitor: str | None, names: list[str]) -> str:
    if monitor is None:
        return f"{names[0]}_val"
    base = monitor[: -len("_val")] if monitor.endswith("_val") else monitor
    if base not in names:
        raise ValueError(explain(
            f"fit: monitor={monitor!r} is not a metric of eval_step",
            expected=f"one of {names} (the validation entries are {[n + '_val' for n in names]})",
            received=repr(monitor), fix=f"pass monitor={names[0]!r}"))
    return f"{base}_val"


def final_metrics(history: History) -> dict[str, float]:
    """The last value of every evaluation entry (``*_test``, ``*_val``) of ``history``."""
    return {name: float(values[-1]) for names in history.names().values() for name in names
            if name.endswith(("_test", "_val")) and (values := history.collect(name))}


__all__ = ["fit"]
