"""Small trainer callbacks: :class:`JAXProfiler`, :class:`DisableGC` and :class:`EarlyStopping`."""

import gc
import math
import numbers
import pathlib
from typing import Any, Literal

import jax
import numpy as np

from gyre.callbacks._monitor import Improvement, check_min_delta, check_name, monitor_mode
from gyre.config._registry import register_callback
from gyre.core._checks import whole
from gyre.core._errors import ExplainedKeyError, describe, explain, suggest, warn
from gyre.core._host import fetch, numeric_dtype
from gyre.trainer._callback import Callback, _check_state

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
        folder = pathlib.Path(self._bound().log_dir) / PROFILE_FOLDER
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
