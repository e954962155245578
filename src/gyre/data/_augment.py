"""Simple image augmentation on host numpy batches: random crop with zero padding, horizontal
flip, and :func:`augmented` for a resumable source. Draws are seeded by ``(seed, epoch,
batch index)``, so a resumed run draws what the uninterrupted one drew.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from gyre.core._checks import real, whole
from gyre.core._errors import as_integer, describe, explain
from gyre.data._arrays import Forwarding, check_seed

Seed = int | tuple[int, ...] | np.random.Generator


def _rng(key_or_seed: Any) -> np.random.Generator:
    if isinstance(key_or_seed, np.random.Generator):
        return key_or_seed
    parts = key_or_seed if isinstance(key_or_seed, tuple) and key_or_seed else (key_or_seed,)
    numbers = [as_integer(v) for v in parts]
    if all(n is not None and n >= 0 for n in numbers):
        return np.random.default_rng(numbers if len(numbers) > 1 else numbers[0])
    raise TypeError(explain(
        "augmentation draws from a numpy Generator or a seed",
        expected="a whole number >= 0, a tuple of them such as (seed, epoch, index), or "
        "numpy.random.default_rng(...)",
        received=describe(key_or_seed),
        fix="pass seed=0, or (seed, epoch, index) for a draw that repeats on resume "
        "(a JAX key lives on the device: augment on the host with a numpy seed instead)"))


def _images(images: Any, what: str) -> np.ndarray:
    array = np.asarray(images)
    if array.ndim < 3:
        raise ValueError(explain(
            f"{what} works on a batch of images",
            expected="an array shaped (batch, height, width) or (batch, height, width, channels)",
            received=f"an array of shape {array.shape}",
            fix="reshape flat images first, e.g. x.reshape(-1, 8, 8, 1) for the digits"))
    return array


def check_padding(padding: Any) -> int:
    """``padding`` (the crop's largest shift) as an ``int`` when a whole number >= 0, else a ``ValueError``."""
    return whole(padding, "padding", expected="the largest shift in pixels, e.g. padding=4 for 32 x 32 images",
                 fix="pass padding=4 (0 leaves the images unchanged)")


def random_crop(images: Any, key_or_seed: Seed, padding: int = 4) -> np.ndarray:
    """Each image of ``images`` (``(batch, height, width[, channels])``) padded with ``padding``
    zeros on every side, then cropped back to its size at a random offset drawn from
    ``key_or_seed`` (a numpy ``Generator``, or a seed: an int or a tuple such as ``(seed, epoch,
    index)``). Returns a new array of the same shape and dtype.

    Example:
        >>> x = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
        >>> random_crop(x, 0, padding=1)[0, :, :, 0]
        array([[4., 5., 6.],
               [7., 8., 9.],
               [0., 0., 0.]], dtype=float32)
    """
    return _crop(_images(images, "random_crop"), _rng(key_or_seed), check_padding(padding))


def _crop(array: np.ndarray, rng: np.random.Generator, padding: int) -> np.ndarray:
    n, height, width = array.shape[:3]
    offsets = rng.integers(0, 2 * padding + 1, size=(n, 2))
    widths = [(0, 0), (padding, padding), (padding, padding)] + [(0, 0)] * (array.ndim - 3)
    padded = np.pad(array, widths)
    out = np.empty_like(array)
    # One slice per distinct offset: faster than a gather.
    codes = offsets[:, 0] * (2 * padding + 1) + offsets[:, 1]
    for code in np.unique(codes):
        members = np.flatnonzero(codes == code)
        top, left = divmod(int(code), 2 * padding + 1)
        out[members] = padded[members, top : top + height, left : left + width]
    return out


def random_flip(images: Any, key_or_seed: Seed, p: float = 0.5) -> np.ndarray:
    """Each image mirrored left to right with probability ``p`` (``rng.random(batch) < p``), drawn
    from ``key_or_seed`` as in :func:`random_crop`; returns a new array.

    Example:
        >>> x = np.array([[[1, 2, 3]], [[4, 5, 6]]])  # two 1 x 3 images
        >>> random_flip(x, 0, p=1.0).tolist()
        [[[3, 2, 1]], [[6, 5, 4]]]
    """
    array = _images(images, "random_flip")
    rng = _rng(key_or_seed)
    p = real(p, "p", minimum=0, maximum=1, problem="the flip probability p must be a number in [0, 1]",
             expected="e.g. p=0.5 (half the images mirrored)", fix="pass p=0.5")
    return _flip(array, rng, p)


def _flip(array: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    flip = (rng.random(array.shape[0]) < p).reshape((-1,) + (1,) * (array.ndim - 1))
    return np.where(flip, array[:, :, ::-1], array)


#: The last entropy word of the augmentation streams (``"aug"`` in ASCII): never 0, so the
#: stream of ``(seed, epoch, index)`` differs from a shuffle's ``(seed, epoch)``.
AUGMENT_STREAM = 0x617567


def augment(
    images: Any, *, seed: int, epoch: int, index: int, padding: int = 4, flip: bool = True
) -> np.ndarray:
    """A random crop with ``padding`` (0: none), then (``flip``) a random horizontal flip of the
    batch ``images``, drawn from ``(seed, epoch, index)`` in a stream apart from
    :func:`gyre.data.batches`' shuffles (one ``seed`` for both is safe). Returns a new array.

    Example:
        >>> x = np.random.default_rng(0).random((4, 8, 8, 1), dtype=np.float32)
        >>> a = augment(x, seed=0, epoch=0, index=3)
        >>> b = augment(x, seed=0, epoch=0, index=3)
        >>> c = augment(x, seed=0, epoch=1, index=3)
        >>> a.shape, np.array_equal(a, b), np.array_equal(a, c)
        ((4, 8, 8, 1), True, False)
    """
    numbers = [whole(value, f"augment's {name}", expected=f"{name} as an int >= 0, e.g. {name}=0",
                     fix="pass the seed, the epoch and the batch's index in the epoch as ints")
               for name, value in (("seed", seed), ("epoch", epoch), ("index", index))]
    return augment_checked(_images(images, "random_crop"), *numbers, check_padding(padding), flip)


def augment_checked(array: np.ndarray, seed: int, epoch: int, index: int, padding: int, flip: bool) -> np.ndarray:
    """:func:`augment` of arguments already checked (a batch of images, whole numbers)."""
    rng = np.random.default_rng((seed, epoch, index, AUGMENT_STREAM))
    out = _crop(array, rng, padding)
    return _flip(out, rng) if flip else out


def with_augment(state: dict[str, Any], seed: int, padding: int, flip: bool) -> dict[str, Any]:
    """A source's position ``state`` with the augmentation that draws its images, saved with it."""
    return {**state, "augment": {"seed": seed, "padding": padding, "flip": flip}}


def checked_augment(state: Any, seed: int, padding: int, flip: bool) -> Any:
    """``state`` without its ``"augment"`` entry, once that entry matches this augmentation; else
    the explained error. A position without one passes when saved before augmentations were
    saved (no ``"data"`` either: ``Batches`` saves that since), else it was never augmented."""
    if not isinstance(state, dict) or ("augment" not in state and "data" not in state):
        return state
    here = {"seed": seed, "padding": padding, "flip": flip}
    if state.get("augment") != here:
        raise ValueError(explain(
            "the position comes from batches augmented otherwise, so a resumed run would draw "
            "other crops and flips than the run that saved it",
            expected=f"the saved augmentation {state.get('augment')!r} (None: the run did not augment)",
            received=f"augmentation {here!r}",
            fix="augment as the run that saved the position did (seed, padding, flip), or start a "
            "new run instead of resuming"))
    return {key: value for key, value in state.items() if key != "augment"}


class Augmented(Forwarding, Iterator[Any]):
    """Batches of a resumable source with their images augmented: what :func:`augmented` returns."""

    def __init__(self, source: Any, *, seed: int = 0, padding: int = 4, flip: bool = True) -> None:
        steps = getattr(source, "epoch_steps", None)
        if steps is None or not callable(getattr(source, "state_dict", None)):
            raise TypeError(explain(
                "augmented() needs a source that knows its position",
                expected="gyre.data.batches(...) (or an iterator with epoch_steps and state_dict)",
                received=describe(source),
                fix="wrap the batches: augmented(gyre.data.batches((x, y), 128), seed=0)"))
        self.source, self.epoch_steps = source, steps
        self.seed, self.padding, self.flip = check_seed(seed), check_padding(padding), bool(flip)

    def __len__(self) -> int:
        """Batches per epoch, the source's (see :meth:`gyre.data.Batches.__len__`)."""
        return self.epoch_steps

    def __next__(self) -> Any:
        where = getattr(self.source, "index", None)  # Batches: the next batch, counted from 0
        if isinstance(where, int):
            epoch, index = divmod(where, self.epoch_steps)
        else:
            state = self.source.state_dict()
            epoch, index = int(state["epoch"]), int(state["position"])
        batch = next(self.source)
        first = batch[0] if isinstance(batch, tuple) else batch
        out = augment_checked(_images(first, "random_crop"), self.seed, epoch, index, self.padding, self.flip)
        return (out, *batch[1:]) if isinstance(batch, tuple) else out

    def __repr__(self) -> str:
        return f"Augmented({self.source!r}, seed={self.seed}, padding={self.padding}, flip={self.flip})"

    def state_dict(self) -> dict[str, Any]:
        """The source's position, with this augmentation (checked by :meth:`load_state_dict`)."""
        return with_augment(self.source.state_dict(), self.seed, self.padding, self.flip)

    def state_dict_at(self, index: int) -> dict[str, Any]:
        """The source's position at batch ``index`` (see ``Batches.state_dict_at``), with this augmentation."""
        return with_augment(self.source.state_dict_at(index), self.seed, self.padding, self.flip)

    def load_state_dict(self, state: Any) -> None:
        """Continues the source at the saved position; a position augmented otherwise is refused."""
        self.source.load_state_dict(checked_augment(state, self.seed, self.padding, self.flip))


def augmented(source: Any, *, seed: int = 0, padding: int = 4, flip: bool = True) -> Augmented:
    """Every batch of ``source`` (e.g. ``gyre.data.batches((x, y), 128)``) with its images (the
    batch's first array) passed through :func:`augment`, seeded by ``seed`` and the batch's epoch
    and position; the source's ``epoch_steps`` and position protocol are kept, so a resumed run
    augments the same way.

    Example:
        >>> import gyre
        >>> x, y = np.ones((8, 4, 4, 1), np.float32), np.arange(8)
        >>> it = augmented(gyre.data.batches((x, y), 4, seed=0), seed=1, padding=1)
        >>> saved = it.state_dict()
        >>> xb, yb = next(it)
        >>> again = augmented(gyre.data.batches((x, y), 4, seed=0), seed=1, padding=1)
        >>> again.load_state_dict(saved)
        >>> xa, ya = next(again)
        >>> xb.shape, np.array_equal(xa, xb) and np.array_equal(ya, yb), it.epoch_steps
        ((4, 4, 4, 1), True, 2)
    """
    return Augmented(source, seed=seed, padding=padding, flip=flip)
