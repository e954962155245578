"""``SupervisedBatch`` (jax_trainer's batch type: ``input``, ``target``, ``size``) and
:func:`supervised`, which turns a source of ``(x, y)`` batches into one of them;
:func:`process_share`, which gives each of several processes its rows of every batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from gyre.core._clock import infer_batch_size
from gyre.core._errors import describe, explain
from gyre.data._arrays import Forwarding


@dataclasses.dataclass(frozen=True)
class SupervisedBatch:
    """Model inputs and their targets, a pytree of the two; ``size`` is the number of examples.

    Example:
        >>> import numpy as np
        >>> b = SupervisedBatch(np.zeros((4, 2), np.float32), np.arange(4))
        >>> b.size, b.input.shape, b[:2].size
        (4, (4, 2), 2)
    """

    input: Any
    target: Any

    @property
    def size(self) -> int:
        """The number of examples (the targets' leading dimension)."""
        return int(np.shape(self.target)[0])

    def __getitem__(self, key: Any) -> SupervisedBatch:
        """The examples at ``key`` (an index keeps its axis: a batch of one)."""
        if isinstance(key, int):
            key = slice(key, key + 1 if key != -1 else None)
        return SupervisedBatch(self.input[key], self.target[key])


jax.tree_util.register_dataclass(SupervisedBatch, data_fields=["input", "target"], meta_fields=[])


def _as_supervised(batch: Any) -> SupervisedBatch:
    if isinstance(batch, SupervisedBatch):
        return batch
    if isinstance(batch, tuple) and len(batch) == 2:
        return SupervisedBatch(*batch)
    raise TypeError(explain(
        "supervised() turns (inputs, targets) batches into SupervisedBatch",
        expected="batches that are (x, y) tuples", received=describe(batch),
        fix="give it gyre.data.batches((x, y), 128) or another source of (x, y) pairs"))


class _EachBatch(Forwarding, Iterator[Any]):
    """A source's batches, each converted by :meth:`_convert`, with the source's length, epoch
    length and position protocol (``state_dict`` ...); ``name`` is the public function's."""

    name = ""

    def __init__(self, source: Any) -> None:
        if not hasattr(source, "__iter__"):
            raise TypeError(explain(
                f"{self.name}() needs a source of batches",
                expected="an iterable of (x, y) batches, e.g. gyre.data.batches((x, y), 128)",
                received=describe(source), fix=f"{self.name}(gyre.data.batches((x, y), 128))"))
        self.source = source
        self._it: Iterator[Any] | None = source if isinstance(source, Iterator) else None

    def _convert(self, batch: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        if self._it is not None:  # a resumable iterator: one stream
            return self
        return (self._convert(b) for b in self.source)  # a re-iterable loader: a fresh pass

    def __next__(self) -> Any:
        if self._it is None:
            self._it = iter(self.source)
        return self._convert(next(self._it))

    def __len__(self) -> int:
        return len(self.source)

    def __repr__(self) -> str:
        return f"{self.name}({self.source!r})"


class Supervised(_EachBatch):
    """What :func:`supervised` returns: the source's batches as :class:`SupervisedBatch`,
    with its length, epoch length and position protocol (``state_dict`` ...)."""

    name = "supervised"

    def _convert(self, batch: Any) -> SupervisedBatch:
        return _as_supervised(batch)


def supervised(source: Any) -> Supervised:
    """The ``(x, y)`` batches of ``source`` as :class:`SupervisedBatch`; its ``epoch_steps`` and
    position (``state_dict``) pass through.

    Example:
        >>> import numpy as np, gyre
        >>> train = supervised(gyre.data.batches((np.zeros((8, 2)), np.arange(8)), 4, seed=0))
        >>> b = next(train); type(b).__name__, b.size, train.epoch_steps
        ('SupervisedBatch', 4, 2)
    """
    return Supervised(source)


class ProcessShare(_EachBatch):
    """What :func:`process_share` returns: this process's rows of each batch of ``source``, with
    the source's length, epoch length and position protocol (``state_dict`` ...)."""

    name = "process_share"

    def __init__(self, source: Any, index: int | None = None, count: int | None = None) -> None:
        super().__init__(source)
        self.index = jax.process_index() if index is None else index
        self.count = jax.process_count() if count is None else count
        if isinstance(source, (list, tuple)):
            sizes = [infer_batch_size(b, strict=False, default=0) for b in source]
        else:  # an evaluation's EvalBatches also knows its last, smaller batch
            size, samples = getattr(source, "batch_size", None), getattr(source, "samples", None)
            sizes = [size, samples % size if isinstance(samples, int) and isinstance(size, int) and size > 0 else None]
        for size in sizes:  # known before the first batch: refused at once, not after an epoch
            self._check(size)

    def _check(self, rows: Any) -> None:
        if isinstance(rows, int) and rows % self.count:
            raise ValueError(explain(
                f"a batch of {rows} rows cannot be shared evenly by {self.count} processes",
                expected=f"batches of a multiple of {self.count} rows (each process feeds its share of the "
                "global batch)", received=f"a batch of {rows} rows",
                fix=f"choose batch sizes (global_batch_size, eval_batch_size, val_size) divisible by {self.count}"))

    def _convert(self, batch: Any) -> Any:
        # (the first array leaf's leading axis: a scalar leaf, such as a batch's learning rate, has
        rows = infer_batch_size(batch, strict=False, default=0)  # none: every process keeps it whole)
        if not rows:
            return batch
        self._check(rows)
        size = rows // self.count
        start = self.index * size
        return jax.tree_util.tree_map(lambda a: a[start : start + size] if np.ndim(a) else a, batch)


def process_share(source: Any) -> Any:
    """This process's rows of each batch of ``source``: of ``P`` processes (``jax.process_count()``),
    process ``i`` gets rows ``[i * n / P, (i + 1) * n / P)`` of a batch of ``n``, so processes that all
    read the same batches feed each global batch once (docs/how-to/multi-host.md). With one process,
    ``source`` itself. Its length, epoch length and position (``state_dict``) are the source's.

    Raises:
        ValueError: a batch whose rows the processes cannot share evenly (a list's batches and a
            ``batch_size`` are checked at once).

    Example:
        >>> import numpy as np, gyre
        >>> train = gyre.data.batches(np.arange(8), 4, shuffle=False)
        >>> gyre.data.process_share(train) is train  # one process
        True
        >>> next(ProcessShare(train, index=1, count=2)).tolist()  # process 1 of 2: its half
        [2, 3]
    """
    return source if jax.process_count() == 1 else ProcessShare(source)
