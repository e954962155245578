"""Built-in data sets that need no download: ``digits`` (scikit-learn's 8x8 handwritten digits), and
MNIST, Fashion-MNIST (IDX files, gzipped or not) and CIFAR-10 (its binary version) read from files
you already have. Every header and size is checked, so a truncated or mixed-up file is a
``ValueError`` naming the file.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from gyre.core._checks import real, require
from gyre.core._errors import describe, explain
from gyre.data._arrays import check_seed


class Split(NamedTuple):
    """What the built-in data sets return: ``(train, test)``, each an ``(x, y)`` pair of arrays.
    It unpacks as a tuple; a loop given it whole (not one part, batched) refuses it.

    Example:
        >>> import numpy as np
        >>> (x, y), test = Split((np.zeros((4, 2)), np.arange(4)), (np.ones((2, 2)), np.arange(2)))
        >>> x.shape, test[0].shape
        ((4, 2), (2, 2))
    """

    train: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]


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
    return Split((x[train], y[train]), (x[test], y[test]))


IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension
IDX_FILES = (
    ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
)
CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST = "test_batch.bin"
CIFAR_RECORD = 1 + 3 * 32 * 32
SOURCES = {
    "MNIST": "https://yann.lecun.com/exdb/mnist/ (mirror: "
    "https://ossci-datasets.s3.amazonaws.com/mnist/)",
    "Fashion-MNIST": "https://github.com/zalandoresearch/fashion-mnist (the files under data/fashion/)",
    "CIFAR-10": "https://www.cs.toronto.edu/~kriz/cifar.html (the 'CIFAR-10 binary version', "
    "cifar-10-binary.tar.gz, extracted with tar xzf)",
}


def _folder(path: str | os.PathLike[str], dataset: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(explain(
            f"{dataset} reads its files from a folder given as a path",
            expected="a str or pathlib.Path naming a folder, e.g. '~/data/mnist'", received=describe(path),
            fix="pass the folder that holds the data set's files"))
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(explain(
            f"the {dataset} folder does not exist (or is not a folder)",
            expected=f"a folder holding the {dataset} files, downloaded from {SOURCES[dataset]}",
            received=f"{str(path)!r} (resolved to {folder.resolve()})",
            fix="download the files there, or pass the folder where they are"))
    return folder


def _missing(dataset: str, folder: Path, names: list[str], *, gz: bool) -> FileNotFoundError:
    listed = ", ".join(f"{n} (or {n}.gz)" if gz else n for n in names)
    return FileNotFoundError(explain(
        f"{dataset} files are missing in {folder}",
        expected=f"the files {listed}", received=f"a folder without {', '.join(names)}",
        fix=f"download them from {SOURCES[dataset]} into {folder} (gzipped or not)"
        if gz
        else f"download them from {SOURCES[dataset]} and pass the extracted folder"))


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    if path.suffix != ".gz":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(explain(
            f"{path} is not a readable gzip file",
            expected="a gzip file, as downloaded (or the same file uncompressed, without .gz)",
            received=f"{len(raw)} bytes that fail to decompress: {err}",
            fix="download the file again; an interrupted download leaves it truncated")) from err


def _corrupt(path: Path, what: str, *, expected: str, received: str) -> ValueError:
    return ValueError(explain(
        f"{path} is corrupt: {what}",
        expected=expected, received=received,
        fix="download the file again (and check that it is the one named, e.g. images not labels)"))


def read_idx(path: Path, *, magic: int, shape: tuple[int, ...]) -> np.ndarray:
    """The uint8 array of an IDX file, its magic number, dimensions and size checked."""
    data = _read(path)
    ndim = 1 + len(shape)
    header = 4 + 4 * ndim
    if len(data) < 4:
        raise _corrupt(
            path, "too short for an IDX header", expected=f"a header of {header} bytes", received=f"{len(data)} bytes"
        )
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        kinds = {IMAGES_MAGIC: "an images file", LABELS_MAGIC: "a labels file"}
        raise _corrupt(
            path,
            "wrong IDX magic number",
            expected=f"magic 0x{magic:08X} ({kinds.get(magic, 'IDX')}: unsigned bytes, {ndim} dimensions)",
            received=f"magic 0x{found:08X}" + (f" ({kinds[found]})" if found in kinds else ""),
        )
    if len(data) < header:
        raise _corrupt(
            path, "the IDX header is cut short", expected=f"{header} bytes of header", received=f"{len(data)} bytes"
        )
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    if dims[1:] != shape:
        raise _corrupt(
            path,
            "unexpected IDX dimensions",
            expected=f"dimensions (n, {', '.join(map(str, shape))})" if shape else "dimensions (n,)",
            received=f"dimensions {dims}",
        )
    size = header + int(np.prod(dims))
    if len(data) != size:
        raise _corrupt(
            path,
            "the file size does not match its header",
            expected=f"{size} bytes ({header} of header + {' x '.join(map(str, dims))} values)",
            received=f"{len(data)} bytes",
        )
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims)


def _check_labels(path: Path, labels: np.ndarray) -> np.ndarray:
    if labels.size and int(labels.max()) > 9:
        raise _corrupt(
            path,
            "labels out of range",
            expected="labels 0-9 (10 classes)",
            received=f"a label {int(labels.max())}",
        )
    return labels.astype(np.int32)


def _images(pixels: np.ndarray) -> np.ndarray:
    images = pixels.astype(np.float32, order="C")  # a C-ordered copy, divided in place
    images /= np.float32(255.0)
    return images


def _idx_dataset(path: str | os.PathLike[str], dataset: str) -> Split:
    folder = _folder(path, dataset)
    found, missing = [], []
    for name in (n for pair in IDX_FILES for n in pair):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                found.append(candidate)
                break
        else:
            missing.append(name)
    if missing:
        raise _missing(dataset, folder, missing, gz=True)
    out = []
    for image_path, label_path in (found[0:2], found[2:4]):
        images = read_idx(image_path, magic=IMAGES_MAGIC, shape=(28, 28))
        labels = read_idx(label_path, magic=LABELS_MAGIC, shape=())
        if len(images) != len(labels):
            raise ValueError(explain(
                f"{label_path.name} and {image_path.name} disagree on the number of examples",
                expected="as many labels as images (60,000 train, 10,000 test)",
                received=f"{len(images)} images in {image_path}, {len(labels)} labels in {label_path}",
                fix="download both files again from the same release"))
        out.append((_images(images)[..., None], _check_labels(label_path, labels)))
    return Split(out[0], out[1])


def mnist(path: str | os.PathLike[str]) -> Split:
    """MNIST read from its four IDX files in the folder ``path`` (``train-images-idx3-ubyte``,
    ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each
    with or without ``.gz``; https://yann.lecun.com/exdb/mnist/).

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: images float32 in [0, 1] shaped
        ``(N, 28, 28, 1)`` (60,000 train, 10,000 test), labels int32 in 0-9.

    Raises:
        FileNotFoundError: the folder or a file is missing (the message says where to get them).
        ValueError: a file is corrupt (magic number, dimensions, size, labels, gzip).

    Example:
        >>> import gzip, tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> def idx(magic, dims, values):  # an IDX file: magic, big-endian dims, bytes
        ...     return magic.to_bytes(4, "big") + np.array(dims, ">u4").tobytes() + bytes(values)
        >>> for part, n in (("train", 3), ("t10k", 2)):
        ...     _ = (folder / f"{part}-images-idx3-ubyte").write_bytes(
        ...         idx(0x803, [n, 28, 28], [255] * (n * 784)))
        ...     _ = (folder / f"{part}-labels-idx1-ubyte.gz").write_bytes(
        ...         gzip.compress(idx(0x801, [n], range(n))))
        >>> (x_train, y_train), (x_test, y_test) = mnist(folder)
        >>> x_train.shape, x_train.dtype, float(x_train.max()), y_train.tolist(), y_test.dtype
        ((3, 28, 28, 1), dtype('float32'), 1.0, [0, 1, 2], dtype('int32'))
    """
    return _idx_dataset(path, "MNIST")


def fashion_mnist(path: str | os.PathLike[str]) -> Split:
    """Fashion-MNIST read from its four IDX files in the folder ``path``, as :func:`mnist` reads
    MNIST (https://github.com/zalandoresearch/fashion-mnist, folder ``data/fashion``; classes
    0 T-shirt/top ... 9 ankle boot).

    Raises:
        FileNotFoundError: the folder or a file is missing.
        ValueError: a file is corrupt.

    Example:
        >>> import tempfile
        >>> fashion_mnist(tempfile.mkdtemp())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        FileNotFoundError: Fashion-MNIST files are missing in ...
          expected: the files train-images-idx3-ubyte (or train-images-idx3-ubyte.gz), ...
    """
    return _idx_dataset(path, "Fashion-MNIST")


def _cifar_folder(path: str | os.PathLike[str]) -> Path:
    folder = _folder(path, "CIFAR-10")
    names = [*CIFAR_TRAIN, CIFAR_TEST]
    for candidate in (folder, folder / "cifar-10-batches-bin"):
        if all((candidate / n).is_file() for n in names):
            return candidate
    inner = folder / "cifar-10-batches-bin"
    base = inner if inner.is_dir() else folder
    missing = [n for n in names if not (base / n).is_file()]
    error = _missing("CIFAR-10", base, missing, gz=False)
    if (folder / "cifar-10-binary.tar.gz").is_file():
        error.args = (error.args[0] + f"\n  note: {folder / 'cifar-10-binary.tar.gz'} is still packed: "
                      f"run tar xzf cifar-10-binary.tar.gz in {folder}",)
    elif (folder / "cifar-10-batches-py").is_dir() or (folder / "data_batch_1").is_file():
        error.args = (error.args[0] + "\n  note: this looks like the 'CIFAR-10 python version'; "
                      "gyre reads the 'CIFAR-10 binary version' (files ending in .bin)",)
    raise error


def _cifar_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    data = path.read_bytes()
    if not data or len(data) % CIFAR_RECORD:
        raise _corrupt(
            path,
            "its size is not a whole number of CIFAR-10 records",
            expected=f"a multiple of {CIFAR_RECORD} bytes (1 label byte + 3 x 32 x 32 pixels per "
            "image; 30,730,000 bytes for 10,000 images)",
            received=f"{len(data)} bytes ({len(data) // CIFAR_RECORD} records and {len(data) % CIFAR_RECORD} bytes over)",
        )
    records = np.frombuffer(data, np.uint8).reshape(-1, CIFAR_RECORD)
    labels = _check_labels(path, records[:, 0])
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return _images(images), labels


def cifar10(path: str | os.PathLike[str]) -> Split:
    """CIFAR-10 read from its binary version in ``path``: the folder ``cifar-10-batches-bin`` (or
    the one above it) holding ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin``.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: images float32 in [0, 1] shaped
        ``(N, 32, 32, 3)`` (50,000 train in batch-file order, 10,000 test), labels int32.

    Raises:
        FileNotFoundError: the folder or a file is missing (also when the archive is packed).
        ValueError: a file is corrupt (its size, or a label above 9).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp()) / "cifar-10-batches-bin"
        >>> folder.mkdir()
        >>> record = bytes([3]) + bytes([255] * 1024 + [0] * 2048)  # label 3, a red image
        >>> for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        ...     _ = (folder / name).write_bytes(record * 2)
        >>> (x_train, y_train), (x_test, y_test) = cifar10(folder.parent)
        >>> x_train.shape, x_test.shape, y_train[:2].tolist(), x_train[0, 0, 0].tolist()
        ((10, 32, 32, 3), (2, 32, 32, 3), [3, 3], [1.0, 0.0, 0.0])
    """
    folder = _cifar_folder(path)
    parts = [_cifar_file(folder / name) for name in CIFAR_TRAIN]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return Split(train, _cifar_file(folder / CIFAR_TEST))
