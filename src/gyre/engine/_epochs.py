"""A training loader as one resumable stream of ``epochs`` epochs, so a trainer or fit run is one
loop of the engine. A loader with its own position (``gyre.data.batches``) is used as it is; any
other re-iterable one is read once per epoch by :class:`EpochStream`, whose resume skips the
batches consumed (exact for a loader giving the same batches each pass, or seeded reshuffles).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gyre.core._clock import infer_batch_size
from gyre.core._errors import describe, explain
from gyre.data._source import refuse_sources
from gyre.engine._elapse import dataset_epoch_steps


def epoch_length(loader: Any, *, what: str) -> int:
    """The batches of one pass over ``loader`` (``epoch_steps`` or ``len``), else the error."""
    steps = dataset_epoch_steps(loader)
    if steps is None:
        try:
            size: int | None = len(loader)
        except TypeError:
            size = None
        raise TypeError(explain(
            f"training needs to know how many batches one epoch of {what} holds",
            expected="a loader with len() (a list of batches, a torch DataLoader) or "
        "gyre.data.batches(...), with at least one batch",
            received=describe(loader) + ("" if size is None else f" (its length is {size})"),
            fix="pass gyre.data.batches((x, y), batch_size) or a list of batches"))
    return steps


def is_iterator(loader: Any) -> bool:
    """Whether ``loader`` is a one-pass iterator, asked without ``iter`` (it may start workers)."""
    return callable(getattr(loader, "__next__", None))


class EpochStream:
    """``epochs`` passes over a re-iterable loader as one resumable iterator."""

    def __init__(self, loader: Any, *, epochs: int, what: str = "train_loader") -> None:
        if is_iterator(loader):
            raise TypeError(explain(
                "the training loader is an iterator, which one epoch would exhaust",
                expected="a re-iterable loader (a list, a DataLoader) or gyre.data.batches(...)",
                received=describe(loader), fix="pass the loader itself, not iter(loader) or a generator"))
        self.loader = loader
        self.epochs = epochs
        self.epoch_steps = epoch_length(loader, what=what)
        self._start = 0  # the index of the first batch the next iteration yields
        self.index = 0  # batches handed out (resumed runs count from the saved position)

    def __iter__(self) -> Iterator[Any]:
        epoch, skip = divmod(self._start, self.epoch_steps)
        self.index = self._start
        while epoch < self.epochs:
            count = 0
            for count, batch in enumerate(self.loader, start=1):  # noqa: B007
                if count <= skip:
                    continue
                self.index += 1
                yield batch
            if count != self.epoch_steps:
                raise ValueError(explain(
                    "the training loader changed its length between epochs",
                    expected=f"{self.epoch_steps} batches in every epoch",
                    received=f"{count} batches in epoch {epoch + 1}",
                    fix="give a loader with a fixed number of batches (drop the last, short one)"))
            epoch, skip = epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        """The position after the batches handed out so far."""
        return self.state_dict_at(self.index)

    def state_dict_at(self, index: int) -> dict[str, int]:
        """The position once ``index`` batches are consumed (the loop reads ahead of its use)."""
        epoch, position = divmod(int(index), self.epoch_steps)
        return {"epoch": epoch, "position": position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues after ``state``'s position at the next iteration."""
        self._start = self.index = int(state["epoch"]) * self.epoch_steps + int(state["position"])


class EpochLength:
    """A run's batches per epoch, saved in its checkpoints (a callback for its ``state_dict``):
    a resume into training data of another length is refused, since the saved clock's epochs,
    the evaluations and the data position would no longer line up (a loader of other length
    continued silently, with an evaluation lost or the data ending early). ``who`` and
    ``data`` name the rung and its argument; ``fix`` is how that rung starts a new run."""

    def __init__(self, epoch_steps: int, *, who: str, data: str, fix: str) -> None:
        self.epoch_steps, self.who, self.data, self.fix = int(epoch_steps), who, data, fix

    def on_train_end(self) -> None:
        """Nothing to do: the object rides in the loop for its ``state_dict``."""

    def state_dict(self) -> dict[str, int]:
        """The batches per epoch of the run that saves."""
        return {"epoch_steps": self.epoch_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Refuses a checkpoint saved with another epoch length."""
        saved = state.get("epoch_steps")
        if saved is not None and saved != self.epoch_steps:
            raise ValueError(explain(
                f"{self.who}: resume continues a run of {saved} batches per epoch, and {self.data} now gives "
                f"{self.epoch_steps}",
                expected=f"{self.data} of {saved} batches per epoch, as in the run that saved the checkpoint",
                received=f"{self.data} of {self.epoch_steps} batches per epoch (other data or another batch size)",
                fix=f"pass the saved run's training data and batch size to continue it, or {self.fix}"))


def training_data(loader: Any, epochs: int, most: int | None = None, *, what: str = "train_loader") -> tuple[Any, int]:
    """The stream of ``epochs`` epochs and its batches per epoch (at most ``most``); ``what`` names
    the rung's argument in errors."""
    refuse_sources(loader, "the training data")
    if hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict") and is_iterator(loader):
        steps = epoch_length(loader, what=what)
        available = getattr(loader, "epochs", None)
        if available is not None and available < epochs:
            raise ValueError(explain(
                "the training loader ends before the last epoch",
                expected=f"a loader of at least {epochs} epochs (or endless: epochs=None)",
                received=f"{loader!r} with epochs={available}",
                fix="build it with gyre.data.batches(..., epochs=None); training stops it at the last epoch"))
        return loader, min(steps, most or steps)
    stream = EpochStream(loader, epochs=epochs, what=what)
    return stream, min(stream.epoch_steps, most or stream.epoch_steps)


def check_split(strategy: Any, data: Any, *, who: str, name: str, single: str) -> None:
    """A clear error, before training, for a training batch ``strategy`` cannot split over its
    devices (every batch of a list or tuple; the first of any other source). ``who`` and
    ``name`` name the rung and its data argument, ``single`` its one-device setting."""
    share = strategy.lift_batch_size(1)  # this process's devices on the data axis
    if share == 1:
        return
    items = enumerate(data) if isinstance(data, (list, tuple)) else [(0, first_batch(data))]
    for index, batch in items:
        rows = infer_batch_size(batch, strict=False, default=0)
        if rows % share:
            lower, upper = rows - rows % share, rows + share - rows % share
            raise ValueError(explain(
                f"{who}: a training batch of {rows} examples cannot be split over the {share} devices "
                f"of strategy {strategy.name!r}",
                expected=f"every training batch a multiple of {share} examples (each device gets "
                f"batch_size / {share})",
                received=f"batch {index} of {name} with {rows} examples",
                fix=f"use a batch size of {upper}" + (f" or {lower}" if lower else "")
                + f" (gyre.data.batches(..., drop_remainder=True) drops a smaller last batch), or {single}"))


def refuse_unsplit_evaluation(rows: int, share: int, what: str, *, expected: str, received: str = "",
                              fix: str) -> None:
    """With several processes a batch is one process's rows: an evaluation batch of ``rows`` that
    does not split over this process's ``share`` devices cannot be evaluated whole (each process
    would weigh only its own rows, and the processes would log different means). ``what`` names
    the batch (``"a val batch"``); ``expected`` and ``received`` add the rung's words."""
    import jax

    if rows % share == 0 or jax.process_count() == 1:
        return
    raise ValueError(explain(
        f"{what} of {rows} rows cannot be split over this process's {share} devices, and with "
        f"{jax.process_count()} processes it cannot be evaluated whole",
        expected=f"every such batch a multiple of {share} rows in each process (its rows of the global batch)"
        + expected, received=f"a batch of {rows} rows in process {jax.process_index()}{received}", fix=fix))


def first_batch(loader: Any) -> Any:
    """One batch of ``loader`` to build the model from, its position (if it has one) restored."""
    saved = loader.state_dict() if hasattr(loader, "state_dict") else None
    batch = next(iter(loader))
    if saved is not None:
        loader.load_state_dict(saved)
    return batch
