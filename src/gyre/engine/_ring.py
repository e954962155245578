"""The history written by the step: a jitted step wrapped once so that each call also writes its
logs into a donated ``uint32`` device *ring*, one row per step (see README.md here).

Sealing the ring at a block's end gives the block's stacked logs, bit for bit a fused step's.
A step whose logs change structure raises :class:`RingMismatch` while traced.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core import _compat
from gyre.core._clock import infer_batch_size
from gyre.core._logs import Logs
from gyre.engine._binding import Invoker
from gyre.engine._fuse import TRACING, step_body

#: Rows of a ring: the most steps of one block.
ROWS = 256
#: Elements of one step's log value beyond which it is not ringed (256 copies of an image
#: batch would not fit): the step returns it, and the block keeps it per step.
LARGEST = 1 << 16


class RingMismatch(Exception):
    """The step's logs do not fit the open ring (raised while tracing: nothing ran)."""


class Layout(NamedTuple):
    """Where each log value lives in a ring row (``None``: returned by the step, not held)."""

    leaves: tuple[tuple[tuple[int, ...], Any, int, int] | None, ...]
    width: int
    treedef: Any


def _words(dtype: Any) -> int:
    """uint32 words per element of ``dtype``: 1 or 2, or 0 when it is not ringed (complex)."""
    dtype = np.dtype(dtype)
    return 0 if dtype.kind == "c" or dtype.itemsize > 8 else (2 if dtype.itemsize == 8 else 1)


def layout_of(leaves: list[Any], treedef: Any) -> Layout:
    """The ring layout of logs with these leaves (arrays or shape-dtype structs)."""
    out, column = [], 0
    for x in leaves:
        words = _words(x.dtype) * math.prod(x.shape)
        if not words or math.prod(x.shape) > LARGEST:
            out.append(None)
            continue
        out.append((tuple(x.shape), np.dtype(x.dtype), column, words))
        column += words
    return Layout(tuple(out), column, treedef)


_UNSIGNED = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}  # a value's bits, by its bytes


def _to_words(x: Any) -> Any:
    """A value's bits as a flat uint32 vector (see :class:`Layout`)."""
    x = jnp.asarray(x)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32).ravel()
    size = x.dtype.itemsize
    if size == 8:
        return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
    return jax.lax.bitcast_convert_type(x, _UNSIGNED[size]).astype(jnp.uint32).ravel()


def _from_words(words: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """The inverse of :func:`_to_words` on ``rows`` of words: ``(rows, *shape)`` of ``dtype``."""
    rows = words.shape[0]
    if dtype == np.bool_:
        return (words != 0).reshape(rows, *shape)
    if dtype.itemsize == 8:
        return jax.lax.bitcast_convert_type(words.reshape(rows, *shape, 2), dtype)
    return jax.lax.bitcast_convert_type(words.astype(_UNSIGNED[dtype.itemsize]), dtype).reshape(rows, *shape)


def _write(ring: Any, logs: Logs, layout: Layout) -> tuple[Any, list[Any]]:
    """The ring with this step's row written, and the step's values it does not hold."""
    leaves, structure = jax.tree_util.tree_flatten(logs)
    if structure != layout.treedef or len(leaves) != len(layout.leaves):
        raise RingMismatch
    for spec, x in zip(layout.leaves, leaves, strict=True):
        if spec is not None and (spec[0] != jnp.shape(x) or spec[1] != jnp.result_type(x)):
            raise RingMismatch
    held = [_to_words(x) for spec, x in zip(layout.leaves, leaves, strict=True) if spec is not None]
    if held:
        index = ring[ROWS, 0].astype(jnp.int32)
        ring = jax.lax.dynamic_update_slice(ring, jnp.concatenate(held)[None], (index, jnp.int32(0)))
        ring = ring.at[ROWS, 0].add(jnp.uint32(1))
    return ring, [x for spec, x in zip(layout.leaves, leaves, strict=True) if spec is None]


_RINGS: weakref.WeakKeyDictionary[Any, dict[tuple[Layout, bool, Any], Any]] = weakref.WeakKeyDictionary()


def _ring_function(invoker: Invoker, step: Any, layout: Layout, sized: bool, treedef: Any) -> tuple[Any, dict[str, Any]]:
    """The cached jitted ``(state's leaves, batch, ring) -> (leaves, ring, {batch size: not
    held})`` for states of structure ``treedef``, and ``{"def": the structure of the state it
    returns}``, set when traced: ``treedef`` itself, or another only when the state was ``None``
    (a first step makes it; ``check_structure`` refuses any other change).

    A state travels as its leaves: jit's dispatch then builds no state object (a flax
    dataclass, an optax namedtuple) per call."""
    try:
        by_layout = _RINGS.setdefault(step, {})
        tracing = TRACING.setdefault(step, invoker)
    except TypeError:  # not weakly referenceable: no cache
        by_layout, tracing = {}, invoker
    found = by_layout.get((layout, sized, treedef))
    if found is None:
        body, out = step_body(tracing), {"def": treedef}

        def ringed(leaves: Any, batch: Any, ring: Any) -> tuple[Any, Any, dict[int, list[Any]]]:
            size = infer_batch_size(batch) if sized else 0
            state, logs = body(jax.tree_util.tree_unflatten(treedef, leaves), batch)
            leaves, structure = jax.tree_util.tree_flatten(state)
            out["def"] = treedef if structure == treedef else structure
            ring, large = _write(ring, logs, layout)
            return leaves, ring, {size: large}

        fn = jax.jit(ringed, donate_argnums=(0, 2) if donates(step) else (2,))
        found = by_layout[(layout, sized, treedef)] = (fn, out)
    return found


def compilations(step: Any) -> int:
    """How many times the ring steps of ``step`` compiled (every layout's, added up)."""
    return sum(fn._cache_size() for fn, _ in _RINGS.get(step, {}).values())


def donates(step: Any) -> bool:
    """Whether a compiled step donates its state: a ``jax.jit`` function's own donation, a
    managed step's ``donates`` (``None``: a train step, which donates)."""
    if _compat.is_jitted(step):
        donated = _compat.donated_argnums(step)
        return bool(donated and 0 in donated)
    return getattr(step, "donates", False) is not False


def ringable(step: Any, state: Any) -> bool:
    """Whether a step can write the history itself: a ``jax.jit`` function or a managed step."""
    if type(step) is _compat.JITTED:  # a jax.jit function itself (a wrapper that counts or times
        return True  # its calls, such as gyre.testing.assert_compiled_once, is called each step)
    strategy = getattr(state, "strategy", None)
    own = getattr(step, "__dict__", {})  # (not a wrapper's delegated attributes)
    if not getattr(strategy, "compiles", True):  # "eager": the step runs op by op, as asked
        return False
    return "pure" in own and "donates" in own and getattr(strategy, "data_size", 1) == 1


class Ring:
    """A jitted step that writes its logs into a device ring (see the module docs)."""

    def __init__(self, invoker: Invoker, step: Any, *, sized: bool = False) -> None:
        self.invoker = invoker
        self.step = step
        self.sized = sized  # the ring step gives each batch's size (see _ring_function)
        self.layout: Layout | None = None  # where the step's logs go in a row
        self.zeros: Any = None  # makes a fresh ring, in one compiled call
        self.ring: Any = None  # the open ring (None: closed)
        self.spare: Any = None  # the last ring sealed, its index reset: the next one opened
        self.large: list[list[Any]] = []  # per step written, the values the ring does not hold
        self.last_row: Logs | None = None  # the last sealed block's last row (seal(last=True))

    def open(self, state: Any, batch: Any, *, again: bool = False) -> None:
        """Opens a fresh ring for the step's logs on ``batch`` (traced once, or ``again`` after
        a :class:`RingMismatch`)."""
        if self.layout is None or again:
            self.layout = _layout(self.invoker, self.step, state, batch)
            self.zeros, self.spare = _zeros_of(self.layout.width, _placement(state)), None
        self.ring, self.spare = (self.zeros() if self.spare is None else self.spare), None
        self.large = []

    def function(self, treedef: Any) -> tuple[Any, dict[str, Any]]:
        """The open layout's ring step for states of structure ``treedef``."""
        return _ring_function(self.invoker, self.step, self.layout, self.sized, treedef)  # type: ignore[arg-type]

    def call(self, state: Any, batch: Any) -> Any:
        """One step: returns the new state; its logs are written into the ring."""
        leaves, treedef = jax.tree_util.tree_flatten(state)
        fn, out = self.function(treedef)
        leaves, self.ring, tagged = fn(leaves, batch, self.ring)
        self.untag([tagged])
        return jax.tree_util.tree_unflatten(out["def"], leaves)

    def untag(self, tagged: list[dict[int, list[Any]]]) -> list[int]:
        """Keeps the values not held of the steps whose call gave ``tagged``; returns their
        batch sizes (0s when the ring is not ``sized``)."""
        if tagged and next(iter(tagged[0].values())):  # (a ring's steps all return such values, or none)
            self.large.extend(large for tag in tagged for large in tag.values())
        return list(itertools.chain.from_iterable(tagged))  # each dict's one key

    def seal(self, *, last: bool = False) -> Logs:
        """The open ring's stacked logs (and with ``last``, the last row's: :attr:`last_row`)."""
        layout = self.layout
        treedef = layout.treedef  # type: ignore[union-attr]
        if last:
            held, row, self.spare = _unpack(layout, True)(self.ring)
            rows, large = iter(row), iter(self.large[-1] if self.large else ())
            self.last_row = jax.tree_util.tree_unflatten(
                treedef, [next(large) if spec is None else next(rows) for spec in layout.leaves])  # type: ignore[union-attr]
        else:
            held, self.spare = _unpack(layout, False)(self.ring)  # type: ignore[arg-type]
            self.last_row = None
        held = iter(held)
        large = iter(zip(*self.large, strict=True)) if self.large else iter(())
        leaves = [jnp.stack(next(large)) if spec is None else next(held) for spec in layout.leaves]  # type: ignore[union-attr]
        self.ring, self.large = None, []
        return jax.tree_util.tree_unflatten(treedef, leaves)


_LAYOUTS: weakref.WeakKeyDictionary[Any, dict[Any, Layout]] = weakref.WeakKeyDictionary()


def arg_shapes(*args: Any) -> Any:
    """A hashable key of a call's arguments (a step's ``state, batch``): their structure, and each
    leaf's shape and dtype."""
    leaves, structure = jax.tree_util.tree_flatten(args)
    return structure, tuple((getattr(x, "shape", None), getattr(x, "dtype", type(x))) for x in leaves)


def _layout(invoker: Invoker, step: Any, state: Any, batch: Any) -> Layout:
    """The ring layout of the step's logs on ``(state, batch)``: traced once per step and
    argument shapes (cached: every loop over the same step, each evaluation, opens a ring)."""
    key = arg_shapes(state, batch)
    try:
        cached = _LAYOUTS.setdefault(step, {})
    except TypeError:  # not weakly referenceable
        cached = {}
    if key not in cached:
        _, logs = jax.eval_shape(step_body(invoker), state, batch)
        cached[key] = layout_of(*jax.tree_util.tree_flatten(logs))
    return cached[key]


@functools.lru_cache(maxsize=256)
def _unpack(layout: Layout, last: bool) -> Any:
    """A compiled ``ring -> (rows, ring with its index reset)``; with ``last``, the last row too."""

    def unpack(ring: Any) -> tuple[Any, ...]:
        specs = list(filter(None, layout.leaves))
        held = [_from_words(ring[:ROWS, c : c + n], shape, dtype) for shape, dtype, c, n in specs]
        reset = ring.at[ROWS, 0].set(jnp.uint32(0))
        if not last:
            return held, reset
        row = jax.lax.dynamic_index_in_dim(ring, ring[ROWS, 0].astype(jnp.int32) - 1, keepdims=True)
        return held, [_from_words(row[:, c : c + n], shape, dtype)[0] for shape, dtype, c, n in specs], reset

    return jax.jit(unpack, donate_argnums=0)


@functools.lru_cache(maxsize=256)
def _zeros_of(width: int, placement: Any) -> Any:
    """A compiled ``() -> ring``: a fresh ring of ``width`` words a row (with ``placement``)."""

    def zeros() -> Any:
        return jnp.zeros((ROWS + 1, max(width, 1)), jnp.uint32)

    return jax.jit(zeros) if placement is None else jax.jit(zeros, out_shardings=placement)


def _placement(state: Any) -> Any:
    """Where the ring lives: where a committed state is, else uncommitted (one compile, not two)."""
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
