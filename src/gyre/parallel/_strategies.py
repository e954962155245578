"""The built-in strategies: eager, jit, data parallel, FSDP, and ``"spmd"`` for models whose parameters carry
flax partitioning annotations."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from gyre.core._checks import whole
from gyre.core._errors import describe, explain, suggest
from gyre.parallel._strategy import Strategy, refuse_one_device


class Eager(Strategy):
    """Runs the step op by op, uncompiled: for debugging (prints and breakpoints work).

    Example:
        >>> import gyre
        >>> gyre.get_strategy("eager").compiles
        False
    """

    name = "eager"
    compiles = False

    def place_state(self, state: Any) -> Any:
        return state

    def place_batch(self, batch: Any, *, axis: int = 0) -> Any:
        return batch


class Jit(Strategy):
    """One device (default ``jax.devices()[0]``), compiled with ``jax.jit``, state donated unless
    ``donate=False``.

    ``gyre.JIT`` is the same class under ciclo's name (ciclo's ``donate_args=`` is accepted).

    Example:
        >>> import gyre
        >>> gyre.get_strategy("jit").name, gyre.JIT(donate_args=False).donate
        ('jit', False)
    """

    name = "jit"

    def __init__(
        self,
        *,
        device: jax.Device | None = None,
        donate: bool | None = None,
        donate_args: bool | None = None,
    ) -> None:
        super().__init__(donate=donate, donate_args=donate_args)
        self.device = device

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self.device)

    def replicated(self) -> Sharding:
        return SingleDeviceSharding(self.device or jax.devices()[0])

    def place_state(self, state: Any) -> Any:
        refuse_one_device(self)
        return super().place_state(state)


class DataParallel(Strategy):
    """The batch split over ``data_axis`` of a mesh (default: every device), the state replicated.

    Example:
        >>> import gyre, jax
        >>> gyre.DataParallel().data_size == jax.device_count()
        True
    """

    name = "data_parallel"

    def __init__(
        self,
        *,
        mesh: Mesh | None = None,
        data_axis: str | Sequence[str] = "data",
        donate: bool | None = None,
        donate_args: bool | None = None,
    ) -> None:
        super().__init__(donate=donate, donate_args=donate_args)
        axes = (data_axis,) if isinstance(data_axis, str) else tuple(data_axis)
        if mesh is None:
            if len(axes) != 1:
                raise ValueError(explain(
                    "several data axes need a mesh",
                    expected="mesh=jax.make_mesh(...) naming the axes in data_axis",
                    received=f"data_axis={data_axis!r} and no mesh", fix="pass mesh=, or a single axis name"))
            mesh = Mesh(np.asarray(jax.devices()), axes)
        missing = [a for a in axes if a not in mesh.axis_names]
        if missing:
            raise ValueError(explain(
                f"the mesh has no axis {missing[0]!r}",
                expected=f"data_axis naming axes of the mesh: {list(mesh.axis_names)}",
                received=f"data_axis={data_axis!r}",
                fix="pass one of the mesh's axis names." + suggest(missing[0], mesh.axis_names)))
        self._mesh = mesh
        self.data_axis: tuple[str, ...] = axes
        self._data_size = int(np.prod([mesh.shape[a] for a in axes]))  # read on every step
        self._batch_shardings: dict[int, Sharding] = {}

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self._mesh, self.data_axis)

    def __repr__(self) -> str:
        shape = dict(self._mesh.shape)
        return f"{type(self).__name__}(mesh={shape}, data_axis={self.data_axis!r}, donate={self.donate})"

    @property
    def mesh(self) -> Mesh:
        return self._mesh

    @property
    def data_size(self) -> int:
        return self._data_size

    def _axis_spec(self) -> str | tuple[str, ...]:
        return self.data_axis[0] if len(self.data_axis) == 1 else self.data_axis

    def replicated(self) -> Sharding:
        return NamedSharding(self._mesh, PartitionSpec())

    def batch_sharding(self, leaf: Any, *, axis: int = 0) -> Sharding:
        if np.ndim(leaf) <= axis:
            return self.replicated()
        sharding = self._batch_shardings.get(axis)  # read per leaf on every step: built once
        if sharding is None:
            spec = PartitionSpec(*([None] * axis), self._axis_spec())
            sharding = self._batch_shardings[axis] = NamedSharding(self._mesh, spec)
        return sharding


class FSDP(DataParallel):
    """Data-parallel, with each parameter and optimizer-state leaf split over ``data_axis`` too.

    A leaf is split along its first dimension that the axis size divides; leaves with none, or
    smaller than ``min_size`` elements, stay replicated.

    Example:
        >>> import gyre, jax, jax.numpy as jnp
        >>> fsdp = gyre.FSDP()
        >>> n = fsdp.data_size
        >>> sharding = fsdp.state_sharding({"w": jnp.zeros((8 * n, 3)), "b": jnp.zeros(())})
        >>> sharding["w"].spec, sharding["b"].spec
        (P('data',), P())
    """

    name = "fsdp"

    def __init__(
        self,
        *,
        mesh: Mesh | None = None,
        data_axis: str | Sequence[str] = "data",
        min_size: int = 0,
        donate: bool | None = None,
        donate_args: bool | None = None,
    ) -> None:
        super().__init__(mesh=mesh, data_axis=data_axis, donate=donate, donate_args=donate_args)
        self.min_size = whole(min_size, "FSDP's min_size", unit="elements",
                              expected="the size below which a parameter stays replicated: an int >= 0",
                              fix="pass min_size=2**14 (or leave it out: every parameter is sharded)")

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self.min_size)

    def _leaf_sharding(self, leaf: Any) -> Sharding:
        shape = np.shape(leaf)
        n = self.data_size
        if int(np.prod(shape, dtype=np.int64)) >= max(self.min_size, 1):
            for dim, size in enumerate(shape):
                if size % n == 0 and size >= n:
                    return NamedSharding(self._mesh, PartitionSpec(*([None] * dim), self._axis_spec()))
        return self.replicated()

    def state_sharding(self, state: Any) -> Any:
        return jax.tree_util.tree_map(self._leaf_sharding, state)


#: ciclo's name for :class:`Jit`.
JIT = Jit


#: flax's logical axis rules: ``(logical_name, mesh_axis)`` pairs in order of precedence.
Rules = Sequence[tuple[str, str | Sequence[str] | None]]


class SPMD(DataParallel):
    """Parameters sharded as their flax annotations say, the batch split over ``data_axis``.

    ``nn.with_logical_partitioning(init, ("embed", "mlp"))`` names are mapped to mesh axes by
    ``rules``; ``nn.with_partitioning`` names mesh axes directly; unannotated leaves are
    replicated. The boxes stay in the state, so the optimizer state is sharded like its
    parameter; ``flax.linen.meta.unbox(state.params)`` gives plain arrays. Steps are traced under
    the rules and mesh, so ``nn.with_logical_constraint`` works too.

    Args:
        mesh: a mesh with ``Auto`` axes; by default every device on one axis named ``data_axis``.
        rules: ``(logical_name, mesh_axis)`` pairs in order of precedence; by default flax's
            rules when the strategy is built. A box's own rules win.
        data_axis: the mesh axis (or axes) the batch is split over.
        donate, donate_args: donate the state to the compiled step (``donate_args``: ciclo's name).

    Example:
        >>> import flax.linen as nn, gyre, jax, jax.numpy as jnp, numpy as np
        >>> mesh = jax.sharding.Mesh(np.asarray(jax.devices()).reshape(-1, 2), ("data", "model"))
        >>> spmd = gyre.SPMD(mesh=mesh, rules=[("mlp", "model")])
        >>> box = nn.LogicallyPartitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
        >>> spmd.state_sharding({"w": box, "b": jnp.zeros(3)})["w"].spec
        P(None, 'model')
    """

    name = "spmd"

    def __init__(
        self,
        *,
        mesh: Mesh | None = None,
        rules: Rules | None = None,
        data_axis: str | Sequence[str] = "data",
        donate: bool | None = None,
        donate_args: bool | None = None,
    ) -> None:
        super().__init__(mesh=mesh, data_axis=data_axis, donate=donate, donate_args=donate_args)
        self.rules = _check_rules(nn.get_logical_axis_rules() if rules is None else rules)
        self._warned = False  # about logical names with no rules to map them
        explicit = [
            name for name, kind in zip(self.mesh.axis_names, self.mesh.axis_types, strict=True)
            if kind == jax.sharding.AxisType.Explicit
        ]
        if explicit:
            raise ValueError(explain(
                "the spmd strategy needs a mesh whose axes are Auto",
                expected="a mesh built with axis_types=(jax.sharding.AxisType.Auto, ...) "
                "so that XLA propagates the parameters' shardings through the model",
                received=f"a mesh with Explicit axes {explicit} (jax.make_mesh's default)",
                fix="jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) "
                "* len(names)), or jax.sharding.Mesh(devices, names)"))

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self.rules)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, rules={list(self.rules)!r})"

    def spec(self, leaf: Any) -> PartitionSpec:
        """The partition spec of one state leaf: from its flax box, else replicated.

        Example:
            >>> import flax.linen as nn, gyre, jax.numpy as jnp
            >>> spmd = gyre.SPMD(rules=[("embed", "data")])
            >>> spmd.spec(nn.LogicallyPartitioned(jnp.zeros((8, 2)), ("embed", "out")))
            P('data', None)
        """
        if isinstance(leaf, nn.LogicallyPartitioned):
            rules = leaf.rules if leaf.rules is not None else self.rules
            spec = nn.logical_to_mesh_axes(leaf.names, rules)
            return spec if spec is not None else PartitionSpec()
        if isinstance(leaf, nn.Partitioned):
            return PartitionSpec(*leaf.names)
        return PartitionSpec()

    def state_sharding(self, state: Any) -> Any:
        unruled: list[str] = []

        def sharding(path: Any, leaf: Any) -> Sharding:
            if isinstance(leaf, nn.LogicallyPartitioned) and leaf.rules is None and not self.rules:
                unruled.append(jax.tree_util.keystr(path))
            spec = self.spec(leaf)
            where = jax.tree_util.keystr(path) or "the state"
            try:
                named = NamedSharding(self.mesh, spec)
            except (ValueError, KeyError) as err:
                raise ValueError(explain(
                    "a parameter's partitioning names an axis the mesh does not have",
                    expected=f"mesh axes among {list(self.mesh.axis_names)}",
                    received=f"{spec} for {where} (from {describe(getattr(leaf, 'names', leaf))})",
                    fix="map the logical names to the mesh's axes in rules=[(logical, "
                    "mesh_axis), ...], or build the mesh with that axis")) from err
            self._check_divisible(where, leaf, spec)
            return named

        shardings = jax.tree_util.tree_map_with_path(
            sharding, state, is_leaf=lambda x: isinstance(x, nn.Partitioned)
        )
        if unruled and not self._warned:
            self._warned = True
            warnings.warn(
                f"the spmd strategy has no rules, so the {len(unruled)} logically partitioned "
                f"parameters ({', '.join(unruled[:3])}{', ...' if len(unruled) > 3 else ''}) are "
                "replicated on every device. Pass rules=[(logical_name, mesh_axis), ...] to "
                "gyre.SPMD, or build the strategy (or the state, with strategy='spmd') inside "
                "`with nn.logical_axis_rules(rules):`.",
                UserWarning,
                stacklevel=2,
            )
        return shardings

    def _check_divisible(self, where: str, leaf: Any, spec: PartitionSpec) -> None:
        shape = np.shape(leaf.value if isinstance(leaf, nn.Partitioned) else leaf)
        for dim, axes in enumerate(spec):
            if axes is None or dim >= len(shape):
                continue
            names = (axes,) if isinstance(axes, str) else tuple(axes)
            ways = int(np.prod([self.mesh.shape[a] for a in names]))
            if shape[dim] % ways:
                raise ValueError(explain(
                    f"{where} cannot be split over mesh axis {axes!r} ({ways} devices)",
                    expected=f"dimension {dim} of {where} divisible by {ways}",
                    received=f"shape {tuple(shape)} with partition spec {spec}", fix="change the rules so this "
                    "dimension maps to a smaller axis (or None), or choose sizes that divide evenly"))

    def _traced_in_context(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        rules, mesh = self.rules, self.mesh

        def under_rules(*args: Any, **kwargs: Any) -> Any:  # for the model's nn.with_logical_constraint
            with nn.logical_axis_rules(rules), jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                return fn(*args, **kwargs)

        return under_rules


def _check_rules(rules: Any) -> tuple[tuple[str, Any], ...]:
    try:
        pairs = tuple((name, tuple(axis) if isinstance(axis, list) else axis) for name, axis in rules)
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or not all(isinstance(name, str) for name, _ in pairs):
        raise ValueError(explain(
            "rules= must be pairs of (logical axis name, mesh axis)",
            expected="e.g. [('batch', 'data'), ('mlp', 'model'), ('embed', None)]", received=describe(rules),
            fix="pass a list of (str, str | None) pairs"))
    return pairs
