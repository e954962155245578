"""Strategies: how a step ``(state, batch) -> (logs, state)`` is run, on ``jax.sharding``.

* ``"eager"``: no compilation, for debugging (prints and breakpoints work in the step).
* ``"jit"``: one device, compiled, the state donated.
* ``"data_parallel"``: the batch split over every device of a mesh along ``data_axis``, the
  state replicated; gradients are averaged by XLA's collectives.
* ``"fsdp"``: as data-parallel, and each parameter and optimizer-state leaf is also split over
  ``data_axis`` along its first dimension that divides the axis size (others stay replicated).
* ``"spmd"``: as data-parallel, and each parameter is sharded as its flax annotation says
  (``nn.with_logical_partitioning`` names mapped to mesh axes by ``rules``, or
  ``nn.with_partitioning`` mesh axes); the optimizer state follows its parameter.

A strategy places the state (:meth:`Strategy.place_state`), places batches
(:meth:`Strategy.place_batch`, which builds global arrays from per-process data when several
processes run), and compiles steps (:meth:`Strategy.compile`) with fixed shardings, so a step
compiles once and keeps its state where it is. Placement itself is
:func:`gyre.core._placement.place`, shared with prefetching.

Strategies are looked up by name in a registry (:func:`get_strategy`); ciclo's names
(``"jit_donate"``, ``"data_parallel_donate"``, ...) are registered too, and
:func:`register_strategy` adds your own, with ciclo's signature.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from gyre.core._errors import describe, explain, suggest
from gyre.core._placement import place

Step = Callable[[Any, Any], tuple[Any, Any]]
#: flax's logical axis rules: ``(logical_name, mesh_axis)`` pairs in order of precedence.
Rules = Sequence[tuple[str, str | Sequence[str] | None]]
StrategyConstructor = Callable[[], "Strategy"]
C = TypeVar("C", bound=Callable[[], Any])


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

    def __init__(self, *, donate: bool | None = None, donate_args: bool | None = None) -> None:
        self.donate = _donation(donate, donate_args)

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
        # copy: the state is donated to its step, which must not delete the caller's arrays
        return place(_numbers_as_arrays(state), shardings, copy=True)

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
        return place(batch, lambda leaf: self.batch_sharding(leaf, axis=axis))

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
        step = self._traced_in_context(step)
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

    def sharded_init(self, init_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``init_fn`` compiled so the state it builds lands directly on
        :meth:`state_sharding` (nothing is built whole on one device first).

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> init = gyre.DataParallel().sharded_init(lambda x: {"w": x * 2})
            >>> init(jnp.ones(3))["w"].sharding.spec
            P()
        """
        if not self.compiles:
            return init_fn
        traced = self._traced_in_context(init_fn)

        def init(*args: Any, **kwargs: Any) -> Any:
            shardings = self.state_sharding(jax.eval_shape(traced, *args, **kwargs))
            return jax.jit(traced, out_shardings=shardings)(*args, **kwargs)

        return init

    def lift_batch_size(self, batch_size: int) -> int:
        """ciclo's helper: the batch size each process should load so that every device on
        the data axis gets ``batch_size`` examples (``batch_size`` on one device).

        Example:
            >>> import gyre, jax
            >>> gyre.get_strategy("jit").lift_batch_size(32)
            32
            >>> gyre.DataParallel().lift_batch_size(32) == 32 * jax.device_count()
            True
        """
        return batch_size * _local_share(self.data_size)

    def _traced_in_context(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as it should be traced under this strategy (subclasses add contexts)."""
        return fn


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

    ``gyre.JIT`` is the same class under ciclo's name; unlike ciclo's, it donates the state
    unless ``donate=False`` (ciclo's ``donate_args=`` is accepted too).

    Args:
        device: the device; by default ``jax.devices()[0]``.
        donate: donate the state to the compiled step (default ``True``).
        donate_args: ciclo's name for ``donate``.

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
    """The batch split over ``data_axis`` of a mesh, the state replicated.

    Args:
        mesh: the device mesh; by default every device in one axis named ``data_axis``.
        data_axis: the mesh axis (or axes) the batch is split over.
        donate: donate the state to the compiled step (default ``True``).
        donate_args: ciclo's name for ``donate``.

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
        donate: bool | None = None,
        donate_args: bool | None = None,
    ) -> None:
        super().__init__(mesh=mesh, data_axis=data_axis, donate=donate, donate_args=donate_args)
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


class SPMD(DataParallel):
    """Parameters sharded as their flax annotations say, the batch split over ``data_axis``.

    Annotate a linen model's parameters with ``nn.with_logical_partitioning(init, ("embed",
    "mlp"))`` and map the logical names to mesh axes with ``rules``
    (``[("mlp", "model"), ("embed", None)]``, flax's rules, in order of precedence);
    ``nn.with_partitioning(init, (None, "model"))`` names mesh axes directly. Leaves without
    an annotation are replicated. The annotations stay in the state as flax's boxes
    (``nn.LogicallyPartitioned``), so ``tx.init`` boxes the optimizer state the same way and
    it is sharded like its parameter; the model's ``apply`` unboxes them, gradients and optax
    updates keep them, and ``flax.linen.meta.unbox(state.params)`` gives plain arrays.

    Steps are traced under the rules and the mesh, so ``nn.with_logical_constraint`` inside
    the model constrains activations too.

    Args:
        mesh: the device mesh, with ``Auto`` axes (``jax.sharding.Mesh(devices, names)``, or
            ``jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Auto,) * n)``);
            by default every device on one axis named ``data_axis``.
        rules: ``(logical_name, mesh_axis)`` pairs; by default the rules flax holds when the
            strategy is built (``with nn.logical_axis_rules(rules):``), else none (every
            logically named dimension replicated). A box's own rules win.
        data_axis: the mesh axis (or axes) the batch is split over.
        donate: donate the state to the compiled step (default ``True``).
        donate_args: ciclo's name for ``donate``.

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
            raise ValueError(
                explain(
                    "the spmd strategy needs a mesh whose axes are Auto",
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
                raise ValueError(
                    explain(
                        "a parameter's partitioning names an axis the mesh does not have",
                        expected=f"mesh axes among {list(self.mesh.axis_names)}",
                        received=f"{spec} for {where} (from "
                        f"{describe(getattr(leaf, 'names', leaf))})",
                        fix="map the logical names to the mesh's axes in rules=[(logical, "
                        "mesh_axis), ...], or build the mesh with that axis",
                    )
                ) from err
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
                raise ValueError(
                    explain(
                        f"{where} cannot be split over mesh axis {axes!r} ({ways} devices)",
                        expected=f"dimension {dim} of {where} divisible by {ways}",
                        received=f"shape {tuple(shape)} with partition spec {spec}",
                        fix="change the rules so this dimension maps to a smaller axis (or "
                        "None), or choose sizes that divide evenly",
                    )
                )

    def _traced_in_context(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        rules, mesh = self.rules, self.mesh

        def under_rules(*args: Any, **kwargs: Any) -> Any:
            with _spmd_context(rules, mesh):
                return fn(*args, **kwargs)

        return under_rules


@contextlib.contextmanager
def _spmd_context(rules: Rules, mesh: Mesh) -> Iterator[None]:
    """flax's logical rules and the mesh, while a step is traced (so the model's
    ``nn.with_logical_constraint`` calls constrain its activations)."""
    with nn.logical_axis_rules(rules), jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        yield


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


#: ciclo's name for :class:`Jit`.
JIT = Jit


# -- the registry ------------------------------------------------------------------------------

#: Every strategy name and the constructor it stands for (see :func:`register_strategy`).
STRATEGIES: dict[str, StrategyConstructor] = {}


@overload
def register_strategy(name: str) -> Callable[[C], C]: ...


@overload
def register_strategy(name: str, *, constructor: StrategyConstructor, replace: bool = ...) -> None: ...


@overload
def register_strategy(name: str, *, replace: bool) -> Callable[[C], C]: ...


def register_strategy(
    name: str, *, constructor: StrategyConstructor | None = None, replace: bool = False
) -> Callable[[C], C] | None:
    """Registers a strategy under ``name``, for ``strategy="name"`` anywhere gyre takes one.

    ciclo's signature: ``register_strategy(name, constructor=fn)`` registers at once;
    ``register_strategy(name)`` is a decorator of the constructor (a :class:`Strategy`
    subclass or a function returning a strategy), returned unchanged. The constructor is
    called with no arguments each time the name is looked up.

    Args:
        name: the name (a non-empty string).
        constructor: builds the strategy; leave it out to use the decorator form.
        replace: allow replacing a registered name (ciclo refuses it, as gyre does by default).

    Raises:
        ValueError: the name is taken (and ``replace`` is not set), or not a string.
        TypeError: the constructor is not callable.

    Example:
        >>> import gyre, jax, numpy as np
        >>> gyre.register_strategy("doc_jit_keep", constructor=lambda: gyre.Jit(donate=False))
        >>> gyre.get_strategy("doc_jit_keep").donate
        False
        >>> @gyre.register_strategy("doc_two_devices")
        ... def two_devices():
        ...     mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:2]), ("data",))
        ...     return gyre.DataParallel(mesh=mesh)
        >>> gyre.get_strategy("doc_two_devices").data_size
        2
    """
    if not isinstance(name, str) or not name:
        raise ValueError(
            explain(
                "a strategy name must be a non-empty string",
                expected="e.g. register_strategy('my_strategy', constructor=MyStrategy)",
                received=describe(name),
                fix="pass the name as a string",
            )
        )

    def register(fn: C) -> C:
        if not callable(fn):
            raise TypeError(
                explain(
                    f"the constructor of strategy {name!r} is not callable",
                    expected="a Strategy subclass or a function with no arguments that returns a "
                    "gyre.Strategy",
                    received=describe(fn),
                    fix=f"register_strategy({name!r}, constructor=lambda: gyre.Jit(donate=False))",
                )
            )
        if name in STRATEGIES and not replace:
            raise ValueError(
                explain(
                    f"strategy {name!r} is already registered",
                    expected=f"a new name (registered: {sorted(STRATEGIES)})",
                    received=f"register_strategy({name!r}, ...) a second time",
                    fix="choose another name, or pass replace=True to replace it on purpose",
                )
            )
        STRATEGIES[name] = fn
        return fn

    if constructor is None:
        return register
    register(constructor)  # type: ignore[arg-type]
    return None


def get_strategy(strategy: str | Strategy) -> Strategy:
    """A strategy from its registered name, or as given when it already is one.

    Names: ``"eager"``, ``"jit"``, ``"data_parallel"``, ``"fsdp"``, ``"spmd"``; ciclo's
    ``"jit_donate"``, ``"data_parallel_donate"`` and ``"data-parallel"`` (gyre donates the
    state with ``"jit"`` and ``"data_parallel"`` too); ``"dp"``; and any name given to
    :func:`register_strategy`.

    Example:
        >>> import gyre
        >>> gyre.get_strategy("data-parallel").name
        'data_parallel'
        >>> gyre.get_strategy("jti")
        Traceback (most recent call last):
        ValueError: unknown strategy 'jti'
        ...
          fix: pick a registered name. Did you mean 'jit'?
    """
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str):
        constructor = STRATEGIES.get(strategy)
        if constructor is not None:
            built = constructor()
            if not isinstance(built, Strategy):
                raise TypeError(
                    explain(
                        f"the constructor registered as strategy {strategy!r} did not build a "
                        "gyre.Strategy",
                        expected="a gyre.Strategy (e.g. a subclass of gyre.Jit or gyre.DataParallel)",
                        received=describe(built),
                        fix=f"register_strategy({strategy!r}, constructor=..., replace=True) with "
                        "a constructor that returns a gyre.Strategy",
                    )
                )
            return built
    valid = list(STRATEGIES)
    raise ValueError(
        explain(
            f"unknown strategy {strategy!r}",
            expected=f"one of {valid}, or a gyre.Strategy object such as "
            "gyre.DataParallel(mesh=..., data_axis=...)",
            received=describe(strategy),
            fix="pick a registered name." + (suggest(strategy, valid) if isinstance(strategy, str) else ""),
        )
    )


register_strategy("eager", constructor=Eager)
register_strategy("jit", constructor=Jit)
register_strategy("data_parallel", constructor=DataParallel)
register_strategy("fsdp", constructor=FSDP)
register_strategy("spmd", constructor=SPMD)
# ciclo's names (its "jit" and "data_parallel" do not donate; gyre's do: README)
register_strategy("jit_donate", constructor=lambda: Jit(donate=True))
register_strategy("data_parallel_donate", constructor=lambda: DataParallel(donate=True))
register_strategy("data-parallel", constructor=DataParallel)
register_strategy("dp", constructor=DataParallel)


# -- helpers -----------------------------------------------------------------------------------


def _donation(donate: bool | None, donate_args: bool | None) -> bool:
    """The donation flag from gyre's ``donate`` and ciclo's ``donate_args`` (default True)."""
    if donate is not None and donate_args is not None and bool(donate) != bool(donate_args):
        raise ValueError(
            explain(
                "donate= and donate_args= disagree",
                expected="one of them (donate_args is ciclo's name for donate)",
                received=f"donate={donate!r}, donate_args={donate_args!r}",
                fix="pass only donate=",
            )
        )
    chosen = donate if donate is not None else donate_args
    return True if chosen is None else bool(chosen)


def _local_share(n: int) -> int:
    """The divisor a per-process batch dimension must respect."""
    processes = jax.process_count()
    return n // processes if processes > 1 and n % processes == 0 else n


def _numbers_as_arrays(tree: Any) -> Any:
    """Python numbers in a state become arrays, so the first step sees the same types as the
    next ones (a Python float in, an array out, would compile the step twice)."""
    return jax.tree_util.tree_map(
        lambda x: np.asarray(x) if isinstance(x, bool | int | float | complex) else x, tree
    )
