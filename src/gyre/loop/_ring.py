"""The history written by the step: a jitted step wrapped once so that each call also writes
its logs into a device *ring*, one row per step, the write index kept in the ring itself.

The ring is donated to every call, so the write is in place, and the step returns the ring
instead of its logs: no per-step log arrays for Python to rebuild. A block of steps ends by
*sealing* the ring: its rows become the block's stacked logs (a row per step, like a fused
step's), and the next block writes a fresh ring. A step whose logs change structure (a new
batch shape that logs differently) raises :class:`RingMismatch` while it is traced, before
anything runs: the block ends there, and the next opens a ring of the new structure.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core import _compat
from gyre.core._logs import Logs
from gyre.loop._binding import Invoker
from gyre.loop._fuse import _TRACING, step_body

#: Rows of a ring: the most steps of one block.
ROWS = 256
#: Elements of one step's log value beyond which it is not ringed (256 copies of an image
#: batch would not fit): the step returns it, and the block keeps it per step.
LARGEST = 1 << 16


class RingMismatch(Exception):
    """The step's logs do not fit the open ring (raised while tracing: nothing ran)."""


def _write(buffers: list[Any], index: Any, logs: Logs, treedef: Any) -> tuple[list[Any], list[Any]]:
    """The ring with this step's row written, and the step's large values (``None`` buffers)."""
    leaves, structure = jax.tree_util.tree_flatten(logs)
    if structure != treedef or len(leaves) != len(buffers):
        raise RingMismatch
    for b, x in zip(buffers, leaves, strict=True):
        if b is not None and (b.shape[1:] != jnp.shape(x) or b.dtype != jnp.result_type(x)):
            raise RingMismatch
    written = [None if b is None else b.at[index].set(x) for b, x in zip(buffers, leaves, strict=True)]
    return written, [x for b, x in zip(buffers, leaves, strict=True) if b is None]


_JITTED = type(jax.jit(lambda x: x))

_RINGS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _ring_function(invoker: Invoker, step: Any) -> Any:
    """The jitted ``(state, batch, (buffers, index), treedef) -> (state, (buffers, index + 1))``
    (``treedef`` the logs' structure: static), cached
    per step (traced with the first invoker, as fused scans are). The state is donated when
    the step donates it."""
    try:
        cached = _RINGS.get(step)
        tracing = _TRACING.setdefault(step, invoker)
    except TypeError:  # not weakly referenceable: no cache
        cached, tracing = None, invoker
    if cached is not None:
        return cached
    body = step_body(tracing)

    def ringed(state: Any, batch: Any, ring: Any, treedef: Any) -> tuple[Any, Any, list[Any]]:
        state, logs = body(state, batch)
        buffers, index = ring
        written, large = _write(buffers, index, logs, treedef)
        return state, (written, index + 1), large

    fn = jax.jit(ringed, donate_argnums=(0, 2) if donates(step) else (2,), static_argnums=3)
    try:
        _RINGS[step] = fn
    except TypeError:
        pass
    return fn


def donates(step: Any) -> bool:
    """Whether a compiled step donates its state: a ``jax.jit`` function's own donation, a
    managed step's ``donates`` (``None``: a train step, which donates).

    Example:
        >>> import jax
        >>> donates(jax.jit(lambda s, b: s, donate_argnums=0)), donates(jax.jit(lambda s, b: s))
        (True, False)
    """
    if _compat.is_jitted(step):
        donated = _compat.donated_argnums(step)
        return bool(donated and 0 in donated)
    return getattr(step, "donates", False) is not False


def ringable(step: Any, state: Any) -> bool:
    """Whether a step can write the history itself: a ``jax.jit`` function, or a managed step
    (``pure`` and ``donates``) on one device of data (a sharded batch is placed on the host
    side of the step's call). A wrapper of a jitted function is not: it must be called.

    Example:
        >>> import jax
        >>> import gyre
        >>> step = jax.jit(lambda s, b: s)
        >>> ringable(step, 0), ringable(lambda s, b: s, 0), ringable(gyre.testing.assert_compiled_once(step), 0)
        (True, False, False)
    """
    if type(step) is _JITTED:  # a jax.jit function itself (a wrapper that counts or times
        return True  # its calls, such as gyre.testing.assert_compiled_once, is called each step)
    strategy = getattr(state, "strategy", None)
    own = getattr(step, "__dict__", {})  # (not a wrapper's delegated attributes)
    return "pure" in own and "donates" in own and getattr(strategy, "data_size", 1) == 1


class Ring:
    """A jitted step that writes its logs into a device ring (see the module docs).

    Example:
        >>> import gyre, jax, numpy as np
        >>> from gyre.loop._binding import bind
        >>> step = jax.jit(lambda s, b: (gyre.logs().add_metric("b", b), s + b))
        >>> ring = Ring(bind(step), step)
        >>> state = np.float32(0)
        >>> ring.open(state, np.float32(1))
        >>> for b in (1.0, 2.0, 3.0):
        ...     state = ring.call(state, np.float32(b))
        >>> ring.seal().metrics.b[:3].tolist(), float(state)
        ([1.0, 2.0, 3.0], 6.0)
    """

    def __init__(self, invoker: Invoker, step: Any) -> None:
        self.invoker = invoker
        self.step = step
        self.fn = _ring_function(invoker, step)
        self.zeros: Any = None  # makes a fresh ring, in one compiled call
        self.template: Any = None  # the logs of one step, as (leaf shapes, tree structure)
        self.treedef: Any = None  # the logs' structure (a static argument of the ring step)
        self.buffers: Any = None  # (a ROWS-row array per log value, write index): the open ring
        self.large: list[list[Any]] = []  # per step written, its large values

    def open(self, state: Any, batch: Any, *, again: bool = False) -> None:
        """Opens a fresh ring for the step's logs on ``batch`` (traced once, or ``again`` after
        a :class:`RingMismatch`): a ``ROWS``-row array per value, but for values over
        :data:`LARGEST` elements, which the step returns, kept per step (:attr:`large`)."""
        if self.template is None or again:
            self.template = _template(self.invoker, self.step, state, batch)
            self.zeros = _zeros_maker(self.template[0], _placement(state))
        self.treedef = self.template[1]
        self.buffers = self.zeros()
        self.large = []

    def call(self, state: Any, batch: Any) -> Any:
        """One step: returns the new state; its logs are written into the ring."""
        state, self.buffers, large = self.fn(state, batch, self.buffers, self.treedef)
        if large:
            self.large.append(large)
        return state

    def seal(self) -> Logs:
        """The open ring's stacked logs (``ROWS`` rows, the first ones written; large values
        stacked, a row per step written); the ring is closed."""
        buffers, _ = self.buffers
        large = iter(zip(*self.large, strict=True)) if self.large else iter(())
        leaves = [jnp.stack(next(large)) if b is None else b for b in buffers]
        self.buffers, self.large = None, []
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


_TEMPLATES: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def _template(invoker: Invoker, step: Any, state: Any, batch: Any) -> tuple[list[Any], Any]:
    """The step's logs on ``(state, batch)`` as (leaf shapes, structure): traced once per step
    and argument shapes (cached: every loop over the same step, each evaluation, opens a ring)."""
    leaves, structure = jax.tree_util.tree_flatten((state, batch))
    key = (structure, tuple((jnp.shape(x), jnp.result_type(x)) for x in leaves))
    try:
        cached = _TEMPLATES.setdefault(step, {})
    except TypeError:  # not weakly referenceable
        cached = {}
    if key not in cached:
        _, logs = jax.eval_shape(step_body(invoker), state, batch)
        cached[key] = jax.tree_util.tree_flatten(logs)
    return cached[key]


def _zeros_maker(leaves: list[Any], placement: Any) -> Any:
    """A compiled ``() -> (buffers, index)``: a fresh ring in one call (with ``placement``)."""
    return _zeros_of(tuple(None if _large(x) else ((ROWS, *x.shape), jnp.dtype(x.dtype)) for x in leaves), placement)


@functools.lru_cache(maxsize=256)
def _zeros_of(shapes: tuple[Any, ...], placement: Any) -> Any:
    def zeros() -> tuple[list[Any], Any]:
        return [None if s is None else jnp.zeros(*s) for s in shapes], jnp.zeros((), jnp.int32)

    return jax.jit(zeros) if placement is None else jax.jit(zeros, out_shardings=placement)


def _placement(state: Any) -> Any:
    """Where the ring lives: committed where a committed state is (its device, or its mesh,
    replicated), else uncommitted (None), so that the step's first call and the next see the
    same placements (a committed argument commits the outputs: a ring or a state that changed
    from uncommitted to committed after the first call would compile the step twice)."""
    for leaf in jax.tree_util.tree_leaves(state):
        sharding = getattr(leaf, "sharding", None)
        if sharding is None or not getattr(leaf, "committed", False):
            continue
        if isinstance(sharding, jax.sharding.NamedSharding):
            return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
        if len(sharding.device_set) == 1:
            return sharding
        return None
    return None  # an uncommitted state: so is the ring, and so are the step's outputs


def _large(x: Any) -> bool:
    return math.prod(x.shape) > LARGEST
