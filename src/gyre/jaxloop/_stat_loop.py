"""jaxloop's ``StatLoop``: a loop that adds statistics (the ``STAT_*`` names) to its outputs."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax

from gyre.core._checks import whole
from gyre.jaxloop._loop import Loop, Output, State
from gyre.steps._step import count_params

STAT_PREFIX = "jaxloop"
STAT_NUM_PARAMS = f"{STAT_PREFIX}/num_params"
STAT_NUM_FLOPS = f"{STAT_PREFIX}/num_flops"
STAT_INIT_TIME = f"{STAT_PREFIX}/init_time"
STAT_BEGIN_TIME = f"{STAT_PREFIX}/begin_time"
STAT_LIFE_TIME_SECS = f"{STAT_PREFIX}/life_time_secs"
STAT_LOOP_TIME_SECS = f"{STAT_PREFIX}/loop_time_secs"
STAT_STEPS_PER_SEC = f"{STAT_PREFIX}/steps_per_sec"
STAT_EXAMPLES_PER_SEC = f"{STAT_PREFIX}/examples_per_sec"


class StatLoop(Loop):
    """A loop that adds statistics to its outputs: ``jaxloop/steps_per_sec``,
    ``examples_per_sec`` (needs ``global_batch_size``), ``loop_time_secs``, ``num_params``,
    ``num_flops``, ``init_time``, ``begin_time``, ``life_time_secs``.

    ``steps_per_sec``/``examples_per_sec`` never wait for the loop's own last step: after the
    first loop, each reports the rate of the loop before it. ``loop_time_secs`` and
    ``life_time_secs`` wait for the state, as jaxloop's do.

    Args:
        stat_names: the statistics to add.
        global_batch_size: examples per step, for ``examples_per_sec``.

    Example:
        >>> import gyre
        >>> from gyre.jaxloop import STAT_LOOP_TIME_SECS
        >>> def step(state, batch, n, **kwargs):
        ...     return state, {}
        >>> _, outputs = gyre.jaxloop.StatLoop(step, stat_names=[STAT_LOOP_TIME_SECS])(0, [1, 2])
        >>> outputs[STAT_LOOP_TIME_SECS] >= 0
        True
    """

    def __init__(
        self, step: Any, stat_names: Sequence[str] | None = None, global_batch_size: int | None = None,
        *, nan_policy: str = "raise", batch_size_fn: Any = None,
    ) -> None:
        super().__init__(step, nan_policy=nan_policy, batch_size_fn=batch_size_fn)
        self._stat_names = list(stat_names or [])
        self._init_time = time.time()
        self._global_batch_size = whole(
            global_batch_size, "StatLoop's global_batch_size", minimum=1, none=True,
            expected="the examples per step over all devices (an int >= 1), or None (no examples_per_sec)",
            fix="pass global_batch_size=256, or leave it out")
        self._begin_time = 0.0
        self._last_steps = 0
        self._speed = _Throughput()

    @property
    def stat_names(self) -> list[str]:
        """The statistics this loop adds."""
        return self._stat_names

    def begin(self, state: State, dataset: Iterator[Any]) -> tuple[State, Iterator[Any]]:
        """Starts the loop's clock."""
        self._begin_time = time.time()
        return super().begin(state, dataset)

    def run(
        self, state: State, dataset: Iterable[Any], num_steps: int | None = None,
        log_num_flops: bool = False, **kwargs: Any,
    ) -> tuple[State, Output]:
        """:meth:`Loop.run`, computing the flops when ``num_flops`` is asked for."""
        flops = log_num_flops or (STAT_NUM_FLOPS in self._stat_names and getattr(self._step, "num_flops", None) is None)
        return super().run(state, dataset, num_steps, flops, **kwargs)

    def end(self, state: State, outputs: Output | None) -> tuple[State, Output | None]:
        """Adds the statistics to the outputs (the clock stops once the state is ready).

        Example:
            >>> import gyre
            >>> loop = gyre.jaxloop.StatLoop(print, stat_names=["jaxloop/steps_per_sec"])
            >>> _ = loop.begin(0, [])
            >>> sorted(loop.end(0, {})[1])
            ['jaxloop/steps_per_sec']
        """
        outputs = outputs if outputs is not None else collections.defaultdict(list)
        names = self._stat_names
        timed = STAT_LOOP_TIME_SECS in names or STAT_LIFE_TIME_SECS in names
        if timed:
            jax.block_until_ready(state)
        speed = None
        if STAT_STEPS_PER_SEC in names or STAT_EXAMPLES_PER_SEC in names:
            speed = self._speed.measure(state, self._last_steps, self._begin_time, waited=timed, outputs=outputs)
        now = time.time()
        if STAT_NUM_PARAMS in names:
            if getattr(self._step, "num_params", None) is None and hasattr(self._step, "compute_num_params"):
                self._step.compute_num_params(state)
            outputs[STAT_NUM_PARAMS] = getattr(self._step, "num_params", None) or count_params(
                getattr(state, "params", state))
        stats = {
            STAT_NUM_FLOPS: getattr(self._step, "num_flops", None) or 0,
            STAT_INIT_TIME: self._init_time,
            STAT_BEGIN_TIME: self._begin_time,
            STAT_LIFE_TIME_SECS: now - self._init_time,
            STAT_LOOP_TIME_SECS: max(now - self._begin_time, 1e-9),
            STAT_STEPS_PER_SEC: speed,
            STAT_EXAMPLES_PER_SEC: None if speed is None or not self._global_batch_size
            else speed * self._global_batch_size,
        }
        outputs.update({name: value for name, value in stats.items() if name in names and value is not None})
        return super().end(state, outputs)


@jax.jit
def _done_marker(leaf: Any) -> Any:
    """A one-element array done when ``leaf`` is (still waitable after ``leaf`` is donated)."""
    return leaf.ravel()[:1]


def _last_output(outputs: Any) -> Any:
    """An array the loop's last step output (done when that step is), or None."""
    for values in (outputs.values() if isinstance(outputs, Mapping) else ()):
        if isinstance(values, list) and values:
            found = _array_in(values[-1])
            if found is not None:
                return found
    return None


def _array_in(value: Any) -> Any:
    """The first ``jax.Array`` in ``value`` (a pytree or mapping), or None."""
    if isinstance(value, jax.Array):
        return value
    children = value.values() if isinstance(value, Mapping) else jax.tree_util.tree_leaves(value)
    for child in children:
        found = None if child is value else _array_in(child)
        if found is not None:
            return found
    return None


class _Throughput:
    """``steps_per_sec`` one loop late, waiting only for the previous loop's last-step marker
    (waiting for each loop's own state would idle the device between inner loops)."""

    def __init__(self) -> None:
        self.seen: float | None = None  # when the previous measured loop was seen done
        self.pending: tuple[Any, int] | None = None  # (marker, steps) of the loop before
        self.rate: float | None = None

    def measure(self, state: Any, steps: int, begin: float, *, waited: bool, outputs: Any = None) -> float:
        leaves = [x for x in jax.tree_util.tree_leaves(state) if isinstance(x, jax.Array) and x.size]
        if self.seen is None or not leaves:  # the first loop (or a host state): wait, exactly
            if leaves and not waited:
                jax.block_until_ready(state)
            self.seen = time.time()
            self.rate = steps / max(self.seen - begin, 1e-9)
            return self.rate
        if self.pending is not None:
            marker, before = self.pending
            jax.block_until_ready(marker)
            now = time.time()
            self.rate = before / max(now - self.seen, 1e-9)
            self.seen = now
        self.pending = (_last_output(outputs) or _done_marker(leaves[0]), steps)
        assert self.rate is not None
        return self.rate
