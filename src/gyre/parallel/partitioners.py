"""jaxloop's partitioners, as thin shells over gyre's strategies.

A partitioner tells a :class:`~gyre.Step` how to shard three things: the batch
(:meth:`Partitioner.shard_batch`), the model initialisation (:meth:`Partitioner.shard_init_fn`)
and the step itself (:meth:`Partitioner.partition`). Each one holds a gyre
:class:`~gyre.Strategy` (``partitioner.strategy``) and asks it for every sharding, so placement
and compilation are the strategies' own:

* :class:`SingleDevicePartitioner`: :class:`~gyre.Jit`, one device.
* :class:`DataParallelPartitioner`: :class:`~gyre.DataParallel`, the batch split over
  ``data_axis``, the state replicated.
* :class:`SPMDPartitioner`: the batch split over ``data_axis`` and each parameter sharded as
  its flax annotation says (``nn.with_logical_partitioning`` names mapped to mesh axes by
  ``rules``, or ``nn.with_partitioning`` mesh axes used as they are).
* ``Partitioner(strategy)``: any other strategy, e.g. ``Partitioner(gyre.FSDP())``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from gyre.core.errors import describe, explain
from gyre.parallel.strategies import DataParallel, Jit, Strategy, get_strategy

Rules = Sequence[tuple[str, str | Sequence[str] | None]]


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

    def __repr__(self) -> str:
        return f"{type(self).__name__}(strategy={self.strategy!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.strategy == self.strategy  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.strategy))

    # -- jaxloop's properties --------------------------------------------------------------------
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
        """The state's sharding as jaxloop reports it: ``None`` on one device, the replicated
        sharding for data parallelism, the tree of shardings of the last initialised state
        otherwise."""
        return getattr(self, "_last_state_sharding", None)

    # -- jaxloop's methods -----------------------------------------------------------------------
    def shard_batch(self, batch: Any) -> Any:
        """The batch placed on the strategy's batch sharding (split over the data axis).

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
        shardings (nothing is built whole on one device first).

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> init = gyre.DataParallelPartitioner().shard_init_fn(lambda x: {"w": x * 2})
            >>> init(jnp.ones(3))["w"].sharding.spec
            P()
        """
        strategy = self.strategy
        if not strategy.compiles:
            return init_fn

        def sharded_init(*args: Any, **kwargs: Any) -> Any:
            abstract = jax.eval_shape(init_fn, *args, **kwargs)
            shardings = strategy.state_sharding(abstract)
            if self.mesh is not None:
                self._last_state_sharding = shardings
            return jax.jit(init_fn, out_shardings=shardings)(*args, **kwargs)

        return sharded_init

    def partition(
        self,
        fn: Callable[..., tuple[Any, Any]],
        state: Any = None,
        *,
        donate: bool = True,
        **jit_kwargs: Any,
    ) -> Callable[..., tuple[Any, Any]]:
        """``fn(state, batch, **kwargs) -> (state, outputs)`` compiled by the strategy.

        :meth:`gyre.Strategy.compile` does the work: the output state keeps the strategy's
        shardings and the outputs are replicated, so the step compiles once. The state is donated
        unless ``donate=False`` (or ``jit_kwargs`` names its own ``donate_argnums`` /
        ``donate_argnames``). Other ``jit_kwargs`` go to ``jax.jit``.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> p = gyre.SingleDevicePartitioner()
            >>> run = p.partition(lambda s, b: (s + b.sum(), {"n": b.size}), jnp.zeros(()))
            >>> state, out = run(jnp.zeros(()), jnp.ones(4))
            >>> float(state), int(out["n"])
            (4.0, 4)
        """
        traces = [0]

        def as_step(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            traces[0] += 1
            new_state, outputs = fn(state, batch, **kwargs)
            return outputs, new_state  # the strategies' (logs, state) order

        compiled = self.strategy.compile(as_step, state, donate=donate, **jit_kwargs)

        def run(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            outputs, state = compiled(state, batch, **kwargs)
            return state, outputs

        run.compiled = compiled  # type: ignore[attr-defined]
        run.trace_count = lambda: traces[0]  # type: ignore[attr-defined]
        return run


class SingleDevicePartitioner(Partitioner):
    """One device (:class:`~gyre.Jit`); batches are left where they are.

    Example:
        >>> import gyre
        >>> p = gyre.SingleDevicePartitioner()
        >>> p.strategy.name, p.mesh, p.sharding
        ('jit', None, None)
    """

    def __init__(self, *, device: jax.Device | None = None) -> None:
        super().__init__(Jit(device=device))

    def shard_batch(self, batch: Any) -> Any:
        """The batch unchanged (the compiled step moves it).

        Example:
            >>> import gyre
            >>> gyre.SingleDevicePartitioner().shard_batch([1, 2])
            [1, 2]
        """
        if getattr(self.strategy, "device", None) is not None:
            return self.strategy.place_batch(batch)
        return batch


class DataParallelPartitioner(Partitioner):
    """The batch split over ``data_axis`` of ``mesh``, the state replicated
    (:class:`~gyre.DataParallel`).

    Args:
        mesh: the device mesh; by default every device on one axis named ``data_axis``.
        data_axis: the mesh axis the batch is split over.

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


class LogicalSharding(DataParallel):
    """The strategy of :class:`SPMDPartitioner`: batches split over ``data_axis``, each state
    leaf sharded as its flax box says.

    A leaf boxed by ``nn.with_logical_partitioning`` (``nn.LogicallyPartitioned``) has its
    logical axis names mapped to mesh axes by ``rules`` (the box's own rules win when it has
    some); one boxed by ``nn.with_partitioning`` (``nn.Partitioned``) names mesh axes
    directly; any other leaf is replicated. The optimizer state inherits the boxes of the
    parameters, so it is sharded like them.

    Example:
        >>> import flax.linen as nn, jax.numpy as jnp
        >>> s = LogicalSharding(rules=[("hidden", "data")])
        >>> box = nn.LogicallyPartitioned(jnp.zeros((4, 8 * s.data_size)), ("in", "hidden"))
        >>> s.state_sharding({"w": box, "b": jnp.zeros(3)})["w"].spec
        P(None, 'data')
    """

    name = "spmd"

    def __init__(
        self,
        *,
        mesh: Mesh | None = None,
        rules: Rules = (),
        data_axis: str | Sequence[str] = "data",
        donate: bool = True,
    ) -> None:
        super().__init__(mesh=mesh, data_axis=data_axis, donate=donate)
        self.rules = _check_rules(rules)
        explicit = [
            name for name, kind in zip(self.mesh.axis_names, self.mesh.axis_types, strict=True)
            if kind == jax.sharding.AxisType.Explicit
        ]
        if explicit:
            raise ValueError(
                explain(
                    "SPMDPartitioner needs a mesh whose axes are Auto",
                    expected="a mesh built with axis_types=(jax.sharding.AxisType.Auto, ...) "
                    "so that XLA propagates the parameters' shardings through the model",
                    received=f"a mesh with Explicit axes {explicit} (jax.make_mesh's default)",
                    fix="jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) "
                    "* len(names)), or jax.sharding.Mesh(devices, names)",
                )
            )

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self.rules)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, rules={list(self.rules)!r})"

    def _spec(self, leaf: Any) -> PartitionSpec:
        if isinstance(leaf, nn.LogicallyPartitioned):
            rules = leaf.rules if leaf.rules is not None else self.rules
            spec = nn.logical_to_mesh_axes(leaf.names, rules)
            return spec if spec is not None else PartitionSpec()
        if isinstance(leaf, nn.Partitioned):
            return PartitionSpec(*leaf.names)
        return PartitionSpec()

    def state_sharding(self, state: Any) -> Any:
        def sharding(leaf: Any) -> Sharding:
            spec = self._spec(leaf)
            try:
                return NamedSharding(self.mesh, spec)
            except (ValueError, KeyError) as err:
                raise ValueError(
                    explain(
                        "a parameter's partitioning names an axis the mesh does not have",
                        expected=f"mesh axes among {list(self.mesh.axis_names)}",
                        received=f"{spec} (from {describe(getattr(leaf, 'names', leaf))})",
                        fix="map the logical names to the mesh's axes in rules=[(logical, "
                        "mesh_axis), ...], or build the mesh with that axis",
                    )
                ) from err

        return jax.tree_util.tree_map(
            sharding, state, is_leaf=lambda x: isinstance(x, nn.Partitioned)
        )


class SPMDPartitioner(Partitioner):
    """Parameters sharded as their flax annotations say, the batch split over ``data_axis``.

    Annotate parameters with ``nn.with_logical_partitioning(init, ("embed", "mlp"))`` and map
    the logical names to mesh axes with ``rules``; ``nn.with_partitioning`` annotations name
    mesh axes directly. The boxes stay in the state (flax's way), so the optimizer state is
    sharded like the parameters; the model's ``apply`` unboxes them, and
    ``flax.linen.meta.unbox(state.params)`` gives plain arrays.

    Args:
        mesh: the device mesh; by default every device on one axis named ``data_axis``.
        rules: ``(logical_name, mesh_axis)`` pairs, in order of precedence (flax's rules).
        data_axis: the mesh axis the batch is split over.

    Example:
        >>> import gyre, jax, numpy as np
        >>> mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(-1, 1), ("data", "model"))
        >>> p = gyre.SPMDPartitioner(mesh=mesh, rules=[("mlp", "model")])
        >>> p.strategy.name, p.data_axis
        ('spmd', 'data')
    """

    def __init__(
        self, mesh: Mesh | None = None, rules: Rules = (), data_axis: str = "data"
    ) -> None:
        super().__init__(LogicalSharding(mesh=mesh, rules=rules, data_axis=data_axis))

    @property
    def rules(self) -> tuple[tuple[str, Any], ...]:
        """The logical-to-mesh axis rules."""
        return self.strategy.rules  # type: ignore[attr-defined]

    def partition(
        self,
        fn: Callable[..., tuple[Any, Any]],
        state: Any = None,
        *,
        donate: bool = True,
        **jit_kwargs: Any,
    ) -> Callable[..., tuple[Any, Any]]:
        """As :meth:`Partitioner.partition`, tracing ``fn`` under the partitioner's rules
        (so ``nn.with_logical_constraint`` inside the model uses them).

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> run = gyre.SPMDPartitioner().partition(lambda s, b: (s, {}), jnp.zeros(()))
            >>> run(jnp.zeros(()), jnp.ones(8))[1]
            {}
        """
        rules = self.rules

        def under_rules(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            with nn.logical_axis_rules(rules):
                return fn(state, batch, **kwargs)

        return super().partition(under_rules, state, donate=donate, **jit_kwargs)


def _check_rules(rules: Any) -> tuple[tuple[str, Any], ...]:
    try:
        pairs = tuple((name, tuple(axis) if isinstance(axis, list) else axis) for name, axis in rules)
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or not all(isinstance(name, str) for name, _ in pairs):
        raise ValueError(
            explain(
                "rules= must be pairs of (logical axis name, mesh axis)",
                expected="e.g. [('batch', 'data'), ('mlp', 'model'), ('embed', None)]",
                received=describe(rules),
                fix="pass a list of (str, str | None) pairs",
            )
        )
    return pairs
