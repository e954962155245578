"""Batches from in-memory numpy arrays: ``batches`` (a resumable :class:`Batches` iterator) and
``steps_per_epoch``. Epoch ``k`` is shuffled by a generator seeded ``(seed, k)``, so a
position ``(epoch, index)`` is all a resumed run needs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from gyre.core._checks import whole
from gyre.core._errors import describe, explain, flag, keywords_checked

Batch = tuple[np.ndarray, ...] | np.ndarray


def check_seed(seed: Any) -> int:
    """``seed`` as an ``int`` when a whole number >= 0, else a ``ValueError``."""
    return whole(seed, "a seed", minimum=0, expected="an int >= 0, e.g. seed=0",
                 fix="pass seed=0 (any non-negative int; the same seed gives the same order)")


def steps_per_epoch(n: int, batch_size: int, drop_remainder: bool = True) -> int:
    """Batches in one epoch of ``n`` samples: ``n // batch_size`` when dropping the remainder
    (:func:`batches`' default), else ``ceil(n / batch_size)``.

    Raises:
        ValueError: an epoch of no batch (no samples, or a batch larger than the data with
            ``drop_remainder``).

    Example:
        >>> steps_per_epoch(1437, 64), steps_per_epoch(1437, 64, drop_remainder=False)
        (22, 23)
    """
    n = whole(n, "n (the number of samples)", expected="an int >= 0, e.g. 1000", fix="pass steps_per_epoch(1000, 32)")
    batch_size = whole(batch_size, "batch_size", minimum=1, expected="an int >= 1, e.g. 32", fix="pass batch_size=32")
    if n == 0:
        raise ValueError(explain(
            "an epoch of no samples has no batch",
            expected="n >= 1 samples", received="n=0", fix="check the data split that produced them"))
    if drop_remainder and batch_size > n:
        raise ValueError(explain(
            "the batch is larger than the data, so every batch would be dropped",
            expected=f"batch_size <= {n} (the number of samples)",
            received=f"batch_size={batch_size} with drop_remainder=True",
            fix=f"use batch_size <= {n}, or drop_remainder=False to get one batch of {n}"))
    return n // batch_size if drop_remainder else -(-n // batch_size)


def _as_arrays(arrays: Any, what: str = "the arrays given to batches()") -> tuple[tuple[np.ndarray, ...], bool]:
    """The arrays as a tuple (checked: >= 1 samples, as many in each), and whether a single array was given."""
    single = hasattr(arrays, "__array__")
    if single:
        arrays = (arrays,)
    elif not isinstance(arrays, Sequence) or isinstance(arrays, (str, bytes)) or not arrays:
        raise TypeError(explain(
            "batches() takes an array or a non-empty tuple of arrays",
            expected="batches((x_train, y_train), batch_size)", received=describe(arrays),
            fix="pass the arrays as a tuple: batches((x, y), 32)"))
    nested = [i for i, a in enumerate(arrays) if isinstance(a, tuple) and all(hasattr(e, "shape") for e in a)]
    if nested:  # a data set's (train, test) split, or (x, y) pairs of several splits
        raise TypeError(explain(
            f"{what} hold tuples of arrays where arrays belong, "
            "e.g. a data set's whole (train, test) split",
            expected="arrays of shape (n, ...): batches((x_train, y_train), batch_size)",
            received=f"item {nested[0]}: a tuple of arrays of shapes {[tuple(e.shape) for e in arrays[nested[0]]]}",
            fix="unpack the split and batch its training part: (x, y), test = gyre.data.digits(); "
            "batches((x, y), 64, seed=0)"))
    out = tuple(np.asarray(a) for a in arrays)
    for i, (array, value) in enumerate(zip(arrays, out, strict=True)):
        if value.ndim == 0:
            raise ValueError(explain(
                f"array {i} given to batches() has no leading sample dimension",
                expected="arrays of shape (n, ...) that share n", received=f"array {i}: {describe(array)}",
                fix="pass one value per sample, e.g. labels of shape (n,)"))
    rows = {a.shape[0] for a in out}
    if len(rows) != 1 or 0 in rows:
        raise ValueError(explain(
            f"{what} must hold the same number (>= 1) of examples along their first dimension "
            f"({'different numbers of samples' if len(rows) != 1 else 'empty arrays'})",
            expected="the same leading dimension n >= 1 in every array, e.g. x (n, 64) and y (n,)",
            received=", ".join(str(a.shape) for a in out),
            fix="check that inputs and labels come from the same split"))
    return out, single


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The permutation of ``n`` samples in ``epoch``, from ``default_rng((seed, epoch))``."""
    return np.random.default_rng((seed, epoch)).permutation(n)


def gather(data: tuple[np.ndarray, ...], order: np.ndarray | None, position: int, size: int) -> tuple[np.ndarray, ...]:
    """Batch ``position`` (``size`` rows) of each array, through ``order`` (``None``: as stored)."""
    start = position * size
    if order is None:
        return tuple(a[start : start + size] for a in data)
    rows = order[start : start + size]
    return tuple(a[rows] for a in data)


#: The arguments that decide which batches a :class:`Batches` hands out, saved with its
#: position so a position is never loaded into batches that would give other data.
_IDENTITY = ("samples", "shapes", "batch_size", "drop_remainder", "shuffle", "seed", "data")

#: The rows :func:`fingerprint` reads of each array (spread evenly over the samples).
FINGERPRINT_ROWS = 64


def fingerprint(data: tuple[np.ndarray, ...]) -> int:
    """A CRC-32 of the arrays' dtypes and of :data:`FINGERPRINT_ROWS` rows spread over them: the
    same arrays give the same number in any process, other values of the same shapes (reordered,
    normalised otherwise, another split) almost surely another. It reads those rows only (object
    arrays are left out: their bytes are addresses)."""
    n = data[0].shape[0]
    rows = np.unique(np.linspace(0, n - 1, min(n, FINGERPRINT_ROWS)).astype(np.int64))
    crc = 0
    for array in data:
        crc = zlib.crc32(array.dtype.str.encode(), crc)
        if not array.dtype.hasobject:
            crc = zlib.crc32(np.ascontiguousarray(array[rows]).tobytes(), crc)
    return crc


class Batches(Iterator[Batch]):
    """Batches of in-memory arrays (``gyre.data.batches``), reshuffled every epoch in a
    deterministic order, with ``epoch_steps`` (so the loops need no ``epoch_duration``), ``len``
    (the same) and a JSON-able position (``state_dict``/``load_state_dict``) a checkpoint saves.

    Args:
        arrays: a tuple of arrays sharing their leading (sample) dimension, e.g. ``(x, y)``;
            or a single array.
        batch_size: samples per batch.
        shuffle: a new order every epoch (epoch ``k`` seeded by ``(seed, k)``); ``False``
            keeps the original order.
        seed: the seed of the shuffles (a whole number >= 0).
        epochs: passes over the data; ``None`` repeats forever (bound the loop with ``stop=``).
        drop_remainder: drop an epoch's last, smaller batch (one shape: one compilation).

    Yields:
        Tuples of numpy arrays (a single array when a single array was given).

    Raises:
        ValueError: the arrays disagree on the number of samples, ``batch_size < 1``, a
            negative ``seed``, or no whole batch fits in the data with ``drop_remainder``.

    Example:
        >>> import numpy as np, gyre
        >>> x = np.arange(10)
        >>> it = gyre.data.batches(x, 4, seed=3)
        >>> it.epoch_steps, next(it).tolist()
        (2, [9, 6, 0, 2])
        >>> saved = it.state_dict()
        >>> after = [next(it).tolist() for _ in range(2)]
        >>> again = gyre.data.batches(x, 4, seed=3)
        >>> again.load_state_dict(saved)
        >>> [next(again).tolist() for _ in range(2)] == after
        True
    """

    @keywords_checked
    def __init__(
        self,
        arrays: Sequence[Any] | np.ndarray,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        epochs: int | None = None,
        drop_remainder: bool = True,
    ) -> None:
        data, single = _as_arrays(arrays)
        batch_size = whole(batch_size, "batch_size", minimum=1, expected="an int >= 1, e.g. 32",
                           fix="pass batch_size=32")
        epochs = whole(epochs, "epochs", minimum=1, none=True, fix="pass epochs=1 (or None to repeat forever)")
        seed = check_seed(seed)
        n = data[0].shape[0]
        shuffle, drop_remainder = flag(shuffle, "shuffle", "batches"), flag(drop_remainder, "drop_remainder", "batches")
        epoch_steps = steps_per_epoch(n, batch_size, drop_remainder)  # refuses an epoch of no batch
        self._data, self._single, self._n = data, single, n
        self.batch_size, self.seed, self.epochs = batch_size, seed, epochs
        self.shuffle, self.drop_remainder = shuffle, drop_remainder
        self.epoch_steps = epoch_steps
        self._identity: dict[str, Any] = {
            "samples": n,
            "shapes": [list(a.shape[1:]) for a in data],
            "batch_size": batch_size,
            "drop_remainder": self.drop_remainder,
            "shuffle": self.shuffle,
            "data": fingerprint(data),
        }
        self._epoch, self._position = 0, 0  # the next batch: its epoch and index in it
        self._ready = -1  # the epoch whose order is drawn (-1: none yet)
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        """Batches per epoch (:attr:`epoch_steps`), as a torch ``DataLoader``'s ``len``."""
        return self.epoch_steps

    def __next__(self) -> Batch:
        epoch = self._epoch
        if epoch != self._ready:  # the first batch of an epoch (or of a loaded position)
            if self.epochs is not None and epoch >= self.epochs:
                raise StopIteration
            self._order = epoch_order(self.seed, epoch, self._n) if self.shuffle else None
            self._ready = epoch
        position = self._position
        batch = gather(self._data, self._order, position, self.batch_size)
        position += 1
        if position == self.epoch_steps:
            self._epoch, self._position = epoch + 1, 0
        else:
            self._position = position
        return batch[0] if self._single else batch

    @property
    def epoch(self) -> int:
        """The epoch of the next batch (0-based; ``epochs`` once every epoch is done)."""
        return self._epoch

    @property
    def position(self) -> int:
        """The index of the next batch in its epoch (``0 <= position < epoch_steps``)."""
        return self._position

    @property
    def index(self) -> int:
        """The next batch counted from the first of epoch 0: ``epoch * epoch_steps + position``."""
        return self._epoch * self.epoch_steps + self._position

    def state_dict(self) -> dict[str, Any]:
        """The position of the next batch, JSON-able: ``epoch``, ``position``, ``seed`` and the
        arguments that decide the batches, which :meth:`load_state_dict` checks.

        Example:
            >>> import numpy as np
            >>> it = batches(np.zeros((10, 3)), 5, seed=1)
            >>> _ = next(it); _ = next(it)
            >>> it.state_dict()
            {'epoch': 1, 'position': 0, 'seed': 1, 'samples': 10, 'shapes': [[3]], 'batch_size': 5, 'drop_remainder': True, 'shuffle': True, 'data': 3057346571}
        """
        return self.state_dict_at(self.index)

    def state_dict_at(self, index: int) -> dict[str, Any]:
        """The :meth:`state_dict` when the next batch is number ``index`` (counted from the first).

        Example:
            >>> import numpy as np
            >>> it = batches(np.zeros((10, 3)), 5)
            >>> state = it.state_dict_at(5); state["epoch"], state["position"]
            (2, 1)
        """
        epoch, position = divmod(int(index), self.epoch_steps)
        return {"epoch": epoch, "position": position, "seed": self.seed, **self._identity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues with the batch a :meth:`state_dict` points at, bit for bit.

        Args:
            state: a dict from :meth:`state_dict` (after a JSON round trip, too). Only ``epoch``
                and ``position`` are required; every other key must match these batches (the
                seed only when shuffling).

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: a key is missing or out of range, or the state comes from batches
                built with other arguments (the message lists each difference).

        Example:
            >>> import numpy as np
            >>> it = batches(np.arange(6), 2, shuffle=False)
            >>> it.load_state_dict({"epoch": 3, "position": 2})
            >>> next(it).tolist(), it.epoch
            ([4, 5], 4)
        """
        if not isinstance(state, Mapping):
            raise TypeError(explain(
                "Batches.load_state_dict() takes the dict that state_dict() returned",
                expected="a dict such as {'epoch': 2, 'position': 5, 'seed': 0, ...}",
                received=describe(state), fix="pass batches.state_dict() of the run being continued"))
        missing = [key for key in ("epoch", "position") if key not in state]
        if missing:
            raise ValueError(explain(
                f"the batches' position lacks {', '.join(repr(k) for k in missing)}",
                expected="a dict from Batches.state_dict(), with 'epoch' and 'position'",
                received=f"a dict with keys {sorted(map(str, state))}",
                fix="pass the whole dict that state_dict() returned"))
        self._check_identity(state)
        epoch = _position_number(state["epoch"], "epoch", minimum=0)
        position = _position_number(state["position"], "position", minimum=0)
        if position >= self.epoch_steps:
            raise ValueError(explain(
                f"position {position} is past the end of an epoch of {self.epoch_steps} batches",
                expected=f"0 <= position < {self.epoch_steps} (batches per epoch here)",
                received=f"epoch={epoch}, position={position}",
                fix="pass a state_dict() of batches with the same data and batch_size"))
        self._epoch, self._position, self._ready = epoch, position, -1

    def _check_identity(self, state: Mapping[str, Any]) -> None:
        here = {"seed": self.seed, **self._identity}
        shuffled = self.shuffle and state.get("shuffle", True)
        differ = []
        for key in _IDENTITY:
            if key not in state or (key == "seed" and not shuffled):
                continue
            saved = state[key]
            if key == "shapes" and isinstance(saved, (list, tuple)):
                saved = [list(s) if isinstance(s, (list, tuple)) else s for s in saved]
            if saved != here[key]:
                differ.append(f"{key}: saved {saved!r}, here {here[key]!r}" + (
                    " (a checksum of sampled rows: the arrays hold other values or another order)"
                    if key == "data" else ""))
        if state.get("augment") is not None:  # saved by augmented batches: these draw no augmentation
            differ.append(f"augment: saved {state['augment']!r}, here none")
        if differ:
            import jax  # (only here: gyre.data's arrays need numpy alone)

            several = jax.process_count() > 1 and all(d.startswith(("data:", "samples:")) for d in differ)
            raise ValueError(explain(
                "the position comes from batches built with other arguments, so it would "
                "continue with other data",
                expected="a state_dict() of batches over the same arrays (the same values, in the "
                "same order), with the same batch_size, seed, shuffle and drop_remainder",
                received="; ".join(differ),
                fix="with several processes a checkpoint holds process 0's position, which batches of "
                "other rows in this process cannot take: give every process the same arrays and "
                "gyre.data.process_share(gyre.data.batches(...)), which feeds each its rows" if several
                else "build the batches as the run that saved the position did (the saved "
                "values above), or start a new run instead of resuming"))

    def __repr__(self) -> str:
        return (
            f"Batches(samples={self._n}, batch_size={self.batch_size}, epoch_steps={self.epoch_steps}, "
            f"epochs={self.epochs}, seed={self.seed}, epoch={self._epoch}, position={self._position})"
        )


def _position_number(value: Any, name: str, *, minimum: int) -> int:
    """A saved position's ``name`` as an int, or the explained error."""
    return whole(value, f"the batches' {name}", minimum=minimum,
                 expected=f"{name} as Batches.state_dict() saved it, e.g. {{'{name}': 3}}",
                 fix="pass the dict that state_dict() returned, unchanged")


class Forwarding:
    """A wrapper of ``self.source``: its position protocol (``state_dict``/``load_state_dict``, grain's
    ``get_state``/``set_state``) and any attribute it lacks are the source's, only where the source has
    them: a wrapped list or generator has no position, as the list or the generator itself."""

    source: Any

    def __getattr__(self, name: str) -> Any:  # epoch_steps, index, batch_size, state_dict, ...
        if name == "source":
            raise AttributeError(name)
        return getattr(self.source, name)


#: The public spelling (``gyre.data.batches((x, y), 32)``): one class, two names.
batches = Batches
