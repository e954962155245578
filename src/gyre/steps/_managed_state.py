"""The managed API's state: a :class:`~gyre.TrainState` that carries its strategy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from gyre.core._train_state import TrainState
from gyre.parallel._registry import get_strategy
from gyre.parallel._strategies import Jit
from gyre.parallel._strategy import Strategy


class ManagedState(TrainState, kw_only=True):
    """A :class:`~gyre.TrainState` with a static strategy, placed on its devices.

    Subclasses may declare fields (``ema_params: Any``), which ``create`` takes as keywords.
    ``skipped_steps`` (int32, 0 at creation) counts the updates ``nan_policy="skip"`` dropped; a
    checkpoint keeps it.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> s = ManagedState.create(params=jnp.zeros(4), tx=optax.adam(1e-3), strategy="jit")
        >>> s.strategy.name, s.with_strategy("eager").strategy.name
        ('jit', 'eager')
    """

    strategy: Strategy = struct.field(pytree_node=False, default_factory=Jit)
    skipped_steps: jax.Array = struct.field(default_factory=lambda: jnp.zeros((), jnp.int32))

    @classmethod
    def create(  # type: ignore[override]
        cls,
        *,
        params: Any,
        tx: optax.GradientTransformation | None = None,
        strategy: str | Strategy = "jit",
        apply_fn: Callable[..., Any] | None = None,
        rng: Any = None,
        model_state: Any = None,
        **extra: Any,
    ) -> Any:
        """A state at step 0 placed for ``strategy`` (a name or a :class:`~gyre.Strategy`).

        Example:
            >>> import jax.numpy as jnp
            >>> ManagedState.create(params=jnp.zeros(2), strategy="fsdp").strategy.name
            'fsdp'
        """
        chosen = get_strategy(strategy)
        state = super().create(
            params=params, tx=tx, apply_fn=apply_fn, rng=rng, model_state=model_state,
            strategy=chosen, **extra)
        return chosen.place_state(state)

    def with_strategy(self, strategy: str | Strategy) -> Any:
        """The same state under another strategy, moved onto its devices.

        Example:
            >>> import jax.numpy as jnp
            >>> ManagedState.create(params=jnp.zeros(2)).with_strategy("data_parallel").strategy.name
            'data_parallel'
        """
        chosen = get_strategy(strategy)
        return chosen.place_state(self.replace(strategy=chosen))


def _strategy_of(state: Any) -> Strategy:
    strategy = getattr(state, "strategy", None)
    return strategy if isinstance(strategy, Strategy) else _DEFAULT


_DEFAULT = Jit()
