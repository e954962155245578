"""jaxloop's early stopping: ``EarlyStoppingAction``, ``MetricMonitoringStopHandler``, ``StopTrainingError``."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp

from gyre.callbacks._monitor import Improvement, check_baseline, monitor_mode
from gyre.core._checks import instance, real, whole
from gyre.core._errors import suggest
from gyre.jaxloop._actions import Action, Output, _step_of
from gyre.jaxloop._loop import reduce_outputs

_log = logging.getLogger(__name__)


class StopTrainingError(Exception):
    """Raised by an action to stop training; an :class:`~gyre.jaxloop.OuterLoop` handles it.

    Example:
        >>> import gyre
        >>> str(gyre.jaxloop.StopTrainingError("no progress", best_step=20, best_metric=0.25))
        'no progress Training stopped early. Best step: 20, best metric: 0.2500.'
    """

    __module__ = "gyre.jaxloop"  # its public path, in tracebacks and reprs

    def __init__(self, message: str, best_step: int | None = None, best_metric: float | None = None) -> None:
        super().__init__(message)
        self.best_step = best_step
        self.best_metric = best_metric

    def __str__(self) -> str:
        metric = "None" if self.best_metric is None else f"{float(self.best_metric):.4f}"
        return f"{self.args[0]} Training stopped early. Best step: {self.best_step}, best metric: {metric}."


class MetricMonitoringStopHandler(Improvement):
    """Decides when training stops: after ``patience`` checks without an improvement of more than
    ``min_delta``.

    Args:
        monitored_metric: the output's name.
        min_delta: the smallest change that counts as an improvement.
        patience: checks without improvement before stopping (>= 1).
        mode: ``"min"``, ``"max"``, or ``"auto"`` (``max`` when the name says higher is better:
            ``val_acc``, ``f1``, ...; else ``min``, as ``gyre.early_stopping``).
        baseline: a value to beat before anything counts as an improvement.

    Example:
        >>> import gyre
        >>> handler = gyre.jaxloop.MetricMonitoringStopHandler("loss", patience=2)
        >>> [handler.update_state(v, s) for s, v in enumerate([1.0, 0.5, 0.6, 0.7])]
        [True, True, False, False]
        >>> handler.should_stop(), handler.get_best_info()
        (True, (0.5, 1))
    """

    def __init__(
        self, monitored_metric: str, min_delta: float = 1e-8, patience: int = 10,
        mode: str = "auto", baseline: float | None = None,
    ) -> None:
        self.monitored_metric = monitored_metric
        super().__init__(
            monitor_mode("MetricMonitoringStopHandler", monitored_metric, mode, strict=False),
            min_delta=abs(real(min_delta, "min_delta", problem="MetricMonitoringStopHandler's min_delta must be a number",
                               expected="the smallest change that counts as an improvement, e.g. min_delta=1e-3",
                               fix="pass a float, e.g. min_delta=1e-3 (its sign is ignored, as jaxloop's)")),
            patience=whole(patience, "patience", minimum=1, fix="pass patience=3",
                           problem="MetricMonitoringStopHandler's patience must be a positive whole number",
                           expected="the checks without improvement before stopping (an int >= 1)"),
            baseline=check_baseline("MetricMonitoringStopHandler", baseline),
        )
        self.best_step = 0
        self._initialized = baseline is not None
        if baseline is None:
            self.best = math.inf if self.mode == "min" else -math.inf

    @property
    def monitored_op(self) -> Callable[[Any, Any], Any]:
        """jaxloop's comparison with the best: ``jnp.less`` or (``max``) ``jnp.greater``."""
        return jnp.less if self.mode == "min" else jnp.greater

    def update_state(self, current_metric: float, current_step: int) -> bool:
        """Records a check; returns whether the metric improved."""
        current = float(current_metric)
        if self._initialized and not self.update(current):
            return False
        # jaxloop's first value is the best, whatever it is (NaN too)
        self._initialized, self.best, self.wait, self.best_step = True, current, 0, int(current_step)
        return True

    def should_stop(self) -> bool:
        """Whether the patience ran out."""
        return self.exhausted

    def get_best_info(self) -> tuple[float, int]:
        """``(best_metric, best_step)``."""
        return self.best, self.best_step

    def state_dict(self) -> dict[str, Any]:
        """What an :class:`~gyre.jaxloop.OuterLoop`'s checkpoints save of it: the best value and
        step and the checks waited since, so a resumed run stops where the uninterrupted one does.

        Example:
            >>> handler = MetricMonitoringStopHandler("loss", patience=2)
            >>> _ = handler.update_state(0.5, 3); _ = handler.update_state(0.7, 4)
            >>> again = MetricMonitoringStopHandler("loss", patience=2)
            >>> again.load_state_dict(handler.state_dict())
            >>> again.get_best_info(), again.wait
            ((0.5, 3), 1)
        """
        return {"monitor": self.monitored_metric, "mode": self.mode, "best": self.best if self._initialized else None,
                "best_step": self.best_step, "wait": self.wait, "initialized": self._initialized}

    def load_state_dict(self, values: Mapping[str, Any]) -> None:
        """Restores :meth:`state_dict` (of a handler on the same metric and mode)."""
        self.refuse_other(values, self.monitored_metric, "MetricMonitoringStopHandler", "a handler",
                          fix="resume with the early stopping actions of the run that saved the checkpoint, in its "
                          "order, or start a new run")
        if values.get("initialized"):
            self.best = float(values["best"])
        self._initialized = bool(values.get("initialized"))
        self.best_step, self.wait = int(values.get("best_step") or 0), int(values.get("wait") or 0)

    @property
    def _patience_left(self) -> int:
        """jaxloop's own counter (its tests read it): checks left before the stop."""
        return self.patience - self.wait


class EarlyStoppingAction(Action):
    """Raises :class:`StopTrainingError` when the handler says to stop (or the metric, the mean of
    its output, is NaN); put it in an eval loop's ``end_actions``.

    Example:
        >>> import gyre
        >>> action = gyre.jaxloop.EarlyStoppingAction(
        ...     gyre.jaxloop.MetricMonitoringStopHandler("loss", patience=1))
        >>> _ = action({"step": 1}, {"loss": [1.0]})
        >>> action({"step": 2}, {"loss": [2.0]})
        Traceback (most recent call last):
        ...
        gyre.jaxloop.StopTrainingError: Early stopping triggered for metric 'loss' Training stopped early. Best step: 1, best metric: 1.0000.
    """

    def __init__(self, handler: MetricMonitoringStopHandler, interval: int = 1) -> None:
        super().__init__(interval=interval)
        self._handler = instance(
            handler, "handler", MetricMonitoringStopHandler, expected="MetricMonitoringStopHandler('loss', patience=3)",
            problem="EarlyStoppingAction needs a MetricMonitoringStopHandler",
            fix="wrap the metric's name: EarlyStoppingAction(MetricMonitoringStopHandler(name))")
        self._missing_said = False  # the missing metric is said once, not at every check
        self.monitored_metric = handler.monitored_metric

    @property
    def handler(self) -> MetricMonitoringStopHandler:
        """The stop handler."""
        return self._handler

    def __call__(self, state: Any, outputs: Output | None, **kwargs: Any) -> Output | None:
        """Checks the metric; raises :class:`StopTrainingError` to stop."""
        step = _step_of(state)
        if outputs is None or self.monitored_metric not in outputs:
            if not self._missing_said:
                self._missing_said = True
                names = sorted(outputs or {})
                _log.warning(
                    "EarlyStoppingAction: the monitored metric %r is not available in the outputs "
                    "dictionary (it holds %s), so it cannot stop training on it; said once.%s", self.monitored_metric, names, suggest(self.monitored_metric, names),
                )
            return outputs
        value = float(reduce_outputs({"m": outputs[self.monitored_metric]})["m"])
        nan = math.isnan(value)
        if not nan:
            self._handler.update_state(value, step)
        if nan or self._handler.should_stop():
            best, best_step = self._handler.get_best_info()
            name = self.monitored_metric
            message = f"Metric '{name}' was NaN" if nan else f"Early stopping triggered for metric '{name}'"
            raise StopTrainingError(message, best_step=best_step, best_metric=best)
        return outputs
