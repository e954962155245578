"""A loop's ``nan_policy`` (``"raise"``, ``"skip"``, ``"ignore"``: docs/concepts/nan-policy.md).

:class:`FiniteCheck` reads values as they reach the host, never waiting; what is still on the device
is checked before a checkpoint saves and when the outermost loop ends (with several processes, only then).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gyre.core._checks import choice
from gyre.core._clock import Elapsed
from gyre.core._errors import explain
from gyre.core._history import Block, History
from gyre.core._host import fetch, to_python
from gyre.core._logs import Logs
from gyre.engine._binding import StateMethod
from gyre.engine._tasks import as_list, check_table

NAN_POLICIES = ("raise", "skip", "ignore")
#: The collections whose values must be finite.
CHECKED = ("losses", "metrics")
#: The name of the count of skipped steps: a state field (or extra) and a stateful metric.
SKIPPED_STEPS = "skipped_steps"
#: Steps between two reads of the values that have landed on the host.
POLL_EVERY = 64
#: Seconds between two reads when :data:`POLL_EVERY` steps take longer: a NaN of a slow run
#: is read within about two of them.
POLL_SECONDS = 0.5

Key = tuple[str, str]


FIRST_STEP = (
    "the first step's value comes before any update, not from a diverged training: check the batch "
    "of step 0 for NaN/Inf inputs and for labels outside the model's classes (optax's "
    "*_with_integer_labels losses give NaN for a label < 0 or >= the number of logits, e.g. labels "
    "1..10 for 10 classes), and the model's initial parameters"
)


class NonFiniteError(FloatingPointError):
    """A loop logged a NaN or infinite loss or metric (``nan_policy="raise"``, the default).

    Attributes:
        step: the step that logged it (its clock's ``steps``: step 0 is the first).
        collection: ``"losses"`` or ``"metrics"``.
        name: the entry's name (``"loss"``, ``"accuracy_test"``).
        value: ``nan``, ``inf`` or ``-inf`` (an array's first non-finite element).

    Example:
        >>> import gyre, math
        >>> def step(state, batch):
        ...     return gyre.logs().add_loss("loss", 1.0 / batch if batch else math.nan), state
        >>> try:
        ...     gyre.loop(None, [1.0, 2.0, 0.0, 4.0], {gyre.every(1): step})
        ... except gyre.NonFiniteError as err:
        ...     print(err.step, err.name, err.value)
        ...     print(str(err).splitlines()[0])
        2 loss nan
        "loss" is nan at step 2
    """

    __module__ = "gyre"  # its public path, in tracebacks and reprs

    def __init__(self, message: str, *, step: int, collection: str, name: str, value: float) -> None:
        super().__init__(message)
        self.step = step
        self.collection = collection
        self.name = name
        self.value = value


def check_nan_policy(policy: Any, where: str = "loop", *, no_skip: tuple[str, str] | None = None) -> str:
    """``policy`` if valid, else the explained error; ``no_skip=(why, fix)`` refuses ``"skip"``."""
    policy = choice(policy, f"nan_policy of {where}", NAN_POLICIES,
                    expected="'raise' (stop with gyre.NonFiniteError at the first NaN/Inf loss or metric), "
                    "'skip' (managed train steps drop non-finite updates and count them) or 'ignore'")
    if policy == "skip" and no_skip is not None:
        why, fix = no_skip
        raise ValueError(explain(
            f"{where} cannot skip non-finite updates: {why}",
            expected="nan_policy='raise' (stop at the first NaN/Inf) or 'ignore' (go on through them)",
            received="nan_policy='skip'", fix=fix))
    return policy


def _skipping(fn: Any) -> Any:
    """The callback that skips non-finite updates in place of ``fn`` (``fn`` when it cannot)."""
    if isinstance(fn, StateMethod):
        method = _skipping(fn.method)
        return fn if method is fn.method else StateMethod(method)
    return fn.with_nan_policy("skip") if _skippable(fn) else fn


def _skippable(fn: Any) -> bool:
    """Whether ``fn`` is a step that can skip non-finite updates (duck-typed, for speed)."""
    return hasattr(fn, "nan_policy") and callable(getattr(fn, "with_nan_policy", None))


def skips(fn: Any) -> bool:
    """Whether a callback drops its non-finite updates."""
    if isinstance(fn, StateMethod):
        fn = fn.method
    return _skippable(fn) and fn.nan_policy == "skip"


def apply_nan_policy(tasks: Any, policy: str) -> tuple[Any, bool]:
    """The table to run under ``policy`` (managed train steps skipping under ``"skip"``), and
    whether a step skips."""
    table = check_table(tasks)
    if policy == "skip":
        table = {key: [_skipping(cb) for cb in as_list(cbs)] for key, cbs in table.items()}
    skipping = any(skips(cb) for cbs in table.values() for cb in as_list(cbs))
    if policy == "skip" and not skipping:
        names = [getattr(cb, "__qualname__", None) or type(cb).__name__ for cbs in table.values() for cb in as_list(cbs)]
        raise ValueError(explain(
            "nan_policy='skip' needs a step that can drop a non-finite update, and this loop has none",
            expected="a managed train step in the table (@gyre.managed.train_step, or the "
            "train_step of gyre.create_flax_state): it drops the update inside the compiled "
            "step and counts it in state.skipped_steps",
            received=f"the callbacks {names[:8]}{' ...' if len(names) > 8 else ''}, none a "
            "managed train step (an evaluation or prediction loop makes no update to skip)",
            fix="write the step with @gyre.managed.train_step; or, in your own jitted step, "
            "keep the previous state with jnp.where(jnp.isfinite(loss), new, old) (or "
            "optax.apply_if_finite) and run the loop with nan_policy='ignore'; or keep "
            "nan_policy='raise' to stop at the first non-finite loss"))
    return table, skipping


def skipped_steps_of(state: Any) -> Any:
    """The state's ``skipped_steps`` (a field, an extra or a dict key), or ``None``."""
    if isinstance(state, Mapping):
        return state.get(SKIPPED_STEPS)
    try:
        return getattr(state, SKIPPED_STEPS, None)
    except Exception:  # a state whose __getattr__ raises something else
        return None


# -- finding the first non-finite value ---------------------------------------------------------


def _isfinite(array: np.ndarray) -> np.ndarray | None:
    """``np.isfinite`` of a host array of numbers (bfloat16 included), ``None`` for others."""
    if array.dtype.kind in "biu":
        return None
    try:
        return np.isfinite(array)
    except TypeError:  # strings, objects
        return None


def _nonfinite_rows(values: Any, count: int) -> np.ndarray:
    """A boolean per row: whether the row holds a NaN or an infinity (non-numbers: never)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        finite = _isfinite(values.reshape(len(values), -1))
        return np.zeros(count, bool) if finite is None else ~finite.all(axis=1)
    out = np.zeros(count, bool)
    for i, value in enumerate(values):
        out[i] = _first_nonfinite(value) is not None
    return out


def _first_nonfinite(value: Any) -> float | None:
    """The first non-finite element of a host value, or ``None`` (non-numbers: ``None``)."""
    try:
        array = np.asarray(value)
    except Exception:
        return None
    finite = _isfinite(array)
    if finite is None or finite.all():
        return None
    first = array[~finite].reshape(-1)[0]
    return float(first.real if np.iscomplexobj(first) else first)


class FiniteCheck:
    """Finds the first non-finite loss or metric a loop logged, as its values reach the host.

    ``start``: the first record to check; ``initial_skips``: the state's skipped steps at the
    start; ``lagged=False`` (several processes) reads only in :meth:`check`.
    """

    def __init__(
        self,
        history: History,
        clock: Callable[[], Elapsed],
        *,
        start: int | None = None,
        initial_skips: Any = None,
        lagged: bool = True,
        policy: str = "raise",
    ) -> None:
        self.history = history
        self.position = len(history) if start is None else start  # the first record not read
        if lagged:  # records that land (a writer's read) are checked at the next step
            history.on_land = self._landed
        self.clock = clock
        self.skipping = initial_skips is not None
        self._initial = initial_skips
        self._last_skips: int | None = None
        self.lagged = lagged
        self.policy = policy
        self._read_to = -1  # the step of the last history record read
        self._due = clock().time + POLL_SECONDS if lagged else math.inf  # the next timed read
        self.countdown = POLL_EVERY
        #: A fused chunk's stacked logs, not yet committed: ``(clocks, logs)`` (set by the
        #: chunk runner while the callbacks after the chunk run).
        self.pending: tuple[list[Elapsed], Logs] | None = None

    def poll(self, steps: int = 1, time: float = -math.inf) -> None:
        """After a step (or ``steps``): checks the computed records when due; never waits."""
        self.countdown -= steps
        if self.countdown > 0 and time < self._due:
            return
        if self.lagged:
            self._read()
            self._due = time + POLL_SECONDS
        self.countdown = POLL_EVERY  # a landing during the read above asks for no other read

    def after_block(self) -> None:
        """After each block: checks the records already computed (the others at the next block)."""
        if self.lagged:
            self._read()

    def _landed(self) -> None:  # records reached the host: read them at the next poll
        self.countdown = 0

    def check(self, current: Logs | None = None, clock: Elapsed | None = None, *, wait: bool = True) -> None:
        """Checks every record not checked yet (waiting when ``wait``), then ``current``, the step
        in progress at ``clock``."""
        self._read(wait=wait)
        if not wait:
            return
        if clock is not None and clock.steps <= self._read_to:
            current = None  # committed (a save at the step's end, the loop's end): read above
        before = self._last_skips  # the steps not committed yet are checked, not counted
        if self.pending is not None:
            clocks, stacked = self.pending
            pending = _columns(clocks, stacked, stacked=True)
            after = self._scan(pending, before)
            if current and clock is not None and clock.steps == clocks[-1].steps:
                before = _count_before_last(pending, before)  # current: the last row, again
            else:
                before = after
        if current and clock is not None:
            self._scan(_columns([clock], current, stacked=False), before)

    # -- reading --------------------------------------------------------------------------

    def _read(self, wait: bool = False) -> None:
        """Checks the history's records not read yet."""
        columns = self.history.read(self.position, wait=wait)
        self.position += columns.count
        self._last_skips = self._scan(columns, self._last_skips)
        if columns.count:
            self._read_to = int(columns.clocks["steps"][-1])

    def _scan(self, columns: Block, before: int | None) -> int | None:
        """Raises at the first non-finite value of ``columns`` in a step that was not skipped;
        returns the count of skipped steps after them (``before``: the count before them)."""
        if not columns.count:
            return before
        bad = np.zeros(columns.count, bool)
        found: dict[Key, tuple[np.ndarray, Any, np.ndarray]] = {}
        for key, (rows, values) in columns.entries.items():
            if key[0] in CHECKED:
                rows_bad = _nonfinite_rows(values, len(rows))
                if rows_bad.any():
                    bad[rows[rows_bad]] = True
                    found[key] = (rows, values, rows_bad)
        skipped, after = self._skipped_rows(columns, bad, before)
        bad &= ~skipped
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            for key, (rows, values, rows_bad) in found.items():
                hit = np.flatnonzero((rows == first) & rows_bad)
                if len(hit):
                    value = _first_nonfinite(values[int(hit[0])])
                    self._raise(columns, first, key, value if value is not None else float("nan"))
        return after

    def _skipped_rows(self, columns: Block, bad: np.ndarray, before: int | None) -> tuple[np.ndarray, int | None]:
        """The rows whose step skipped its update (its count of skipped steps grew), and the
        count after the last row."""
        skipped = np.zeros(columns.count, bool)
        entry = columns.entries.get(("stateful_metrics", SKIPPED_STEPS)) if self.skipping else None
        if entry is None:
            return skipped, before
        rows, values = entry
        counts = np.asarray(values).reshape(len(rows))
        if bad.any():
            if before is None:
                before = int(np.asarray(fetch(self._initial)).reshape(()))  # once, when needed
            previous = np.concatenate([[before], counts[:-1]])
            skipped[rows[counts > previous]] = True
        return skipped, int(counts[-1])

    def _raise(self, columns: Block, row: int, key: Key, value: float) -> None:
        step = int(columns.clocks["steps"][row])
        collection, name = key
        now = self.clock()
        clock = ", ".join(f"{f}={to_python(columns.clocks[f][row])}" for f in ("epochs", "step_in_epoch", "samples"))
        if now.in_progress and now.steps > step:
            later = f"; the loop noticed it during step {now.steps}"
        elif not now.in_progress and now.steps > step + 1:
            later = f"; the loop noticed it when it ended, after {now.steps} steps"
        else:
            later = ""
        if later:
            later += " (values are checked once they reach the host: the check never slows a step)"
        text = "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
        kind = "loss" if collection == "losses" else "metric"
        if self.policy == "skip":
            policy = (
                "nan_policy='skip': a managed train step drops an update whose loss or gradients "
                "are not finite, and any other non-finite value is an error"
            )
            then = (
                f"this one came from a step that was not skipped (a {kind} of another callback, "
                "or of a step whose loss and gradients were finite); make it finite, or pass "
                "nan_policy='ignore' to record it without stopping"
            )
        else:
            policy = "nan_policy='raise', the default"
            then = (
                "to drop such updates and go on, pass nan_policy='skip' (managed train steps: "
                "they count them in state.skipped_steps); nan_policy='ignore' records them "
                "without stopping"
            )
        fix = f"{FIRST_STEP}; {then}" if step == 0 else (
            "the training diverged: lower the learning rate, clip the gradients "
            "(optax.clip_by_global_norm(1.0), or @gyre.managed.train_step(clip_grad_norm=1.0)), "
            f"and check the batch of step {step} for NaN/Inf inputs; {then}"
        )
        if kind == "metric":
            fix = (
                f"if {name!r} can be NaN on its own (a ratio over an empty batch), log it as an "
                "output (logs.add_output) or guard it with jnp.where; else " + fix
            )
        raise NonFiniteError(explain(
            f'"{name}" is {text} at step {step}',
            expected=f"finite losses and metrics ({policy}): the first non-finite {kind} "
            "stops the loop, before any checkpoint holds a state made from it",
            received=f"{collection}.{name} = {text} at step {step} ({clock}){later}",
            fix=fix), step=step, collection=collection, name=name, value=value)


def _count_before_last(columns: Block, before: int | None) -> int | None:
    """The count of skipped steps before the last of ``columns``' rows."""
    entry = columns.entries.get(("stateful_metrics", SKIPPED_STEPS))
    if entry is None or len(entry[0]) < 2:
        return before
    return int(np.asarray(entry[1]).reshape(len(entry[0]))[-2])


def _columns(clocks: list[Elapsed], logs: Logs, *, stacked: bool) -> Block:
    """Logs not in the history yet (a step's, or a chunk's stacked rows) as columns, their
    checked entries read from the device in one transfer."""
    host = fetch({(c, n): v for c, n, v in logs.entries()
                  if c in CHECKED or (c == "stateful_metrics" and n == SKIPPED_STEPS)})
    count = len(clocks)
    entries = {}
    for key, value in host.items():
        array = np.asarray(value)
        entries[key] = (np.arange(count), array[:count] if stacked else array[None])
    fields = ("steps", "samples", "epochs", "step_in_epoch")
    return Block(count, {f: np.asarray([getattr(c, f) for c in clocks]) for f in fields}, entries)


def finite_check(
    policy: str,
    history: History,
    clock: Callable[[], Elapsed],
    *,
    skipping: bool,
    state: Any,
) -> FiniteCheck | None:
    """The check a loop runs under ``policy`` (``None`` for ``"ignore"``) over the history's
    records from now on; ``skipping``: the records of skipped steps are not errors."""
    if policy == "ignore":
        return None
    import jax

    initial = None
    if skipping:  # a copy: the state is donated to its first step
        count = skipped_steps_of(state)
        initial = np.zeros((), np.int32) if count is None else jax.numpy.array(count, copy=True)
    return FiniteCheck(
        history, clock, start=len(history), initial_skips=initial, lagged=jax.process_count() == 1, policy=policy
    )
