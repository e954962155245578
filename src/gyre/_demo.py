"""The job behind ``gyre fit`` without a config: the digits demo, run as a config through
:func:`gyre.trainer._run.run_config` (the path every ``gyre fit CONFIG`` takes).

:func:`digits_config` turns the demo's options into a config: the ``ImgClassifierTrainer``,
a 64-256-256-10 ``SimpleClassifier`` MLP, Adam, and the ``DigitsDataset`` (200 of the 1,437
training digits held out for validation; the best model by validation accuracy is tested).
``examples/configs/digits_mlp.yaml`` is the same config as a file.

Needs the ``examples`` extra (scikit-learn for the data, matplotlib for the plot,
tensorboardX for the event files).
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyre.core._checks import require
from gyre.core._clock import Elapsed
from gyre.core._errors import as_integer, describe, explain
from gyre.core._history import History
from gyre.trainer import _run

#: digits held out of the training part for validation (the rest train)
VAL_SIZE = 200


def make_run_dir(out: str | Path, *, now: _dt.datetime | None = None) -> Path:
    """Creates and returns ``<out>/<YYYYmmdd-HHMMSS>/``, with a ``-1``, ``-2``... suffix if taken.

    Raises:
        DemoArgumentError: ``out`` is a file, or the folder cannot be created there.
    """
    try:
        return _run.make_run_dir(check_out(out), now=now)
    except _run.RunError as err:
        raise DemoArgumentError.of(err) from None


@dataclass(frozen=True)
class DemoResult:
    """What :func:`fit_digits` returns.

    Attributes:
        run_dir: the run folder (``config.yaml``, ``history.csv``, ``curves.png``,
            ``tensorboard/``, ``metrics/``, ``checkpoints/`` with the best model by validation
            accuracy, ``resume/``).
        test_accuracy: accuracy on the whole test set of the best model by validation
            accuracy (NaN when preempted).
        history: the run's history.
        elapsed: the loop's final clock.
        seconds: wall-clock seconds of training, compilation, validations and the test.
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
    """

    def __init__(self, argument: str, summary: str, *, expected: str, received: str, fix: str) -> None:
        super().__init__(
            explain(f"fit_digits: {argument} {summary}", expected=expected, received=received, fix=fix)
        )
        self.argument = argument
        self.summary = summary

    @classmethod
    def of(cls, err: _run.RunError) -> DemoArgumentError:
        """The same mistake, found by :mod:`gyre.trainer._run`, as the demo's."""
        return cls(err.argument, err.summary, expected=err.expected, received=err.received, fix=err.fix)


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
        expected="a float such as learning_rate=3e-3",
        received=describe(value),
        fix="pass learning_rate=3e-3",
    )


def _training_samples() -> int:
    """The digits that train: the 1,437 of the training part less the validation split."""
    from gyre.data import digits

    (_, y_train), _ = digits()
    return len(y_train) - VAL_SIZE


def _check_batch_size(batch_size: int, samples: int) -> None:
    if batch_size > samples:
        raise DemoArgumentError(
            "batch_size",
            f"must be at most {samples}, the number of digits training samples, received "
            f"{batch_size}",
            expected=f"batch_size <= {samples} (every training batch is full; {VAL_SIZE} more digits "
            "are held out for validation)",
            received=f"batch_size={batch_size}",
            fix=f"pass batch_size={min(64, samples)} (or any value up to {samples})",
        )


def check_out(out: str | Path) -> Path:
    """Checks, before any work, that run folders can be made in ``out``.

    ``out`` may be missing (it is created); it must not be a file, nor lie under a file or
    a folder that cannot be written to.
    """
    try:
        return _run.check_out(out)
    except _run.RunError as err:
        raise DemoArgumentError.of(err) from None


def _require_plotting() -> None:
    require("matplotlib", "gyre fit (it draws curves.png)", extra="examples")


def digits_config(
    *, epochs: int = 15, batch_size: int = 64, learning_rate: float = 3e-3, seed: int = 0, quiet: bool = False
) -> dict[str, Any]:
    """The demo as a config: ``ImgClassifierTrainer``, a 64-256-256-10 ``SimpleClassifier``,
    Adam at ``learning_rate``, the ``DigitsDataset`` (``seed`` picks the validation split,
    the shuffles and the initial parameters), the best model by ``val/acc`` kept and tested,
    a NaN or infinite loss stopping the run.
    """
    return {
        "seed": seed,
        "trainer": {
            "class_name": "ImgClassifierTrainer",
            "train_epochs": epochs,
            "seed": seed,
            "enable_progress_bar": not quiet,
            "detect_nans": True,
            "logger": {"log_steps_every": 50},
            "callbacks": {"ModelCheckpoint": {"monitor": "val/acc", "mode": "max", "save_top_k": 1}},
        },
        "model": {"class_name": "SimpleClassifier", "c_hid": 256, "num_layers": 2, "num_classes": 10},
        "optimizer": {"class_name": "Adam", "learning_rate": learning_rate},
        "dataset": {
            "class_name": "DigitsDataset", "global_batch_size": batch_size, "val_size": VAL_SIZE, "split_seed": seed,
        },
    }


#: The demo's options when not given (a resumed run: its own, from its ``config.yaml``).
DEFAULTS: dict[str, Any] = {"epochs": 15, "batch_size": 64, "learning_rate": 3e-3, "seed": 0}
#: Where each option lives in the demo's config.
CONFIG_KEYS = {
    "epochs": ("trainer", "train_epochs"), "batch_size": ("dataset", "global_batch_size"),
    "learning_rate": ("optimizer", "learning_rate"), "seed": ("trainer", "seed"),
}


def fit_digits(
    *,
    epochs: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    seed: int | None = None,
    out: str | Path = "runs",
    quiet: bool = False,
    resume: str | Path | None = None,
) -> DemoResult:
    """Trains a 64-256-256-10 MLP on the digits with Adam (:func:`digits_config` through
    :func:`gyre.trainer._run.run_config`); writes a run folder.

    The run folder ``<out>/<YYYYmmdd-HHMMSS>/`` receives the resolved ``config.yaml``,
    ``history.csv``, ``curves.png`` (loss and accuracy: steps, epochs, validation),
    ``tensorboard/`` (``tensorboard --logdir <out>``), ``metrics/`` (one JSON file per phase
    and epoch), ``checkpoints/`` (the best model by validation accuracy, the one tested) and
    ``resume/``. Fifteen epochs take a few seconds on a laptop CPU and reach about 97% test
    accuracy.

    Args:
        epochs: passes over the training set (15); the validation set is evaluated after each.
        batch_size: samples per training step (64).
        learning_rate: Adam's learning rate (3e-3).
        seed: seeds the validation split, the shuffles and the initial parameters (0).
        out: the folder that holds run folders.
        quiet: no progress bar.
        resume: a run folder of an earlier, stopped run (SIGTERM, a crash): the run
            continues there from its newest good checkpoint, exactly as if it had never
            stopped, with the run's own options (from its ``config.yaml``) for those not
            given. ``epochs`` and ``learning_rate`` may change; a ``batch_size`` or ``seed``
            other than the run's is refused before anything is written (the data would
            differ).

    Returns:
        A :class:`DemoResult`.

    Raises:
        DemoArgumentError: an argument that cannot work (checked before any training, and
            before the run folder is made, except that folder's own creation).
        gyre.NonFiniteError: the training diverged (a NaN or infinite loss or metric); a
            note names the run folder.
    """
    run_dir = None if resume is None else _resume_dir(resume)
    stored = {} if run_dir is None else stored_options(run_dir)
    given = {"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed}
    chosen = {k: stored.get(k, DEFAULTS[k]) if v is None else v for k, v in given.items()}
    epochs = _check_whole("epochs", chosen["epochs"], minimum=1, maximum=None, example="epochs=10")
    batch_size = _check_whole("batch_size", chosen["batch_size"], minimum=1, maximum=None, example="batch_size=64")
    learning_rate = _check_learning_rate(chosen["learning_rate"])
    seed = _check_whole("seed", chosen["seed"], minimum=0, maximum=MAX_SEED, example="seed=0")
    if run_dir is not None:
        _check_same_data(run_dir, stored, {"batch_size": batch_size, "seed": seed})
    check_out(out)
    _require_plotting()
    require("tensorboardX", extra="examples", who="gyre fit (its tensorboard/ event files)")
    _check_batch_size(batch_size, _training_samples())
    run_dir = make_run_dir(out) if run_dir is None else run_dir
    config = digits_config(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, seed=seed, quiet=quiet)
    if resume is not None:
        config["trainer"]["resume"] = "latest"
    result = _run.run_config(config, run_dir=run_dir)
    trainer = result.trainer
    accuracy = result.test.get("test/acc", math.nan)  # none: preempted
    return DemoResult(result.run_dir, accuracy, trainer.history, trainer.elapsed, result.seconds, result.preempted)


def stored_options(run_dir: str | Path) -> dict[str, Any]:
    """The demo's options a run folder's ``config.yaml`` holds (``{}`` without one)."""
    import yaml

    try:
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    found = {}
    for name, (section, key) in CONFIG_KEYS.items():
        value = config.get(section, {}).get(key) if isinstance(config, dict) and isinstance(config.get(section), dict) else None
        if value is not None:
            found[name] = value
    return found


def _check_same_data(run_dir: Path, stored: dict[str, Any], chosen: dict[str, Any]) -> None:
    """A resumed run continues with the batches it was saved with: another batch size or
    seed (which draws the validation split and the shuffles) is refused, before anything
    is written, in the command line's terms."""
    for name, value in chosen.items():
        if name in stored and stored[name] != value:
            option = "--" + name.replace("_", "-")
            raise DemoArgumentError(
                name,
                f"is {value!r}, and the run in {str(run_dir)!r} was trained with {option} {stored[name]!r} "
                f"(resumed, it would continue with other data): leave {option} out to continue it, or "
                "start a new run without --resume",
                expected=f"the run's own {option} ({stored[name]!r}): leave {option} out when resuming",
                received=f"{option} {value!r}",
                fix=f"continue the run: gyre resume {run_dir} (or gyre fit --resume {run_dir} without "
                f"{option}); or start a new run: gyre fit {option} {value!r}",
            )


def _resume_dir(resume: str | Path) -> Path:
    """The run folder to continue (it must hold the resume checkpoints of an earlier run)."""
    run_dir = Path(resume).expanduser()
    if not (run_dir / "resume").is_dir():
        raise DemoArgumentError(
            "resume",
            f"must name the run folder of an earlier run: {str(run_dir)!r} "
            + ("holds no resume/" if run_dir.is_dir() else "does not exist"),
            expected="a folder made by gyre fit, holding resume/",
            received=repr(str(run_dir)),
            fix="pass the run folder gyre fit printed, e.g. --resume runs/20240501-120000",
        )
    return run_dir
