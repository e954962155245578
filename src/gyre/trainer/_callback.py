"""The trainer's callback contract: :class:`Callback` (jax_trainer's hooks) and
:class:`TrainerView`, what a callback may use of the trainer. Hooks run in this order
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

import numbers
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jax

from gyre.core._checks import real, whole
from gyre.core._errors import as_integer, describe, explain
from gyre.loggers._writer import Writer

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

    log_dir: pathlib.Path
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
        self.every_n_epochs = _every_n_epochs(type(self).__name__, every_n_epochs)
        self.every_n_minutes = _every_n_minutes(type(self).__name__, every_n_minutes)
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

    def _write(self, kind: str, values: Mapping[str, Any]) -> None:
        """Writes ``values`` (``"scalars"``, ``"images"``) at the global step, if the writer can."""
        trainer = self._bound()
        writer = trainer.writer
        if kind in writer.kinds:
            getattr(writer, f"write_{kind}")(int(trainer.global_step), values)

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


def _every_n_epochs(owner: str, value: Any) -> int:
    """``every_n_epochs`` checked; -1 (jax_trainer's default) means every epoch."""
    if as_integer(value) == -1:
        return 1
    return whole(value, f"{owner}: every_n_epochs", minimum=1, fix="pass every_n_epochs=1, or 2 for every other epoch",
                 expected="an int >= 1 (1 runs every epoch; -1, jax_trainer's default, means 1)")


def _every_n_minutes(owner: str, value: Any) -> float | None:
    """``every_n_minutes`` checked; -1 (jax_trainer's 'off') means ``None``."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value == -1:
        return None
    return real(value, f"{owner}: every_n_minutes", above=0, none=True,
                problem=f"{owner}: every_n_minutes must be a number > 0, or None", fix="pass every_n_minutes=30, or leave it out",
                expected="None (epochs only), or minutes > 0, e.g. 30 (-1, jax_trainer's 'off', means None)")
