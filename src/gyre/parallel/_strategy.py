"""The strategy base class: how a step ``(state, batch) -> (logs, state)`` is placed and compiled,
on ``jax.sharding``."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, Sharding, SingleDeviceSharding

from gyre.core._errors import explain, suggest
from gyre.core._placement import place

Step = Callable[[Any, Any], tuple[Any, Any]]


class Strategy:
    """Base class: subclasses define the mesh and shardings. Strategies configured alike compare
    equal (one jit cache entry).

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

    _rows_agreed = False  # its first batch was placed (several processes: with as many rows in each)

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
        """The state copied onto its shardings.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> gyre.get_strategy("jit").place_state({"w": jnp.ones(2)})["w"].shape
            (2,)
        """
        shardings = self.state_sharding(state)
        if jax.process_count() > 1:  # a compiled identity: device_put makes arrays orbax cannot save
            host = jax.device_get(state)
            refuse_differing_states(host)
            return jax.jit(lambda tree: tree, out_shardings=shardings)(host)
        # copy: the state is donated to its step, which must not delete the caller's arrays
        return place(_numbers_as_arrays(state), shardings, copy=True)

    def place_batch(self, batch: Any, *, axis: int = 0) -> Any:
        """The batch moved onto the batch sharding; with several processes, each process's batch
        becomes its slice of one global batch.

        Example:
            >>> import gyre, numpy as np
            >>> gyre.get_strategy("jit").place_batch((np.ones((4, 2)), np.zeros(4)))[0].shape
            (4, 2)
        """
        leaves = jax.tree_util.tree_leaves(batch)
        if all(isinstance(x, jax.Array) and x.sharding == self.batch_sharding(x, axis=axis) for x in leaves):
            return batch  # already placed (prefetched): nothing to move or check
        self.check_batch(batch, axis=axis)
        if not self._rows_agreed:  # once: the processes' first batches
            if jax.process_count() > 1:
                refuse_differing_batches(batch, axis)
            self._rows_agreed = True
        return place(batch, lambda leaf: self.batch_sharding(leaf, axis=axis))

    def check_batch(self, batch: Any, *, axis: int = 0) -> None:
        """Raises a clear error when the batch cannot be split over the data axis."""
        n = self.data_size
        if n == 1:
            return
        share = _local_share(n)
        for path, leaf in jax.tree_util.tree_leaves_with_path(batch):
            shape = np.shape(leaf)
            if len(shape) > axis and shape[axis] % share != 0:
                where = jax.tree_util.keystr(path) or "the batch"
                if share != n:  # several processes: the batch is this process's share of the global one
                    rows, processes = shape[axis], jax.process_count()
                    raise ValueError(explain(
                        f"this process's batch of {rows} cannot be split evenly over its {share} devices",
                        expected=f"each process's batch a multiple of {share} (the {n} devices on the data "
                        f"axis are {processes} processes' {share}; the global batch is the {processes} batches together)",
                        received=f"{where} with shape {shape} in process {jax.process_index()}",
                        fix=f"feed each process a batch such as {max(share, rows - rows % share)} (its rows of the "
                        "global batch), or drop the remainder batch (gyre.data.batches drops it unless "
                        "drop_remainder=False)"))
                raise ValueError(explain(
                    f"a batch of {shape[axis]} cannot be split evenly over {n} devices",
                    expected=f"a batch size that is a multiple of {n} (the devices on "
                    f"the data axis{'' if jax.process_count() == 1 else ', all processes together'})",
                    received=f"{where} with shape {shape}",
                    fix=f"use a batch size such as {max(n, shape[axis] - shape[axis] % n)}, "
                    "drop the remainder batch (gyre.data.batches drops it unless drop_remainder=False), "
                    "or pad it (a test step that takes mask= gets every batch padded to one size, a "
                    "list's largest batch or the first one's, and masks the padding)"))

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
        """``step`` compiled for this strategy, the new state kept on :meth:`state_sharding` and the
        logs replicated.

        The state is donated unless the strategy or this call says ``donate=False`` (evaluation
        should not donate). Batches must be placed by :meth:`place_batch`; ``state`` is not needed.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> strategy = gyre.get_strategy("jit")
            >>> state = strategy.place_state(jnp.zeros(()))
            >>> run = strategy.compile(lambda s, b: (gyre.logs(), s + b.sum()), state)
            >>> float(run(state, strategy.place_batch(jnp.ones(4)))[1])
            4.0
        """
        if not self.compiles:  # eager: the step as it is
            return step
        if self.mesh is None:
            refuse_one_device(self)
            return self.jit(step, donate=self.donate if donate is None else donate, **jit_kwargs)
        step = self._traced_in_context(step)
        replicated = self.replicated()

        def constrain(sharding: Sharding, subtree: Any) -> Any:  # one sharding may cover a subtree (a flax box)
            return jax.tree_util.tree_map(
                lambda x: jax.lax.with_sharding_constraint(x, sharding) if isinstance(x, jax.Array) else x,
                subtree,
            )

        def placed_step(state: Any, batch: Any, **kwargs: Any) -> tuple[Any, Any]:
            logs, new_state = step(state, batch, **kwargs)
            logs = constrain(replicated, logs)
            new_state = jax.tree_util.tree_map(constrain, self.state_sharding(new_state), new_state)
            return logs, new_state

        return jax.jit(placed_step, **_jit_options(jit_kwargs, self.donate if donate is None else donate))

    def jit(self, fn: Callable[..., Any], *, donate: bool = False, **jit_kwargs: Any) -> Callable[..., Any]:
        """``fn`` compiled with ``jax.jit`` under this strategy's mesh and rules, outputs
        unconstrained (:meth:`compile` is the form for steps).

        ``donate`` donates the first argument unless ``jit_kwargs`` names its own donation; a
        ``jit_kwargs`` key ``jax.jit`` lacks raises ``TypeError`` here.

        Example:
            >>> import gyre, jax.numpy as jnp
            >>> f = gyre.get_strategy("jit").jit(lambda x, y: {"sum": x + y})
            >>> float(f(jnp.ones(()), jnp.ones(()))["sum"])
            2.0
        """
        check_jit_options(jit_kwargs)
        compiled = jax.jit(self._traced_in_context(fn), **_jit_options(jit_kwargs, donate))
        return compiled if self.compiles else fn

    def sharded_init(self, init_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``init_fn`` compiled so the state it builds lands directly on :meth:`state_sharding`.

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
        """ciclo's helper: the batch size each process loads so every device on the data axis gets
        ``batch_size``.

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


def check_jit_options(options: Mapping[str, Any]) -> None:
    """Raises ``TypeError`` (jaxloop's type) for an option ``jax.jit`` does not have, before
    compiling."""
    known = [name for name in inspect.signature(jax.jit).parameters if name != "fun"]
    for name in options:
        if name not in known:
            raise TypeError(explain(
                f"compile() got an unexpected keyword argument {name!r}.{suggest(name, known)}",
                expected=f"options of jax.jit: {', '.join(known)}", received=f"{name}={options[name]!r}",
                fix=f"drop {name}=, or spell it as jax.jit does"))


def refuse_one_device(strategy: Strategy) -> None:
    """Raises when a compiled one-device strategy would run in a run of several processes: each
    process would train a model of its own on its own rows (only process 0's logged, its
    checkpoints refused by orbax)."""
    if strategy.compiles and strategy.mesh is None and jax.process_count() > 1:
        raise ValueError(explain(
            f"strategy {strategy.name!r} runs on one device, and this run has {jax.process_count()} processes",
            expected="a strategy over every process's devices, so that the processes train one model "
            "on one global batch: 'data_parallel', 'fsdp' or 'spmd'",
            received=f"strategy {strategy.name!r} in process {jax.process_index()} of {jax.process_count()} "
            "(each process would train its own model on its own rows)",
            fix="pass strategy='data_parallel' (gyre.fit, ManagedState.create), set trainer.num_devices: "
            f"{jax.device_count()} for the trainer, or use jaxloop's DataParallelPartitioner"))


def _gathered(mine: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Every process's ``mine`` (one gather), and the processes whose value is not process 0's."""
    from jax.experimental import multihost_utils

    every = np.asarray(multihost_utils.process_allgather(mine))
    return every, [i for i in range(len(every)) if not np.array_equal(every[i], every[0])]


def refuse_differing_states(host_state: Any) -> None:
    """Raises unless every process holds the same state (one gather of a digest): the processes
    each give their own copy of a replicated value, and JAX trusts them to agree; a state
    initialised per process (its own seed) would train on as copies that never meet."""
    digest = hashlib.blake2b(digest_size=8)
    for leaf in jax.tree_util.tree_leaves(host_state):
        try:
            array = np.asarray(leaf)
        except Exception:  # noqa: BLE001 - a leaf with no numbers (a key, an object): not compared
            continue
        if array.dtype.kind in "biufc":
            digest.update(f"{array.shape}{array.dtype}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    _, differ = _gathered(np.frombuffer(digest.digest(), np.uint32))
    if differ:
        raise ValueError(explain(
            "the processes hold different initial states",
            expected="the same parameters and optimizer state in every process (a replicated state is "
            "each process's own copy, trusted to be equal)",
            received=f"a state in processes {differ} that differs from process 0's",
            fix="initialise with the same seed in every process (jax.random.key(0), not a key or a numpy "
            "generator seeded by the process index), or load the same checkpoint in all of them"))


def refuse_differing_batches(batch: Any, axis: int = 0) -> None:
    """Raises unless every process's batch has as many rows (one gather, at the first batch): each
    gives its rows of one global batch, and JAX trusts them to agree; processes feeding 8 and 6 rows
    trained on silently, each logging another loss."""
    rows = [np.shape(leaf)[axis] for leaf in jax.tree_util.tree_leaves(batch) if np.ndim(leaf) > axis]
    every, differ = _gathered(np.asarray(rows[:1] or [0], np.int64))
    if differ:
        raise ValueError(explain(
            "the processes feed batches of different sizes",
            expected="the same number of rows in every process's batch (its rows of one global batch)",
            received=f"rows per process: {every.ravel().tolist()}",
            fix="give every process the same batch size (global batch / processes), e.g. "
            "gyre.data.process_share(gyre.data.batches((x, y), global_batch)) over the same arrays"))


def _jit_options(jit_kwargs: Mapping[str, Any], donate: bool) -> dict[str, Any]:
    """``jax.jit``'s options: ``jit_kwargs``, donating the first argument when ``donate`` unless
    they name their own donation."""
    if "donate_argnums" in jit_kwargs or "donate_argnames" in jit_kwargs:
        return dict(jit_kwargs)
    return {**jit_kwargs, "donate_argnums": (0,) if donate else ()}


def _donation(donate: bool | None, donate_args: bool | None) -> bool:
    """The donation flag from gyre's ``donate`` and ciclo's ``donate_args`` (default True)."""
    if donate is not None and donate_args is not None and bool(donate) != bool(donate_args):
        raise ValueError(explain(
            "donate= and donate_args= disagree",
            expected="one of them (donate_args is ciclo's name for donate)",
            received=f"donate={donate!r}, donate_args={donate_args!r}", fix="pass only donate="))
    chosen = donate if donate is not None else donate_args
    return True if chosen is None else bool(chosen)


def _local_share(n: int) -> int:
    """The divisor a per-process batch dimension must respect."""
    processes = jax.process_count()
    return n // processes if processes > 1 and n % processes == 0 else n


def _numbers_as_arrays(tree: Any) -> Any:
    """Python numbers as arrays, so the first step sees the types of the next (one compilation)."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x) if isinstance(x, bool | int | float | complex) else x, tree)
