"""Batches from in-memory arrays: ``batches`` and ``steps_per_epoch``.

Numpy only: the batches are host arrays, moved to the device by the step that consumes
them. Each epoch is shuffled with its own generator, seeded by ``(seed, epoch)``, so the
order of epoch ``k`` does not depend on how many epochs ran before it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from gyre.core._errors import describe, explain, whole_number

Batch = tuple[np.ndarray, ...] | np.ndarray


def _check_count(name: str, value: Any, *, minimum: int, example: str) -> int:
    if isinstance(value, np.integer) and value >= minimum:  # a count read from an array
        return int(value)
    return whole_number(
        value,
        minimum=minimum,
        problem=f"{name} must be a whole number >= {minimum}",
        expected=f"an int >= {minimum}, e.g. {example}",
        fix=f"pass {example}",
    )


def check_seed(seed: Any) -> int:
    """``seed`` as an ``int`` when it can seed numpy's generators (a whole number >= 0,
    numpy and 0-d integer arrays included), else a ``ValueError`` that says so.

    Example:
        >>> import numpy as np
        >>> check_seed(np.int64(7))
        7
    """
    return whole_number(
        seed,
        minimum=0,
        problem="a seed must be a whole number >= 0",
        expected="an int >= 0, e.g. seed=0",
        fix="pass seed=0 (any non-negative int; the same seed gives the same order)",
    )


def steps_per_epoch(n: int, batch_size: int, drop_remainder: bool = True) -> int:
    """Batches in one epoch of ``n`` samples.

    Args:
        n: samples in the data set.
        batch_size: samples per batch.
        drop_remainder: whether a last, smaller batch is dropped (as :func:`batches` does by
            default) or kept.

    Returns:
        ``n // batch_size`` when dropping the remainder, else ``ceil(n / batch_size)``.

    Example:
        >>> steps_per_epoch(1437, 64), steps_per_epoch(1437, 64, drop_remainder=False)
        (22, 23)
    """
    n = _check_count("n (the number of samples)", n, minimum=0, example="steps_per_epoch(1000, 32)")
    batch_size = _check_count("batch_size", batch_size, minimum=1, example="batch_size=32")
    return n // batch_size if drop_remainder else -(-n // batch_size)


def _as_arrays(arrays: Any) -> tuple[tuple[np.ndarray, ...], bool]:
    """The arrays as a tuple, and whether a single array (not a sequence) was given."""
    if isinstance(arrays, np.ndarray) or hasattr(arrays, "__array__"):
        single = (np.asarray(arrays),)
        if single[0].ndim == 0:
            raise ValueError(
                explain(
                    "batches() needs arrays with a leading sample dimension",
                    expected="an array of shape (n, ...) or a tuple of them, e.g. (x, y)",
                    received=f"a 0-d array {describe(arrays)}",
                    fix="pass the whole data set, e.g. batches((x, y), 32)",
                )
            )
        return single, True
    if not isinstance(arrays, Sequence) or isinstance(arrays, (str, bytes)) or not arrays:
        raise TypeError(
            explain(
                "batches() takes an array or a non-empty tuple of arrays",
                expected="batches((x_train, y_train), batch_size)",
                received=describe(arrays),
                fix="pass the arrays as a tuple: batches((x, y), 32)",
            )
        )
    out = []
    for i, array in enumerate(arrays):
        value = np.asarray(array)
        if value.ndim == 0:
            raise ValueError(
                explain(
                    f"array {i} given to batches() has no leading sample dimension",
                    expected="arrays of shape (n, ...) that share n",
                    received=f"array {i}: {describe(array)}",
                    fix="pass one value per sample, e.g. labels of shape (n,)",
                )
            )
        out.append(value)
    sizes = [a.shape[0] for a in out]
    if len(set(sizes)) != 1:
        shapes = ", ".join(f"array {i}: {a.shape}" for i, a in enumerate(out))
        raise ValueError(
            explain(
                "the arrays given to batches() have different numbers of samples",
                expected="the same leading dimension in every array, e.g. x (n, 64) and y (n,)",
                received=shapes,
                fix="check that inputs and labels come from the same split",
            )
        )
    return tuple(out), False


def batches(
    arrays: Sequence[Any] | np.ndarray,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epochs: int | None = None,
    drop_remainder: bool = True,
) -> Iterator[Batch]:
    """Batches of in-memory arrays, reshuffled every epoch with a deterministic order.

    Arguments are checked at once (not when the first batch is pulled).

    Args:
        arrays: a tuple of arrays sharing their leading (sample) dimension, e.g. ``(x, y)``;
            or a single array.
        batch_size: samples per batch.
        shuffle: draw a new order every epoch (epoch ``k`` uses the generator seeded by
            ``(seed, k)``); ``False`` keeps the original order.
        seed: the seed of the shuffles (a whole number >= 0).
        epochs: passes over the data; ``None`` repeats forever (bound the loop with ``stop=``).
        drop_remainder: drop the last batch of an epoch when it is smaller than
            ``batch_size``, so every batch has the same shape (one compilation of the step).

    Returns:
        An iterator of tuples of numpy arrays, one per input array (a single array when a
        single array was given).

    Raises:
        ValueError: the arrays disagree on the number of samples, ``batch_size < 1``, a
            negative ``seed``, or a whole batch does not fit in the data while
            ``drop_remainder=True``.

    Example:
        >>> import numpy as np
        >>> x, y = np.arange(10).reshape(5, 2), np.arange(5)
        >>> [b[1].tolist() for b in batches((x, y), 2, shuffle=False, epochs=1)]
        [[0, 1], [2, 3]]
        >>> [b.tolist() for b in batches(y, 2, shuffle=False, epochs=1, drop_remainder=False)]
        [[0, 1], [2, 3], [4]]
        >>> it = batches((x, y), 5, seed=1)
        >>> sorted(next(it)[1].tolist()), sorted(next(it)[1].tolist())
        ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    """
    data, single = _as_arrays(arrays)
    batch_size = _check_count("batch_size", batch_size, minimum=1, example="batch_size=32")
    if epochs is not None:
        epochs = _check_count("epochs", epochs, minimum=1, example="epochs=1 (or None to repeat forever)")
    seed = check_seed(seed)
    n = data[0].shape[0]
    if n == 0:
        raise ValueError(
            explain(
                "batches() was given empty arrays",
                expected="at least one sample",
                received=f"arrays of shapes {[a.shape for a in data]}",
                fix="check the data split that produced them",
            )
        )
    if drop_remainder and batch_size > n:
        raise ValueError(
            explain(
                "the batch is larger than the data, so every batch would be dropped",
                expected=f"batch_size <= {n} (the number of samples)",
                received=f"batch_size={batch_size} with drop_remainder=True",
                fix=f"use batch_size <= {n}, or drop_remainder=False to get one batch of {n}",
            )
        )
    return _generate(data, single, batch_size, shuffle, seed, epochs, drop_remainder)


def _generate(
    data: tuple[np.ndarray, ...],
    single: bool,
    batch_size: int,
    shuffle: bool,
    seed: int,
    epochs: int | None,
    drop_remainder: bool,
) -> Iterator[Batch]:
    n = data[0].shape[0]
    steps = steps_per_epoch(n, batch_size, drop_remainder)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = np.random.default_rng((seed, epoch)).permutation(n) if shuffle else None
        for i in range(steps):
            start, end = i * batch_size, min((i + 1) * batch_size, n)
            if order is None:
                batch = tuple(a[start:end] for a in data)
            else:
                index = order[start:end]
                batch = tuple(a[index] for a in data)
            yield batch[0] if single else batch
        epoch += 1
