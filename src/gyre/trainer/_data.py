"""The trainer's data: the parts of a batch (:func:`batch_part`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gyre.core._errors import describe, explain

INPUT_KEYS = ("input", "inputs", "x", "image", "images")
TARGET_KEYS = ("target", "targets", "label", "labels", "y")


def batch_part(batch: Any, keys: tuple[str, ...], position: int, what: str) -> Any:
    """One part of a batch (``what``: ``"input"`` or ``"target"``), by name first (a dict's
    key, a batch object's attribute, a namedtuple's field: the first of ``keys`` found), then
    by ``position`` in a tuple or list; else a ``TypeError`` saying how to override it.
    """
    for key in keys:
        if isinstance(batch, Mapping):
            if key in batch:
                return batch[key]
        elif not isinstance(batch, (tuple, list)) and hasattr(batch, key):
            return getattr(batch, key)
        elif isinstance(batch, tuple) and key in getattr(batch, "_fields", ()):
            return getattr(batch, key)  # a namedtuple with named fields
    if isinstance(batch, (tuple, list)) and len(batch) > position:
        return batch[position]
    raise TypeError(explain(
        f"the trainer cannot find the model's {what} in a batch",
        expected=f"an (inputs, targets) tuple, a dict with {keys[0]!r} or {keys[2]!r}, or a batch with "
    f".{keys[0]} (jax_trainer's SupervisedBatch)",
        received=describe(batch), fix=f"override batch_to_{what}(self, batch) in your trainer to return the {what}"))
