"""What the ``from_ciclo`` examples share: the data in MNIST's layout and where they write.

ciclo's README trains on MNIST (28x28x1 images, pixels 0..255, downloaded). These examples use
scikit-learn's 8x8 digits, which ship with scikit-learn (nothing is downloaded), laid out the
same way: ``uint8`` images of shape ``(8, 8, 1)`` with pixels 0..255 and ``int32`` labels, in
Keras-style ``(images, labels)`` batches.

Files go to ``runs/from_ciclo/<example>/<YYYYmmdd-HHMMSS>/`` in the repository (``runs/`` is
gitignored), or to the ``workdir`` a caller gives.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import gyre.data

RUNS = Path(__file__).resolve().parent.parent.parent / "runs" / "from_ciclo"  # gitignored
Batch = tuple[np.ndarray, np.ndarray]


def _images(x: np.ndarray) -> np.ndarray:
    return np.round(x.reshape(-1, 8, 8, 1) * 255).astype(np.uint8)


def mnist_like() -> tuple[Batch, Batch]:
    """``((x_train, y_train), (x_test, y_test))``: 1,437 and 360 images ``(8, 8, 1)`` uint8."""
    (x_train, y_train), (x_test, y_test) = gyre.data.digits()
    return (_images(x_train), y_train), (_images(x_test), y_test)


def train_dataset(batch_size: int = 32, batches: int | None = None) -> Iterator[Batch]:
    """Training batches, reshuffled every epoch, forever (or ``batches`` of them)."""
    (x, y), _ = mnist_like()
    data = gyre.data.batches((x, y), batch_size)
    return iter(data) if batches is None else itertools.islice(data, batches)


def get_test_dataset(batch_size: int = 32) -> Iterator[Batch]:
    """One pass over the test set in order, its last (smaller) batch included."""
    _, (x, y) = mnist_like()
    return iter(gyre.data.batches((x, y), batch_size, shuffle=False, epochs=1, drop_remainder=False))


def make_workdir(workdir: str | None, name: str) -> str:
    """``workdir``, or a new ``runs/from_ciclo/<name>/<YYYYmmdd-HHMMSS>/`` (``-1``, ``-2``... if taken)."""
    if workdir is not None:
        return workdir
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for suffix in itertools.chain([""], (f"-{i}" for i in itertools.count(1))):
        folder = RUNS / name / f"{stamp}{suffix}"
        try:
            folder.mkdir(parents=True)
            return str(folder)
        except FileExistsError:
            continue
    raise AssertionError("unreachable")
