"""In-memory arrays as data sources: :func:`arrays` makes resumable training batches, a seeded
validation split and fixed evaluation batches, optionally augmented, optionally on grain.

Every random choice has its own stream of ``seed`` (the split: ``SeedSequence(seed,
spawn_key=(1,))``; epoch ``k``'s shuffle: ``(seed, k)``; augmentation: ``(augment_seed, k,
i)``, ``augment_seed`` from ``spawn_key=(2,)``), so batch ``i`` of epoch ``k`` is a pure
function of its position: grain's path and numpy's give the same batches and resume each
other.
"""

from __future__ import annotations

import numbers
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from gyre.core._checks import instance, require, whole
from gyre.core._errors import describe, explain, suggest
from gyre.data._arrays import Batches, _as_arrays, check_seed, epoch_order, gather
from gyre.data._augment import (
    augment_checked,
    augmented,
    check_padding,
    checked_augment,
    with_augment,
)
from gyre.data._datasets import Split

AUGMENT_OPTIONS = ("padding", "flip", "seed")


class Sources(NamedTuple):
    """What :func:`arrays` returns: ``train``, ``val`` and ``test`` (``None``: no such split).

    Example:
        >>> import numpy as np, gyre
        >>> s = gyre.data.arrays(((np.zeros((8, 2)), np.arange(8)), (np.ones((3, 2)), np.arange(3))), 2)
        >>> s.train.epoch_steps, s.val, len(s.test)
        (4, None, 2)
    """

    train: Any
    val: EvalBatches | None
    test: EvalBatches | None


def refuse_sources(value: Any, what: str) -> None:
    """Raises a clear error when ``value`` is the whole :class:`Sources` triple or a built-in data
    set's whole :class:`~gyre.data._datasets.Split`, not one part."""
    if isinstance(value, Sources):
        raise TypeError(explain(
            f"{what} is the whole result of gyre.data.arrays(...), a (train, val, test) triple",
            expected="one of its parts: sources.train to train on, sources.val or sources.test "
            "to evaluate on (or unpack: train, val, test = gyre.data.arrays(...))",
            received=f"Sources(train={value.train!r}, val={value.val!r}, test={value.test!r})",
            fix="pass sources.train as the training data and sources.val / sources.test as "
            "the evaluation data"))
    if isinstance(value, Split):
        shapes = [tuple(tuple(a.shape) for a in part) for part in value]
        raise TypeError(explain(
            f"{what} is the whole result of a built-in data set (gyre.data.digits(), mnist, "
            "fashion_mnist, cifar10): its (train, test) pair of (x, y) arrays, which would be iterated "
            "as two batches of every row",
            expected="batches of its training part",
            received=f"Split(train=(x, y) of shapes {shapes[0]}, test=(x, y) of shapes {shapes[1]})",
            fix="unpack and batch it: (x, y), (x_test, y_test) = gyre.data.digits(); "
            "gyre.data.batches((x, y), 64, seed=0); or gyre.data.arrays(gyre.data.digits(), 64) "
            "for its train, val and test parts"))


class EvalBatches:
    """Evaluation batches of in-memory arrays: re-iterable in one fixed order, the last, smaller
    batch kept (gyre pads and masks it), never shuffled or augmented.

    Attributes:
        batch_size: rows per batch (the last may hold fewer).
        samples: rows in all.

    Example:
        >>> import numpy as np
        >>> val = EvalBatches((np.arange(5), np.arange(5) * 10), 2)
        >>> len(val), [y.tolist() for _, y in val]
        (3, [[0, 10], [20, 30], [40]])
    """

    def __init__(self, arrays: tuple[np.ndarray, ...], batch_size: int) -> None:
        self._arrays, self.batch_size, self.samples = arrays, batch_size, arrays[0].shape[0]

    def __iter__(self) -> Iterator[tuple[np.ndarray, ...]]:
        for start in range(0, self.samples, self.batch_size):
            yield tuple(a[start : start + self.batch_size] for a in self._arrays)

    def __len__(self) -> int:
        return -(-self.samples // self.batch_size)

    def __repr__(self) -> str:
        return f"EvalBatches(samples={self.samples}, batch_size={self.batch_size}, batches={len(self)})"


class GrainBatches(Iterator[tuple[np.ndarray, ...]]):
    """The training batches of :func:`arrays` with ``workers >= 1``: ``gyre.data.batches``'s
    batches (augmented as ``gyre.data.augmented`` would), gathered on grain's threads, one
    element per batch. Its position is :class:`~gyre.data.Batches`' ``state_dict``, so either
    path resumes the other.

    Example:
        >>> import numpy as np, gyre
        >>> x = np.arange(12.0).reshape(6, 2)
        >>> it = gyre.data.arrays((x, np.arange(6)), 2, workers=1).train
        >>> plain = gyre.data.batches((x, np.arange(6)), 2)  # the numpy path's batches
        >>> all(np.array_equal(next(it)[1], next(plain)[1]) for _ in range(4))
        True
        >>> saved = it.state_dict()
        >>> again = gyre.data.arrays((x, np.arange(6)), 2, workers=1).train
        >>> again.load_state_dict(saved)
        >>> np.array_equal(next(again)[1], next(it)[1])
        True
        >>> it.close(); again.close()
    """

    def __init__(self, arrays: tuple[np.ndarray, ...], batch_size: int, *, shuffle: bool, seed: int,
                 drop_remainder: bool, augment: Mapping[str, Any] | None, workers: int) -> None:
        grain = require("grain", "gyre.data.arrays(..., workers>=1) (it runs on grain)", extra="grain",
                        fix="pip install 'gyre[grain]', or pass workers=0 (the numpy path, the same batches)")
        self._plan = Batches(arrays, batch_size, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder)
        self._data = self._plan._data
        self._augment = _augment_options(augment, self._plan.seed, self._data[0])  # checked once, here: not per batch
        self.epoch_steps, self.epochs = self._plan.epoch_steps, None
        self.batch_size, self.seed, self.shuffle = self._plan.batch_size, self._plan.seed, self._plan.shuffle
        self._orders: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        options = grain.ReadOptions(num_threads=workers, prefetch_buffer_size=2 * workers + 2)
        self._dataset = grain.MapDataset.range(sys.maxsize).map(self._batch).to_iter_dataset(options)
        self._it: Any = None  # made at the first batch, so a loaded position starts it there
        self._start = 0

    def _order(self, epoch: int) -> np.ndarray:
        with self._lock:
            order = self._orders.get(epoch)
            if order is None:
                order = self._orders[epoch] = epoch_order(self.seed, epoch, self._plan._n)
                if len(self._orders) > 4:  # the oldest goes (drawn again if a thread needs it)
                    del self._orders[min(self._orders)]
            return order

    def _batch(self, index: int) -> tuple[np.ndarray, ...]:
        epoch, position = divmod(int(index), self.epoch_steps)
        batch = gather(self._data, self._order(epoch) if self.shuffle else None, position, self.batch_size)
        if (options := self._augment) is not None:
            images = augment_checked(batch[0], options["seed"], epoch, position, options["padding"], options["flip"])
            batch = (images, *batch[1:])
        return batch

    def __len__(self) -> int:
        """Batches per epoch (see :meth:`gyre.data.Batches.__len__`)."""
        return self.epoch_steps

    def __next__(self) -> tuple[np.ndarray, ...]:
        if self._it is None:
            self._it = iter(self._dataset)
            if self._start:
                self._it.set_state({"next_index": self._start})
        return next(self._it)

    @property
    def index(self) -> int:
        """The next batch counted from the first of epoch 0 (grain's ``next_index``)."""
        return self._start if self._it is None else int(self._it.get_state()["next_index"])

    def state_dict(self) -> dict[str, Any]:
        """The position of the next batch, as ``gyre.data.Batches.state_dict`` gives it (with
        ``augment``'s settings, as ``gyre.data.augmented``'s)."""
        return self.state_dict_at(self.index)

    def state_dict_at(self, index: int) -> dict[str, Any]:
        """The :meth:`state_dict` at batch ``index`` (see ``Batches.state_dict_at``)."""
        state = self._plan.state_dict_at(index)
        options = self._augment
        return state if options is None else with_augment(state, options["seed"], options["padding"], options["flip"])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues with the batch ``state`` points at (checked as ``Batches.load_state_dict``
        checks it: a position of other data, or augmented otherwise, is an error)."""
        if (options := self._augment) is not None:
            state = checked_augment(dict(state), options["seed"], options["padding"], options["flip"])
        self._plan.load_state_dict(state)
        self._start = self._plan.index
        if self._it is not None:
            self._it.set_state({"next_index": self._start})

    def close(self) -> None:
        """Stops grain's threads (a later batch starts them again)."""
        if self._it is not None:
            self._start = self.index
            self._it.close()
            self._it = None

    def __repr__(self) -> str:
        return (f"GrainBatches(samples={self._plan._n}, batch_size={self.batch_size}, "
                f"epoch_steps={self.epoch_steps}, seed={self.seed}, index={self.index})")


def _is_array(value: Any) -> bool:
    return hasattr(value, "__array__") and np.ndim(value) >= 1


def _split_arrays(data: Any) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...] | None]:
    """``(train arrays, test arrays or None)`` from ``(x, y, ...)`` or a reader's result."""
    if isinstance(data, (tuple, list)) and data:
        if all(_is_array(a) for a in data):
            return _as_arrays(data, "data")[0], None
        if len(data) == 2 and all(isinstance(p, (tuple, list)) and p and all(_is_array(a) for a in p) for p in data):
            train = _as_arrays(data[0], "the training arrays")[0]
            test = _as_arrays(data[1], "the test arrays")[0]
            shapes = [a.shape[1:] for a in train], [a.shape[1:] for a in test]
            if shapes[0] != shapes[1]:
                raise ValueError(explain(
                    "the test arrays' examples differ in shape from the training arrays'",
                    expected=f"per-example shapes {shapes[0]} (the training arrays', after the first dimension)",
                    received=f"{shapes[1]}",
                    fix="pass the test split of the same data, with the same preprocessing (reshape, one-hot)"))
            return train, test
    raise TypeError(explain(
        "arrays() takes a tuple of arrays sharing their first dimension, or a reader's result",
        expected="(x, y) numpy arrays, or ((x_train, y_train), (x_test, y_test)) as gyre.data.mnist(path) returns",
        received=describe(data),
        fix="pass gyre.data.arrays((x, y), 128) or gyre.data.arrays(gyre.data.mnist(path), 128)"))


def _held_out(validation: Any, n: int) -> int:
    """How many of the ``n`` training examples ``validation`` holds out (checked)."""
    bad = None
    if isinstance(validation, bool) or not isinstance(validation, numbers.Real):
        bad = "not a number"
    elif isinstance(validation, numbers.Integral):
        count = int(validation)
        bad = "a count < 1" if count < 1 else f"more than the {n} examples" if count > n else None
    elif not 0 < validation < 1:
        bad = "a float outside (0, 1) (a count is an int)"
    else:
        count = max(1, round(float(validation) * n))
    if bad is None and count >= n:
        bad = f"all {n} examples, leaving none for training"
    if bad is not None:
        raise ValueError(explain(
            f"validation= must hold out some, not all, of the {n} training examples ({bad})",
            expected=f"None, a fraction in (0, 1) such as 0.1, or a count 1 <= k < {n} such as {max(1, n // 10)}",
            received=describe(validation),
            fix=f"pass validation=0.1 or validation={max(1, n // 10)} (an int), or None for no split"))
    return count


def _augment_options(augment: Any, seed: int, images: np.ndarray) -> dict[str, Any] | None:
    if augment is None or augment is False:
        return None
    options = {} if augment is True else dict(augment) if isinstance(augment, Mapping) else None
    unknown = [key for key in options or {} if key not in AUGMENT_OPTIONS]
    if options is None or unknown:
        raise (TypeError if options is None else ValueError)(explain(
            "augment= takes None, True or a dict of the options padding, flip, seed",
            expected="augment=True (crop with padding 4, flip) or augment={'padding': 2, 'flip': False}",
            received=describe(augment) if options is None else f"an unknown option {unknown[0]!r}",
            fix="pass augment=True or a dict with keys padding, flip, seed."
            + (suggest(str(unknown[0]), AUGMENT_OPTIONS) if unknown else "")))
    if images.ndim < 3:
        raise ValueError(explain(
            "augment= crops and flips images, and the first array holds none",
            expected="x shaped (n, height, width) or (n, height, width, channels)",
            received=f"x of shape {images.shape}",
            fix="reshape flat images first, e.g. x.reshape(-1, 8, 8, 1), or leave augment=None"))
    options["flip"] = instance(options.get("flip", True), "augment's flip", bool, expected="flip=True or flip=False",
                               fix="pass {'flip': True}")
    default = int(np.random.SeedSequence(seed, spawn_key=(2,)).generate_state(1)[0])
    options["seed"] = check_seed(options.get("seed", default))
    options["padding"] = check_padding(options.get("padding", 4))
    return options


def arrays(
    data: Any,
    batch_size: int,
    *extra: Any,
    validation: float | int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    drop_remainder: bool = True,
    augment: bool | Mapping[str, Any] | None = None,
    workers: int = 0,
) -> Sources:
    """In-memory arrays as data sources: resumable training batches reshuffled every epoch, a
    seeded validation split, and fixed evaluation batches.

    Args:
        data: ``(x, y, ...)`` arrays sharing their first dimension (``test`` is then ``None``),
            or a reader's result ``((x_train, y_train), (x_test, y_test))`` (``gyre.data.mnist``).
        batch_size: examples per batch.
        *extra: refused: ``arrays(x, y, 64)`` is an error saying to pass ``(x, y)``.
        validation: ``None``; a fraction in (0, 1) (at least one example) or a count >= 1 of
            the training examples, held out by a permutation drawn from ``seed``.
        seed: decides the split, every epoch's order and the augmentation.
        shuffle: reshuffle the training batches every epoch (``False``: the data's order).
        drop_remainder: drop each epoch's last, smaller training batch (one step shape).
        augment: ``None``; ``True`` or ``{"padding": 4, "flip": True, "seed": ...}``: random
            crop and flip of the training images (the first array), repeated on resume.
        workers: ``0``: numpy in the calling thread; ``>= 1``: the same batches from a grain
            pipeline on that many threads (``pip install 'gyre[grain]'``), worth it only when a
            batch costs milliseconds (augmented images) and cores are idle.

    Returns:
        :class:`Sources` ``(train, val, test)``: ``train`` is endless, knows its
        ``epoch_steps`` and position (``gyre.data.Batches``, possibly ``augmented``, or
        :class:`GrainBatches`); ``val``/``test`` are :class:`EvalBatches` or ``None``.

    Raises:
        TypeError, ValueError: a bad ``data``, ``validation``, ``augment`` or ``workers``.
        ImportError: ``workers >= 1`` without grain.

    Example:
        >>> import numpy as np, gyre
        >>> x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
        >>> train, val, test = gyre.data.arrays((x, y), 4, validation=0.2, seed=1)
        >>> train.epoch_steps, val.samples, len(val), test is None
        (2, 2, 1, True)
        >>> saved = train.state_dict()
        >>> again = gyre.data.arrays((x, y), 4, validation=0.2, seed=1).train
        >>> again.load_state_dict(saved)
        >>> np.array_equal(next(again)[1], next(train)[1])
        True
    """
    if extra or (_is_array(data) and np.ndim(batch_size) >= 1):  # arrays(x, y, 64): Keras's habit
        received = [describe(v, 40) for v in (data, batch_size, *extra)]
        raise TypeError(explain(
            "arrays() takes the arrays as one tuple, then the batch size",
            expected="gyre.data.arrays((x, y), 64) or gyre.data.arrays(((x_train, y_train), (x_test, y_test)), 64)",
            received=f"{len(received)} positional arguments: {', '.join(received)}",
            fix="wrap the arrays in a tuple: gyre.data.arrays((x, y), batch_size)"))
    train_arrays, test_arrays = _split_arrays(data)
    seed = check_seed(seed)
    batch_size = whole(batch_size, "batch_size", minimum=1, expected="an int >= 1, e.g. 128",
                       fix="pass batch_size=128")
    workers = whole(workers, "workers", expected="0 (numpy, this thread) or the threads of a grain pipeline, e.g. 2",
                    fix="pass workers=0 or workers=2")
    options = _augment_options(augment, seed, train_arrays[0])
    val = None
    if validation is not None:
        n = train_arrays[0].shape[0]
        held = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,))).permutation(n)
        cut = _held_out(validation, n)
        val_rows, train_rows = np.sort(held[:cut]), np.sort(held[cut:])
        val = EvalBatches(tuple(a[val_rows] for a in train_arrays), batch_size)
        train_arrays = tuple(a[train_rows] for a in train_arrays)
    test = None if test_arrays is None else EvalBatches(test_arrays, batch_size)
    if workers:
        train: Any = GrainBatches(train_arrays, batch_size, shuffle=shuffle, seed=seed,
                                  drop_remainder=drop_remainder, augment=options, workers=workers)
    else:
        train = Batches(train_arrays, batch_size, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder)
        if options is not None:
            train = augmented(train, **options)
    return Sources(train, val, test)


__all__ = ["EvalBatches", "GrainBatches", "Sources", "arrays"]
