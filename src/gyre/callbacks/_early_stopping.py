"""``early_stopping``: stop when a monitored value stops improving; keep the best weights."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from gyre.callbacks import _monitor
from gyre.core._checks import choice, instance, whole
from gyre.core._clock import Elapsed, Period
from gyre.core._logs import Logs
from gyre.engine._tasks import LoopElement


class EarlyStopping(_monitor.Improvement, LoopElement):
    """Stops the loop when ``monitor`` has not improved for ``patience`` evaluations (calls where it
    is logged).

    In a named loop it runs on ``on_epoch_end``, after the evaluation. The monitored value must
    be a single number.

    Args:
        monitor: a logged name (``"loss_test"``) or ``"collection.name"``.
        patience: evaluations without improvement; or a :class:`~gyre.Period`
            (``gyre.at(steps=200)``): the clock since the last improvement, as ciclo counts it.
        min_delta: how much better a value must be to count as an improvement.
        delta_mode: ``"absolute"`` (by ``min_delta``) or ``"relative"`` (by ``min_delta * |best|``).
        mode: ``"min"``, ``"max"``, or ``"auto"``: ``"max"`` when a word of the name says higher
            is better (``accuracy``, ``f1``, ``auc``, ``score``...), else ``"min"``.
        baseline: a value to beat; until it is beaten, evaluations count against patience.
        restore_best_weights: when the loop ends, return the best evaluation's state (a copy is
            kept on the device).
        initial_patience: first evaluations that cannot count against patience (they still
            record the best).

    Attributes:
        best: the best value seen (or the baseline), ``None`` before the first evaluation.
        best_step: the step of the best value.
        wait: evaluations since the last improvement.
        stopped_step: the step at which it asked the loop to stop, or ``None``.

    Example:
        >>> import gyre
        >>> losses = iter([3.0, 2.0, 2.5, 2.4, 2.6, 1.0])
        >>> def evaluate(state):
        ...     return gyre.logs().add_loss("loss", next(losses)), state + 1
        >>> es = gyre.early_stopping("loss", patience=2, restore_best_weights=True)
        >>> state, _, elapsed = gyre.loop(0, range(6), {gyre.every(1): [evaluate, es]},
        ...                               on_end=es.on_train_end)
        >>> elapsed.steps, state, es.best
        (4, 2, 2.0)
    """

    def __init__(
        self,
        monitor: str,
        *,
        patience: int | Period,
        min_delta: float = 0.0,
        delta_mode: str = "absolute",
        mode: str = "auto",
        baseline: float | None = None,
        restore_best_weights: bool = False,
        initial_patience: int = 0,
    ) -> None:
        self.monitor = _monitor.check_name(monitor, "early_stopping needs the name of the value to monitor",
                                           "'loss_test' or 'metrics.accuracy_test'", "early_stopping('loss_test', patience=3)")
        patience, initial_patience = (
            value
            if name == "patience" and isinstance(value, Period)
            else whole(value, f"early_stopping's {name}", fix=f"pass {name} as a non-negative int",
                       expected=f"{name}=3 (counted in evaluations of the monitored value)"
                       + (", or patience=gyre.at(steps=200) (the clock since the best value, ciclo's "
                          "meaning)" if name == "patience" else ""))
            for name, value in (("patience", patience), ("initial_patience", initial_patience)))
        choice(delta_mode, "early_stopping's delta_mode", ("absolute", "relative"), fix="delta_mode='absolute'.",
               expected="'absolute' (improve by min_delta) or 'relative' (by min_delta * |best|)")
        instance(restore_best_weights, "restore_best_weights", (bool, np.bool_),
                 problem="early_stopping's restore_best_weights must be True or False",
                 expected="restore_best_weights=True to return the best state at the end",
                 fix="pass restore_best_weights=True or False")
        self.mode_inferred = mode == "auto"
        super().__init__(
            _monitor.monitor_mode("early_stopping", monitor, mode, strict=False),
            min_delta=_monitor.check_min_delta("early_stopping", min_delta),
            relative=delta_mode == "relative", patience=patience, baseline=_monitor.check_baseline("early_stopping", baseline))
        self.delta_mode = delta_mode
        self.restore_best_weights = bool(restore_best_weights)
        self.initial_patience = initial_patience
        self.reset()

    def __repr__(self) -> str:
        how = " (inferred from the name)" if self.mode_inferred else ""
        return f"EarlyStopping({self.monitor!r}, mode={self.mode!r}{how}, patience={self.patience!r})"

    def reset(self) -> None:
        """Forgets what was seen (best value, counters and best weights)."""
        self.best, self.wait = self.baseline, 0
        self.best_step: int | None = None
        self.best_state: Any = None
        self.since: Elapsed | None = None  # the clock of the first evaluation or the last improvement
        self.evaluations = 0
        self.stopped_step: int | None = None

    def __call__(self, state: Any, elapsed: Any, logs: Logs, loop: Any = None) -> None:
        value = _monitor.find(
            logs,
            self.monitor,
            owner="early_stopping",
            step=elapsed.steps,
            fix="monitor one of the received names (evaluation entries carry the test "
            "suffix, e.g. 'loss_test'), and run early stopping where it is logged "
            "(it registers itself on on_epoch_end, after evaluation)")
        value = _monitor.as_number(value, self.monitor, owner="early_stopping", step=elapsed.steps)
        self.evaluations += 1
        if self.since is None:
            self.since = elapsed.replace()  # a plain copy: not the clock of a step in progress
        if self.update(value):
            self.best_step = elapsed.steps
            self.since = elapsed.replace()
            if self.restore_best_weights:
                # the loop donates the state to the next step: keep buffers of our own
                self.best_state = jax.tree_util.tree_map(lambda x: x.copy() if isinstance(x, jax.Array) else x, state)
            return
        if self.evaluations <= self.initial_patience:
            self.wait -= 1  # a warm-up evaluation does not count against patience
            return
        if isinstance(self.patience, Period):
            waited = elapsed.since(self.since)
            run_out, how_long = waited >= self.patience, f"{waited.steps} steps ({self.patience})"
        else:
            run_out, how_long = self.exhausted, f"{self.wait} evaluations"
        if run_out and loop is not None:
            self.stopped_step = elapsed.steps
            loop.request_stop(
                f"early stopping: {self.monitor} (mode {self.mode!r}) did not improve for {how_long} "
                f"(best {self.best:.6g} at step {self.best_step})")

    on_epoch_end = __call__

    def on_train_end(self, state: Any) -> Any:
        """Returns the best state when ``restore_best_weights`` (whatever ended the loop)."""
        if self.restore_best_weights and self.best_state is not None:
            if isinstance(self.best_state, _Leaves):
                self.best_state = self.best_state.like(state)
            return self.best_state
        return None

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint saves: the counters, the best value and the best weights' leaves.

        Example:
            >>> es = early_stopping("loss", patience=2)
            >>> es.state_dict()["wait"], es.state_dict()["best_leaves"]
            (0, None)
        """
        best = self.best_state
        return {
            "best": self.best, "best_step": self.best_step, "wait": self.wait, "evaluations": self.evaluations,
            "since": None if self.since is None else self.since.to_dict(),
            "stopped_step": self.stopped_step,
            "best_leaves": None if best is None else best.leaves if isinstance(best, _Leaves)
            else jax.tree_util.tree_leaves(best),  # restored leaves not yet given their structure
        }

    def load_state_dict(self, values: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`.

        Example:
            >>> es = early_stopping("loss", patience=2)
            >>> es.load_state_dict({"best": 0.5, "wait": 1, "evaluations": 3})
            >>> es.best, es.wait
            (0.5, 1)
        """
        self.best, self.wait = values.get("best"), values.get("wait", 0)
        self.best_step = values.get("best_step")
        self.evaluations = values.get("evaluations", 0)
        self.stopped_step = values.get("stopped_step")
        since = values.get("since")
        self.since = None if since is None else Elapsed.from_dict(since)
        leaves = values.get("best_leaves")
        self.best_state = None if leaves is None else _Leaves(list(leaves))


class _Leaves:
    """Best weights restored from a checkpoint: leaves waiting for the state's structure."""

    def __init__(self, leaves: list[Any]) -> None:
        self.leaves = leaves

    def like(self, state: Any) -> Any:
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state), self.leaves)


early_stopping = EarlyStopping  # ciclo's name: one class, two spellings
