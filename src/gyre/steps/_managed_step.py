"""The managed step object: a user's step compiled once per strategy, callable and fusable."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gyre.core._compat import cache_size
from gyre.core._logs import Logs
from gyre.data._padding import accepts_mask
from gyre.engine._binding import Masked
from gyre.engine._fuse import scanned
from gyre.engine._tasks import LoopElement
from gyre.parallel._strategy import Strategy
from gyre.steps._managed_call import StepFn, _takes_no_mask
from gyre.steps._managed_state import _strategy_of


class ManagedStep(LoopElement):
    """A step compiled per strategy; built by :func:`train_step` and :func:`step`.

    Call it as ``step(state, batch)`` (``mask=`` for a padded batch when the function takes
    it), as a method of the state when it is a class attribute, or spread it into a task table
    (``{**train_step, gyre.every(100): [...]}``, under ``every(1)`` as in ciclo). ``nan_policy``
    is ``"skip"`` when it drops non-finite updates, else ``None``.

    Example:
        >>> import gyre
        >>> from gyre.steps.managed import step
        >>> count = step(lambda s, b: (gyre.logs().add_metric("b", b), s))
        >>> [repr(k) for k in {**count}]
        ['every(steps=1)']
    """

    def __init__(
        self,
        fn: StepFn,
        pure: StepFn,
        *,
        kind: str,
        nan_policy: str | None = None,
        make: Callable[[bool], StepFn] | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self.pure = pure
        self.kind = kind
        self.trains = kind == "train_step"  # read by the loops: a managed.step never trains
        self.nan_policy = nan_policy
        self._make = make  # builds the pure step, skipping or not (train steps only)
        self.takes_mask = accepts_mask(fn)
        self._variants: dict[str, ManagedStep] = {}
        # A training step replaces the state: donate it. Other steps (evaluation, prediction)
        # return it unchanged and callers keep using the one they passed: never donate.
        self.donates: bool | None = None if kind == "train_step" else False
        # One compiled function per strategy; jax.jit itself retraces for states of another
        # structure (the strategy constrains shardings inside the trace).
        self._compiled: dict[tuple[Strategy, bool], StepFn] = {}
        self._last: tuple[Strategy | None, StepFn | None] = (None, None)

    def __repr__(self) -> str:
        return f"<gyre managed {self.kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _get(self, strategy: Strategy, state: Any, fused: bool) -> StepFn:
        run = self._compiled.get((strategy, fused))
        if run is None:
            pure, axis = (scanned(self.pure), 1) if fused else (self.pure, 0)
            run = self._compiled[(strategy, fused)] = strategy.compile(pure, state, batch_axis=axis, donate=self.donates)
        return run

    def __call__(self, state: Any, batch: Any = None, mask: Any = None) -> tuple[Logs, Any]:
        if mask is not None:
            if not self.takes_mask:
                raise TypeError(_takes_no_mask(self._fn))
            batch = Masked(batch, mask)
        strategy = _strategy_of(state)
        last_strategy, run = self._last
        if strategy is not last_strategy or run is None:
            run = self._get(strategy, state, fused=False)
            self._last = (strategy, run)
        if strategy.data_size > 1:  # one device: jax.jit moves host batches itself
            batch = strategy.place_batch(batch)
        return run(state, batch)

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
            strategy = _strategy_of(state)
            run = self._get(strategy, state, fused=True)
            if strategy.data_size > 1:  # one device: jax.jit moves host batches itself
                batches = strategy.place_batch(batches, axis=1)
            return run(state, batches)

        return fused

    def with_nan_policy(self, policy: str) -> ManagedStep:
        """This step as a loop with ``nan_policy=policy`` runs it: under ``"skip"``, a train step
        that drops non-finite updates; else this step.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> from gyre.steps.managed import train_step
            >>> fit = train_step(lambda s, b: (gyre.logs().add_loss("l", jnp.sum(s.params * b)), s))
            >>> fit.nan_policy, fit.with_nan_policy("skip").nan_policy, fit.with_nan_policy("raise") is fit
            (None, 'skip', True)
        """
        if policy != "skip" or self.nan_policy == "skip" or self._make is None:
            return self
        if policy not in self._variants:
            self._variants[policy] = ManagedStep(self._fn, self._make(True), kind=self.kind, nan_policy="skip", make=self._make)
        return self._variants[policy]

    def compiled_count(self) -> int:
        """How many programs this step's compiled functions hold, its skipping form's included (for
        tests).

        Example:
            >>> from gyre.steps.managed import step
            >>> step(lambda s, b: (None, s)).compiled_count()
            0
        """
        own = sum(cache_size(f) for f in self._compiled.values())
        return own + sum(v.compiled_count() for v in self._variants.values())
