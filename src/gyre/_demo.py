"""The job behind ``gyre fit`` without a config: the digits demo, whose options become a config
(``examples/configs/digits_mlp.yaml`` as a file) run by :func:`gyre.trainer._run.run_config`.
Needs the ``examples`` extra.
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
    """What :func:`fit_digits` returns; ``test_accuracy`` is NaN when preempted."""

    run_dir: Path
    test_accuracy: float
    history: History
    elapsed: Elapsed
    seconds: float
    preempted: bool = False


class DemoArgumentError(ValueError):
    """An argument of :func:`fit_digits` that cannot work; the command prints
    ``argument --<name>: <summary>``."""

    def __init__(self, argument: str, summary: str, *, expected: str, received: str, fix: str) -> None:
        super().__init__(explain(f"fit_digits: {argument} {summary}", expected=expected, received=received, fix=fix))
        self.argument = argument
        self.summary = summary

    @classmethod
    def of(cls, err: _run.RunError) -> DemoArgumentError:
        """The same mistake, found by :mod:`gyre.trainer._run`, as the demo's."""
        return cls(err.argument, err.summary, expected=err.expected, received=err.received, fix=err.fix)


MAX_SEED = 2**63 - 1  # what jax.random.key takes (the CLI checks --seed against it too)


def _refused(name: str, value: Any, wanted: str, expected: str, example: str) -> DemoArgumentError:
    return DemoArgumentError(name, f"must be {wanted}, received {describe(value)}", expected=expected,
                             received=describe(value), fix=f"pass {example}")


def _check_whole(name: str, value: Any, *, minimum: int, maximum: int | None, example: str) -> int:
    number = as_integer(value)
    if number is not None and number >= minimum and (maximum is None or number <= maximum):
        return number
    span = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    raise _refused(name, value, f"a whole number {span}", f"an int {span}, e.g. {example}", example)


def _check_learning_rate(value: Any) -> float:
    good = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if good and math.isfinite(value) and value > 0:  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    raise _refused("learning_rate", value, "a finite number > 0", "a float such as learning_rate=3e-3",
                   "learning_rate=3e-3")


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
    """Checks, before any work, that run folders can be made in ``out``."""
    try:
        return _run.check_out(out)
    except _run.RunError as err:
        raise DemoArgumentError.of(err) from None


def _require_plotting() -> None:
    require("matplotlib", "gyre fit (it draws curves.png)", extra="examples")


def digits_config(
    *, epochs: int = 15, batch_size: int = 64, learning_rate: float = 3e-3, seed: int = 0, quiet: bool = False
) -> dict[str, Any]:
    """The demo as a config: a 64-256-256-10 MLP, Adam, the digits; the best ``val/acc`` tested."""
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
    """Trains a 64-256-256-10 MLP on the digits with Adam into a run folder ``<out>/<timestamp>/``.

    ``seed`` draws the validation split, the shuffles and the initial parameters. ``resume``
    continues a stopped run folder with its own options; only ``epochs`` and
    ``learning_rate`` may change. Raises :class:`DemoArgumentError` before any training, or
    ``gyre.NonFiniteError``.
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
    sections = config if isinstance(config, dict) else {}
    return {name: sections[section][key] for name, (section, key) in CONFIG_KEYS.items()
            if isinstance(sections.get(section), dict) and sections[section].get(key) is not None}


def _check_same_data(run_dir: Path, stored: dict[str, Any], chosen: dict[str, Any]) -> None:
    """Refuses resuming with another batch size or seed than the run's (the data would differ)."""
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
