"""Batches of a torch ``DataLoader`` or a ``tf.data.Dataset`` as numpy, still re-iterable and
with their length. Each adapter imports its package when called.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from gyre.core._checks import require
from gyre.core._errors import describe, explain


def to_numpy(tree: Any) -> Any:
    """``tree`` with every torch or TensorFlow tensor (in tuples, lists, dicts) as a numpy array."""
    if isinstance(tree, np.ndarray):
        return tree
    if isinstance(tree, Mapping):
        return {key: to_numpy(value) for key, value in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple
        return type(tree)(*(to_numpy(value) for value in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(to_numpy(value) for value in tree)
    if callable(getattr(tree, "detach", None)):  # torch
        return tree.detach().cpu().numpy()
    if callable(getattr(tree, "numpy", None)):  # TensorFlow (eager)
        return tree.numpy()
    return np.asarray(tree)


class NumpyLoader(Iterable[Any]):
    """A re-iterable loader whose batches come out as numpy: what :func:`from_torch` and
    :func:`from_tf` return. ``len()`` is the wrapped loader's when it has one.

    Example:
        >>> loader = NumpyLoader([(np.ones(2), 7)])
        >>> len(loader), next(iter(loader))
        (1, (array([1., 1.]), array(7)))
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return (to_numpy(batch) for batch in self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __repr__(self) -> str:
        return f"NumpyLoader({self.loader!r})"


def _numpy_loader(loader: Any, package: str, adapter: str, example: str) -> NumpyLoader:
    """``loader`` as a :class:`NumpyLoader` once ``package`` imports and ``loader`` is re-iterable."""
    require(package, f"gyre.data.{adapter}", package=package,
            fix=f"pip install {package}, or pass gyre.data.batches((x, y), batch_size) instead")
    if not isinstance(loader, Iterable) or isinstance(loader, Iterator):
        raise TypeError(explain(
            f"{adapter}() takes a re-iterable loader (one pass per epoch)",
            expected=example, received=describe(loader), fix="pass the loader itself, not iter(loader)"))
    return NumpyLoader(loader)


def from_torch(loader: Any) -> NumpyLoader:
    """A ``torch.utils.data.DataLoader`` (or any re-iterable of torch tensors) whose batches come
    out as numpy (a :class:`NumpyLoader`), re-iterable (one epoch per pass) and with its ``len``.

    Raises:
        ImportError: torch is not installed (the message says ``pip install torch``).
        TypeError: ``loader`` is a one-pass iterator or not iterable.

    Example:
        >>> try:
        ...     loader = from_torch([])
        ... except ImportError as err:  # torch is not a gyre dependency
        ...     print(str(err).splitlines()[0])
        ... else:
        ...     print("gyre.data.from_torch needs torch, which is not installed")
        gyre.data.from_torch needs torch, which is not installed
    """
    return _numpy_loader(loader, "torch", "from_torch", "torch.utils.data.DataLoader(dataset, batch_size=128)")


def from_tf(dataset: Any) -> NumpyLoader:
    """A batched ``tf.data.Dataset`` (or any re-iterable of TensorFlow tensors) whose batches come
    out as numpy (a :class:`NumpyLoader`), re-iterable and with its ``len`` when finite.

    Raises:
        ImportError: TensorFlow is not installed (the message says ``pip install tensorflow``).
        TypeError: ``dataset`` is a one-pass iterator or not iterable.

    Example:
        >>> try:
        ...     loader = from_tf([])
        ... except ImportError as err:  # TensorFlow is not a gyre dependency
        ...     print(str(err).splitlines()[0])
        ... else:
        ...     print("gyre.data.from_tf needs tensorflow, which is not installed")
        gyre.data.from_tf needs tensorflow, which is not installed
    """
    return _numpy_loader(dataset, "tensorflow", "from_tf", "tf.data.Dataset.from_tensor_slices((x, y)).batch(128)")
