"""jaxloop's loops with actions: ``ActionLoop``, and ``TrainLoop`` and ``EvalLoop`` on it."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from gyre.core._checks import whole
from gyre.jaxloop._actions import CheckpointAction
from gyre.jaxloop._loop import Output, State, state_step
from gyre.jaxloop._stat_loop import STAT_LOOP_TIME_SECS, STAT_STEPS_PER_SEC, StatLoop
from gyre.steps._actions import check_actions

_log = logging.getLogger(__name__)


class ActionLoop(StatLoop):
    """A loop that runs actions before and after itself, each when the loop's count (1 for the
    first call, kept across calls) is a multiple of its interval.

    Args:
        begin_actions: actions run at the start, called ``action(state, None)``.
        end_actions: actions run at the end, called ``action(state, outputs)``.
        **kwargs: :class:`StatLoop`'s ``stat_names``, ``global_batch_size``.

    Example:
        >>> import gyre
        >>> seen = []
        >>> class Record(gyre.jaxloop.Action):
        ...     def __call__(self, state, outputs, **kwargs):
        ...         seen.append(state)
        >>> loop = gyre.jaxloop.ActionLoop(lambda s, b, n: (s + b, {}), end_actions=[Record(interval=2)])
        >>> for _ in range(4):
        ...     _ = loop(0, [1])
        >>> loop.loop_count, seen
        (4, [1, 1])
    """

    #: ``(statistic, format)`` logged at INFO at the end, or ``None``.
    _logged: ClassVar[tuple[str, str] | None] = None

    def __init__(
        self,
        step: Any,
        begin_actions: Sequence[Any] | None = None,
        end_actions: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(step, **kwargs)
        owner = type(self).__name__
        self._begin_actions = check_actions(begin_actions, "begin_actions", owner, "SummaryAction(writer)")
        self._end_actions = check_actions(end_actions, "end_actions", owner, "SummaryAction(writer)")
        self._loop_count = 0

    @property
    def begin_actions(self) -> list[Any]:
        """The actions run at the start of a loop."""
        return self._begin_actions

    @property
    def end_actions(self) -> list[Any]:
        """The actions run at the end of a loop."""
        return self._end_actions

    @property
    def loop_count(self) -> int:
        """How many times the loop began (settable, e.g. to align with a resumed step)."""
        return self._loop_count

    @loop_count.setter
    def loop_count(self, loop_count: int) -> None:
        self._loop_count = whole(loop_count, "loop_count", expected="the number of loops already run",
                                 fix="set loop.loop_count = 0 to start over")

    def begin(self, state: State, dataset: Iterator[Any]) -> tuple[State, Iterator[Any]]:
        """Counts the loop and runs the begin actions whose interval divides the count.

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.ActionLoop(print)
            >>> _ = loop.begin(0, [])
            >>> loop.loop_count
            1
        """
        self._loop_count += 1
        for action in self._begin_actions:
            if self._loop_count % action.interval == 0:
                action(state, None)
        return super().begin(state, dataset)

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """Adds the statistics, then runs the end actions whose interval divides the count
        (and every :class:`~gyre.jaxloop.CheckpointAction` when SIGTERM cut the loop short);
        then logs a ``TrainLoop``'s speed or an ``EvalLoop``'s time (``logging`` at INFO).

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.ActionLoop(print)
            >>> _ = loop.begin(0, [])
            >>> loop.end(0, {"x": [1]})
            (0, {'x': [1]})
        """
        state, outputs = super().end(state, outputs)
        for action in self._end_actions:
            if self._loop_count % action.interval == 0 or (self._preempted and isinstance(action, CheckpointAction)):
                try:
                    action(state, outputs)
                except Exception as err:
                    err.state, err.outputs = state, outputs  # type: ignore[attr-defined]
                    raise
        if self._logged is not None and outputs is not None and self._logged[0] in outputs and _log.isEnabledFor(logging.INFO):
            _log.info(self._logged[1], state_step(state), outputs[self._logged[0]])
        return state, outputs


class TrainLoop(ActionLoop):
    """The training loop: an :class:`ActionLoop` adding and logging ``steps_per_sec`` by default.

    Example:
        >>> import gyre
        >>> from gyre.jaxloop import STAT_STEPS_PER_SEC
        >>> loop = gyre.jaxloop.TrainLoop(lambda s, b, n: (s + b, {"b": b}))
        >>> state, outputs = loop(0, iter(range(10)), num_steps=4)
        >>> state, outputs["b"], outputs[STAT_STEPS_PER_SEC] > 0
        (6, [0, 1, 2, 3], True)
    """

    _logged = (STAT_STEPS_PER_SEC, "train    | step: %s | steps_per_sec: %6.1f")

    def __init__(self, step: Any, stat_names: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(step, stat_names=stat_names or [STAT_STEPS_PER_SEC], **kwargs)


class EvalLoop(ActionLoop):
    """The evaluation loop: an :class:`ActionLoop` adding ``loop_time_secs`` by default.

    A step that takes the keyword ``mask`` (a :class:`gyre.Step` whose ``run`` does, or
    ``step(state, batch, n, mask=None, **kwargs)``) gets batches padded to one size (a list's
    largest batch, else the first one's) and compiles once; return ``Mean.from_stacked(per_example, mask)`` and
    :func:`reduce_outputs` merges the exact means (docs/concepts/named-loops.md: "Evaluation without recompiles").

    Args:
        stat_names: the statistics to add (default: ``loop_time_secs``).
        name: the key of this loop's outputs in an :class:`OuterLoop`'s outputs
            (``"eval"``, then ``"eval_1"``... by position when not given).
        **kwargs: :class:`ActionLoop`'s ``begin_actions``, ``end_actions``,
            ``global_batch_size``.

    Example:
        >>> import gyre
        >>> loop = gyre.jaxloop.EvalLoop(lambda s, b, n: (s, {"acc": b}), name="test")
        >>> state, outputs = loop(0, [0.5, 1.0])
        >>> loop.name, outputs["acc"]
        ('test', [0.5, 1.0])
    """

    pads_batches = True
    _logged = (STAT_LOOP_TIME_SECS, "eval     | step: %s | eval time: %4.2f seconds.")

    def __init__(
        self, step: Any, stat_names: Sequence[str] | None = None, *, name: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(step, stat_names=stat_names or [STAT_LOOP_TIME_SECS], **kwargs)
        self.name = name

