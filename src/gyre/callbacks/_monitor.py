"""The one improvement monitor of every early stopping and best-model ranking, and ``early_stopping``:
stop when a monitored value stops improving; keep the best weights."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from gyre.core._checks import choice, instance, real, whole
from gyre.core._clock import Elapsed, Period
from gyre.core._errors import ExplainedKeyError, describe, explain, keywords_checked, suggest, warn
from gyre.core._host import fetch, to_python
from gyre.core._logs import Logs
from gyre.engine._tasks import LoopElement


def check_name(monitor: Any, problem: str, example: str, fix: str, *, optional: bool = False) -> Any:
    """``monitor`` when it names a logged value (or is None when ``optional``), else a TypeError saying ``problem``."""
    if (isinstance(monitor, str) and monitor) or (optional and monitor is None):
        return monitor
    raise TypeError(explain(problem, expected=f"a logged name, e.g. {example}", received=describe(monitor), fix=fix))


def find(logs: Logs | None, monitor: str, *, owner: str, step: int, fix: str) -> float:
    """The value logged as ``monitor`` (``"name"`` or ``"collection.name"``) read by :func:`as_number`, else an
    error listing the logged entries."""
    found, value = (False, None) if logs is None else logs.lookup(monitor)
    if found:
        return as_number(value, monitor, owner=owner, step=step)
    available = [] if logs is None else sorted({f"{c}.{n}" for c, n, _ in logs.entries()})
    raise ExplainedKeyError(explain(
        f"{owner} monitors {monitor!r}, which was not logged at step {step}",
        expected=f"an entry named {monitor!r} in the logs when {owner} runs",
        received=f"entries {available}" if logs is not None else "no logs (logs=None)", fix=fix))


def as_number(value: Any, monitor: str, *, owner: str, step: int) -> float:
    """A monitored value read as one float (a scalar or one-value array); the shape is checked before any transfer."""
    shape = tuple(np.shape(value))  # read from the array's metadata: no transfer
    dtype = getattr(value, "dtype", None)
    if math.prod(shape) != 1:
        kind = f"an array of shape {shape}" + (f" ({dtype})" if dtype is not None else "")
        raise ValueError(explain(
            f"{owner} monitors {monitor!r}, which is not a single number at step {step}",
            expected=f"a scalar logged as {monitor!r} (a loss or a metric averaged over the batch)",
            received=kind, fix=f"log one number under {monitor!r}, e.g. logs.add_metric(name, "
            "values.mean()), or monitor another entry"))
    host = to_python(np.reshape(fetch(value), ()))
    if isinstance(host, bool) or not isinstance(host, (int, float)):
        raise TypeError(explain(
            f"{owner} monitors {monitor!r}, which is not a number at step {step}",
            expected="an int or float value (a loss or a metric)", received=describe(value),
            fix=f"log a number under {monitor!r}, or monitor another entry"))
    return float(host)


# Words of a monitored name (or, to maximise, its start) that imply its mode.
MAX_WORDS = ("acc", "accuracy", "auc", "f1", "precision", "recall", "iou", "score", "r2")
MIN_WORDS = ("loss", "error", "err", "mse", "mae", "rmse", "nll", "perplexity", "ppl", "ce")


def monitor_mode(owner: str, monitor: str | None, mode: Any, *, strict: bool = True, auto: bool = True) -> str:
    """``mode`` checked once for ``owner``; ``"auto"`` (when allowed) is ``"max"`` when a word of the
    name's last part is one of :data:`MAX_WORDS`, else ``"min"``; when ``strict``, a mode against the name is an error."""
    choices = ("min", "max", "auto") if auto else ("min", "max")
    if not isinstance(mode, str) or mode not in choices:
        named = f": unknown mode {mode!r}.{suggest(mode, choices)}" if isinstance(mode, str) else ""
        raise ValueError(explain(
            f"{owner}'s mode must be {', '.join(map(repr, choices[:-1]))} or {choices[-1]!r}{named}",
            expected="'min' (lower is better: a loss) or 'max' (higher is better: an accuracy)"
            + (", or 'auto' (from the monitored name)" if auto else "") + "; any other mode is not known",
            received=describe(mode), fix="pass mode='min' for a loss or mode='max' for an accuracy"
            + (" (or leave mode out: it is taken from the name)" if auto else "")))
    base = re.split(r"[./]", monitor or "")[-1].lower()  # after a collection's "metrics." or a prefix's "val/"
    words = base.split("_")
    implied = ("max" if any(w in words or base.startswith(w) for w in MAX_WORDS)
               else "min" if any(w in words for w in MIN_WORDS) else None)
    if mode == "auto":
        return implied or "min"
    if strict and implied is not None and mode != implied:
        kept, better = ("lowest", "higher") if mode == "min" else ("highest", "lower")
        raise ValueError(explain(
            f"{owner}: mode {mode!r} on {monitor!r} keeps the {kept} value, but its name says mode "
            f"{implied!r} ({better} is better)",
            expected=f"mode: {implied} for {monitor} (or leave mode out: it is taken from the name)",
            received=f"mode: {mode}", fix=f"set mode: {implied}; if {kept.replace('est', 'er')} really is better for "
            "this metric, log it under a name that says so"))
    return mode


def check_min_delta(owner: str, min_delta: Any) -> float:
    """``min_delta`` as a float >= 0, else an error naming ``owner``."""
    return real(min_delta, "min_delta", minimum=0, problem=f"{owner}'s min_delta must be a number >= 0",
                expected="min_delta=0.001 (how much better a value must be to count)",
                fix="pass a non-negative float, e.g. min_delta=0.001 (0 counts any improvement; the "
                "direction comes from mode)")


def check_baseline(owner: str, baseline: Any) -> float | None:
    """``baseline`` as a float (a 0-d array read once), or ``None``; else an error naming ``owner``."""
    if baseline is None:
        return None
    plain = isinstance(baseline, numbers.Real) and not isinstance(baseline, (bool, np.bool_))
    zero_d = getattr(baseline, "shape", None) == () and getattr(getattr(baseline, "dtype", None), "kind", "") in ("i", "u", "f")
    if (plain or zero_d) and not math.isnan(float(baseline)):
        return float(baseline)
    raise ValueError(explain(
        f"{owner}'s baseline must be a number or None",
        expected="the value to beat, e.g. baseline=0.5 for a loss (mode='min') or "
        "baseline=0.9 for an accuracy (mode='max'); None for no baseline",
        received=describe(baseline), fix="pass the monitored value's threshold as a float, e.g. baseline=0.5"))


def score(mode: str, value: Any) -> float:
    """``value`` ranked, higher is better (``-value`` in ``"min"`` mode); a non-number or NaN ranks last (``-inf``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        return -math.inf
    return float(value) if mode == "max" else -float(value)


class Improvement:
    """Strictly beyond ``best`` by ``min_delta`` (times ``|best|`` when relative); NaN never improves."""

    def __init__(
        self, mode: str, *, min_delta: float = 0.0, relative: bool = False, patience: Any = None,
        baseline: float | None = None,
    ) -> None:
        self.mode, self.min_delta, self.relative = mode, min_delta, relative
        self.patience, self.baseline = patience, baseline
        self.best: float | None = baseline
        self.wait = 0

    def update(self, value: float) -> bool:
        """Records ``value`` (a new ``best`` and ``wait`` back to 0, or one more in ``wait``); whether it improved."""
        margin = self.min_delta * abs(self.best) if self.relative and self.best is not None else self.min_delta
        if not math.isnan(value) and (
            self.best is None or (value < self.best - margin if self.mode == "min" else value > self.best + margin)
        ):
            self.best, self.wait = value, 0
            return True
        self.wait += 1
        return False

    @property
    def exhausted(self) -> bool:
        """Whether ``wait`` reached a whole-number ``patience``."""
        return isinstance(self.patience, int) and self.wait >= self.patience

    def refuse_other(self, values: Mapping[str, Any], monitor: str, kind: str, one: str, fix: str) -> None:
        """Refuses a ``state_dict`` saved by ``one`` on another value or mode (checkpoints tell
        two of a kind apart by their order); one without ``monitor``/``mode`` (older) loads."""
        saved = values.get("monitor", monitor), values.get("mode", self.mode)
        if saved != (monitor, self.mode):
            raise ValueError(explain(
                f"{kind}({monitor!r}, mode={self.mode!r}) was given the state of {one} on another value, "
                f"so it would compare {monitor} with a best {saved[0]} of {values.get('best')!r}",
                expected=f"the state_dict() of {kind}({monitor!r}, mode={self.mode!r})",
                received=f"the state_dict() of {kind}({saved[0]!r}, mode={saved[1]!r})", fix=fix))


class EarlyStopping(Improvement, LoopElement):
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
        restore_best_weights: the loop it stops returns the best evaluation's state, as ciclo's
            does; a loop ended otherwise returns it through ``on_train_end`` (a copy is kept on
            the device).
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

    @keywords_checked
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
        self.monitor = check_name(monitor, "early_stopping needs the name of the value to monitor",
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
            monitor_mode("early_stopping", monitor, mode, strict=False),
            min_delta=check_min_delta("early_stopping", min_delta),
            relative=delta_mode == "relative", patience=patience, baseline=check_baseline("early_stopping", baseline))
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
        self._given_back = False  # on_train_end ran in this loop (it returns the best state)

    def __call__(self, state: Any, elapsed: Any, logs: Logs, loop: Any = None) -> tuple[None, Any] | None:
        if self.since is not None and elapsed.steps < self.since.steps:
            self.reset()  # a clock behind the one it counted from: a new loop's (reused, re-run), which starts anew
        value = find(
            logs,
            self.monitor,
            owner="early_stopping",
            step=elapsed.steps,
            fix="monitor one of the received names (evaluation entries carry the test "
            "suffix, e.g. 'loss_test'), and run early stopping where it is logged "
            "(it registers itself on on_epoch_end, after evaluation)")
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
            best = self.on_train_end(state)  # as ciclo: the loop it stops returns the best state
            if best is not None:
                return None, best
        return None

    on_epoch_end = __call__

    def on_train_end(self, state: Any) -> Any:
        """Returns the best state when ``restore_best_weights`` (whatever ended the loop; the
        loop it stops gets it at once, as ciclo's)."""
        self._given_back = True
        if self.restore_best_weights and self.best_state is not None:
            if isinstance(self.best_state, _Leaves):
                self.best_state = self.best_state.like(state)
            return self.best_state
        return None

    def on_loop_end(self) -> None:
        """At the end of a loop whose table holds it: says when ``restore_best_weights`` had no
        ``on_train_end`` to give the best state back (a plain loop without ``on_end=``)."""
        given, self._given_back = self._given_back, False
        if self.restore_best_weights and self.best_state is not None and not given:
            warn(explain(
                f"early_stopping({self.monitor!r}, restore_best_weights=True) kept the best state "
                f"(step {self.best_step}), but nothing gave it back: the loop returned its last state",
                expected="its on_train_end among the loop's end callbacks",
                received="a loop without on_end=es.on_train_end (gyre.loop, or a train_loop task table)",
                fix="pass on_end=es.on_train_end to gyre.loop, or give it to train_loop(callbacks=[es])"))

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint saves: the counters, the best value and the best weights' leaves.

        Example:
            >>> es = early_stopping("loss", patience=2)
            >>> es.state_dict()["wait"], es.state_dict()["best_leaves"]
            (0, None)
        """
        best = self.best_state
        return {
            "monitor": self.monitor, "mode": self.mode,  # whose state it is: checked when loaded
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
        self.refuse_other(values, self.monitor, "early_stopping", "an early stopping",
                          fix="resume with the callbacks of the run that saved the checkpoint, in its order (two "
                          "early stoppings are told apart by their order), or start a new run")
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
