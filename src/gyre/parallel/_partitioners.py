"""jaxloop's partitioners, as thin adapters over gyre's strategies.

Each holds a :class:`~gyre.Strategy` (``partitioner.strategy``) and forwards ``shard_batch``,
``shard_init_fn`` and ``partition`` to it, translating only jaxloop's conventions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, Sharding

from gyre.core._errors import as_pair
from gyre.parallel._registry import get_strategy
from gyre.parallel._strategies import SPMD, DataParallel, Jit, Rules
from gyre.parallel._strategy import Strategy, check_jit_options

#: The strategy of :class:`SPMDPartitioner`, under its former name.
LogicalSharding = SPMD


class Partitioner:
    """Shards a :class:`~gyre.Step`'s batches, initialisation and computation with a strategy.

    Args:
        strategy: a :class:`~gyre.Strategy` or its name (``"jit"``, ``"data_parallel"``,
            ``"fsdp"``, ``"eager"``).

    Example:
        >>> import gyre
        >>> p = gyre.Partitioner(gyre.FSDP())
        >>> p.strategy.name, p.data_axis
        ('fsdp', 'data')
    """

    def __init__(self, strategy: Strategy | str = "jit") -> None:
        self.strategy: Strategy = get_strategy(strategy)
        self._last_state_sharding: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(strategy={self.strategy!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.strategy == self.strategy  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.strategy))

    @property
    def mesh(self) -> Mesh | None:
        """The device mesh (``None`` on one device)."""
        return self.strategy.mesh

    @property
    def data_axis(self) -> str | None:
        """The mesh axis the batch is split over (``None`` on one device)."""
        axes = getattr(self.strategy, "data_axis", None)
        if not axes:
            return None
        return axes[0] if len(axes) == 1 else axes  # type: ignore[return-value]

    @property
    def sharding(self) -> Any:
        """The state's sharding as jaxloop reports it (``None`` on one device; else the shardings of
        the last initialised state)."""
        return self._last_state_sharding

    def shard_batch(self, batch: Any) -> Any:
        """The batch placed on the strategy's batch sharding.

        Example:
            >>> import gyre, numpy as np
            >>> p = gyre.DataParallelPartitioner()
            >>> x = p.shard_batch(np.zeros((8 * p.strategy.data_size, 3)))
            >>> x.sharding.spec
            P('data',)
        """
        return self.strategy.place_batch(batch)

    def shard_init_fn(self, init_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``init_fn`` compiled so the state it builds lands directly on the strategy's state
        shardings.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> init = gyre.DataParallelPartitioner().shard_init_fn(lambda x: {"w": x * 2})
            >>> init(jnp.ones(3))["w"].sharding.spec
            P()
        """
        init = self.strategy.sharded_init(init_fn)
        if self.mesh is None:
            return init

        def sharded_init(*args: Any, **kwargs: Any) -> Any:
            state = init(*args, **kwargs)
            self._last_state_sharding = self.strategy.state_sharding(state)
            return state

        return sharded_init

    def partition(
        self,
        fn: Callable[..., Any],
        state: Any = None,
        *,
        donate: bool = False,
        **jit_kwargs: Any,
    ) -> Callable[..., Any]:
        """jaxloop's ``partition``: ``fn(state, batch, **kwargs)`` compiled by the strategy (see
        :meth:`gyre.Strategy.jit`), its outputs where XLA propagates them (nothing is gathered).

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> p = gyre.SingleDevicePartitioner()
            >>> run = p.partition(lambda s, b: {"dot": b @ s})
            >>> float(run(jnp.ones(3), jnp.ones(3))["dot"])
            3.0
        """
        return self.strategy.jit(fn, donate=donate, **jit_kwargs)  # which checks jit_kwargs

    def partition_step(
        self,
        fn: Callable[..., tuple[Any, Any]],
        state: Any = None,
        *,
        donate: bool = True,
        **jit_kwargs: Any,
    ) -> Callable[..., tuple[Any, Any]]:
        """``fn(state, batch, **kwargs) -> (state, outputs)`` compiled by
        :meth:`gyre.Strategy.compile`; the state is donated unless ``donate=False``.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> p = gyre.SingleDevicePartitioner()
            >>> run = p.partition_step(lambda s, b: (s + b.sum(), {"n": b.size}), jnp.zeros(()))
            >>> state, out = run(jnp.zeros(()), jnp.ones(4))
            >>> float(state), int(out["n"])
            (4.0, 4)
        """
        traces = [0]

        def as_step(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            traces[0] += 1
            new_state, outputs = as_pair(fn(state, batch, **kwargs), step_name(fn))
            return outputs, new_state  # the strategies' (logs, state) order

        check_jit_options(jit_kwargs)
        compiled = self.strategy.compile(as_step, state, donate=donate, **jit_kwargs)

        def run(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            outputs, state = compiled(state, batch, **kwargs)
            return state, outputs

        run.compiled = compiled  # type: ignore[attr-defined]
        run.trace_count = lambda: traces[0]  # type: ignore[attr-defined]
        return run


def step_name(fn: Callable[..., Any]) -> str:
    """How an error names a step function: its qualified name (``MyStep.run``)."""
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class SingleDevicePartitioner(Partitioner):
    """One device (:class:`~gyre.Jit`; default ``jax.devices()[0]``).

    Example:
        >>> import gyre
        >>> p = gyre.SingleDevicePartitioner()
        >>> p.strategy.name, p.mesh, p.sharding
        ('jit', None, None)
    """

    def __init__(self, *, device: jax.Device | None = None) -> None:
        super().__init__(Jit(device=device))


class DataParallelPartitioner(Partitioner):
    """The batch split over ``data_axis`` of ``mesh`` (default: every device), the state replicated.

    Example:
        >>> import gyre, jax
        >>> p = gyre.DataParallelPartitioner(data_axis="data")
        >>> p.mesh.shape["data"] == jax.device_count(), p.data_axis
        (True, 'data')
    """

    def __init__(self, mesh: Mesh | None = None, data_axis: str = "data") -> None:
        super().__init__(DataParallel(mesh=mesh, data_axis=data_axis))

    @property
    def sharding(self) -> Sharding:
        """The replicated sharding of the state (jaxloop's ``sharding``)."""
        return self.strategy.replicated()


class SPMDPartitioner(Partitioner):
    """Parameters sharded as their flax annotations say, the batch split over ``data_axis``
    (:class:`~gyre.SPMD` has the details).

    Example:
        >>> import gyre, jax, numpy as np
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(-1, 1), ("data", "model"))
        >>> p = gyre.SPMDPartitioner(mesh=mesh, rules=[("mlp", "model")])
        >>> p.strategy.name, p.data_axis
        ('spmd', 'data')
    """

    def __init__(
        self, mesh: Mesh | None = None, rules: Rules | None = None, data_axis: str = "data"
    ) -> None:
        super().__init__(SPMD(mesh=mesh, rules=rules, data_axis=data_axis))

    @property
    def rules(self) -> tuple[tuple[str, Any], ...]:
        """The logical-to-mesh axis rules."""
        return self.strategy.rules  # type: ignore[attr-defined]
