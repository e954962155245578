"""Batches moved to the devices ahead of the step that uses them (:func:`prefetch_to_device`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import jax
from jax.sharding import Sharding

from gyre.core._checks import whole
from gyre.core._clock import Elapsed
from gyre.core._errors import describe, explain
from gyre.core._placement import is_array, is_sharding_tree, place
from gyre.engine._data import DataTracker
from gyre.engine._elapse import check_stop, dataset_epoch_steps, epoch_steps_of, stop_index


class BatchPlacer(Protocol):
    """What prefetching needs of a :class:`~gyre.Strategy` (the loop layer cannot import it)."""

    def place_batch(self, batch: Any, *, axis: int = 0) -> Any: ...  # pragma: no cover

Placer = Callable[[Any], Any]


def _placer(sharding: Any) -> Placer:
    """The function that moves one batch to the devices (a Strategy is recognised by its method)."""
    place_batch = getattr(sharding, "place_batch", None)
    if callable(place_batch):
        return place_batch
    if sharding is None:
        if jax.process_count() > 1:
            return lambda batch: batch  # on the host: the step's strategy (or jit) makes it global
        return lambda batch: jax.tree_util.tree_map(lambda x: jax.device_put(x) if is_array(x) else x, batch)
    if isinstance(sharding, Sharding) or (is_sharding_tree(sharding) and jax.tree_util.tree_leaves(sharding)):
        return lambda batch: place(batch, sharding)
    raise TypeError(explain(
        "prefetch_to_device got a sharding it cannot use",
        expected="None (the default device), a jax.sharding.Sharding, a pytree of them "
        "shaped like the batch, or a gyre.Strategy such as state.strategy",
        received=describe(sharding), fix="pass e.g. sharding=gyre.DataParallel() or "
        "sharding=NamedSharding(mesh, PartitionSpec('data'))"))


class _End:
    """Marks where the source stopped (``error`` is what it raised, if anything)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class PrefetchIterator(Iterator[Any]):
    """One pass over a source, ``size`` placed batches ahead.

    Attributes:
        pulled: items taken from the source so far.
        delivered: batches handed to the consumer so far.
    """

    def __init__(
        self, source: Iterator[Any], size: int, place: Placer, limit: int | None = None
    ) -> None:
        self._source: Iterator[Any] | None = source
        self._size = size
        self._place = place
        self._limit = limit
        self._queue: deque[Any] = deque()
        self.pulled = 0
        self.delivered = 0
        self.wrapped_dataset = source
        self.epoch_steps = dataset_epoch_steps(source)

    def __iter__(self) -> PrefetchIterator:
        return self

    def _pull(self) -> None:
        """Takes one item from the source and places it; the end (or an error) is queued in
        its position, so earlier batches are still delivered first."""
        try:
            if self._limit is not None and self.pulled >= self._limit:
                raise StopIteration
            item = next(self._source)  # type: ignore[arg-type]
            self.pulled += 1
            self._queue.append(self._place(item))
            return
        except StopIteration:
            end = _End(None)
        except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - delivered at its position (a source or a
            end = _End(err)  # placement error; a Ctrl-C too: the batches pulled before it run first, as without prefetch)
        self._queue.append(end)
        self._source = None

    def __next__(self) -> Any:
        queue = self._queue
        # the batch handed out now, and `size` more on their way behind it
        while self._source is not None and len(queue) <= self._size:
            self._pull()
        if not queue:
            raise StopIteration
        item = queue[0]
        if type(item) is _End:
            if item.error is not None:
                error, item.error = item.error, None  # raised once; then the pass is over
                raise error
            raise StopIteration
        queue.popleft()
        self.delivered += 1
        return item


class SizedPrefetchIterator(PrefetchIterator):
    """A :class:`PrefetchIterator` over a one-shot source with ``len()``, reported as its own."""

    def __len__(self) -> int:
        n = len(self.wrapped_dataset)
        return n if self._limit is None else min(n, self._limit)


class Prefetch:
    """A re-iterable of placed batches: every ``iter()`` starts a new pass over the source."""

    def __init__(
        self, iterable: Iterable[Any], size: int, place: Placer, limit: int | None = None
    ) -> None:
        self.source = self.wrapped_dataset = iterable
        self.size = size
        self.limit = limit
        self._place = place

    def __iter__(self) -> PrefetchIterator:
        return PrefetchIterator(iter(self.source), self.size, self._place, self.limit)

    @property
    def epoch_steps(self) -> int | None:
        """Batches per epoch of the source (its ``epoch_steps``, else its ``len()``)."""
        return dataset_epoch_steps(self.source)

    def __repr__(self) -> str:
        return f"<prefetch_to_device over {type(self.source).__name__}, size={self.size}>"


class SizedPrefetch(Prefetch):
    """A :class:`Prefetch` over a source with ``len()``, which it reports as its own."""

    def __len__(self) -> int:
        n = len(self.source)  # type: ignore[arg-type]
        return n if self.limit is None else min(n, self.limit)


def prefetch_to_device(
    iterable: Iterable[Any],
    size: int = 2,
    sharding: Sharding | BatchPlacer | Any | None = None,
    *,
    limit: int | None = None,
) -> Prefetch | PrefetchIterator:
    """Batches moved to their devices ahead of use, so the copy overlaps the running step.

    The source is read on the caller's thread, in order, never more than ``size`` items ahead of
    the consumer. ``len()`` and ``epoch_steps`` are the source's. An error from the source or a
    placement (a KeyboardInterrupt too) reaches the consumer at that batch's position. Stopping
    early leaves up to ``size`` items taken but not delivered: keep using the prefetch object (it
    continues), or pass ``limit``.

    Args:
        iterable: the batches, on the host (numpy) or anywhere.
        size: batches kept on their way ahead of the consumer (0: placed when asked).
        sharding: ``None`` (the default device; with several processes, left on the host), a
            :class:`~gyre.Strategy` (its ``place_batch``: split over the mesh, one global batch
            across processes), or a ``jax.sharding.Sharding`` or a pytree of them. Non-array
            leaves are left as they are, except by a strategy.
        limit: take at most this many items from the source (per pass); ``None``: all.

    Returns:
        An iterable of placed batches (an iterator when ``iterable`` is one).

    Example:
        >>> import gyre, numpy as np
        >>> batches = [np.full((8, 2), i, np.float32) for i in range(3)]
        >>> placed = gyre.prefetch_to_device(batches, sharding=gyre.DataParallel())
        >>> len(placed), [float(b[0, 0]) for b in placed]
        (3, [0.0, 1.0, 2.0])
        >>> next(iter(placed)).sharding.spec
        P('data',)
    """
    size = whole(size, "prefetch size", unit="batches", fix="pass a small whole number such as size=2",
                 expected="size=2 (two batches on their way while a step runs), or 0 for none")
    limit = whole(limit, "prefetch limit", unit="batches", none=True,
                  fix="pass the loop's stop as a whole number, or leave limit out",
                  expected="limit=1000 (the steps the loop will run), or None for every batch")
    place = _placer(sharding)
    if isinstance(iterable, DataTracker):  # a loop's data: keep positions `size` back
        iterable.read_ahead(size)
    # decided without calling iter(): starting a pass of a data loader can be costly
    one_shot = isinstance(iterable, Iterator)
    if not (isinstance(iterable, Iterable) or hasattr(iterable, "__getitem__")):
        raise TypeError(explain(
            "prefetch_to_device needs an iterable of batches",
            expected="a list of batches, a generator, a data loader", received=describe(iterable),
            fix="pass something a for-loop can run over"))
    sized = hasattr(iterable, "__len__")
    if one_shot:
        return (SizedPrefetchIterator if sized else PrefetchIterator)(iterable, size, place, limit)  # type: ignore[arg-type]
    return (SizedPrefetch if sized else Prefetch)(iterable, size, place, limit)


def prefetched(dataset: Any, state: Any, size: int, stop: Any, initial: Elapsed | None, epoch_duration: Any = None) -> Any:
    """The dataset placed ahead on the state's strategy's devices (managed states only), never
    beyond a stop in steps, or in epochs of a known length."""
    strategy = getattr(state, "strategy", None)
    if not size or not callable(getattr(strategy, "place_batch", None)) or not getattr(strategy, "compiles", False):
        return dataset
    if not hasattr(dataset, "__iter__"):
        return dataset  # Elapse raises the explanation
    clock = initial.completed() if initial is not None else Elapsed()
    steps = stop_index(check_stop(stop), clock, epoch_steps_of(epoch_duration, dataset))
    limit = None if steps is None or steps is False else max(steps - clock.steps, 0)
    return prefetch_to_device(dataset, size=size, sharding=strategy, limit=limit)
