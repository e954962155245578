"""Built-in data sets that need no download: ``digits``, scikit-learn's 8x8 handwritten digits."""

from __future__ import annotations

import numpy as np

from gyre.core._checks import real, require
from gyre.core._errors import explain
from gyre.data._arrays import check_seed

Split = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _check_test_size(test_size: object) -> float:
    return real(test_size, "test_size", above=0, below=1,
                problem="test_size must be a fraction strictly between 0 and 1",
                expected="e.g. test_size=0.2 (20% of the samples held out)", fix="pass a float in (0, 1)")


def stratified_split(labels: np.ndarray, *, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a deterministic train/test split that keeps the class proportions: the test set
    holds ``ceil(test_size * n)`` samples, drawn with ``default_rng(seed)``; both are shuffled.

    Args:
        labels: one integer class label per sample, a 1-D array (floats, one-hot rows or a
            column ``(n, 1)`` are refused, with how to convert them).
        test_size: fraction of the samples held out, in (0, 1).
        seed: the seed of the draw.

    Returns:
        ``(train_indices, test_indices)``.

    Example:
        >>> train, test = stratified_split(np.array([0, 0, 0, 0, 1, 1, 1, 1]), test_size=0.5, seed=0)
        >>> len(train), len(test), sorted(np.array([0, 0, 0, 0, 1, 1, 1, 1])[test].tolist())
        (4, 4, [0, 0, 1, 1])
    """
    test_size = _check_test_size(test_size)
    rng = np.random.default_rng(check_seed(seed))
    labels = np.asarray(labels)
    if labels.ndim != 1 or not (np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool):
        fix = (
            "flatten the column: labels.ravel()" if labels.ndim == 2 and labels.shape[1] == 1
            else "take the class of each row: labels.argmax(-1)" if labels.ndim == 2
            else "convert whole-number labels with labels.astype(int); bin continuous targets first "
            "(np.digitize)" if labels.ndim == 1
            else "pass one class per sample"
        )
        raise ValueError(explain(
            "stratified_split needs 1-D integer class labels (it keeps each class's share)",
            expected="an int array of shape (n,), e.g. np.array([0, 2, 1, 0])",
            received=f"an array of shape {labels.shape} and dtype {labels.dtype}", fix=fix))
    classes, counts = np.unique(labels, return_counts=True)
    # largest remainder: each class its share rounded down, plus one for the largest fractional parts
    shares = test_size * counts
    held = np.floor(shares).astype(int)
    missing = int(np.ceil(test_size * len(labels))) - int(held.sum())
    if missing > 0:
        held[np.argsort(-(shares - held), kind="stable")[:missing]] += 1
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for value, count in zip(classes, held, strict=True):
        members = rng.permutation(np.flatnonzero(labels == value))
        test.append(members[:count])
        train.append(members[count:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def digits(*, test_size: float = 0.2, seed: int = 0) -> Split:
    """The scikit-learn digits (1,797 8x8 grey images of 0-9), split into train and test (needs
    ``pip install 'gyre[examples]'``; nothing is downloaded).

    Args:
        test_size: fraction held out for the test set, stratified by class.
        seed: the seed of the split, a whole number >= 0.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: images as float32 vectors of 64 values in
        [0, 1], labels int32.

    Example:
        >>> (x_train, y_train), (x_test, y_test) = digits()
        >>> x_train.shape, x_test.shape, x_train.dtype, y_train.dtype
        ((1437, 64), (360, 64), dtype('float32'), dtype('int32'))
    """
    seed, test_size = check_seed(seed), _check_test_size(test_size)
    bunch = require("sklearn.datasets", "gyre.data.digits", extra="examples", package="scikit-learn").load_digits()
    x = (np.asarray(bunch.data, dtype=np.float32) / 16.0).reshape(-1, 64)
    y = np.asarray(bunch.target, dtype=np.int32)
    train, test = stratified_split(y, test_size=test_size, seed=seed)
    return (x[train], y[train]), (x[test], y[test])
