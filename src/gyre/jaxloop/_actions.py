"""jaxloop's actions: the :class:`Action` base, ``SummaryAction`` (writes), ``CheckpointAction`` (saves, in gyre's
format or jaxloop's: a bare orbax ``CheckpointManager``'s) and ``StepNumberAction`` with its writers."""

from __future__ import annotations

import enum
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gyre.callbacks._checkpoint import Checkpoint, checkpoint, monitored
from gyre.core import _checks as checks
from gyre.core._checks import choice
from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain
from gyre.core._host import numeric_dtype
from gyre.core._logs import Logs
from gyre.engine._snapshot import Snapshot
from gyre.jaxloop._loop import reduce_outputs, state_step
from gyre.loggers import Writer
from gyre.steps._actions import check_interval
from gyre.steps._restore import restore_pytree

Output = dict[str, Any]
DATA_META = "jaxloop_data"  # the key of the training data's position in a checkpoint's meta
STOPPERS_META = "jaxloop_stoppers"  # the key of the early stopping handlers' states
EVALS_META = "jaxloop_evals"  # the key of the outer loop's evaluation counts (before the loop end's evaluations)
_log = logging.getLogger(__name__)


def _step_of(state: Any) -> int:
    step = state_step(state)
    if step is None:
        raise TypeError(explain(
            "a jaxloop action needs the state's step",
            expected="a state with a step (gyre.TrainState, or a dict with 'step')", received=describe(state),
            fix="train with gyre.Step.initialize_model's TrainState, or keep a 'step' entry"))
    return step


class Action:
    """An operation run every ``interval`` (a positive int) loops, in a loop's ``begin_actions`` /
    ``end_actions``, or steps, in a ``gyre.Step``'s. Subclass it and define
    ``__call__(state, outputs, **kwargs)``; its return value is ignored.

    Example:
        >>> import gyre
        >>> class Hello(gyre.jaxloop.Action):
        ...     def __call__(self, state, outputs, **kwargs):
        ...         print("step", state["step"])
        >>> Hello(interval=2)({"step": 4}, None)
        step 4
    """

    def __init__(self, interval: int = 1) -> None:
        self._interval = check_interval(interval, type(self).__name__)

    @property
    def interval(self) -> int:
        """Every how many loops (or steps) the action runs."""
        return self._interval

    def __call__(self, state: Any, outputs: Output | None, **kwargs: Any) -> Any:
        """Runs the action; override it (the base raises ``NotImplementedError``)."""
        raise NotImplementedError(explain(
            f"{type(self).__name__}.__call__ is not implemented",
            expected="an Action subclass defining __call__(self, state, outputs, **kwargs)",
            received=type(self).__qualname__, fix="define __call__ in your subclass"))


class MetricType(enum.Enum):
    """The kinds of value an output can be (jaxloop's members, CLU writer's methods).

    :class:`SummaryAction` writes ``SCALAR``, ``HISTOGRAM``, ``IMAGE``, ``VIDEO`` and ``TEXT``;
    ``AUDIO`` and ``OTHER`` are for your own actions.

    Example:
        >>> import gyre
        >>> [t.value for t in gyre.jaxloop.MetricType]
        ['scalar', 'image', 'video', 'audio', 'text', 'histogram', 'other']
    """

    SCALAR = "scalar"
    IMAGE = "image"
    VIDEO = "video"
    AUDIO = "audio"
    TEXT = "text"
    HISTOGRAM = "histogram"
    OTHER = "other"


@dataclass(frozen=True)
class MetricWithMetadata:
    """An output value with its kind, for :class:`SummaryAction` (a bare value is a scalar), and
    free ``metadata``.

    Example:
        >>> import gyre
        >>> m = gyre.jaxloop.MetricWithMetadata([1.0, 2.0], gyre.jaxloop.MetricType.HISTOGRAM)
        >>> m.type.name, m.metadata
        ('HISTOGRAM', None)
    """

    value: Any
    type: MetricType = MetricType.SCALAR
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, MetricType):  # its value ("histogram") reads as the member
            names = [t.value for t in MetricType]
            object.__setattr__(self, "type", MetricType(choice(
                self.type, "MetricWithMetadata's type", names, expected=f"a MetricType or one of {names}",
                fix="pass type=gyre.jaxloop.MetricType.HISTOGRAM (or its value, 'histogram')")))


_METHODS = {
    MetricType.SCALAR: "write_scalars",
    MetricType.HISTOGRAM: "write_histograms",
    MetricType.IMAGE: "write_images",
    MetricType.VIDEO: "write_videos",
    MetricType.TEXT: "write_texts",
}


class SummaryAction(Action):
    """Writes a loop's outputs to a writer at its step (``int(state.step)``).

    Bare values are scalars: a value as it is, a per-step list reduced to its mean (metric
    objects merged, :func:`~gyre.jaxloop.reduce_outputs`); a list that does not reduce to one
    number is skipped with a warning, once per name. A :class:`MetricWithMetadata` goes to the
    writer's method for its type (a list's last value); ``AUDIO`` and ``OTHER`` raise
    ``ValueError``.

    Args:
        summary_writer: an object with ``write_scalars(step, values)`` (and ``write_histograms``,
            ``write_images``, ``write_videos``, ``write_texts`` for those types), ``flush()``,
            ``close()``: gyre's writers, or CLU's.
        interval: every how many loops.
        flush_each_call: flush the writer after each call.

    Example:
        >>> import gyre
        >>> class Printer:
        ...     def write_scalars(self, step, values):
        ...         print(step, {k: round(float(v), 3) for k, v in values.items()})
        ...     def flush(self): pass
        ...     def close(self): pass
        >>> gyre.jaxloop.SummaryAction(Printer())({"step": 10}, {"loss": [0.5, 0.25]})
        10 {'loss': 0.375}
    """

    supported_types = frozenset(_METHODS)

    def __init__(self, summary_writer: Any, interval: int = 1, flush_each_call: bool = False) -> None:
        super().__init__(interval=interval)
        if not callable(getattr(summary_writer, "write_scalars", None)):
            raise TypeError(explain(
                "SummaryAction needs a writer",
                expected="an object with write_scalars(step, values), flush() and close() "
                "(a gyre writer, or a CLU metric writer)",
                received=describe(summary_writer), fix="pass a writer, e.g. gyre.loggers.CSVWriter(path)"))
        self._writer = summary_writer
        self._flush_each_call = bool(flush_each_call)
        self._closed = False
        self._not_written: set[str] = set()  # bare non-scalar outputs already warned about

    @property
    def summary_writer(self) -> Any:
        """The writer."""
        return self._writer

    def split_outputs(self, outputs: Output | None) -> dict[MetricType, dict[str, Any]]:
        """The outputs by type, ready to write (scalars reduced, others their last value).

        Raises:
            ValueError: a value's type is not supported.

        Example:
            >>> import gyre
            >>> from gyre.jaxloop import MetricType, MetricWithMetadata
            >>> class W:
            ...     def write_scalars(self, step, values): pass
            >>> action = gyre.jaxloop.SummaryAction(W())
            >>> split = action.split_outputs({"loss": [1.0, 3.0], "note": MetricWithMetadata("hi", MetricType.TEXT)})
            >>> float(split[MetricType.SCALAR]["loss"]), split[MetricType.TEXT]
            (2.0, {'note': 'hi'})
        """
        by_type: dict[MetricType, dict[str, Any]] = {}
        per_step: dict[str, list[Any]] = {}
        for key, value in (outputs or {}).items():
            if isinstance(value, list) and value and all(isinstance(v, MetricWithMetadata) for v in value):
                value = value[-1]
            if isinstance(value, list):
                if value:
                    per_step[key] = value
                continue
            if not isinstance(value, MetricWithMetadata):
                if value is not None:
                    by_type.setdefault(MetricType.SCALAR, {})[key] = value
                continue
            if value.type not in self.supported_types:
                raise ValueError(explain(
                    f"SummaryAction cannot write {key!r}: type {value.type.name} is not supported",
                    expected=f"one of {sorted(t.name for t in self.supported_types)}",
                    received=f"MetricWithMetadata(type=MetricType.{value.type.name})",
                    fix="write it yourself in an Action, or log it as another type"))
            inner = value.value[-1] if isinstance(value.value, list) and value.value else value.value
            by_type.setdefault(value.type, {})[key] = inner
        reduced = reduce_outputs(per_step)
        numbers = {k: v for k, v in reduced.items() if _is_scalar(v)}
        for key in sorted(reduced.keys() - numbers.keys() - self._not_written):
            self._not_written.add(key)
            _log.warning(_not_a_number(key, per_step[key]))
        if numbers:
            by_type[MetricType.SCALAR] = {**numbers, **by_type.get(MetricType.SCALAR, {})}
        return by_type

    def __call__(self, state: Any, outputs: Output | None, **kwargs: Any) -> None:
        """Writes the outputs at the state's step."""
        step = _step_of(state)
        for metric_type, values in self.split_outputs(outputs).items():
            method = getattr(self._writer, _METHODS[metric_type], None)
            if method is None:
                raise TypeError(explain(
                    f"the writer cannot write {metric_type.name.lower()} values",
                    expected=f"a writer with {_METHODS[metric_type]}(step, values)",
                    received=describe(self._writer),
                    fix="use a writer that supports the type, or log the values as scalars"))
            method(step, values)
        if self._flush_each_call and callable(getattr(self._writer, "flush", None)):
            self._writer.flush()

    def _resumed(self, step: int) -> None:
        """Tells a gyre writer that the run resumed and writes again from ``step`` on (as ``write_to``
        does): a CSV or JSONL file keeps the earlier rows (it was started afresh), TensorBoard drops
        the later points of the earlier files."""
        if isinstance(self._writer, Writer):
            self._writer._resumed(step)

    def close(self) -> None:
        """Flushes and closes the writer, once (an :class:`OuterLoop` calls it when it ends)."""
        if self._closed:
            return
        self._closed = True
        for name in ("flush", "close"):
            method = getattr(self._writer, name, None)
            if callable(method):
                method()


def _not_a_number(key: str, value: Any) -> str:
    last = value[-1] if isinstance(value, list) and value else value
    if isinstance(last, str):
        got, wrap = f"a str ({last[:40]!r})", "MetricWithMetadata(value, MetricType.TEXT)"
    else:
        got = f"shape {np.shape(last)} per step"
        wrap = "MetricWithMetadata(value, MetricType.HISTOGRAM) (an image: IMAGE)"
    return (
        f"SummaryAction does not write {key!r}: it is not one number per step ({got}). Wrap it "
        f"as {wrap} to write it, or reduce it in the step; said once."
    )


def _is_scalar(value: Any) -> bool:
    if isinstance(value, bool | int | float | np.number):
        return True
    return isinstance(value, np.ndarray) and value.ndim == 0


class CheckpointAction(Action):
    """Saves the state at ``int(state.step)``: through :func:`gyre.checkpoint`, or through an orbax
    ``CheckpointManager`` you built (jaxloop's way and format).

    An :class:`OuterLoop` with a :class:`~gyre.jaxloop.CheckpointSpec` on the same directory
    resumes from either. A gyre checkpoint with ``monitor=`` ranks saves by that output, as
    jaxloop's ``metrics=outputs`` (``gyre.checkpoint(d, keep=1, keep_best=1, monitor="loss")``);
    a manager gets ``manager.save(step, metrics=..., args=PyTreeSave(state))``.

    Args:
        ckpt_manager: an orbax ``CheckpointManager``, a :class:`gyre.Checkpoint`, or a
            directory to make a gyre checkpoint in.
        interval: every how many loops.
        keep: how many checkpoints a directory given here keeps.

    Example:
        >>> import tempfile, gyre, jax.numpy as jnp
        >>> tmp = tempfile.TemporaryDirectory()
        >>> action = gyre.jaxloop.CheckpointAction(tmp.name)
        >>> action({"step": jnp.int32(5), "w": jnp.ones(2)}, None)
        >>> action.close(); action.checkpoint.all_steps()
        [5]
        >>> tmp.cleanup()
    """

    def __init__(self, ckpt_manager: Any, interval: int = 1, *, keep: int = 3) -> None:
        super().__init__(interval=interval)
        self.data_source: Any = None
        """The training data whose position (``state_dict()``) is saved with each state;
        an :class:`~gyre.jaxloop.OuterLoop` sets it when its train dataset has one
        (``gyre.data.batches``). Checkpoints in jaxloop's format do not hold it."""
        self.stoppers: list[Any] = []
        """The stop handlers of the outer loop's early stopping actions, whose ``state_dict()`` is
        saved with each state (an :class:`~gyre.jaxloop.OuterLoop` sets them)."""
        self.eval_counts: list[int] | None = None
        """How many times each eval loop of the outer loop ran, saved with each state (an
        :class:`~gyre.jaxloop.OuterLoop` sets it: its ``EvalContext.eval_count`` continue on resume)."""
        self._manager: Any = None
        self._checkpoint: Checkpoint | None = None
        if isinstance(ckpt_manager, Checkpoint):
            self._checkpoint = ckpt_manager
        elif isinstance(ckpt_manager, str | os.PathLike):
            self._checkpoint = checkpoint(ckpt_manager, keep=keep)
        elif is_manager(ckpt_manager):
            self._manager = ckpt_manager
        else:
            raise TypeError(explain(
                "CheckpointAction needs a checkpoint manager or a directory",
                expected="an orbax CheckpointManager (jaxloop's format), "
                "gyre.checkpoint(directory, ...), or a path",
                received=describe(ckpt_manager),
                fix="pass CheckpointAction('runs/exp/checkpoints', interval=10), or "
                "CheckpointAction(ckpt_manager=orbax.checkpoint.CheckpointManager(path))"))

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The :class:`gyre.Checkpoint` saving the states; ``None`` when an orbax manager does."""
        return self._checkpoint

    @property
    def ckpt_manager(self) -> Any:
        """The orbax ``CheckpointManager`` given, or ``None`` with a gyre checkpoint."""
        return self._manager

    @property
    def directory(self) -> str:
        """The checkpoint directory (absolute)."""
        if self._manager is not None:
            return os.path.abspath(os.fspath(self._manager.directory))
        assert self._checkpoint is not None
        return self._checkpoint.directory

    def save(self, step: int, state: Any, outputs: Output | None) -> bool:
        """Saves ``state`` at ``step`` in the background; returns whether a save started
        (``False``: the step is saved already, or the manager's policy skipped it).

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     action = gyre.jaxloop.CheckpointAction(tmp)
            ...     action.save(3, {"w": jnp.ones(2)}, None), action.save(3, {"w": jnp.ones(2)}, None)
            ...     action.close()
            (True, False)
        """
        if self._manager is not None:
            import orbax.checkpoint as ocp

            metrics = host_metrics(reduce_outputs(_bare(outputs))) if outputs else None
            return bool(self._manager.save(step, metrics=metrics, args=ocp.args.PyTreeSave(state)))
        ckpt = self._checkpoint
        assert ckpt is not None
        before = ckpt.saved_step()
        elapsed = Elapsed(steps=step)
        metrics = None
        if ckpt.monitor is not None:  # best-k ranks by the loop's (reduced) output
            reduced = reduce_outputs(_bare(outputs or {}))
            logs = Logs().add_entries("metrics", {k: v for k, v in reduced.items() if _is_scalar(v)})
            metrics = monitored(ckpt, logs, elapsed)
        meta = {} if self.data_source is None else {DATA_META: self.data_source.state_dict()}
        if self.stoppers:
            meta[STOPPERS_META] = [handler.state_dict() for handler in self.stoppers]
        if self.eval_counts is not None:
            meta[EVALS_META] = list(self.eval_counts)
        ckpt.save_snapshot(Snapshot(step=step, state=state, elapsed=elapsed, meta=meta, metrics=metrics))
        return ckpt.saved_step() != before  # a step saved already (or older) is skipped

    def __call__(self, state: Any, outputs: Output | None, **kwargs: Any) -> None:
        """Saves ``state`` at its step (in the background; a step already saved is skipped)."""
        step = _step_of(state)
        if self.save(step, state, outputs):
            _log.info("Saving checkpoint to %s at step %d.", self.directory, step)

    def wait_until_finished(self) -> None:
        """Blocks until the saves are on disk."""
        (self._manager or self._checkpoint).wait_until_finished()

    def close(self) -> None:
        """Waits for the saves and releases orbax's resources (an orbax manager is closed)."""
        if self._manager is not None:
            self._manager.wait_until_finished()
            self._manager.close()
            return
        assert self._checkpoint is not None
        self._checkpoint.close()


def _bare(outputs: Output) -> Output:
    return {k: v for k, v in outputs.items() if not isinstance(v, MetricWithMetadata)}


# -- jaxloop's checkpoint format ----------------------------------------------------------------


def is_manager(obj: Any) -> bool:
    """Whether ``obj`` is an orbax ``CheckpointManager``."""
    from orbax.checkpoint import CheckpointManager

    return isinstance(obj, CheckpointManager)


def steps_in(directory: str | os.PathLike[str]) -> list[int]:
    """The complete steps an orbax manager saved in ``directory``, oldest first."""
    from orbax.checkpoint import utils

    if not os.path.isdir(os.fspath(directory)):
        return []
    return sorted(int(s) for s in utils.checkpoint_steps(os.fspath(directory)))


def host_metrics(reduced: dict[str, Any]) -> dict[str, float]:
    """The numbers among a loop's reduced outputs, as Python floats (for orbax's ``best_fn``)."""
    return {k: float(v) for k, v in reduced.items() if np.ndim(v) == 0 and np.asarray(v).dtype != bool and numeric_dtype(np.asarray(v).dtype)}


def read_orbax(step_obj: Any, state: Any, directory: str | os.PathLike[str], step: int, transforms: Any) -> Any:
    """Step ``step`` of ``directory`` read into ``state``'s structure and shardings."""
    restore_model = getattr(step_obj, "restore_model", None)
    if callable(restore_model):
        return restore_model(state, directory, step=step, transforms=transforms)
    return restore_pytree(state, directory, step, transforms=transforms)


# -- step numbers ------------------------------------------------------------------------------


class StepNumberWriter:
    """Where :class:`StepNumberAction` writes the step number; this one keeps it in memory.

    Example:
        >>> import gyre
        >>> w = gyre.jaxloop.StepNumberWriter(); w.write(step_number=7); w.last
        7
    """

    def __init__(self) -> None:
        self.last: int | None = None

    def write(self, step_number: int) -> None:
        """Records ``step_number`` (jaxloop's argument name)."""
        self.last = int(step_number)


class LocalFileStepNumberWriter(StepNumberWriter):
    """Writes the step number to a local file as ``timestamp_ms:<ms>,step_number:<n>`` (jaxloop's
    entry). The file is created empty at construction and replaced atomically by each write,
    so it holds the latest entry only (jaxloop appends a line each time).

    Example:
        >>> import os, tempfile, gyre
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     w = gyre.jaxloop.LocalFileStepNumberWriter(os.path.join(tmp, "step.txt"))
        ...     w.write(step_number=12)
        ...     open(os.path.join(tmp, "step.txt")).read().split(",")[1].strip()
        'step_number:12'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = checks.path(path, "LocalFileStepNumberWriter needs a file path", expected="a str or os.PathLike path",
                                fix="pass LocalFileStepNumberWriter('runs/exp/step.txt')")
        self._replace("")

    def write(self, step_number: int) -> None:
        """Writes ``step_number`` to the file, with the time (its folder is created)."""
        super().write(step_number)
        self._replace(f"timestamp_ms:{time.time() * 1000.0},step_number:{int(step_number)}\n")

    def _replace(self, text: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.path)


class StepNumberAction(Action):
    """Writes the state's step number through a :class:`StepNumberWriter`.

    Example:
        >>> import gyre
        >>> writer = gyre.jaxloop.StepNumberWriter()
        >>> gyre.jaxloop.StepNumberAction(writer)({"step": 40}, None)
        >>> writer.last
        40
    """

    def __init__(self, step_writer: StepNumberWriter, interval: int = 1) -> None:
        super().__init__(interval=interval)
        if not callable(getattr(step_writer, "write", None)):
            raise TypeError(explain(
                "StepNumberAction needs a step number writer",
                expected="an object with write(step_number), e.g. LocalFileStepNumberWriter(path)",
                received=describe(step_writer),
                fix="pass StepNumberAction(gyre.jaxloop.LocalFileStepNumberWriter(path))"))
        self._step_number_writer = step_writer

    def __call__(self, state: Any, outputs: Output | None = None, **kwargs: Any) -> None:
        """Writes the step number."""
        self._step_number_writer.write(step_number=_step_of(state))
