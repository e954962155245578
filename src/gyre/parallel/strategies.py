"""Strategies: how a step ``(state, batch) -> (logs, state)`` is run, on ``jax.sharding``.

* ``"eager"``: no compilation, for debugging (prints and breakpoints work in the step).
* ``"jit"``: one device, compiled, the state donated.
* ``"data_parallel"``: the batch split over every device of a mesh along ``data_axis``, the
  state replicated; gradients are averaged by XLA's collectives.
* ``"fsdp"``: as data-parallel, and each parameter and optimizer-state leaf is also split over
  ``data_axis`` along its first dimension that divides the axis size (others stay replicated).

A strategy places the state (:meth:`Strategy.place_state`), places batches
(:meth:`Strategy.place_batch`, which builds global arrays from per-process data when several
processes run), and compiles steps (:meth:`Strategy.compile`) with fixed shardings, so a step
compiles once and keeps its state where it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from gyre.core.errors import describe, explain, suggest

Step = Callable[[Any, Any], tuple[Any, Any]]


class Strategy:
    """Base class. Subclasses define the mesh and the shardings; see the module docstring.

    Strategies compare equal when they are configured alike, so a state holding one (as a
    static field) keeps the same jit cache entry.

    Example:
        >>> import gyre
        >>> gyre.get_strategy("jit") == gyre.get_strategy("jit")
        True
    """

    name = "strategy"
    #: whether :meth:`compile` runs ``jax.jit``
    compiles = True

    def __init__(self, *, donate: bool = True) -> None:
        self.donate = donate

    # -- identity ----------------------------------------------------------------------------
    def _key(self) -> tuple[Any, ...]:
        return (type(self), self.donate)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Strategy) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(donate={self.donate})"

    # -- shardings ---------------------------------------------------------------------------
    @property
    def mesh(self) -> Mesh | None:
        """The device mesh (``None`` for single-device strategies)."""
        return None

    @property
    def data_size(self) -> int:
        """How many ways a batch is split (1 when it is not)."""
        return 1

    def replicated(self) -> Sharding:
        """The sharding of values every device holds whole (logs, scalars)."""
        return SingleDeviceSharding(jax.devices()[0])

    def batch_sharding(self, leaf: Any, *, axis: int = 0) -> Sharding:
        """The sharding of one batch leaf whose batch dimension is ``axis``."""
        return self.replicated()

    def state_sharding(self, state: Any) -> Any:
        """A pytree of shardings shaped like ``state``."""
        return jax.tree_util.tree_map(lambda _: self.replicated(), state)

    # -- placement ---------------------------------------------------------------------------
    def place_state(self, state: Any) -> Any:
        """The state moved onto its shardings (a copy; the argument is left as it is).

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> gyre.get_strategy("jit").place_state({"w": jnp.ones(2)})["w"].shape
            (2,)
        """
        shardings = self.state_sharding(state)
        if jax.process_count() > 1:
            # Global arrays are built by a compiled identity from host values that every
            # process holds alike (device_put onto a global sharding makes arrays orbax
            # cannot save).
            return jax.jit(lambda tree: tree, out_shardings=shardings)(jax.device_get(state))
        return _put(state, shardings, copy=True)

    def place_batch(self, batch: Any, *, axis: int = 0) -> Any:
        """The batch moved onto the batch sharding; with several processes, each process's
        batch becomes its slice of one global batch.

        Example:
            >>> import gyre, numpy as np
            >>> gyre.get_strategy("jit").place_batch((np.ones((4, 2)), np.zeros(4)))[0].shape
            (4, 2)
        """
        leaves = jax.tree_util.tree_leaves(batch)
        if all(isinstance(x, jax.Array) and x.sharding == self.batch_sharding(x, axis=axis) for x in leaves):
            return batch  # already placed (prefetched): nothing to move or check
        self.check_batch(batch, axis=axis)
        shardings = jax.tree_util.tree_map(lambda x: self.batch_sharding(x, axis=axis), batch)
        if jax.process_count() > 1 and self.mesh is not None:
            return jax.tree_util.tree_map(_global_array, shardings, batch)
        return _put(batch, shardings)

    def check_batch(self, batch: Any, *, axis: int = 0) -> None:
        """Raises a clear error when the batch cannot be split over the data axis."""
        n = self.data_size
        if n == 1:
            return
        for path, leaf in jax.tree_util.tree_leaves_with_path(batch):
            shape = np.shape(leaf)
            if len(shape) > axis and shape[axis] % _local_share(n) != 0:
                where = jax.tree_util.keystr(path) or "the batch"
                raise ValueError(
                    explain(
                        f"a batch of {shape[axis]} cannot be split evenly over {n} devices",
                        expected=f"a batch size that is a multiple of {n} (the devices on "
                        f"the data axis{'' if jax.process_count() == 1 else ', all processes together'})",
                        received=f"{where} with shape {shape}",
                        fix=f"use a batch size such as {max(n, shape[axis] - shape[axis] % n)}, "
                        "drop the remainder batch, or pad it",
                    )
                )

    # -- compilation -------------------------------------------------------------------------
    def compile(
        self,
        step: Step,
        state: Any = None,
        *,
        batch_axis: int = 0,
        donate: bool | None = None,
        **jit_kwargs: Any,
    ) -> Step:
        """``step`` compiled for this strategy.

        The new state is constrained to :meth:`state_sharding` and the logs to
        :meth:`replicated` inside the compiled function, so the state keeps its placement
        from step to step (and donation reuses its buffers) whatever its structure; one
        compiled function serves every state structure (``jax.jit`` retraces per structure).
        The state is donated unless the strategy was built with ``donate=False`` or
        ``donate=False`` is passed here (steps that leave the state unchanged, such as
        evaluation, should not donate it). The returned function expects batches placed by
        :meth:`place_batch`; ``state`` is accepted for symmetry and not needed. Other
        ``jit_kwargs`` go to ``jax.jit`` (its own ``donate_argnums``/``donate_argnames`` win);
        keyword arguments of the call reach ``step``.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> strategy = gyre.get_strategy("jit")
            >>> state = strategy.place_state(jnp.zeros(()))
            >>> run = strategy.compile(lambda s, b: (gyre.logs(), s + b.sum()), state)
            >>> float(run(state, strategy.place_batch(jnp.ones(4)))[1])
            4.0
        """
        options = dict(jit_kwargs)
        if "donate_argnums" not in options and "donate_argnames" not in options:
            options["donate_argnums"] = (0,) if (self.donate if donate is None else donate) else ()
        if self.mesh is None:
            return jax.jit(step, **options)
        replicated = self.replicated()

        def constrain(sharding: Sharding, subtree: Any) -> Any:
            # ``state_sharding`` may give one sharding for a whole subtree (a flax box).
            return jax.tree_util.tree_map(
                lambda x: jax.lax.with_sharding_constraint(x, sharding) if isinstance(x, jax.Array) else x,
                subtree,
            )

        def placed_step(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            logs, new_state = step(state, batch, **kwargs)
            logs = constrain(replicated, logs)
            new_state = jax.tree_util.tree_map(constrain, self.state_sharding(new_state), new_state)
            return logs, new_state

        return jax.jit(placed_step, **options)


class Eager(Strategy):
    """Runs the step op by op, uncompiled: slow, for debugging only.

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

    def compile(
        self,
        step: Step,
        state: Any = None,
        *,
        batch_axis: int = 0,
        donate: bool | None = None,
        **jit_kwargs: Any,
    ) -> Step:
        return step


class Jit(Strategy):
    """One device, compiled with ``jax.jit``, state donated.

    Example:
        >>> import gyre
        >>> gyre.get_strategy("jit").name
        'jit'
    """

    name = "jit"

    def __init__(self, *, device: jax.Device | None = None, donate: bool = True) -> None:
        super().__init__(donate=donate)
        self.device = device

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self.device)

    def replicated(self) -> Sharding:
        return SingleDeviceSharding(self.device or jax.devices()[0])


class DataParallel(Strategy):
    """The batch split over ``data_axis`` of a mesh, the state replicated.

    Args:
        mesh: the device mesh; by default every device in one axis named ``data_axis``.
        data_axis: the mesh axis (or axes) the batch is split over.
        donate: donate the state to the compiled step.

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
        donate: bool = True,
    ) -> None:
        super().__init__(donate=donate)
        axes = (data_axis,) if isinstance(data_axis, str) else tuple(data_axis)
        if mesh is None:
            mesh = Mesh(np.asarray(jax.devices()), axes[:1]) if len(axes) == 1 else None
            if mesh is None:
                raise ValueError(
                    explain(
                        "several data axes need a mesh",
                        expected="mesh=jax.make_mesh(...) naming the axes in data_axis",
                        received=f"data_axis={data_axis!r} and no mesh",
                        fix="pass mesh=, or a single axis name",
                    )
                )
        missing = [a for a in axes if a not in mesh.axis_names]
        if missing:
            raise ValueError(
                explain(
                    f"the mesh has no axis {missing[0]!r}",
                    expected=f"data_axis naming axes of the mesh: {list(mesh.axis_names)}",
                    received=f"data_axis={data_axis!r}",
                    fix="pass one of the mesh's axis names." + suggest(missing[0], mesh.axis_names),
                )
            )
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
    """Data-parallel, with parameters and optimizer state split over ``data_axis`` too.

    Each leaf is split along its first dimension that the data-axis size divides; leaves
    with no such dimension, and leaves smaller than ``min_size`` elements, stay replicated.

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
        donate: bool = True,
    ) -> None:
        super().__init__(mesh=mesh, data_axis=data_axis, donate=donate)
        self.min_size = min_size

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


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "eager": Eager,
    "jit": Jit,
    "data_parallel": DataParallel,
    "fsdp": FSDP,
}
_ALIASES = {"data-parallel": "data_parallel", "dp": "data_parallel"}


def get_strategy(strategy: str | Strategy) -> Strategy:
    """A strategy from its name (``"eager"``, ``"jit"``, ``"data_parallel"``, ``"fsdp"``) or
    as given when it already is one.

    Example:
        >>> import gyre
        >>> gyre.get_strategy("data-parallel").name
        'data_parallel'
    """
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str):
        factory = STRATEGIES.get(_ALIASES.get(strategy, strategy))
        if factory is not None:
            return factory()
    valid = list(STRATEGIES)
    raise ValueError(
        explain(
            f"unknown strategy {strategy!r}",
            expected=f"one of {valid}, or a gyre.Strategy object such as "
            "gyre.DataParallel(mesh=..., data_axis=...)",
            received=describe(strategy),
            fix="pick a valid name." + (suggest(strategy, valid) if isinstance(strategy, str) else ""),
        )
    )


# -- helpers -----------------------------------------------------------------------------------


def _local_share(n: int) -> int:
    """The divisor a per-process batch dimension must respect."""
    processes = jax.process_count()
    return n // processes if processes > 1 and n % processes == 0 else n


def _put(tree: Any, shardings: Any, *, copy: bool = False) -> Any:
    # A state is donated to its step: it must not share buffers with the caller's arrays,
    # or the first step would delete them.
    return jax.device_put(tree, shardings, may_alias=False if copy else None)


def _global_array(sharding: Sharding, local: Any) -> jax.Array:
    """One process's slice of a global batch, as a global array (data from numpy).

    A leaf that already is a global array (placed by :func:`gyre.prefetch_to_device`) is
    kept as it is."""
    if isinstance(local, jax.Array) and not local.is_fully_addressable:
        return local
    return jax.make_array_from_process_local_data(sharding, np.asarray(local))
