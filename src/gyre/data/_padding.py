"""Evaluation without recompiles: the last, smaller batch padded to the batch shape, with a mask
of its real rows, so a step that takes ``mask`` compiles once and its means stay exact
(docs/concepts/named-loops.md: "Evaluation without recompiles"). ``fill="edge"`` (the default) repeats the last
real row, so no padded row becomes a NaN that ``x * mask`` would keep; ``"zeros"`` writes 0.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._checks import whole
from gyre.core._clock import infer_batch_size
from gyre.core._errors import describe, explain

FILLS = ("edge", "zeros")


def _pad_leaf(leaf: Any, rows: int, size: int, fill: str) -> Any:
    if np.ndim(leaf) == 0 or rows == size:
        return leaf
    xp = np if isinstance(leaf, np.ndarray) else jnp
    shape = (size - rows,) + tuple(np.shape(leaf)[1:])
    if fill == "edge" and rows > 0:
        extra = xp.broadcast_to(leaf[rows - 1 : rows], shape)
    else:
        extra = xp.zeros(shape, leaf.dtype)
    return xp.concatenate([leaf, extra])


_FULL: dict[int, np.ndarray] = {}


def _full_mask(size: int) -> np.ndarray:
    if size not in _FULL:
        mask = np.ones(size, bool)
        mask.setflags(write=False)
        _FULL[size] = mask
    return _FULL[size]


def pad_batch(batch: Any, size: int, *, fill: str = "edge") -> tuple[Any, np.ndarray]:
    """``batch`` with every array leaf padded along axis 0 to ``size`` rows, and the numpy bool
    mask of its real rows (made on the host). Numpy stays numpy, JAX arrays stay on their
    device, scalars are kept; a full batch comes back unchanged with a mask of ones.

    Args:
        batch: a pytree of arrays sharing their leading dimension (e.g. ``(x, y)``).
        size: the rows to pad to (at least the batch's).
        fill: ``"edge"`` repeats the last real row, ``"zeros"`` writes zeros.

    Returns:
        ``(padded_batch, mask)``.

    Raises:
        ValueError: the batch holds more than ``size`` rows, its arrays disagree on their
            rows, or ``fill`` is unknown.

    Example:
        >>> import numpy as np
        >>> (x, y), mask = pad_batch((np.array([[1.0], [2.0]]), np.array([3, 4])), 4)
        >>> x[:, 0].tolist(), y.tolist(), mask.tolist()
        ([1.0, 2.0, 2.0, 2.0], [3, 4, 4, 4], [True, True, False, False])
    """
    if fill not in FILLS:
        raise ValueError(
            explain("pad_batch: unknown fill", expected=f"one of {list(FILLS)}", received=repr(fill),
                    fix="fill='edge' (repeat the last row) or fill='zeros'")
        )
    rows = infer_batch_size(batch, default=None)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or rows > size:
        raise ValueError(explain(
            "pad_batch: the batch holds more rows than the size to pad to",
            expected=f"a whole number size >= the batch's {rows} rows", received=f"size={describe(size)}",
            fix="pad to the largest batch's size (padded() learns it from the first batch)"))
    if rows == size:
        return batch, _full_mask(int(size))
    out = jax.tree_util.tree_map(lambda leaf: _pad_leaf(leaf, rows, int(size), fill), batch)
    mask = np.zeros(int(size), bool)
    mask[:rows] = True
    return out, mask


class Padded:
    """The batches of a loader as ``(batch, mask)`` pairs of one size: what :func:`padded` returns.

    Example:
        >>> import numpy as np
        >>> p = Padded([np.arange(3), np.arange(1)])
        >>> [(b.tolist(), m.tolist()) for b, m in p]
        [([0, 1, 2], [True, True, True]), ([0, 0, 0], [True, False, False])]
    """

    def __init__(self, loader: Iterable[Any], batch_size: int | None = None, *, fill: str = "edge") -> None:
        batch_size = whole(batch_size, "padded: batch_size", minimum=1, none=True,
                           fix="pass batch_size=64 (or None: the first batch's)")
        self.loader, self.batch_size, self.fill = loader, batch_size, fill

    def __iter__(self) -> Iterator[tuple[Any, np.ndarray]]:
        size = self.batch_size
        for batch in self.loader:
            if size is None:
                size = infer_batch_size(batch, default=None)
            yield pad_batch(batch, size, fill=self.fill)

    def __len__(self) -> int:
        """The loader's batches (a loader without a length has none: ``TypeError``)."""
        return len(self.loader)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Padded({self.loader!r}, batch_size={self.batch_size})"


def padded(loader: Iterable[Any], batch_size: int | None = None, *, fill: str = "edge") -> Padded:
    """``loader``'s batches as ``(batch, mask)`` pairs padded to one batch size, for a step that
    takes ``mask``.

    Args:
        loader: the batches (pytrees of arrays sharing their leading dimension).
        batch_size: the rows to pad to; ``None``: each pass's first batch's rows (a later,
            larger batch is an error).
        fill: ``"edge"`` (repeat the last real row) or ``"zeros"``.

    Returns:
        A :class:`Padded`, as re-iterable as ``loader``.

    Example:
        >>> import numpy as np
        >>> x = np.arange(10.0)
        >>> pairs = list(padded([x[i : i + 4] for i in range(0, 10, 4)]))
        >>> [b.shape for b, _ in pairs], [int(m.sum()) for _, m in pairs]
        ([(4,), (4,), (4,)], [4, 4, 2])
    """
    return Padded(loader, batch_size, fill=fill)


def accepts_mask(fn: Any) -> bool:
    """Whether ``fn`` takes a keyword argument ``mask`` (a step opting in to padded batches).

    Example:
        >>> accepts_mask(lambda state, batch, mask=None: 0), accepts_mask(lambda state, batch: 0)
        (True, False)
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    param = params.get("mask")
    return param is not None and param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


__all__ = ["Padded", "accepts_mask", "pad_batch", "padded"]
