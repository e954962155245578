"""What an :class:`~gyre.jaxloop.OuterLoop` is told: :class:`EvalSpec`, :class:`EvalContext`, :class:`CheckpointSpec`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gyre.core._checks import instance, real, whole
from gyre.core._errors import explain, keywords_checked
from gyre.engine._snapshot import has_state


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What an :class:`EvalSpec`'s ``should_eval_fn`` is told before an evaluation (jaxloop's three
    fields first, in jaxloop's order, then gyre's).

    Attributes:
        is_continuous_eval: whether a saved checkpoint is evaluated (no train loop).
        step_num: the step evaluated (the checkpoint's, or the training step reached).
        loop_count: the train loop's ``loop_count`` (0 in continuous evaluation).
        train_total_steps: the step training runs to (``None`` in continuous evaluation).
        train_outputs: the last train loop's outputs (empty in continuous evaluation).
        eval_name: the evaluation's name in the outputs.
        eval_count: how many times this evaluation ran before.

    Example:
        >>> import gyre
        >>> ctx = gyre.jaxloop.EvalContext(is_continuous_eval=False, step_num=20, loop_count=2)
        >>> ctx.step_num % 20 == 0, ctx.step
        (True, 20)
    """

    is_continuous_eval: bool
    step_num: int
    loop_count: int
    train_total_steps: int | None = None
    train_outputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    eval_name: str = ""
    eval_count: int = 0

    @property
    def step(self) -> int:
        """``step_num``, under gyre's earlier name."""
        return self.step_num


def is_one_shot(dataset: Any) -> bool:
    """Whether ``dataset`` is its own iterator, without a position (``state_dict``) to put it back."""
    if not isinstance(dataset, Iterator) or has_state(dataset):
        return False
    return iter(dataset) is dataset


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How and when one eval loop of an :class:`OuterLoop` runs.

    Attributes:
        dataset: read as ``iter(dataset)`` at each evaluation: a collection restarts each time,
            an iterator continues (a finite one runs out, with a warning); an iterator with
            ``state_dict``/``load_state_dict`` is put back to its first position each time.
        dataset_iterator: one iterator shared by all evaluations; wins over ``dataset``.
        num_steps: steps per evaluation; ``None`` runs until the data ends.
        eval_loop_interval: evaluate after every ``eval_loop_interval``-th train loop;
            ``None``: after every train loop.
        should_eval_fn: a predicate on an :class:`EvalContext`, needed as well as the interval;
            in continuous evaluation it decides alone.
        kwargs: keyword arguments for the eval loop's steps.

    Example:
        >>> import gyre
        >>> spec = gyre.jaxloop.EvalSpec(dataset=[1, 2], eval_loop_interval=5)
        >>> spec.num_steps, spec.eval_loop_interval
        (None, 5)
    """

    dataset: Iterable[Any] | None = None
    dataset_iterator: Iterator[Any] | None = None
    num_steps: int | None = None
    eval_loop_interval: int | None = None
    should_eval_fn: Callable[[EvalContext], bool] | None = None
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dataset is None and self.dataset_iterator is None:
            raise ValueError(explain(
                "an EvalSpec needs dataset= or dataset_iterator=",
                expected="dataset= (what each evaluation reads: a collection from its start, an iterator "
                "onward) or dataset_iterator= (one iterator continued across evaluations)",
                received="neither",
                fix="pass EvalSpec(dataset=eval_batches) or EvalSpec(dataset_iterator=it, num_steps=10)"))
        for name in ("dataset", "dataset_iterator"):
            instance(getattr(self, name), name, Iterable, none=True, problem=f"EvalSpec's {name}= must be iterable",
                     expected="a collection of batches or an iterator", fix=f"pass {name}=iter(batches)")
        for name in ("num_steps", "eval_loop_interval"):
            whole(getattr(self, name), name, minimum=1, none=True, expected="an int >= 1, or None",
                  problem=f"EvalSpec's {name} must be a positive whole number or None",
                  fix=f"pass {name}=10, or leave it None")
        instance(self.should_eval_fn, "EvalSpec's should_eval_fn", Callable, none=True, kind="callable",
                 problem="EvalSpec's should_eval_fn must be callable", expected="a function EvalContext -> bool",
                 fix="pass should_eval_fn=lambda ctx: ctx.step >= 1000")


EvalSpec.__init__ = keywords_checked(EvalSpec.__init__)  # type: ignore[method-assign]  # a typo: the closest field


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """Where an :class:`OuterLoop` resumes training from, and continuous evaluation reads.

    Attributes:
        checkpoint_dir: a :class:`~gyre.jaxloop.CheckpointAction`'s directory: gyre
            checkpoints, or an orbax ``CheckpointManager``'s (read by ``Step.restore_model``).
        iterate_interval_secs: seconds between looks for a new checkpoint (at least one).
        iterate_stop_fn: returns ``True`` when no checkpoint will come; by default, whether
            ``checkpoint_dir/STOPPED`` exists.
        transforms: orbax ``PyTreeRestore`` transforms, for jaxloop's format only.

    Example:
        >>> import gyre
        >>> gyre.jaxloop.CheckpointSpec("runs/exp/checkpoints").iterate_interval_secs
        0
    """

    checkpoint_dir: str | os.PathLike[str]
    iterate_interval_secs: float = 0
    iterate_stop_fn: Callable[[], bool] | None = None
    transforms: Any = None

    def __post_init__(self) -> None:
        instance(self.checkpoint_dir, "checkpoint_dir", (str, os.PathLike), expected="a str or os.PathLike directory",
                 problem="CheckpointSpec's checkpoint_dir must be a path",
                 fix="pass CheckpointSpec('runs/exp/checkpoints')")
        real(self.iterate_interval_secs, "CheckpointSpec's iterate_interval_secs", minimum=0,
             expected="seconds between looks for a new checkpoint, a number >= 0 (0: as often as it polls)",
             fix="pass iterate_interval_secs=60")

    @property
    def directory(self) -> str:
        """The checkpoint directory, absolute."""
        return os.path.abspath(os.fspath(self.checkpoint_dir))
