"""The job behind ``gyre fit``: an MLP learns the digits data set with :func:`gyre.train_loop`.

It is also a complete, small example of the loop language at the ``train_loop`` rung: a
jitted train step that donates the state, a jitted test step, an evaluation at the end of
each epoch, a progress bar, a checkpoint and a TensorBoard writer registered by
``callbacks=``. The state is a
plain dict ``{"params", "opt_state"}``.

Needs the ``examples`` extra (scikit-learn for the data, matplotlib for the plot,
tensorboardX for the event files).
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import gyre
import gyre.data
from gyre.core._clock import Elapsed
from gyre.core._errors import as_integer, describe, explain
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.loggers._writer import require

State = dict[str, Any]
Batch = tuple[jax.Array, jax.Array]
Step = Callable[[State, Batch], Any]


class MLP(nn.Module):
    """A multilayer perceptron: ``Dense -> relu`` per hidden layer, then a linear head.

    Example:
        >>> model = MLP(hidden=(8,), classes=3)
        >>> params = model.init(jax.random.key(0), jnp.zeros((1, 4)))["params"]
        >>> model.apply({"params": params}, jnp.zeros((2, 4))).shape
        (2, 3)
    """

    hidden: tuple[int, ...] = (256, 256)
    classes: int = 10

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.classes)(x)


def _loss_and_accuracy(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == labels)
    return loss, accuracy


def make_steps(model: nn.Module, tx: optax.GradientTransformation) -> tuple[Step, Step]:
    """The jitted ``(train_step, test_step)`` for a classifier and an optimizer.

    Both are ``(state, (x, y)) -> (logs, state)`` with ``state = {"params", "opt_state"}``
    and log ``loss`` (a loss) and ``accuracy`` (a metric). The train step donates its state.

    Example:
        >>> model, tx = MLP(hidden=(8,), classes=3), optax.sgd(0.1)
        >>> state = create_state(model, tx, features=4, seed=0)
        >>> train_step, test_step = make_steps(model, tx)
        >>> batch = (jnp.ones((2, 4)), jnp.array([0, 1]))
        >>> logs, state = train_step(state, batch)
        >>> sorted(logs.losses), sorted(logs.metrics)
        (['loss'], ['accuracy'])
    """

    def train_step(state: State, batch: Batch) -> tuple[Logs, State]:
        x, y = batch

        def objective(params: Any) -> tuple[jax.Array, jax.Array]:
            logits = model.apply({"params": params}, x)
            loss, accuracy = _loss_and_accuracy(logits, y)
            return loss, accuracy

        (loss, accuracy), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        logs = gyre.logs().add_loss("loss", loss).add_metric("accuracy", accuracy)
        return logs, {"params": params, "opt_state": opt_state}

    def test_step(state: State, batch: Batch) -> Logs:
        x, y = batch
        loss, accuracy = _loss_and_accuracy(model.apply({"params": state["params"]}, x), y)
        return gyre.logs().add_loss("loss", loss).add_metric("accuracy", accuracy)

    return jax.jit(train_step, donate_argnums=0), jax.jit(test_step)


def create_state(model: nn.Module, tx: optax.GradientTransformation, *, features: int, seed: int) -> State:
    """The initial ``{"params", "opt_state"}`` of ``model`` for inputs of ``features`` values.

    Example:
        >>> state = create_state(MLP(hidden=(8,)), optax.adam(1e-3), features=4, seed=0)
        >>> sorted(state), state["params"]["Dense_0"]["kernel"].shape
        (['opt_state', 'params'], (4, 8))
    """
    params = model.init(jax.random.key(seed), jnp.zeros((1, features), jnp.float32))["params"]
    return {"params": params, "opt_state": tx.init(params)}


def make_run_dir(out: str | Path, *, now: _dt.datetime | None = None) -> Path:
    """Creates and returns ``<out>/<YYYYmmdd-HHMMSS>/``, with a ``-1``, ``-2``... suffix if taken.

    Raises:
        DemoArgumentError: ``out`` is a file, or the folder cannot be created there.

    Example:
        >>> import tempfile, datetime
        >>> when = datetime.datetime(2024, 5, 1, 12, 0, 0)
        >>> with tempfile.TemporaryDirectory() as root:
        ...     make_run_dir(root, now=when).name, make_run_dir(root, now=when).name
        ('20240501-120000', '20240501-120000-1')
    """
    base = check_out(out)
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    suffix = 0
    try:
        base.mkdir(parents=True, exist_ok=True)
        while True:
            candidate = base / (stamp if suffix == 0 else f"{stamp}-{suffix}")
            try:
                candidate.mkdir()
            except FileExistsError:
                suffix += 1
                continue
            return candidate
    except OSError as err:  # no permission, a read-only or special file system, ...
        reason = err.strerror or type(err).__name__
        raise _out_error(base, f"cannot create a run folder in {str(base)!r}: {reason}") from err


@dataclass(frozen=True)
class DemoResult:
    """What :func:`fit_digits` returns.

    Attributes:
        run_dir: the run folder (``history.csv``, ``curves.png``, ``tensorboard/``,
            ``checkpoints/``).
        test_accuracy: accuracy on the whole test set after the last epoch.
        history: the run's history.
        elapsed: the loop's final clock.
        seconds: wall-clock seconds of training, compilation and evaluations included.
        preempted: the run stopped on SIGTERM (or Ctrl-C), its last step saved; run again
            with ``resume=run_dir`` to continue.
    """

    run_dir: Path
    test_accuracy: float
    history: History
    elapsed: Elapsed
    seconds: float
    preempted: bool = False


class DemoArgumentError(ValueError):
    """An argument of :func:`fit_digits` (or :func:`make_run_dir`) that cannot work.

    ``str(err)`` is the full explanation (expected, received, fix); the ``gyre`` command
    prints ``argument --<name>: <summary>`` with its usage line instead.

    Attributes:
        argument: the parameter's name (``"batch_size"``; the option is ``--batch-size``).
        summary: what is wrong, in one line that names the value received.

    Example:
        >>> try:
        ...     fit_digits(epochs=0)
        ... except DemoArgumentError as err:
        ...     print(err.argument, "-", err.summary)
        epochs - must be a whole number >= 1, received int 0
    """

    def __init__(self, argument: str, summary: str, *, expected: str, received: str, fix: str) -> None:
        super().__init__(
            explain(f"fit_digits: {argument} {summary}", expected=expected, received=received, fix=fix)
        )
        self.argument = argument
        self.summary = summary


MAX_SEED = 2**63 - 1  # what jax.random.key takes


def _check_whole(name: str, value: Any, *, minimum: int, maximum: int | None, example: str) -> int:
    number = as_integer(value)
    if number is not None and number >= minimum and (maximum is None or number <= maximum):
        return number
    span = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    raise DemoArgumentError(
        name,
        f"must be a whole number {span}, received {describe(value)}",
        expected=f"an int {span}, e.g. {example}",
        received=describe(value),
        fix=f"pass {example}",
    )


def _check_learning_rate(value: Any) -> float:
    good = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if good and math.isfinite(value) and value > 0:  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    raise DemoArgumentError(
        "learning_rate",
        f"must be a finite number > 0, received {describe(value)}",
        expected="a float such as learning_rate=1e-3",
        received=describe(value),
        fix="pass learning_rate=1e-3",
    )


def _check_batch_size(batch_size: int, samples: int) -> None:
    if batch_size > samples:
        raise DemoArgumentError(
            "batch_size",
            f"must be at most {samples}, the number of digits training samples, received "
            f"{batch_size}",
            expected=f"batch_size <= {samples} (every training batch is full)",
            received=f"batch_size={batch_size}",
            fix=f"pass batch_size={min(64, samples)} (or any value up to {samples})",
        )


def _out_error(out: Path, summary: str) -> DemoArgumentError:
    return DemoArgumentError(
        "out",
        summary,
        expected="a folder that holds the run folders (created if missing), e.g. out='runs'",
        received=repr(str(out)),
        fix="choose a folder you can write to, e.g. out='runs'",
    )


def check_out(out: str | Path) -> Path:
    """Checks, before any work, that run folders can be made in ``out``.

    ``out`` may be missing (it is created); it must not be a file, nor lie under a file or
    a folder that cannot be written to.

    Example:
        >>> import tempfile, os
        >>> root = tempfile.TemporaryDirectory()
        >>> check_out(os.path.join(root.name, "runs")).name  # missing: it will be created
        'runs'
        >>> open(os.path.join(root.name, "notes.txt"), "w").close()
        >>> check_out(os.path.join(root.name, "notes.txt"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        gyre._demo.DemoArgumentError: fit_digits: out '...notes.txt' is a file, not a folder...
        >>> root.cleanup()
    """
    if isinstance(out, bytes) or not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise DemoArgumentError(
            "out",
            f"must be a folder name, received {describe(out)}",
            expected="a str or pathlib.Path naming a folder, e.g. out='runs'",
            received=describe(out),
            fix="pass out='runs'",
        )
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise _out_error(path, f"{str(path)!r} is a file, not a folder to hold the run folders")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise _out_error(path, f"{str(path)!r} cannot be created: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _out_error(path, f"{str(path)!r} cannot be created: {str(existing)!r} is not writable")
    return path


def _require_plotting() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError(
            explain(
                "gyre fit draws curves.png with matplotlib, which is not installed",
                expected="matplotlib",
                received=f"ImportError: {err}",
                fix="pip install 'gyre[examples]'",
            )
        ) from err


def fit_digits(
    *,
    epochs: int = 15,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    seed: int = 0,
    out: str | Path = "runs",
    quiet: bool = False,
    resume: str | Path | None = None,
) -> DemoResult:
    """Trains a 64-256-256-10 MLP on the digits with Adam; writes a run folder.

    The run folder ``<out>/<YYYYmmdd-HHMMSS>/`` receives ``history.csv``, ``curves.png``
    (loss and accuracy, train and test), ``tensorboard/`` (every step's entries as
    TensorBoard event files, written by :func:`gyre.write_to`: ``tensorboard --logdir
    <out>``) and ``checkpoints/`` (the state after the last epoch). Ten epochs take a few seconds on a laptop CPU and reach about 97% test accuracy.

    Args:
        epochs: passes over the training set; the test set is evaluated after each.
        batch_size: samples per training step.
        learning_rate: Adam's learning rate.
        seed: seeds the data split, the shuffles and the initial parameters.
        out: the folder that holds run folders.
        quiet: no progress bar.
        resume: a run folder of an earlier, stopped run (SIGTERM, a crash): the run
            continues there from its newest good checkpoint, exactly as if it had never
            stopped (same arguments expected).

    Returns:
        A :class:`DemoResult`.

    Raises:
        DemoArgumentError: an argument that cannot work (checked before any training, and
            before the run folder is made, except that folder's own creation).
        gyre.NonFiniteError: the training diverged (a NaN or infinite loss or metric); a
            note names the run folder.

    Example:
        >>> result = fit_digits(epochs=10, out="runs")  # doctest: +SKIP
        >>> result.test_accuracy > 0.95  # doctest: +SKIP
        True
    """
    epochs = _check_whole("epochs", epochs, minimum=1, maximum=None, example="epochs=10")
    batch_size = _check_whole("batch_size", batch_size, minimum=1, maximum=None, example="batch_size=64")
    learning_rate = _check_learning_rate(learning_rate)
    seed = _check_whole("seed", seed, minimum=0, maximum=MAX_SEED, example="seed=0")
    check_out(out)
    _require_plotting()
    require("tensorboardX", extra="examples", who="gyre fit (its tensorboard/ event files)")
    (x_train, y_train), (x_test, y_test) = gyre.data.digits(seed=seed)
    _check_batch_size(batch_size, len(x_train))
    steps = gyre.data.steps_per_epoch(len(x_train), batch_size)
    train = gyre.data.batches((x_train, y_train), batch_size, seed=seed, epochs=epochs)
    total = epochs * steps

    def test_batches() -> Any:
        return gyre.data.batches(
            (x_test, y_test), batch_size, shuffle=False, epochs=1, drop_remainder=False
        )

    run_dir = make_run_dir(out) if resume is None else _resume_dir(resume)
    model, tx = MLP(), optax.adam(learning_rate)
    train_step, test_step = make_steps(model, tx)
    state = create_state(model, tx, features=x_train.shape[1], seed=seed)
    writer = gyre.TensorBoardWriter(run_dir / "tensorboard")
    callbacks: list[Any] = [gyre.checkpoint(str((run_dir / "checkpoints").resolve())), gyre.write_to(writer)]
    if not quiet:
        callbacks.insert(0, gyre.keras_bar(total=total))

    start = time.perf_counter()
    try:
        state, history, elapsed = gyre.train_loop(
            state,
            train,
            {gyre.on_train_step: [train_step], gyre.on_test_step: [test_step]},
            test_dataset=test_batches,
            callbacks=callbacks,
            stop=total,
            resume=None if resume is None else "latest",
        )
    except gyre.NonFiniteError as err:  # diverged: the checkpoints hold the last good state
        err.add_note(f"run folder: {run_dir}")
        raise
    finally:
        writer.close()
    seconds = time.perf_counter() - start

    history.to_csv(str(run_dir / "history.csv"))
    history.plot(str(run_dir / "curves.png"), keys=[["loss", "loss_test"], ["accuracy", "accuracy_test"]])
    accuracies = history.collect("accuracy_test") if "accuracy_test" in history.names().get("metrics", []) else []
    accuracy = float(accuracies[-1]) if accuracies else math.nan  # none yet: preempted early
    preempted = history.stop_reason == "preempted"
    return DemoResult(run_dir, accuracy, history, elapsed, seconds, preempted)


def _resume_dir(resume: str | Path) -> Path:
    """The run folder to continue (it must hold the checkpoints of an earlier run)."""
    run_dir = Path(resume).expanduser()
    if not (run_dir / "checkpoints").is_dir():
        raise DemoArgumentError(
            "resume",
            f"must name the run folder of an earlier run: {str(run_dir)!r} "
            + ("holds no checkpoints/" if run_dir.is_dir() else "does not exist"),
            expected="a folder made by gyre fit, holding checkpoints/",
            received=repr(str(run_dir)),
            fix="pass the run folder gyre fit printed, e.g. --resume runs/20240501-120000",
        )
    return run_dir
