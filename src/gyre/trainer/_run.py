"""A whole run from a config: the job behind ``gyre fit CONFIG``, ``gyre resume RUN`` and
``gyre test RUN``. The run folder gets ``config.yaml``, ``checkpoints/``, ``resume/``,
``metrics/*.json``, the writer's logs, ``history.csv`` and ``curves.png``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gyre.core._errors import describe, explain, warn
from gyre.trainer._curves import plot_curves
from gyre.trainer._logger import EpochMetricFiles
from gyre.trainer._run_log import LOG_FILE, run_logging


class RunError(ValueError):
    """A run that cannot start, found before any training; ``str(err)`` is the full explanation."""

    def __init__(self, argument: str, summary: str, *, expected: str, received: str, fix: str) -> None:
        super().__init__(explain(f"{argument} {summary}", expected=expected, received=received, fix=fix))
        self.argument, self.summary = argument, summary
        self.expected, self.received, self.fix = expected, received, fix


def is_user_error(err: BaseException) -> bool:
    """Whether ``err`` is a mistake gyre explained (expected / received / fix)."""
    text = user_message(err)
    return isinstance(err, (ValueError, TypeError, KeyError, OSError, ImportError)) and "\n  expected: " in text and "\n  fix: " in text


def user_message(err: BaseException) -> str:
    """The text of an error (a ``KeyError``'s message without the quotes ``str`` adds)."""
    if isinstance(err, KeyError) and err.args and isinstance(err.args[0], str):
        return err.args[0]
    return str(err)


def _out_error(out: Any, summary: str) -> RunError:
    return RunError(
        "out",
        summary,
        expected="a folder that holds the run folders (created if missing), e.g. --out runs",
        received=repr(str(out)),
        fix="choose a folder you can write to, e.g. --out runs",
    )


def check_out(out: str | os.PathLike[str]) -> Path:
    """Checks, before any work, that run folders can be made in ``out``."""
    if isinstance(out, bytes) or not isinstance(out, (str, os.PathLike)) or not os.fspath(out):
        raise RunError(
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


def make_run_dir(out: str | os.PathLike[str], *, now: _dt.datetime | None = None) -> Path:
    """Creates and returns ``<out>/<YYYYmmdd-HHMMSS>/`` (``-1``, ``-2``... if taken), else a RunError."""
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
class RunResult:
    """What :func:`run_config` returns; ``test`` holds the best checkpoint's scalar metrics."""

    run_dir: Path
    config: Any
    trainer: Any
    val: dict[str, Any] = field(default_factory=dict)
    test: dict[str, Any] = field(default_factory=dict)
    steps: int = 0
    epochs: int = 0
    seconds: float = 0.0
    preempted: bool = False


def resolve_config(source: Any, overrides: Sequence[str] = ()) -> Any:
    """The validated config of ``source`` with ``overrides``, its optimizer built (fails early)."""
    from gyre.config import Config, RunLengthUnknown, build_optimizer, config_to_dict, load_config

    if isinstance(source, Config):
        source = config_to_dict(source)
    config = load_config(source, list(overrides))
    try:
        build_optimizer(config.optimizer, where="optimizer")
    except RunLengthUnknown:
        pass  # a schedule that lasts the run: built by run_config, once the data is known
    return config


def run_steps_of(config: Any, dataset: Any) -> int | None:
    """The run's training steps (``train_epochs`` x batches per epoch), or ``None`` if unknown."""
    loader = dataset.train_loader
    per_epoch = getattr(loader, "epoch_steps", None)
    if per_epoch is None and hasattr(loader, "__len__"):
        per_epoch = len(loader)
    return None if not per_epoch else config.trainer.train_epochs * int(per_epoch)


def build_dataset(config: Any) -> Any:
    """The dataset of the config's ``dataset`` section, with its three loaders checked."""
    from gyre.trainer._datasets import build_dataset_module

    dataset = build_dataset_module(config.dataset)
    name = config.dataset["class_name"]
    missing = [a for a in ("train_loader", "val_loader", "test_loader") if not hasattr(dataset, a)]
    if missing:
        raise TypeError(explain(
            f"the dataset {name!r} has no {', '.join(missing)}",
            expected="a registered dataset with train_loader, val_loader and test_loader attributes",
            received=f"{describe(dataset)}", fix=f"give {name} those attributes (see gyre.trainer.DigitsDataset)"))
    return dataset


def run_config(
    source: Any,
    overrides: Sequence[str] = (),
    *,
    out: str | os.PathLike[str] = "runs",
    run_dir: str | os.PathLike[str] | None = None,
) -> RunResult:
    """Trains and tests what a config describes, in ``run_dir`` or a timestamped folder of ``out``
    (a ``ConfigError`` or :class:`RunError` comes before any training)."""
    from gyre.config import TRAINERS, config_to_dict, dump_config, load_config, run_length

    config = resolve_config(source, overrides)
    made = None
    if run_dir is None and not config.trainer.logger.log_dir:  # None or "" (the fork's "no folder"); base_log_dir: jax_trainer's out
        run_dir = made = make_run_dir(config.trainer.logger.base_log_dir or out)
    logs = contextlib.ExitStack()  # the run's log file (trainer.logger.log_file_verbosity) and stderr threshold
    try:
        if run_dir is not None:
            data = config_to_dict(config)
            data["trainer"]["logger"]["log_dir"] = str(run_dir)
            config = load_config(data)
        folder = Path(config.trainer.logger.log_dir)
        if config.trainer.resume is None:
            _check_fresh(folder)
            folder.mkdir(parents=True, exist_ok=True)  # from now on a kill leaves a run gyre resume continues
            (folder / "config.yaml").write_text(dump_config(config))
        log = logs.enter_context(run_logging(folder, file_level=config.trainer.logger.log_file_verbosity,
                                             stderr_level=config.trainer.logger.stderrthreshold))
        dataset = build_dataset(config)
        with run_length(run_steps_of(config, dataset)):  # schedules without steps last the run
            trainer_cls = TRAINERS.get(config.trainer.class_name, where="trainer.class_name")
            trainer = trainer_cls(config.trainer, config.model, config.optimizer, config=config)
    except Exception:
        logs.close()
        if made is not None and {p.name for p in made.iterdir()} <= {LOG_FILE, "config.yaml"}:
            shutil.rmtree(made)  # a run that could not start leaves no run folder behind
        raise
    _start_log(log, source, config, dataset)
    kept = _KeptConfig(folder / "config.yaml", config.trainer.resume is not None)
    start = time.perf_counter()
    try:
        outcome = trainer.train_model(dataset.train_loader, dataset.val_loader, dataset.test_loader)
        seconds = time.perf_counter() - start
        elapsed, history = trainer.elapsed, trainer.history
        test = _scalars(outcome.get("test", {}))
        if test:
            files = EpochMetricFiles(folder)
            try:
                files.write("test", max(elapsed.epochs, 1), max(elapsed.steps - 1, 0), dict(test))
            finally:
                files.close()
            trainer.writer.write_scalars(max(elapsed.steps - 1, 0), {k: v for k, v in test.items() if not k.endswith("/time")})
        _end_log(log, trainer, config, elapsed, seconds, test or _scalars(outcome.get("val", {})))
        if history is not None:
            history.to_csv(str(folder / "history.csv"))
            plot_curves(history, folder / "curves.png", title=folder.name, **_monitored(config))
    except BaseException as err:
        kept.restore(err)
        if isinstance(err, FloatingPointError):  # gyre.NonFiniteError: the checkpoints hold the last good state
            err.add_note(f"run folder: {folder}")
        raise
    finally:
        trainer.close_writer()
        logs.close()
    preempted = history is not None and history.stop_reason == "preempted"
    return RunResult(
        folder, config, trainer, _scalars(outcome.get("val", {})), test,
        elapsed.steps, elapsed.epochs, seconds, preempted,
    )


def _start_log(log: Any, source: Any, config: Any, dataset: Any) -> None:
    """Seeds Python's and numpy's global generators with the config's ``seed``, and logs the run."""
    import numpy as np

    random.seed(config.seed)
    np.random.seed(config.seed % 2**32)
    steps = run_steps_of(config, dataset)
    log.info("config: %s (seed %d)", source if isinstance(source, (str, os.PathLike)) else "a mapping", config.seed)
    log.info("run: %s, %s training steps (%d epochs)", config.trainer.class_name, steps or "?", config.trainer.train_epochs)


def _end_log(log: Any, trainer: Any, config: Any, elapsed: Any, seconds: float, metrics: Mapping[str, float]) -> None:
    """Logs the run's end, and writes the config as hyperparameters with the final metrics."""
    from gyre.config import flatten_configdict

    log.info("trained %d steps (%d epochs) in %.1fs; %s", elapsed.steps, elapsed.epochs, seconds,
             ", ".join(metric_lines(metrics)) or "no metrics")
    final = {f"hparams/{k}": v for k, v in metrics.items() if not k.endswith("/time")}
    trainer.writer.write_hparams(flatten_configdict(config), final)


class _KeptConfig:
    """A resumed run's ``config.yaml`` as it was, put back (with a note) when the resume fails."""

    def __init__(self, path: Path, resuming: bool) -> None:
        self.path = path
        self.text = path.read_text() if resuming and path.is_file() else None

    def restore(self, err: BaseException) -> None:
        if self.text is None:
            return
        self.path.write_text(self.text)
        err.add_note(
            f"gyre: {self.path} is kept as the run wrote it; continue the run with its own "
            f"config: gyre resume {self.path.parent}"
        )


def _check_fresh(folder: Path) -> None:
    """A new run must not train into a folder that holds another run's checkpoints."""
    taken = [name for name in ("resume", "checkpoints") if (folder / name).is_dir() and any((folder / name).iterdir())]
    if taken:
        raise RunError(
            "trainer.logger.log_dir",
            f"{str(folder)!r} already holds a run ({', '.join(name + '/' for name in taken)})",
            expected="a new or empty run folder (or trainer.resume=latest to continue that run)",
            received=repr(str(folder)),
            fix=f"continue it with: gyre resume {folder}; or choose another folder: "
            "trainer.logger.log_dir=runs/<name> (or remove it)",
        )


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _monitored(config: Any) -> dict[str, str]:
    """The ``ModelCheckpoint``'s monitor and mode, for ``curves.png``; empty without one."""
    from gyre.callbacks._monitor import monitor_mode

    for name, section in config.trainer.callbacks.items():
        if section.get("class_name", name) == "ModelCheckpoint" and section.get("monitor"):
            return {"monitor": section["monitor"],
                    "mode": monitor_mode("ModelCheckpoint", section["monitor"], section.get("mode", "auto"))}
    return {}


def find_run_dir(path: str | os.PathLike[str]) -> Path:
    """The nearest folder holding ``config.yaml`` at or up to two levels above ``path``."""
    p = Path(path).expanduser()
    for candidate in (p, p.parent, p.parent.parent):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise RunError(
        "run",
        f"{str(p)!r} is not a run folder" + ("" if p.exists() else " (it does not exist)"),
        expected="a run folder written by gyre fit (it holds config.yaml), or a checkpoint in it",
        received=repr(str(p)),
        fix="pass the run folder that gyre fit printed, e.g. runs/20240501-120000",
    )


def resume_run(run: str | os.PathLike[str], *, quiet: bool = False) -> RunResult:
    """Continues the stopped run ``run`` from its newest resume checkpoint, with its own config."""
    folder = find_run_dir(run)
    resume = folder / "resume"
    if not resume.is_dir() or not any(p.name.isdigit() for p in resume.iterdir()):
        warn(f"{str(folder)!r} holds no resume checkpoint yet (the run stopped before "
             "its first one: saved every trainer.resume_every_minutes, or every epoch when 0): it "
             "starts over from step 0, with its own config, and ends as the run would have")
    overrides = ["trainer.resume=latest"] + (["trainer.enable_progress_bar=false"] if quiet else [])
    return run_config(folder / "config.yaml", overrides, run_dir=folder)


def run_test(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The test metrics of a run's best checkpoint (or the one ``path`` names), on its dataset."""
    from gyre.trainer._module import TrainerModule

    target = Path(path).expanduser()
    if not target.exists():
        find_run_dir(target)  # raises the explained error
    trainer = TrainerModule.load_from_checkpoint(target)
    if trainer.full_config is None:
        raise RunError(
            "run",
            f"the checkpoint in {str(target)!r} stores no dataset section",
            expected="a checkpoint written by a run from a config (gyre fit CONFIG)",
            received=repr(str(target)),
            fix="test it from Python: TrainerModule.load_from_checkpoint(path).test_model(test_loader)",
        )
    dataset = build_dataset(trainer.full_config)
    try:
        return trainer.test_model(dataset.test_loader)
    finally:
        trainer.close_writer()  # if a callback opened it


def metric_lines(metrics: Mapping[str, Any]) -> list[str]:
    """``name: value`` lines of the scalar metrics (times left out), sorted by name."""
    return [f"{k}: {v:.8g}" if math.isfinite(v) else f"{k}: {v}"
            for k, v in sorted(_scalars(metrics).items()) if not k.endswith("/time")]
