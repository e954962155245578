"""The trainer's callbacks: :class:`Callback` (jax_trainer's hooks), :class:`TrainerView` (what a
callback may use of the trainer), and the built-in ones: :class:`ModelCheckpoint`,
:class:`EarlyStopping`, :class:`JAXProfiler`, :class:`DisableGC`, :class:`LearningRateMonitor`,
:class:`GradientSpikeMonitor` and :class:`ConfusionMatrixCallback`. Hooks run in this order
(epochs from 1)::

    on_training_start()
    for each epoch e = 1, 2, ...:
        on_training_epoch_start(e)
        on_training_step(step_metrics, e, global_step)      # each step; see below
        on_training_epoch_end(train_metrics, e)
        on_validation_epoch_start(e)                        # on validation epochs
        on_validation_epoch_end(eval_metrics, e)
    on_training_end()
    on_test_epoch_start(e); on_test_epoch_end(test_metrics, e)
    finalize("success" | "failed" | "stopped")

Each training and validation hook calls its ``on_filtered_*`` twin on the callback's epochs
only; callbacks override those. Metrics dicts hold device values under their logged names.
"""

import gc
import json
import math
import numbers
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from gyre.callbacks._monitor import Improvement, check_min_delta, check_name, monitor_mode, score
from gyre.callbacks._store import Store
from gyre.config import config_to_dict
from gyre.config._registry import register_callback
from gyre.core._checks import instance, real, whole
from gyre.core._errors import (
    ExplainedKeyError,
    as_integer,
    describe,
    explain,
    keywords_checked,
    suggest,
    warn,
)
from gyre.core._host import fetch, numeric_dtype
from gyre.engine._snapshot import Snapshot
from gyre.loggers._writer import Writer
from gyre.trainer._logger import matplotlib_canvas

STATUSES = ("success", "failed", "stopped")
_MEMBERS = ("log_dir", "state", "writer", "global_step", "stop_training", "learning_rate")


class TrainerView(Protocol):
    """What a :class:`Callback` may use of the trainer that binds it.

    Attributes:
        log_dir: the run folder.
        state: the current train state (``.params``, ``.opt_state``, ``.step``).
        writer: the run's :class:`gyre.Writer`.
        global_step: the number of training steps done.

    Example:
        >>> import pathlib, types, gyre
        >>> view = types.SimpleNamespace(
        ...     log_dir=pathlib.Path("."), state=None, writer=gyre.MultiWriter([]), global_step=0,
        ...     stop_training=lambda reason: None, learning_rate=lambda: None)
        >>> cb = Callback()
        >>> cb.bind(view)
        >>> cb.trainer is view
        True
    """

    log_dir: Path
    state: Any
    writer: Writer
    global_step: int

    def stop_training(self, reason: str) -> None:
        """Asks the trainer to stop after the current epoch, for ``reason``."""
        ...

    def learning_rate(self) -> jax.Array | None:
        """The current learning rate as a device scalar, or ``None`` when it is unknown."""
        ...


class Callback:
    """The base of the trainer's callbacks: every hook does nothing until overridden.

    Args:
        every_n_epochs: the filtered hooks run at epochs ``e % every_n_epochs == 0``
            (jax_trainer's ``-1`` means 1).
        every_n_minutes: a filtered hook also runs when this many minutes passed since its
            phase's last filtered end; a filtered start always gets its filtered end.
            ``None`` or ``-1``: epochs only.

    Attributes:
        trainer: the :class:`TrainerView` given to :meth:`bind`, ``None`` before.

    Example:
        >>> class Printer(Callback):
        ...     def on_filtered_training_epoch_end(self, train_metrics, epoch_idx):
        ...         print("epoch", epoch_idx, train_metrics)
        >>> printer = Printer(every_n_epochs=2)
        >>> for epoch in (1, 2, 3, 4):
        ...     printer.on_training_epoch_end({"train/loss_epoch": 0.5}, epoch)
        epoch 2 {'train/loss_epoch': 0.5}
        epoch 4 {'train/loss_epoch': 0.5}
    """

    trainer: TrainerView | None = None
    _clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, *, every_n_epochs: int = 1, every_n_minutes: float | None = None) -> None:
        owner = type(self).__name__  # -1 (jax_trainer's default): every epoch, and no minutes
        self.every_n_epochs = 1 if as_integer(every_n_epochs) == -1 else whole(
            every_n_epochs, f"{owner}: every_n_epochs", minimum=1,
            fix="pass every_n_epochs=1, or 2 for every other epoch",
            expected="an int >= 1 (1 runs every epoch; -1, jax_trainer's default, means 1)")
        number = isinstance(every_n_minutes, numbers.Real) and not isinstance(every_n_minutes, bool)
        self.every_n_minutes = None if number and every_n_minutes == -1 else real(
            every_n_minutes, f"{owner}: every_n_minutes", above=0, none=True,
            problem=f"{owner}: every_n_minutes must be a number > 0, or None",
            fix="pass every_n_minutes=30, or leave it out",
            expected="None (epochs only), or minutes > 0, e.g. 30 (-1, jax_trainer's 'off', means None)")
        self.trainer = None
        self._last_fired: dict[str, float] = {}  # phase -> clock time its filtered end ran
        self._decided: dict[str, tuple[int, bool]] = {}  # phase -> (epoch, fires)

    # -- binding ------------------------------------------------------------------------------

    def bind(self, trainer: TrainerView) -> None:
        """Gives the callback the trainer it serves; one that lacks a :class:`TrainerView` member is
        an error.

        Example:
            >>> Callback().bind(object())  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            TypeError: Callback.bind needs a trainer with log_dir, state, writer, ...
        """
        missing = [name for name in _MEMBERS if not _has(trainer, name)]
        if missing:
            raise TypeError(explain(
                f"{type(self).__name__}.bind needs a trainer with {', '.join(_MEMBERS)}",
                expected="a gyre.TrainerModule (or an object with the TrainerView members)",
                received=f"{describe(trainer)}, which lacks {', '.join(missing)}",
                fix="let the TrainerModule bind its callbacks; in a test, give a fake "
            "trainer those members"))
        self.trainer = trainer

    def _bound(self) -> TrainerView:
        """The bound trainer, or an error when :meth:`bind` was never called."""
        if self.trainer is None:
            raise RuntimeError(explain(
                f"{type(self).__name__} is not bound to a trainer",
                expected="callback.bind(trainer) before its hooks run",
                received="a hook call on a callback that was never bound",
                fix="give the callback to a TrainerModule (it binds it), or call bind() first"))
        return self.trainer

    def _write(self, kind: str, values: Mapping[str, Any], back: int = 0) -> None:
        """Writes ``values`` (``"scalars"``, ``"images"``) at the global step (``back`` steps
        before it, not below 0), if the writer can."""
        trainer = self._bound()
        writer = trainer.writer
        if kind in writer.kinds:
            getattr(writer, f"write_{kind}")(max(int(trainer.global_step) - back, 0), values)

    # -- filtering ----------------------------------------------------------------------------

    def _fires(self, phase: str, epoch_idx: int, *, start: bool) -> bool:
        by_epoch = epoch_idx % self.every_n_epochs == 0
        if self.every_n_minutes is None:
            return by_epoch
        decided = self._decided.get(phase)
        if not start and decided is not None and decided[0] == epoch_idx:
            fires = decided[1]
        else:
            now = self._clock()
            last = self._last_fired.setdefault(phase, now)
            fires = by_epoch or now - last >= 60.0 * self.every_n_minutes
            self._decided[phase] = (epoch_idx, fires)
        if fires and not start:
            self._last_fired[phase] = self._clock()
        return fires

    # -- hooks --------------------------------------------------------------------------------

    def on_training_start(self) -> None:
        """Called once, before the first training epoch."""

    def on_training_end(self) -> None:
        """Called once, after the last training epoch (not when training failed)."""

    def _filtered(self, phase: str, hook: str, epoch_idx: int, *metrics: Any) -> None:
        """Runs ``on_filtered_<phase>_epoch_<hook>`` when the callback's filter fires."""
        if self._fires(phase, epoch_idx, start=hook == "start"):
            getattr(self, f"on_filtered_{phase}_epoch_{hook}")(*metrics, epoch_idx)

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Runs :meth:`on_filtered_training_epoch_start` on the callback's epochs."""
        self._filtered("training", "start", epoch_idx)

    def on_filtered_training_epoch_start(self, epoch_idx: int) -> None:
        """Called at the start of the training epochs the callback runs on."""

    def on_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Runs :meth:`on_filtered_training_epoch_end` on the callback's epochs."""
        self._filtered("training", "end", epoch_idx, train_metrics)

    def on_filtered_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Called at the end of the training epochs the callback runs on."""

    def on_validation_epoch_start(self, epoch_idx: int) -> None:
        """Runs :meth:`on_filtered_validation_epoch_start` on the callback's epochs."""
        self._filtered("validation", "start", epoch_idx)

    def on_filtered_validation_epoch_start(self, epoch_idx: int) -> None:
        """Called before the validations of the epochs the callback runs on."""

    def on_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Runs :meth:`on_filtered_validation_epoch_end` on the callback's epochs."""
        self._filtered("validation", "end", epoch_idx, eval_metrics)

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Called after the validations of the epochs the callback runs on."""

    def on_test_epoch_start(self, epoch_idx: int) -> None:
        """Called before testing (not filtered)."""

    def on_test_epoch_end(self, test_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Called after testing with its metrics (not filtered)."""

    def on_training_step(self, step_metrics: dict[str, Any], epoch_idx: int, global_step: int) -> None:
        """Called after each training step, only if overridden; read no metric value here."""

    def finalize(self, status: str) -> None:
        """Called once at the very end: ``"success"``, ``"failed"`` or ``"stopped"``.

        Example:
            >>> Callback().finalize("done")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ValueError: Callback.finalize got an unknown status 'done'...
        """
        if status not in STATUSES:
            raise ValueError(explain(
                f"{type(self).__name__}.finalize got an unknown status {status!r}",
                expected=f"one of {', '.join(map(repr, STATUSES))}", received=describe(status),
                fix="pass 'success', 'failed' or 'stopped'"))

    # -- resume -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What the callback needs to resume exactly (numbers, strings, lists, arrays); saved in
        every checkpoint.

        Example:
            >>> Callback().state_dict()
            {}
        """
        return {}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned; unknown keys are an error.

        Example:
            >>> Callback().load_state_dict({})
        """
        _check_state(self, d, ())


def _has(obj: Any, name: str) -> bool:
    """Whether ``obj`` has ``name``, without running a property."""
    return any(name in vars(k) for k in type(obj).__mro__) or name in getattr(obj, "__dict__", {})


def overrides_training_step(cb: Callback) -> bool:
    """Whether ``cb``'s class overrides :meth:`Callback.on_training_step`."""
    method = getattr(type(cb), "on_training_step", None)
    return method is not None and method is not Callback.on_training_step


def _check_state(cb: Callback, d: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """``d`` as a dict holding exactly ``keys``, else an error."""
    name = type(cb).__name__
    if not isinstance(d, Mapping) or set(d) != set(keys):
        received = describe(d) if not isinstance(d, Mapping) else f"keys {sorted(map(str, d))}"
        raise ValueError(explain(
            f"{name}.load_state_dict got a state it did not write",
            expected=f"a dict with keys {sorted(keys)} (what {name}.state_dict returns)", received=received,
            fix="resume with the callbacks (and their order) of the run that wrote the "
        "checkpoint"))
    return dict(d)


PROFILE_FOLDER = "profile"


class _CleansUp(Callback):
    """A callback whose ``_clean_up`` runs at training's end and at :meth:`finalize`, whatever the status."""

    def _clean_up(self) -> None:
        raise NotImplementedError

    def on_training_end(self) -> None:
        """Cleans up (see the class)."""
        self._clean_up()

    def finalize(self, status: str) -> None:
        """Cleans up (see the class)."""
        super().finalize(status)
        self._clean_up()


@register_callback
class JAXProfiler(_CleansUp):
    """Traces ``profile_n_steps`` training steps with ``jax.profiler`` into ``log_dir/profile``.

    The first trace starts after step ``first_step``; another starts ``every_n_minutes``
    after the last one stopped (``None``: one trace). A trace that cannot start is a warning.

    Example:
        >>> import pathlib, tempfile, types, gyre, jax.numpy as jnp
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> trainer = types.SimpleNamespace(
        ...     log_dir=folder, state=jnp.zeros(2), writer=gyre.MultiWriter([]), global_step=0,
        ...     stop_training=print, learning_rate=lambda: None)
        >>> profiler = JAXProfiler(first_step=1, profile_n_steps=2)
        >>> profiler.bind(trainer)
        >>> profiler.on_training_start()
        >>> for step in (1, 2, 3):
        ...     profiler.on_training_step({}, 1, step)
        >>> profiler.traces, profiler.active
        (1, False)
        >>> (folder / "profile").is_dir()
        True
        >>> import shutil; shutil.rmtree(folder)
    """

    def __init__(
        self, *, every_n_minutes: float | None = 60, first_step: int = 10, profile_n_steps: int = 5
    ) -> None:
        super().__init__(every_n_minutes=every_n_minutes)
        self.first_step = whole(first_step, "JAXProfiler: first_step", minimum=0, fix="pass first_step=10")
        self.profile_n_steps = whole(profile_n_steps, "JAXProfiler: profile_n_steps", minimum=1,
                                     fix="pass profile_n_steps=5")
        self.active = False
        self.traces = 0  # traces taken
        self._started_at = 0  # the step after which the running trace started
        self._stopped_at: float | None = None  # clock time the last trace stopped

    def on_training_step(self, step_metrics: dict[str, Any], epoch_idx: int, global_step: int) -> None:
        """Starts or stops a trace."""
        if self.active:
            if global_step - self._started_at >= self.profile_n_steps:
                self._clean_up()
        elif self._due(global_step):
            self._start(global_step)

    def _due(self, global_step: int) -> bool:
        if self.traces == 0:
            return global_step >= self.first_step
        if self.every_n_minutes is None or self._stopped_at is None:
            return False
        return self._clock() - self._stopped_at >= 60.0 * self.every_n_minutes

    def _start(self, global_step: int) -> None:
        folder = Path(self._bound().log_dir) / PROFILE_FOLDER
        try:
            jax.profiler.start_trace(str(folder))
        except RuntimeError as err:  # another trace runs in this process
            warn(f"JAXProfiler: no trace at step {global_step}: {err}")
            self.traces += 1  # do not retry at every step
            self._stopped_at = self._clock()
            return
        self.active = True
        self.traces += 1
        self._started_at = global_step

    def _clean_up(self) -> None:
        """Stops a running trace."""
        if not self.active:
            return
        state = self.trainer.state if self.trainer is not None else None
        jax.block_until_ready([x for x in jax.tree_util.tree_leaves(state) if isinstance(x, jax.Array)])
        self.active = False
        self._stopped_at = self._clock()
        jax.profiler.stop_trace()

    def on_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Stops a running trace."""
        self._clean_up()


@register_callback
class DisableGC(_CleansUp):
    """Turns Python's garbage collector off while training and collects at each epoch's end instead.

    Training's end and :meth:`finalize` put the collector back as it was.

    Example:
        >>> import gc
        >>> callback = DisableGC()
        >>> callback.on_training_start()
        >>> gc.isenabled()
        False
        >>> callback.on_training_end()
        >>> gc.isenabled()
        True
    """

    def __init__(self) -> None:
        super().__init__()
        self._was_enabled: bool | None = None  # None: not disabled by this callback

    def on_training_start(self) -> None:
        """Turns the collector off, remembering its state."""
        if self._was_enabled is None:
            self._was_enabled = gc.isenabled()
        gc.disable()

    def _collect(self) -> None:
        if self._was_enabled is not None:
            gc.collect()

    def on_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Collects."""
        self._collect()

    def on_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Collects."""
        self._collect()

    def on_test_epoch_end(self, test_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Collects."""
        self._collect()

    def _clean_up(self) -> None:
        """Puts the collector back as it was."""
        if self._was_enabled is None:
            return
        if self._was_enabled:
            gc.enable()
        self._was_enabled = None


@register_callback
class EarlyStopping(Callback, Improvement):
    """Stops training when the validation metric ``monitor`` has not improved for ``patience``
    validations.

    Args:
        mode: ``"min"``, ``"max"``, or ``"auto"``: the mode ``monitor``'s name implies
            (``"max"`` for ``val/acc``, else ``"min"``); a mode against the name is an error.
        min_delta: the smallest change that counts as an improvement; a NaN never improves.
        every_n_epochs: look at the validations of epochs ``e % every_n_epochs == 0``.

    Example:
        >>> import pathlib, types, gyre
        >>> trainer = types.SimpleNamespace(
        ...     log_dir=pathlib.Path("."), state=None, writer=gyre.MultiWriter([]), global_step=0,
        ...     stop_training=print, learning_rate=lambda: None)
        >>> stopper = EarlyStopping(monitor="val/loss", patience=2)
        >>> stopper.bind(trainer)
        >>> for epoch, loss in enumerate([0.5, 0.4, 0.45, 0.41], start=1):
        ...     stopper.on_validation_epoch_end({"val/loss": loss}, epoch)
        EarlyStopping: val/loss did not improve for 2 validation epochs (best 0.4 at epoch 2)
    """

    mode_from_monitor = True  # a config's mode against the monitor's name is refused (config/_schema)

    @keywords_checked
    def __init__(
        self,
        *,
        monitor: str = "val/loss",
        mode: Literal["min", "max", "auto"] = "auto",
        patience: int = 3,
        min_delta: float = 0.0,
        every_n_epochs: int = 1,
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.monitor = check_name(monitor, "EarlyStopping: monitor must name a validation metric",
                                  "'val/loss' or 'val/acc'", "pass monitor='val/loss'")
        Improvement.__init__(
            self, monitor_mode("EarlyStopping", monitor, mode), min_delta=check_min_delta("EarlyStopping", min_delta),
            patience=whole(patience, "EarlyStopping: patience", minimum=1, fix="pass patience=3"),
        )
        self.best_epoch = 0
        self.stopped_epoch = 0  # the epoch at which it asked to stop; 0: not yet

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Reads the monitored value and stops training when it stopped improving."""
        value = read_metric("EarlyStopping", eval_metrics, self.monitor, epoch_idx)
        if self.update(value):
            self.best_epoch = epoch_idx
            return
        if self.exhausted and not self.stopped_epoch:
            self.stopped_epoch = epoch_idx
            best = "no finite value yet" if self.best is None else f"best {self.best:g} at epoch {self.best_epoch}"
            self._bound().stop_training(
                f"EarlyStopping: {self.monitor} did not improve for {self.wait} validation epochs ({best})"
            )

    def state_dict(self) -> dict[str, Any]:
        """The best value and its epoch, the epochs waited, the stop epoch.

        Example:
            >>> EarlyStopping().state_dict()
            {'has_best': 0, 'best': 0.0, 'best_epoch': 0, 'wait': 0, 'stopped_epoch': 0}
        """
        return {
            "has_best": int(self.best is not None),
            "best": 0.0 if self.best is None else float(self.best),
            "best_epoch": self.best_epoch,
            "wait": self.wait,
            "stopped_epoch": self.stopped_epoch,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        Example:
            >>> stopper = EarlyStopping()
            >>> stopper.load_state_dict({"has_best": 1, "best": 0.25, "best_epoch": 4, "wait": 1,
            ...                          "stopped_epoch": 0})
            >>> stopper.best, stopper.wait
            (0.25, 1)
        """
        d = _check_state(self, d, ("has_best", "best", "best_epoch", "wait", "stopped_epoch"))
        self.best = float(np.asarray(d["best"])) if int(np.asarray(d["has_best"])) else None
        self.best_epoch = int(np.asarray(d["best_epoch"]))
        self.wait = int(np.asarray(d["wait"]))
        self.stopped_epoch = int(np.asarray(d["stopped_epoch"]))


def read_metric(owner: str, metrics: dict[str, Any], monitor: str, epoch_idx: int) -> float:
    """The validation metric ``owner`` monitors as a float, or an error."""
    if monitor not in metrics:
        keys = sorted(map(str, metrics))
        raise ExplainedKeyError(explain(
            f"{owner} monitors {monitor!r}, which was not logged in the validation of "
            f"epoch {epoch_idx}." + suggest(monitor, keys),
            expected=f"{monitor!r} among the validation metrics", received=f"keys {keys}",
            fix="set monitor= to one of those keys (validation metrics are named "
            "'val/<name>'), or log the metric in the loss function"))
    value = metrics[monitor]
    shape = tuple(np.shape(value))  # metadata: no read
    dtype = float if isinstance(value, numbers.Real) else getattr(value, "dtype", object)
    if isinstance(value, bool) or math.prod(shape) != 1 or not numeric_dtype(dtype) or np.dtype(dtype).kind == "b":
        raise ValueError(explain(
            f"{owner} monitors {monitor!r}, which is not one number",
            expected="a scalar validation metric, e.g. a mean loss or an accuracy",
            received=f"{describe(value)} of shape {shape}", fix="monitor a scalar metric"))
    return float(np.reshape(fetch(value), ()))


def best_first(mode: str, pairs: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """``(value, step)`` pairs by :func:`score`, best first; of equals, the earlier stays first."""
    return sorted(pairs, key=lambda vs: -score(mode, vs[0]))


def best_of(mode: str, pairs: list[tuple[Any, int]]) -> int | None:
    """The step of the best ``(value, step)`` pair (:func:`best_first`); ``None`` when no value is a number."""
    value, step = best_first(mode, pairs)[0]
    return step if score(mode, value) > -math.inf else None


@register_callback
class ModelCheckpoint(_CleansUp):
    """Keeps the best ``save_top_k`` models by ``monitor`` (a validation metric).

    Args:
        monitor: the logged name ranking the models, logged at every validation.
        mode: ``"min"``, ``"max"``, or ``"auto"``: the mode ``monitor``'s name implies
            (``"max"`` for ``val/acc``, else ``"min"``); a mode against the name is an error.
        save_optimizer_state: also save the optimizer state.

    Example:
        >>> cb = ModelCheckpoint(monitor="val/acc", save_top_k=2)
        >>> cb.monitor, cb.mode, cb.save_top_k, cb.best_step()
        ('val/acc', 'max', 2, None)
    """

    mode_from_monitor = True  # a config's mode against the monitor's name is refused (config/_schema)

    @keywords_checked
    def __init__(
        self,
        monitor: str = "val/loss",
        mode: Literal["min", "max", "auto"] = "auto",
        save_top_k: int = 1,
        save_optimizer_state: bool = False,
        every_n_epochs: int = 1,
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        check_name(monitor, "ModelCheckpoint's monitor must name a validation metric", "'val/loss' or 'val/acc'",
                   "monitor: val/acc")
        save_top_k = whole(save_top_k, "ModelCheckpoint's save_top_k", minimum=1,
                           expected="save_top_k: 1 (the best model) or more", fix="save_top_k: 1")
        self.monitor, self.mode, self.save_top_k = monitor, monitor_mode("ModelCheckpoint", monitor, mode), save_top_k
        self.save_optimizer_state = save_optimizer_state
        self.ranked: list[tuple[float, int]] = []  # (value, step), best first
        self._store: Store | None = None

    @property
    def directory(self) -> Path:
        """``<log_dir>/checkpoints``."""
        return Path(self._bound().log_dir).resolve() / "checkpoints"

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(
                str(self.directory), keep=1, keep_best=self.save_top_k,
                score=lambda metrics: score(self.mode, metrics[self.monitor]),
            )
        return self._store

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        value = read_metric("ModelCheckpoint", eval_metrics, self.monitor, epoch_idx)  # a host read
        if math.isnan(value):
            return
        t = self._bound()
        step = int(t.global_step)
        candidates = best_first(self.mode, [*self.ranked, (value, step)])
        if (value, step) not in candidates[: self.save_top_k]:
            return
        self.ranked = candidates[: self.save_top_k]
        payload = _model_tree(t.state, self.save_optimizer_state)
        meta = {"config": stored_config(t), "epoch": epoch_idx, "monitor": self.monitor, "mode": self.mode,
                "value": value, "input": getattr(t, "_input_spec", None)}
        self.store.save(
            Snapshot(step=step, state=payload, elapsed=t.elapsed, meta=meta), metrics={self.monitor: value}
        )

    def on_training_start(self) -> None:
        t = self.trainer
        if t is not None and t.config.resume is not None:
            # A run killed after a model save and before its next resume save left newer
            # steps than the one it resumes from: the resumed run saves them again.
            store = self.store
            newer = [s for s in store.on_disk() if s > t.global_step]
            if newer and t.global_step == 0:  # nothing resumed: maybe another run's models
                aside = [store.set_aside(step, ".before-restart") for step in newer]
                warn(f"the run starts over from step 0 (no resume checkpoint), so the best models "
                     f"it had saved, steps {newer}, are moved aside to <step>.before-restart in "
                     f"{store.root} (the last: {aside[-1]}); it saves them again as it reaches them")
            else:
                store.delete_steps(newer)
            store.delete_temporaries()  # a save the kill cut short
            store.reload()

    def _clean_up(self) -> None:
        """Waits for the saves in flight."""
        if self._store is not None:
            self._store.wait()

    def none_saved(self) -> str:
        """Why no model was saved and what the test scores instead (the trainer warns with it)."""
        every = self._bound().config.check_val_every_n_epoch
        why = ("trainer.check_val_every_n_epoch is 0: no validation ran" if not every
               else f"no validation logged a finite {self.monitor}")
        return (f"ModelCheckpoint saved no model ({why}), so the test scores the final model, not the best "
                f"by {self.monitor}; to test the best one, validate: give a validation set and set "
                "trainer.check_val_every_n_epoch: 1")

    def best_step(self) -> int | None:
        """The step of the best model saved, or ``None``."""
        return self.ranked[0][1] if self.ranked else None

    def restore_best(self, state: Any) -> Any:
        """``state`` with the best model's parameters and model state."""
        step = self.best_step()
        assert step is not None
        self.store.wait()
        return read_model(self.store, step, state, self.save_optimizer_state)

    def state_dict(self) -> dict[str, Any]:
        self._clean_up()  # a resume checkpoint names only models already on disk
        return {"ranked": [[v, s] for v, s in self.ranked]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ranked = [(float(v), int(s)) for v, s in state.get("ranked", [])]


def _model_tree(state: Any, optimizer: bool = False) -> dict[str, Any]:
    """What a model checkpoint holds of ``state``: parameters, model state, optimizer state if asked."""
    tree = {"params": state.params, "model_state": state.model_state}
    return {**tree, "opt_state": state.opt_state} if optimizer else tree


def read_model(store: Store, step: int, state: Any, optimizer: bool = False) -> Any:
    """``state`` with the parameters and model state saved at ``step`` in ``store``."""
    saved = store.read(step, _model_tree(state, optimizer)).state
    return state.replace(params=saved["params"], model_state=saved["model_state"])


def stored_config(trainer: Any) -> dict[str, Any]:
    """The config a checkpoint stores: the whole config, else the trainer's known sections."""
    if trainer.full_config is not None:
        return config_to_dict(trainer.full_config)
    return {
        "trainer": trainer.config.model_dump(mode="json"),
        "model": trainer.model_config,
        "optimizer": trainer.optimizer_config,
        "trainer_class": type(trainer).__name__,
    }


LR_NAME = "optimizer/lr"
SPIKES_FILE = "grad_spikes.jsonl"


@register_callback
class LearningRateMonitor(Callback):
    """Writes ``trainer.learning_rate()`` as ``optimizer/lr`` at each filtered training epoch's
    start, at the step of the update that used it (the previous epoch's last; 0 at the first).

    When the trainer cannot tell the rate, nothing is written and a warning says so once.

    Example:
        >>> import io, pathlib, types, gyre, jax.numpy as jnp
        >>> out = io.StringIO()
        >>> trainer = types.SimpleNamespace(
        ...     log_dir=pathlib.Path("."), state=None, writer=gyre.ConsoleWriter(out),
        ...     global_step=0, stop_training=print, learning_rate=lambda: jnp.float32(0.5))
        >>> monitor = LearningRateMonitor()
        >>> monitor.bind(trainer)
        >>> monitor.on_training_epoch_start(1)
        >>> trainer.writer.close()
        >>> out.getvalue()
        'step 0: optimizer/lr=0.5\\n'
    """

    def __init__(self, *, every_n_epochs: int = 1) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self._warned = False

    def on_filtered_training_epoch_start(self, epoch_idx: int) -> None:
        """Writes ``optimizer/lr``."""
        rate = self._bound().learning_rate()
        if rate is None:
            if not self._warned:
                self._warned = True
                warn(
                    "LearningRateMonitor: the trainer cannot tell the learning rate, so none is "
                    "written; a config's optimizer keeps it unless it says optimizer.log_learning_rate: "
                    "false (remove that line), and an optax optimizer of your own keeps it when built "
                    "with optax.inject_hyperparams"
                )
            return
        # the rate the last update used (optax.inject_hyperparams keeps that one): the step before
        # global_step, as every series is written at the step that made it (step 0: the initial rate)
        self._write("scalars", {LR_NAME: rate}, back=1)


CHUNK = 1024  # per-step rows kept on the device in buffers of this many steps


@jax.jit
def _spike_update(carry: dict[str, jax.Array], value: Any, decay: jax.Array, threshold: jax.Array):
    """One step of the spike monitor on the device; the row goes into ``rows`` if carried."""
    value = jnp.asarray(value).astype(jnp.float32)
    ema, seen = carry["ema"], carry["seen"]
    finite = jnp.isfinite(value)
    started = seen > 0
    spike = jnp.logical_or(~finite, started & (value > threshold * ema))
    moved = jnp.where(started, decay * ema + (1.0 - decay) * value, value)
    new_ema = jnp.where(finite, moved, ema)
    new = {
        "ema": new_ema,
        "seen": seen + finite.astype(jnp.int32),
        "spikes": carry["spikes"] + spike.astype(jnp.int32),
    }
    if "rows" in carry:
        row = jnp.stack([value, new_ema, spike.astype(jnp.float32)])[None]
        new["rows"] = jax.lax.dynamic_update_slice(carry["rows"], row, (carry["pos"], jnp.int32(0)))
        new["pos"] = carry["pos"] + 1
    return new


@register_callback
class GradientSpikeMonitor(Callback):
    """Counts steps whose gradient norm exceeds ``threshold`` times the EMA of the norms before it.

    The norm is the step metric ``metric`` (logged with ``log_grad_norm``); a non-finite norm
    is a spike. Each filtered epoch end writes ``grad/spikes`` and ``grad/ema``, and with
    ``log_to_disk`` one JSON line per step to ``log_dir/grad_spikes.jsonl``.

    Example:
        >>> import pathlib, tempfile, types, gyre, jax.numpy as jnp
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> trainer = types.SimpleNamespace(
        ...     log_dir=folder, state=None, writer=gyre.MultiWriter([]), global_step=0,
        ...     stop_training=print, learning_rate=lambda: None)
        >>> monitor = GradientSpikeMonitor(ema_decay=0.5, threshold=3.0)
        >>> monitor.bind(trainer)
        >>> for step, norm in enumerate([1.0, 1.0, 10.0, 1.0], start=1):
        ...     monitor.on_training_step({"grad_norm": jnp.float32(norm)}, 1, step)
        >>> int(monitor.state_dict()["spikes"]), float(monitor.state_dict()["ema"])
        (1, 3.25)
        >>> monitor.on_training_epoch_end({}, 1)
        >>> (folder / "grad_spikes.jsonl").read_text().splitlines()[2]
        '{"step": 3, "epoch": 1, "grad_norm": 10.0, "ema": 5.5, "spike": true}'
        >>> import shutil; shutil.rmtree(folder)
    """

    def __init__(
        self,
        *,
        every_n_epochs: int = 1,
        ema_decay: float = 0.99,
        threshold: float = 3.0,
        log_to_disk: bool = True,
        metric: str = "grad_norm",
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.ema_decay = real(ema_decay, "ema_decay", minimum=0.0, below=1.0, problem="GradientSpikeMonitor: bad ema_decay",
                              expected="a number in [0, 1)", fix="pass ema_decay=0.99")
        self.threshold = real(threshold, "threshold", above=0.0, problem="GradientSpikeMonitor: bad threshold",
                              expected="a number > 0", fix="pass threshold=3.0")
        self.log_to_disk = instance(log_to_disk, "log_to_disk", bool, problem="GradientSpikeMonitor: bad log_to_disk",
                                    expected="True or False", fix="pass log_to_disk=True")
        self.metric = check_name(metric, "GradientSpikeMonitor: bad metric", "'grad_norm'", "pass metric='grad_norm'")
        self._key: str | None = None  # the step metric's key, found at the first step
        self._consts = (jnp.float32(self.ema_decay), jnp.float32(self.threshold))
        self._zero = jnp.zeros((), jnp.int32)
        self._empty_rows = jnp.zeros((CHUNK, 3), jnp.float32)  # never written in place: shared
        self._carry: dict[str, jax.Array] = {"ema": jnp.zeros((), jnp.float32), "seen": self._zero,
                                             "spikes": self._zero}
        self._chunks: list[jax.Array] = []  # full (CHUNK, 3) row buffers not yet written
        self._steps: list[tuple[int, int]] = []  # (global_step, epoch) of each pending row
        self._window_steps = 0  # steps since grad/spikes was last written (a host count)
        self._new_buffer()

    def _new_buffer(self) -> None:
        if self.log_to_disk:
            self._carry = {**self._carry, "rows": self._empty_rows, "pos": self._zero}

    def _find(self, step_metrics: dict[str, Any]) -> str:
        for key in (self.metric, f"train/{self.metric}_step", f"train/{self.metric}"):
            if key in step_metrics:
                if np.shape(step_metrics[key]) != ():  # metadata only: no read
                    raise ValueError(explain(
                        f"GradientSpikeMonitor: the step metric {key!r} is not one number",
                        expected="a scalar gradient norm per step",
                        received=f"{describe(step_metrics[key])} of shape "
                        f"{np.shape(step_metrics[key])}",
                        fix="log the global norm (optax.global_norm(grads)) under "
                        f"{self.metric!r}, or set metric= to the name of a scalar"))
                return key
        raise ExplainedKeyError(explain(
            f"GradientSpikeMonitor needs the step metric {self.metric!r}, which was not logged",
            expected=f"{self.metric!r} in the step metrics (the trainer logs the gradient "
            "norm when log_grad_norm is on)",
            received=f"step metrics {sorted(step_metrics)}",
            fix="set log_grad_norm: true in the trainer's config, or set metric= to the "
            "name of the metric holding the gradient norm"))

    def on_training_step(self, step_metrics: dict[str, Any], epoch_idx: int, global_step: int) -> None:
        """Updates the EMA and the spike count on the device."""
        value = step_metrics.get(self._key) if self._key is not None else None
        if value is None:  # the first step (or a step without the metric): find it, or explain
            self._key = self._find(step_metrics)
            value = step_metrics[self._key]
        self._carry = _spike_update(self._carry, value, *self._consts)
        self._window_steps += 1
        if self.log_to_disk:
            self._steps.append((int(global_step), int(epoch_idx)))
            if len(self._steps) % CHUNK == 0:  # the buffer is full: keep it, start another
                self._chunks.append(self._carry["rows"])
                self._new_buffer()

    def on_filtered_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Writes ``grad/spikes``, ``grad/ema`` and the per-step lines."""
        self._flush()

    def on_training_end(self) -> None:
        """Writes what the last epochs counted if their end was filtered out."""
        self._flush()

    def _flush(self) -> None:
        if not self._window_steps:
            return
        trainer = self._bound()
        self._write("scalars", {"grad/spikes": self._carry["spikes"], "grad/ema": self._carry["ema"]})
        if self._steps:
            buffers = fetch([*self._chunks, self._carry["rows"]])  # the one host read
            rows = np.concatenate(buffers)[: len(self._steps)].tolist()
            folder = Path(trainer.log_dir)
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / SPIKES_FILE, "a", encoding="utf-8") as file:
                for (step, epoch), (value, ema, spike) in zip(self._steps, rows, strict=True):
                    line = {"step": step, "epoch": epoch, self.metric: _finite(value),
                            "ema": _finite(ema), "spike": bool(spike)}
                    file.write(json.dumps(line) + "\n")
        self._chunks, self._steps, self._window_steps = [], [], 0
        self._carry = {**self._carry, "spikes": self._zero}
        self._new_buffer()

    def state_dict(self) -> dict[str, Any]:
        """The EMA, the counts, and the per-step rows not yet written (device arrays).

        Example:
            >>> sorted(GradientSpikeMonitor().state_dict())  # doctest: +NORMALIZE_WHITESPACE
            ['chunks', 'ema', 'pending_epochs', 'pending_steps', 'pos', 'rows', 'seen', 'spikes',
             'window_steps']
        """
        carry = self._carry
        return {
            "ema": carry["ema"],
            "seen": carry["seen"],
            "spikes": carry["spikes"],
            "pos": carry.get("pos", 0),
            "rows": carry.get("rows", []),
            "chunks": list(self._chunks),
            "window_steps": self._window_steps,
            "pending_steps": [step for step, _ in self._steps],
            "pending_epochs": [epoch for _, epoch in self._steps],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (per-step rows only with ``log_to_disk``).

        Example:
            >>> monitor = GradientSpikeMonitor()
            >>> monitor.load_state_dict(GradientSpikeMonitor().state_dict())
        """
        d = _check_state(self, d, ("ema", "seen", "spikes", "pos", "rows", "chunks", "window_steps",
                                   "pending_steps", "pending_epochs"))
        self._carry = {"ema": jnp.asarray(d["ema"], jnp.float32), "seen": jnp.asarray(d["seen"], jnp.int32),
                       "spikes": jnp.asarray(d["spikes"], jnp.int32)}
        self._window_steps = int(np.asarray(d["window_steps"]))
        saved_rows = not isinstance(d["rows"], list)
        self._chunks, self._steps = [], []
        self._new_buffer()
        if self.log_to_disk and saved_rows:
            self._chunks = [jnp.asarray(c, jnp.float32) for c in d["chunks"]]
            self._carry["rows"] = jnp.asarray(d["rows"], jnp.float32)
            self._carry["pos"] = jnp.asarray(d["pos"], jnp.int32)
            self._steps = [(int(s), int(e)) for s, e in zip(d["pending_steps"], d["pending_epochs"], strict=True)]


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


SUFFIX = "conf_matrix"
FOLDER = "confusion_matrix"
ANNOTATE_UP_TO = 30  # classes; a larger matrix is drawn without the numbers in its cells


def confusion_matrix(labels: Any, predictions: Any, num_classes: int) -> jax.Array:
    """Counts (true label, prediction) pairs in a ``(num_classes, num_classes)`` int32 array
    (jittable).

    ``predictions`` are classes (``logits.argmax(-1)``), of the labels' shape; pairs outside
    ``[0, num_classes)`` (a padding label ``-1``) are not counted.

    Example:
        >>> import jax.numpy as jnp
        >>> confusion_matrix(jnp.array([0, 1, 1, 2, -1]), jnp.array([0, 1, 2, 2, 0]), 3).tolist()
        [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    """
    n = whole(num_classes, "confusion_matrix: num_classes", minimum=1, expected="a Python int, e.g. 10",
              fix="pass the number of classes, e.g. confusion_matrix(labels, preds, 10)")
    labels, predictions = jnp.asarray(labels), jnp.asarray(predictions)
    for name, value in (("labels", labels), ("predictions", predictions)):
        if not jnp.issubdtype(value.dtype, jnp.integer):
            raise TypeError(explain(
                f"confusion_matrix: {name} must hold integer classes",
                expected="integer arrays of class indices", received=f"dtype {value.dtype}, shape {value.shape}",
                fix="pass predicted classes, e.g. logits.argmax(-1), not the logits"))
    if labels.shape != predictions.shape:
        raise ValueError(explain(
            "confusion_matrix: labels and predictions differ in shape",
            expected="one prediction per label (the same shape)",
            received=f"labels {labels.shape}, predictions {predictions.shape}",
            fix="take the argmax over the class axis only: logits.argmax(-1)"))
    labels, predictions = labels.reshape(-1), predictions.reshape(-1)
    valid = (labels >= 0) & (labels < n) & (predictions >= 0) & (predictions < n)
    cells = jnp.where(valid, labels * n + predictions, 0).astype(jnp.int32)
    counts = jnp.bincount(cells, weights=valid.astype(jnp.int32), length=n * n)
    return counts.astype(jnp.int32).reshape(n, n)


@register_callback
class ConfusionMatrixCallback(Callback):
    """Draws each metric ending in ``conf_matrix`` of filtered validations and of tests.

    Each is a PNG at ``log_dir/confusion_matrix/<phase>_epoch_NNNN.png`` and an image
    ``<phase>/confusion_matrix`` for the writer. Needs matplotlib (``gyre[plot]``).

    Args:
        normalize: divide each row by its total.
        figsize: the figure's (width, height) in inches.
        format: a cell's format spec; ``None``: ``".2f"`` when normalized, else ``"d"``.

    Example:
        >>> import tempfile, gyre, optax, jax.numpy as jnp
        >>> from flax import nnx
        >>> callback = ConfusionMatrixCallback(figsize=(2, 2), dpi=50)
        >>> trainer = gyre.TrainerModule(model=nnx.Linear(1, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
        ...                              log_dir=tempfile.mkdtemp(), callbacks=[callback])
        >>> matrix = confusion_matrix(jnp.array([0, 1, 1]), jnp.array([0, 1, 0]), 2)
        >>> callback.on_validation_epoch_end({"val/conf_matrix": matrix}, 3)
        >>> sorted(p.name for p in (trainer.log_dir / "confusion_matrix").iterdir())
        ['val_epoch_0003.png']
        >>> trainer.close_writer()
    """

    def __init__(
        self,
        *,
        normalize: bool = True,
        cmap: str = "Blues",
        figsize: tuple[float, float] = (8, 8),
        format: str | None = None,
        dpi: int = 100,
        every_n_epochs: int = 1,
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.normalize = instance(normalize, "normalize", bool, problem="ConfusionMatrixCallback: bad normalize",
                                  expected="True or False", fix="pass normalize=True")
        if not isinstance(cmap, str) or not cmap:
            raise TypeError(_bad("cmap", cmap, "a matplotlib colormap name, e.g. 'Blues'", "pass cmap='Blues'"))
        size = tuple(figsize) if isinstance(figsize, (tuple, list)) else None
        if size is None or len(size) != 2 or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v < 1000 for v in size
        ):
            raise ValueError(_bad("figsize", figsize, "(width, height) in inches, two numbers > 0",
                                  "pass figsize=(8, 8)"))
        self.dpi = whole(dpi, "dpi", minimum=1, maximum=2000, problem="ConfusionMatrixCallback: bad dpi",
                         expected="a whole number from 1 to 2000", fix="pass dpi=100")
        fmt = format if format is not None else (".2f" if normalize else "d")
        try:
            _cell(1.0, fmt)
        except (TypeError, ValueError) as err:
            raise ValueError(_bad("format", format, "a format spec for one number, e.g. '.2f' or 'd'",
                                  "pass format='.2f', or leave it out")) from err
        self.cmap = cmap
        self.figsize = (float(size[0]), float(size[1]))
        self.format = fmt

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Draws the validation matrix."""
        self._draw(eval_metrics, epoch_idx, "val")

    def on_test_epoch_end(self, test_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Draws the test matrix."""
        self._draw(test_metrics, epoch_idx, "test")

    def _draw(self, metrics: dict[str, Any], epoch_idx: int, phase: str) -> None:
        trainer = self._bound()
        keys = [k for k in metrics if isinstance(k, str) and k.endswith(SUFFIX)]
        if not keys:
            raise ExplainedKeyError(explain(
                f"ConfusionMatrixCallback found no confusion matrix in the {phase} metrics "
                f"of epoch {epoch_idx}",
                expected=f"a metric whose key ends with {SUFFIX!r}, e.g. '{phase}/{SUFFIX}'",
                received=f"keys {sorted(map(str, metrics))}",
                fix="return {'conf_matrix': {'value': gyre.trainer.confusion_matrix(labels, "
                "preds, n), 'mode': 'sum', 'log_mode': 'eval'}} from the loss function"))
        for key in keys:
            shape = np.shape(metrics[key])  # metadata: no read
            if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 1:
                raise ValueError(explain(
                    f"ConfusionMatrixCallback: {key!r} is not a square matrix",
                    expected="an (n, n) array: rows true labels, columns predictions",
                    received=f"{describe(metrics[key])} of shape {shape}",
                    fix="log gyre.trainer.confusion_matrix(labels, preds, n) with mode 'sum'"))
        images = {}
        folder = Path(trainer.log_dir) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        for key, matrix in zip(keys, fetch([metrics[k] for k in keys]), strict=True):  # one read
            stem = key.rsplit("/", 1)[-1]
            name = phase if len(keys) == 1 else f"{phase}_{stem}"
            rgba = self._render(np.asarray(matrix, np.float64), key, epoch_idx,
                                folder / f"{name}_epoch_{epoch_idx:04d}.png")
            images[f"{phase}/confusion_matrix" if len(keys) == 1 else f"{phase}/{stem}"] = rgba[..., :3]
        self._write("images", images, back=1)  # beside the evaluation's scalars: the last trained step's index

    def _render(self, matrix: np.ndarray, key: str, epoch_idx: int, path: Path) -> np.ndarray:
        """Draws the picture into the PNG ``path``; returns it as an (height, width, 4) uint8 RGBA array."""
        figure, agg = matplotlib_canvas("ConfusionMatrixCallback")
        import matplotlib.image

        try:
            cmap = matplotlib.colormaps[self.cmap]
        except KeyError:
            names = sorted(matplotlib.colormaps)
            raise ValueError(explain(
                f"ConfusionMatrixCallback: unknown colormap {self.cmap!r}." + suggest(self.cmap, names),
                expected="a matplotlib colormap name, e.g. 'Blues', 'viridis', 'Greys'", received=describe(self.cmap),
                fix="pass cmap='Blues'")) from None
        if self.normalize:
            matrix = _normalize(matrix)
        n = matrix.shape[0]
        fig = figure(figsize=self.figsize, dpi=self.dpi)
        canvas = agg(fig)
        ax = fig.subplots()
        top = 1.0 if self.normalize else max(float(matrix.max()), 1.0)
        ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=top, interpolation="nearest")
        if n <= ANNOTATE_UP_TO:
            for i in range(n):
                for j in range(n):
                    ax.text(j, i, _cell(matrix[i, j], self.format), ha="center", va="center",
                            fontsize="small", color="white" if matrix[i, j] > top / 2 else "black")
        ticks = list(range(n)) if n <= ANNOTATE_UP_TO else list(range(0, n, max(n // 10, 1)))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("Predicted label")
        ax.set_ylabel("True label")
        ax.set_title(f"{key}, epoch {epoch_idx}")
        fig.tight_layout()
        canvas.draw()
        rgba = np.array(canvas.buffer_rgba(), dtype=np.uint8)
        matplotlib.image.imsave(path, rgba, format="png")
        return rgba


def _normalize(matrix: np.ndarray) -> np.ndarray:
    """Each row divided by its total; a row of zeros stays zeros."""
    totals = matrix.sum(axis=1, keepdims=True)
    return np.divide(matrix, totals, out=np.zeros_like(matrix, dtype=np.float64), where=totals > 0)


def _cell(value: float, fmt: str) -> str:
    if fmt.endswith(("d", "x", "X", "o", "b", "c")):
        return format(int(round(float(value))), fmt)
    return format(float(value), fmt)


def _bad(name: str, value: Any, expected: str, fix: str) -> str:
    return explain(f"ConfusionMatrixCallback: bad {name}", expected=expected, received=describe(value), fix=fix)
