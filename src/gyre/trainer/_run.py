"""A whole run from a config: the job behind ``gyre fit CONFIG``, ``gyre resume RUN`` and
``gyre test RUN``. The run folder gets ``config.yaml``, ``checkpoints/``, ``resume/``,
``metrics/*.json``, the writer's logs, ``run.log`` (jax_trainer's ``log_file_verbosity``; the
console gets ``stderrthreshold``), ``history.csv`` and ``curves.png``: one panel per metric with
its step, epoch-mean and validation series, x in epochs, a loss on a log scale, other panels
zoomed past the first epoch, the best checkpoint marked.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import random
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gyre.callbacks._monitor import monitor_mode
from gyre.config import (
    TRAINERS,
    Config,
    RunLengthUnknown,
    build_optimizer,
    config_to_dict,
    dump_config,
    flatten_configdict,
    load_config,
    run_length,
)
from gyre.core._errors import describe, explain, warn
from gyre.trainer._callback import best_of
from gyre.trainer._classifier import build_dataset_module
from gyre.trainer._logger import EpochMetricFiles, python_numbers
from gyre.trainer._module import TrainerModule, build_callbacks

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
LOG_FILE = "run.log"


def _level(key: str, name: object) -> int:
    if name not in LEVELS:
        raise ValueError(explain(
            f"trainer.logger.{key} must be one of {', '.join(LEVELS)}",
            expected="debug, info, warning or error", received=describe(name), fix=f"write {key}: warning"))
    return LEVELS[name]  # type: ignore[index]


@contextlib.contextmanager
def run_logging(log_dir: str | Path, *, file_level: str = "info", stderr_level: str = "warning") -> Iterator[logging.Logger]:
    """Within the block ``<log_dir>/run.log`` records logging from ``file_level`` (and warnings),
    stderr from ``stderr_level``; yields the ``gyre.run`` logger."""
    file_at, console_at = _level("log_file_verbosity", file_level), _level("stderrthreshold", stderr_level)
    root, log = logging.getLogger(), logging.getLogger("gyre.run")
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    file_handler = logging.FileHandler(Path(log_dir) / LOG_FILE, encoding="utf-8", delay=True)
    file_handler.setLevel(file_at)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(console_at)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers = [file_handler] if root.handlers else [file_handler, console]  # a configured root keeps its own console
    old_level, show = root.level, warnings.showwarning

    def show_and_log(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        record = log.makeRecord(log.name, logging.WARNING, filename, lineno, "%s: %s", (category.__name__, message), None)
        if file_handler.level <= logging.WARNING:  # to the file only: Python shows it on stderr
            file_handler.handle(record)
        show(message, category, filename, lineno, file, line)

    root.setLevel(min(file_at, console_at, root.level or logging.WARNING))
    for handler in handlers:
        root.addHandler(handler)
    warnings.showwarning = show_and_log
    try:
        yield log
    finally:
        warnings.showwarning = show
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(old_level)
        file_handler.close()


#: the prefixes of a metric's series, and the names they are shown under
KINDS = (("", "train, per step"), ("train/", "train, epoch mean"), ("val/", "validation"), ("test/", "test"))


def series_groups(names: Sequence[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Panels: ``(metric, [(entry, label), ...])``, one entry per kind of series; window means
    (``train/<m>_step``) beside per-step values, times and the epoch counter are left out."""
    panels: dict[str, dict[str, str]] = {}
    for name in names:
        prefix, _, rest = name.rpartition("/")
        prefix = prefix + "/" if prefix else ""
        if prefix not in ("", "train/", "val/", "test/"):
            continue
        base = rest.removesuffix("_epoch")
        step_window = rest.endswith("_step") and prefix == "train/"
        base = base.removesuffix("_step")
        if base in ("time", "epoch") or (step_window and base in names):
            continue
        label = dict(KINDS)[prefix] if not step_window else "train, window mean"
        panels.setdefault(base, {}).setdefault(label, name)
    order = [label for _, label in KINDS] + ["train, window mean"]
    return [(base, sorted(((n, lbl) for lbl, n in by.items()), key=lambda p: order.index(p[1]))) for base, by in panels.items()]


def best_step(history: Any, monitor: str | None, mode: str = "max") -> int | None:
    """The step of the best ``monitor`` value (the first of equals, as a checkpoint keeps it),
    counted as completed steps (a checkpoint's number); ``None`` without one."""
    logged = {n for names in history.names().values() for n in names}
    if monitor is None or (monitor not in logged and monitor.rpartition(".")[2] not in logged):
        return None  # never logged (no validation ran: too few epochs, or a stop before the first)
    steps, values = history.collect("steps", monitor)
    if not values:
        return None
    step = best_of(mode, list(zip(values, steps, strict=True)))
    return None if step is None else int(step) + 1  # (no number: no best)


def _zoom(ax: Any, curves: list[tuple[list[float], list[float], bool]], start: float) -> None:
    """Limits the y-axis to where the curves differ: their values after ``start`` (a step
    series by its 5th percentile, its noise left out), with a margin."""
    low, high = [], []
    for xs, ys, per_step in curves:
        kept = np.array([y for x, y in zip(xs, ys, strict=True) if x > start + 1e-9 and math.isfinite(y)])
        if kept.size:
            low.append(np.percentile(kept, 5) if per_step else kept.min())
            high.append(kept.max())
    if low:
        lo, hi = min(low), max(high)
        pad = max((hi - lo) * 0.1, 1e-3)
        ax.set_ylim(lo - pad, hi + pad)


def plot_curves(
    history: Any, path: str | os.PathLike[str], *, title: str | None = None,
    monitor: str | None = None, mode: str = "max",
) -> None:
    """Draws ``history``'s scalar series into the PNG ``path``, marking the best ``monitor`` value
    by ``mode`` (the checkpoint's metric; see the module docs)."""
    from matplotlib.figure import Figure  # no pyplot: the user's backend and figures are left alone

    names = history.names()
    panels = series_groups([*names.get("losses", []), *names.get("metrics", [])])
    if not panels:
        return
    positions, epochs = history.collect("step_in_epoch"), history.collect("epochs")
    epoch = max(positions) + 1 if positions and epochs and max(epochs) > 0 else None
    scale = (lambda s: (s + 1) / epoch) if epoch else (lambda s: s + 1)
    best = best_step(history, monitor, mode)
    fig = Figure(figsize=(5.2 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (base, entries) in zip(axes[0], panels, strict=True):
        curves = []
        for name, label in entries:
            steps, values = history.collect("steps", name)
            xs, ys = [scale(s) for s in steps], [float(v) for v in values]
            per_step = label == "train, per step"
            style = {"linewidth": 0.8, "alpha": 0.45} if per_step else {"marker": "o", "markersize": 3.5}
            ax.plot(xs, ys, label=label, **style)
            curves.append((xs, ys, per_step))
            if name == monitor and best is not None:  # the best value itself, starred
                y = ys[[s + 1 for s in steps].index(best)]
                ax.plot([scale(best - 1)], [y], marker="*", markersize=13, color="black", linestyle="none")
        if "loss" in base and all(y > 0 for _, ys, _ in curves for y in ys if math.isfinite(y)):
            ax.set_yscale("log")
        else:
            _zoom(ax, curves, start=1.0 if epoch else 0.0)
        if best is not None:
            ax.axvline(scale(best - 1), color="0.3", linestyle=":", linewidth=1.2,
                       label=f"best checkpoint ({monitor}, {'epoch' if epoch else 'step'} {scale(best - 1):g})")
        ax.set_title(base)
        ax.set_xlabel("epoch" if epoch else "step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=100)


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
    path = Path(out).expanduser()  # --out=~/runs reaches us unexpanded (the shell expands a word's start only)
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
    """The validated config of ``source`` with ``overrides``, its optimizer and callbacks built
    (what their constructors refuse fails here, before any data is read)."""
    if isinstance(source, Config):
        source = config_to_dict(source)
    config = load_config(source, list(overrides))
    build_callbacks(config.trainer)
    try:
        build_optimizer(config.optimizer, where="optimizer")
    except RunLengthUnknown:
        pass  # a schedule that lasts the run: built by run_config, once the data is known
    return config


def run_steps_of(config: Any, dataset: Any) -> int | None:
    """The run's training steps (``train_epochs`` x batches per epoch, at most
    ``max_steps_per_epoch``), or ``None`` if unknown."""
    loader = dataset.train_loader
    per_epoch = getattr(loader, "epoch_steps", None)
    if per_epoch is None and hasattr(loader, "__len__"):
        per_epoch = len(loader)
    most = getattr(config.trainer, "max_steps_per_epoch", None)
    return None if not per_epoch else config.trainer.train_epochs * min(int(per_epoch), most or int(per_epoch))


def build_dataset(config: Any) -> Any:
    """The dataset of the config's ``dataset`` section, with its three loaders checked."""
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
    yaml_path = folder / "config.yaml"  # a resumed run's: train_model rewrites it once the resume is accepted
    kept = yaml_path.read_text() if config.trainer.resume is not None and yaml_path.is_file() else None
    start = time.perf_counter()
    try:
        outcome = trainer.train_model(dataset.train_loader, dataset.val_loader, dataset.test_loader)
        seconds = time.perf_counter() - start
        elapsed, history = trainer.elapsed, trainer.history
        test = python_numbers(outcome.get("test", {}))
        if test:
            files = EpochMetricFiles(folder)
            try:
                files.write("test", max(elapsed.epochs, 1), max(elapsed.steps - 1, 0), dict(test))
            finally:
                files.close()
        _end_log(log, trainer, config, elapsed, seconds, test or python_numbers(outcome.get("val", {})))
        if history is not None:
            history.to_csv(str(folder / "history.csv"))
            plot_curves(history, folder / "curves.png", title=folder.name, **_monitored(config))
    except BaseException as err:
        if kept is not None and yaml_path.read_text() == kept:  # e.g. a refused resume
            err.add_note(f"gyre: {yaml_path} is kept as the run wrote it; continue the run with its own "
                         f"config: gyre resume {folder}")
        if isinstance(err, FloatingPointError):  # gyre.NonFiniteError: the checkpoints hold the last good state
            err.add_note(f"run folder: {folder}")
        raise
    finally:
        trainer.close_writer()
        logs.close()
    preempted = history is not None and history.stop_reason == "preempted"
    return RunResult(
        folder, config, trainer, python_numbers(outcome.get("val", {})), test,
        elapsed.steps, elapsed.epochs, seconds, preempted,
    )


def _start_log(log: Any, source: Any, config: Any, dataset: Any) -> None:
    """Seeds Python's and numpy's global generators with the config's ``seed``, and logs the run."""
    random.seed(config.seed)
    np.random.seed(config.seed % 2**32)
    steps = run_steps_of(config, dataset)
    log.info("config: %s (seed %d)", source if isinstance(source, (str, os.PathLike)) else "a mapping", config.seed)
    log.info("run: %s, %s training steps (%d epochs)", config.trainer.class_name, steps or "?", config.trainer.train_epochs)
    devices = config.trainer.num_devices or 1
    if config.num_gpus > 1 and config.num_gpus != devices:  # jax_trainer's key, which nothing reads
        warn(explain(
            f"num_gpus: {config.num_gpus} is not read: the trainer trains on trainer.num_devices devices, here {devices}",
            expected="trainer.num_devices: the devices to train data-parallel on (left out: one)",
            received=f"num_gpus: {config.num_gpus}, trainer.num_devices: {config.trainer.num_devices}",
            fix=f"set trainer.num_devices: {config.num_gpus} (override: trainer.num_devices={config.num_gpus}), "
            "or remove num_gpus"), UserWarning)


def _end_log(log: Any, trainer: Any, config: Any, elapsed: Any, seconds: float, metrics: Mapping[str, float]) -> None:
    """Logs the run's end, and writes the config as hyperparameters with the final metrics."""
    log.info("trained %d steps (%d epochs) in %.1fs; %s", elapsed.steps, elapsed.epochs, seconds,
             ", ".join(metric_lines(metrics)) or "no metrics")
    final = {f"hparams/{k}": v for k, v in metrics.items() if not k.endswith("/time")}
    trainer.writer.write_hparams(flatten_configdict(config), final)


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


def _monitored(config: Any) -> dict[str, str]:
    """The ``ModelCheckpoint``'s monitor and mode, for ``curves.png``; empty without one."""
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
            for k, v in sorted(python_numbers(metrics).items()) if not k.endswith("/time")]
