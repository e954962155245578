"""A ``(state, batch) -> (logs, state)`` step compiled per strategy, batches placed on its devices:
:func:`gyre.fit`'s step under a strategy, and the base of the managed step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gyre.core._logs import Logs
from gyre.engine._engine import refuse_donated
from gyre.engine._fuse import scanned
from gyre.parallel._strategies import Jit
from gyre.parallel._strategy import Strategy

StepFn = Callable[[Any, Any], tuple[Logs, Any]]
_DEFAULT = Jit()


def strategy_of(state: Any) -> Strategy:
    """The state's strategy (a :class:`~gyre.ManagedState`'s), else one ``jax.jit``."""
    strategy = getattr(state, "strategy", None)
    return strategy if isinstance(strategy, Strategy) else _DEFAULT


class StrategyStep:
    """``pure`` compiled by ``strategy`` (``None``: the state's), batches placed on its devices when it
    has a mesh; ``fuse(k)`` scans ``k`` steps."""

    donates: bool | None = None  # None: as the strategy says (a training step)

    def __init__(self, pure: StepFn, strategy: Strategy | None = None) -> None:
        self.pure, self.strategy = pure, strategy
        # One compiled function per strategy; jax.jit itself retraces for states of another
        # structure (the strategy constrains shardings inside the trace).
        self._compiled: dict[tuple[Strategy, bool], StepFn] = {}
        self._last: tuple[Strategy | None, StepFn | None, bool] = (None, None, False)

    def _places(self, strategy: Strategy) -> bool:  # one device: jax.jit moves host batches itself
        return strategy.mesh is not None

    def _get(self, strategy: Strategy, state: Any, fused: bool) -> StepFn:
        run = self._compiled.get((strategy, fused))
        if run is None:
            pure, axis = (scanned(self.pure), 1) if fused else (self.pure, 0)
            run = strategy.compile(pure, state, batch_axis=axis, donate=self.donates)
            self._compiled[(strategy, fused)] = run
        return run

    def __call__(self, state: Any, batch: Any) -> tuple[Logs, Any]:
        strategy = self.strategy or strategy_of(state)
        last, run, place = self._last
        if strategy is not last or run is None:
            run, place = self._get(strategy, state, fused=False), self._places(strategy)
            self._last = (strategy, run, place)
        if place:
            batch = strategy.place_batch(batch)
        try:
            return run(state, batch)
        except Exception:  # XLA's "Buffer has been deleted or donated": said in a step's terms
            refuse_donated(state, "the step", "logs, state = train_step(state, batch)")
            raise

    def fuse(self, steps: int) -> StepFn:
        """``(state, batches) -> (logs, state)`` running one step per row of stacked ``batches`` in
        one ``lax.scan``; logs come back stacked.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> from gyre import managed
            >>> count = managed.step(lambda s, b: (gyre.logs().add_metric("b", b.sum()), s))
            >>> logs, _ = count.fuse(3)(managed.ManagedState.create(params=()), jnp.ones((3, 2)))
            >>> logs.metrics.b.tolist()
            [2.0, 2.0, 2.0]
        """

        def fused(state: Any, batches: Any) -> tuple[Logs, Any]:
            strategy = self.strategy or strategy_of(state)
            run = self._get(strategy, state, fused=True)
            if self._places(strategy):
                batches = strategy.place_batch(batches, axis=1)
            return run(state, batches)

        return fused
