"""Padded evaluations: a test step that takes ``mask`` gets batches padded to one size (a
list's largest batch, else the first one's) and compiles once (docs/concepts/named-loops.md: "Evaluation without recompiles").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gyre.core._clock import Elapsed
from gyre.core._errors import explain
from gyre.data._padding import padded
from gyre.engine._binding import Invoker, Masked, bind
from gyre.engine._elapse import StopLike, dataset_epoch_steps, size_function
from gyre.engine._prefetch import prefetched


def mask_wanted(callbacks: Sequence[Any], where: str) -> tuple[list[Invoker], bool]:
    """The ``on_test_step`` callbacks bound, and whether they take ``mask`` (all or none must:
    a step without it would count the padding rows in its means)."""
    invokers = [bind(cb) for cb in callbacks]
    takers = [i.name for i in invokers if i.takes_mask]
    others = [i.name for i in invokers if not i.takes_mask]
    if takers and others:
        raise ValueError(explain(
            f"the on_test_step callbacks of {where} disagree about mask: {takers} take it, "
            f"{others} do not",
            expected="every on_test_step callback with a mask parameter (the evaluation's "
            "batches are then padded to one size and masked), or none (batches as they come)",
            received=f"{len(takers)} callback(s) with mask and {len(others)} without",
            fix=f"add mask=None to {others[0]} and leave the padded rows out of its means "
            "(jnp.sum(x * mask) / jnp.sum(mask)), or move it to gyre.on_test_batch_end"))
    return invokers, bool(takers)


def largest_batch(dataset: Any, size_of: Any) -> int | None:
    """The rows a padded evaluation of ``dataset`` pads to when known before it runs: a list's
    largest batch (its short batch may come first); ``None`` for other data (the first batch's)."""
    if isinstance(dataset, (list, tuple)) and dataset:
        return max(size_of(batch) for batch in dataset)
    return None


class MaskedBatches:
    """``dataset`` padded to ``batch_size`` (else a list's largest batch, or the first batch's size) as :class:`Masked` items
    weighed by their host-counted ``rows``, placed ``prefetch`` ahead on a managed state's devices.
    The one padded evaluation: ``test_loop``, ``fit`` and jaxloop's ``EvalLoop`` iterate it."""

    def __init__(
        self,
        dataset: Iterable[Any],
        state: Any = None,
        *,
        stop: StopLike = None,
        initial: Elapsed | None = None,
        batch_size_fn: Any = None,
        prefetch: int = 2,
        batch_size: int | None = None,
    ) -> None:
        self.wrapped_dataset = dataset
        self._size_of = size_function(batch_size_fn)
        self.batch_size = batch_size if batch_size is not None else largest_batch(dataset, self._size_of)
        self.epoch_steps = dataset_epoch_steps(dataset)
        self._state = state
        self._stop = stop
        self._initial = initial
        self._prefetch = prefetch

    def __iter__(self) -> Iterator[Masked]:
        rows: deque[int] = deque()

        def counted() -> Iterator[Any]:
            for batch in self.wrapped_dataset:
                rows.append(self._size_of(batch))
                yield batch

        items = (Masked(full, mask) for full, mask in padded(counted(), self.batch_size))
        for item in prefetched(items, self._state, self._prefetch, self._stop, self._initial):
            item.rows = rows.popleft()  # in order: the placed items are the padded ones, one for one
            yield item

    def __repr__(self) -> str:
        return f"MaskedBatches({self.wrapped_dataset!r})"


def real_rows(batch: Masked) -> int:
    """The samples a padded evaluation's clock counts for a batch (a host int, no device read)."""
    return batch.rows  # type: ignore[return-value]


def unmasking(fn: Any) -> Invoker:
    """``fn`` bound for a padded evaluation: one that takes ``mask`` splits the :class:`Masked`
    batch itself; any other gets the padded batch."""
    inner = bind(fn)
    if inner.takes_mask:
        return inner
    call = inner.call
    return Invoker(inner.fn, lambda s, b, e, lg, lp: call(s, b.batch if type(b) is Masked else b, e, lg, lp), inner.name)
