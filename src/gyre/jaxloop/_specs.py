"""What an :class:`~gyre.jaxloop.OuterLoop` is told: :class:`EvalSpec` (which data an evaluation
reads, and when it runs), :class:`EvalContext` (what a ``should_eval_fn`` predicate is shown) and
:class:`CheckpointSpec` (where checkpoints go, for resuming and for continuous evaluation).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gyre.core._errors import describe, explain, whole_number


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What an :class:`EvalSpec`'s ``should_eval_fn`` is told after each train loop.

    Attributes:
        step: the training step reached (``state.step``).
        loop_count: the train loop's ``loop_count``.
        train_total_steps: the step training runs to.
        train_outputs: the last train loop's outputs.
        eval_name: the evaluation's name in the outputs.
        eval_count: how many times this evaluation ran before.

    Example:
        >>> import gyre
        >>> ctx = gyre.jaxloop.EvalContext(step=20, loop_count=2, train_total_steps=100,
        ...                                train_outputs={}, eval_name="eval", eval_count=0)
        >>> ctx.step % 20 == 0
        True
    """

    step: int
    loop_count: int
    train_total_steps: int
    train_outputs: Mapping[str, Any]
    eval_name: str
    eval_count: int


def is_one_shot(dataset: Any) -> bool:
    """Whether ``dataset`` is an iterator that cannot be read again from its start: it is its
    own iterator and has no ``state_dict``/``load_state_dict`` to put it back.

    Example:
        >>> import gyre
        >>> is_one_shot(iter([1, 2])), is_one_shot([1, 2])
        (True, False)
    """
    if not isinstance(dataset, Iterator) or has_position(dataset):
        return False
    return iter(dataset) is dataset


def has_position(dataset: Any) -> bool:
    """Whether ``dataset`` saves and loads its position (``state_dict``/``load_state_dict``,
    as ``gyre.data.batches``).

    Example:
        >>> import gyre, numpy as np
        >>> has_position(gyre.data.batches(np.zeros((4, 1)), 2)), has_position([1])
        (True, False)
    """
    return callable(getattr(dataset, "state_dict", None)) and callable(getattr(dataset, "load_state_dict", None))


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How and when one eval loop of an :class:`OuterLoop` runs.

    Attributes:
        dataset: an iterable evaluated from its start each time: a list, a re-iterable
            collection (``gyre.data.arrays(...).test``), or an iterator with
            ``state_dict()``/``load_state_dict()`` (``gyre.data.batches(..., epochs=1)``), put
            back before each evaluation where it was at the first. Other iterators (a
            generator) are refused: they can be read only once.
        dataset_iterator: instead of ``dataset``, one iterator shared by all evaluations:
            each continues where the last one stopped (with ``num_steps``).
        num_steps: steps per evaluation; ``None`` runs until the data ends.
        eval_loop_interval: evaluate after every ``eval_loop_interval``-th train loop
            (``loop_count % interval == 0``); ``None``: after every train loop.
        should_eval_fn: a predicate on an :class:`EvalContext`; when given, the evaluation
            runs only when it (and the interval, if any) says so.
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
        if (self.dataset is None) == (self.dataset_iterator is None):
            raise ValueError(
                explain(
                    "an EvalSpec needs one of dataset= and dataset_iterator=",
                    expected="dataset= (an iterable, evaluated from its start each time) or "
                    "dataset_iterator= (one iterator continued across evaluations)",
                    received=f"dataset={describe(self.dataset)}, "
                    f"dataset_iterator={describe(self.dataset_iterator)}",
                    fix="pass EvalSpec(dataset=eval_batches) or EvalSpec(dataset_iterator=it, num_steps=10)",
                )
            )
        if is_one_shot(self.dataset):
            raise TypeError(
                explain(
                    "EvalSpec's dataset= is read from its start at every evaluation, and an "
                    "iterator can be read only once: every evaluation after the first would run no step",
                    expected="dataset= a re-iterable collection (a list, gyre.data.arrays(...).test) or "
                    "an iterator with state_dict()/load_state_dict() (gyre.data.batches(..., epochs=1)), "
                    "or dataset_iterator= an iterator continued across evaluations",
                    received=f"dataset={describe(self.dataset)}",
                    fix="pass dataset=list(batches) to evaluate the same batches each time, or "
                    "EvalSpec(dataset_iterator=it, num_steps=10) to read on from one stream",
                )
            )
        for name in ("num_steps", "eval_loop_interval"):
            value = getattr(self, name)
            if value is not None:
                whole_number(
                    value, minimum=1, problem=f"EvalSpec's {name} must be a positive whole number or None",
                    expected="an int >= 1, or None", fix=f"pass {name}=10, or leave it None",
                )
        if self.should_eval_fn is not None and not callable(self.should_eval_fn):
            raise TypeError(
                explain(
                    "EvalSpec's should_eval_fn must be callable",
                    expected="a function EvalContext -> bool",
                    received=describe(self.should_eval_fn),
                    fix="pass should_eval_fn=lambda ctx: ctx.step >= 1000",
                )
            )


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """Where an :class:`OuterLoop` resumes training from, and where continuous evaluation
    finds its checkpoints.

    Attributes:
        checkpoint_dir: the directory of a :class:`~gyre.jaxloop.CheckpointAction` (gyre
            checkpoints).
        iterate_interval_secs: seconds between looks for a new checkpoint (continuous
            evaluation); at least one second (the default, 0, looks once a second).
        iterate_stop_fn: a function returning ``True`` when no checkpoint will come; by
            default, whether ``checkpoint_dir/STOPPED`` exists.
        transforms: accepted for jaxloop compatibility; must be ``None``.

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
        if not isinstance(self.checkpoint_dir, str | os.PathLike):
            raise TypeError(
                explain(
                    "CheckpointSpec's checkpoint_dir must be a path",
                    expected="a str or os.PathLike directory",
                    received=describe(self.checkpoint_dir),
                    fix="pass CheckpointSpec('runs/exp/checkpoints')",
                )
            )
        if self.transforms is not None:
            raise ValueError(
                explain(
                    "CheckpointSpec's transforms are not supported",
                    expected="transforms=None (gyre restores into the given state's structure)",
                    received=describe(self.transforms),
                    fix="restore and transform the state yourself with gyre.restore",
                )
            )

    @property
    def directory(self) -> str:
        """The checkpoint directory, absolute.

        Example:
            >>> import os, gyre
            >>> os.path.isabs(gyre.jaxloop.CheckpointSpec("ckpts").directory)
            True
        """
        return os.path.abspath(os.fspath(self.checkpoint_dir))
