"""The job behind ``gyre fit`` without a config: the digits demo, whose options become a config
(``examples/configs/digits_mlp.yaml`` as a file) run by :func:`gyre.trainer._run.run_config`.
Needs the ``examples`` extra.
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

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
        return _run.make_run_dir(out, now=now)
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


MAX_SEED = 2**63 - 1  # what jax.random.key takes


class Option(NamedTuple):
    """A demo option: its default, where the demo's config holds it, the ``gyre fit CONFIG``
    override that sets it there, and its check (``value``: the value checked, or ``None``)."""

    default: Any
    where: tuple[str, str]
    config_key: str
    example: str
    value: Callable[[Any], Any]
    wanted: str
    expected: str


def _whole(example: str, minimum: int, maximum: int | None = None) -> tuple[Callable[[Any], Any], str, str]:
    span = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def value(given: Any) -> int | None:
        number = as_integer(given)
        return number if number is not None and minimum <= number and (maximum is None or number <= maximum) else None

    return value, f"a whole number {span}", f"an int {span}, e.g. {example}"


def _rate(given: Any) -> float | None:
    good = isinstance(given, numbers.Real) and not isinstance(given, bool) and math.isfinite(given) and given > 0
    return float(given) if good else None  # type: ignore[arg-type]


#: The demo's options, in the order they are checked (the CLI's --epochs, --batch-size, ...).
OPTIONS = {
    "epochs": Option(15, ("trainer", "train_epochs"), "trainer.train_epochs=N", "epochs=10", *_whole("epochs=10", 1)),
    "batch_size": Option(64, ("dataset", "global_batch_size"), "dataset.global_batch_size=N", "batch_size=64",
                         *_whole("batch_size=64", 1)),
    "learning_rate": Option(3e-3, ("optimizer", "learning_rate"), "optimizer.learning_rate=LR", "learning_rate=3e-3",
                            _rate, "a finite number > 0", "a float such as learning_rate=3e-3"),
    "seed": Option(0, ("trainer", "seed"), "seed=N", "seed=0", *_whole("seed=0", 0, MAX_SEED)),
}


def check_option(name: str, given: Any) -> Any:
    """The value of the demo option ``name``, checked (the CLI's check of it too)."""
    option = OPTIONS[name]
    value = option.value(given)
    if value is None:
        raise DemoArgumentError(name, f"must be {option.wanted}, received {describe(given)}",
                                expected=option.expected, received=describe(given), fix=f"pass {option.example}")
    return value


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
    chosen = {k: check_option(k, stored.get(k, OPTIONS[k].default) if v is None else v) for k, v in given.items()}
    epochs, batch_size, learning_rate, seed = chosen.values()
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
    return {name: sections[section][key] for name, (_, (section, key), *_) in OPTIONS.items()
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
