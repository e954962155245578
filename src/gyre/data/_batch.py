"""``SupervisedBatch`` (jax_trainer's batch type: ``input``, ``target``, ``size``) and
:func:`supervised`, which turns a source of ``(x, y)`` batches into one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

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


class Supervised(Forwarding, Iterator[SupervisedBatch]):
    """What :func:`supervised` returns: the source's batches as :class:`SupervisedBatch`,
    with its length, epoch length and position protocol (``state_dict`` ...)."""

    def __init__(self, source: Any) -> None:
        if not hasattr(source, "__iter__"):
            raise TypeError(explain(
                "supervised() needs a source of batches",
                expected="an iterable of (x, y) batches, e.g. gyre.data.batches((x, y), 128)",
                received=describe(source), fix="supervised(gyre.data.batches((x, y), 128))"))
        self.source = source
        self._it: Iterator[Any] | None = source if isinstance(source, Iterator) else None

    def __iter__(self) -> Iterator[SupervisedBatch]:
        if self._it is not None:  # a resumable iterator: one stream
            return self
        return (_as_supervised(b) for b in self.source)  # a re-iterable loader: a fresh pass

    def __next__(self) -> SupervisedBatch:
        if self._it is None:
            self._it = iter(self.source)
        return _as_supervised(next(self._it))

    def __len__(self) -> int:
        return len(self.source)

    def __repr__(self) -> str:
        return f"supervised({self.source!r})"


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
