"""The built-in strategies: eager, jit, data parallel, FSDP."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from gyre.core._checks import whole
from gyre.core._errors import explain, suggest
from gyre.parallel._strategy import Strategy


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
