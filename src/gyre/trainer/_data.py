"""The trainer's data: the parts of a batch (:func:`batch_part`), and a training loader turned into one resumable stream of ``num_epochs``
epochs, so that a whole training run is one loop of the engine (one clock, one checkpoint
story) while the trainer still speaks in epochs.

* A loader with ``state_dict``/``load_state_dict`` and ``epoch_steps`` (``gyre.data.batches``)
  is iterated as it is, for ``epochs × epoch_steps`` steps: its own position resumes it.
* Any other re-iterable loader (a list of batches, a torch ``DataLoader``, a function's fresh
  generator each epoch) is iterated once per epoch by :class:`EpochStream`, which knows its
  epoch and position; resuming skips the batches the checkpoint had consumed (exact for a
  loader that gives the same batches in each pass, or reshuffles from its own seed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gyre.core._errors import describe, explain
from gyre.engine._elapse import dataset_epoch_steps


def epoch_length(loader: Any, *, what: str) -> int:
    """The batches of one pass over ``loader`` (``epoch_steps`` or ``len``); an error when it
    has neither or none.
    """
    steps = dataset_epoch_steps(loader)  # the engine's own reading: epoch_steps, else len
    if steps is None:
        try:
            size: int | None = len(loader)
        except TypeError:
            size = None
        raise TypeError(explain(
            f"the trainer needs to know how many batches one epoch of {what} holds",
            expected="a loader with len() (a list of batches, a torch DataLoader) or "
        "gyre.data.batches(...), with at least one batch",
            received=describe(loader) + ("" if size is None else f" (its length is {size})"),
            fix="pass gyre.data.batches((x, y), batch_size) or a list of batches"))
    return steps


def is_iterator(loader: Any) -> bool:
    """Whether ``loader`` is a one-pass iterator (it has ``__next__``); asked without
    calling ``iter``, which may start a loader's workers.
    """
    return callable(getattr(loader, "__next__", None))


class EpochStream:
    """``epochs`` passes over a re-iterable loader as one resumable iterator.

    Attributes:
        epoch_steps: batches per epoch.
        epochs: passes in all.
    """

    def __init__(self, loader: Any, *, epochs: int) -> None:
        if is_iterator(loader):
            raise TypeError(explain(
                "the training loader is an iterator, which one epoch would exhaust",
                expected="a re-iterable loader (a list, a DataLoader) or gyre.data.batches(...)",
                received=describe(loader), fix="pass the loader itself, not iter(loader) or a generator"))
        self.loader = loader
        self.epochs = epochs
        self.epoch_steps = epoch_length(loader, what="train_loader")
        self._start = 0  # the index of the first batch the next iteration yields
        self._index = 0

    def __iter__(self) -> Iterator[Any]:
        return self._batches()

    def _batches(self) -> Iterator[Any]:
        epoch, skip = divmod(self._start, self.epoch_steps)
        self._index = self._start
        while epoch < self.epochs:
            count = 0
            for count, batch in enumerate(self.loader, start=1):  # noqa: B007
                if count <= skip:
                    continue
                self._index += 1
                yield batch
            if count != self.epoch_steps:
                raise ValueError(explain(
                    "the training loader changed its length between epochs",
                    expected=f"{self.epoch_steps} batches in every epoch",
                    received=f"{count} batches in epoch {epoch + 1}",
                    fix="give a loader with a fixed number of batches (drop the last, short one)"))
            epoch, skip = epoch + 1, 0

    @property
    def index(self) -> int:
        """How many batches were handed out (resumed runs count from the saved position)."""
        return self._index

    def state_dict(self) -> dict[str, int]:
        """The position after the batches handed out so far."""
        return self.state_dict_at(self._index)

    def state_dict_at(self, index: int) -> dict[str, int]:
        """The position once ``index`` batches are consumed (the loop reads ahead of its use)."""
        epoch, position = divmod(int(index), self.epoch_steps)
        return {"epoch": epoch, "position": position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues after ``state``'s position at the next iteration."""
        self._start = self._index = int(state["epoch"]) * self.epoch_steps + int(state["position"])


INPUT_KEYS = ("input", "inputs", "x", "image", "images")
TARGET_KEYS = ("target", "targets", "label", "labels", "y")


def batch_part(batch: Any, keys: tuple[str, ...], position: int, what: str) -> Any:
    """One part of a batch (``what``: ``"input"`` or ``"target"``), by name first (a dict's
    key, a batch object's attribute, a namedtuple's field: the first of ``keys`` found), then
    by ``position`` in a tuple or list; else a ``TypeError`` saying how to override it.
    """
    for key in keys:
        if isinstance(batch, Mapping):
            if key in batch:
                return batch[key]
        elif not isinstance(batch, (tuple, list)) and hasattr(batch, key):
            return getattr(batch, key)
        elif isinstance(batch, tuple) and key in getattr(batch, "_fields", ()):
            return getattr(batch, key)  # a namedtuple with named fields
    if isinstance(batch, (tuple, list)) and len(batch) > position:
        return batch[position]
    raise TypeError(explain(
        f"the trainer cannot find the model's {what} in a batch",
        expected=f"an (inputs, targets) tuple, a dict with {keys[0]!r} or {keys[2]!r}, or a batch with "
    f".{keys[0]} (jax_trainer's SupervisedBatch)",
        received=describe(batch), fix=f"override batch_to_{what}(self, batch) in your trainer to return the {what}"))
