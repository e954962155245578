"""Loss objects called by keyword as ``jax_metrics``' are (``loss(target=, preds=)``), so ciclo's
examples port unchanged; each returns the batch's mean, weighted by ``sample_weight``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from gyre.core._errors import explain
from gyre.frameworks._calling import weighted_mean


def _arrays(preds: Any, target: Any, labels: Any, loss: str) -> tuple[jax.Array, jax.Array]:
    """``(preds, target)`` as arrays (``target``, else ``labels``), or an error when there is none."""
    value = labels if target is None else target
    if value is None:
        raise TypeError(explain(
            f"{loss} needs the batch's labels",
            expected=f"{loss}(preds=..., target=...) (or labels=)", received="target=None",
            fix="give batches as (inputs, labels)"))
    return jnp.asarray(preds), jnp.asarray(value)


@dataclass(frozen=True)
class Crossentropy:
    """Cross-entropy between ``preds`` and integer (or one-hot / probability) targets.

    Args:
        from_logits: ``preds`` are logits (default); ``False``: probabilities.
        binary: a sigmoid per output (multi-label) instead of a softmax over the last axis.
        label_smoothing: smooth one-hot targets by this amount.

    Example:
        >>> import jax.numpy as jnp
        >>> loss = Crossentropy()
        >>> round(float(loss(target=jnp.array([0, 1]), preds=jnp.array([[2.0, 0.0], [0.0, 2.0]]))), 4)
        0.1269
    """

    from_logits: bool = True
    binary: bool = False
    label_smoothing: float | None = None

    def __call__(
        self, *, preds: Any, target: Any = None, labels: Any = None, sample_weight: Any = None, **_: Any
    ) -> jax.Array:
        """The batch's mean cross-entropy (weighted by ``sample_weight``)."""
        preds, target = _arrays(preds, target, labels, "Crossentropy")
        if self.binary:
            target = target.astype(preds.dtype)
        elif target.ndim == preds.ndim - 1:
            target = jax.nn.one_hot(target, preds.shape[-1], dtype=preds.dtype)
        if self.label_smoothing is not None:
            target = optax.smooth_labels(target, self.label_smoothing)
        if self.binary:
            if self.from_logits:
                per_example = optax.sigmoid_binary_cross_entropy(preds, target)
            else:
                p = jnp.clip(preds, 1e-7, 1 - 1e-7)
                per_example = -(target * jnp.log(p) + (1 - target) * jnp.log1p(-p))
        elif self.from_logits:
            per_example = optax.softmax_cross_entropy(preds, target)
        else:
            per_example = -jnp.sum(target * jnp.log(jnp.clip(preds, 1e-7, 1.0)), axis=-1)
        return weighted_mean(per_example, sample_weight)


@dataclass(frozen=True)
class MeanSquaredError:
    """Mean squared error between ``preds`` and ``target``.

    Example:
        >>> import jax.numpy as jnp
        >>> float(MeanSquaredError()(preds=jnp.array([1.0, 3.0]), target=jnp.array([0.0, 0.0])))
        5.0
    """

    def __call__(
        self, *, preds: Any, target: Any = None, labels: Any = None, sample_weight: Any = None, **_: Any
    ) -> jax.Array:
        """The batch's mean squared error (weighted by ``sample_weight``)."""
        preds, target = _arrays(preds, target, labels, "MeanSquaredError")
        target = target.astype(preds.dtype)
        per_example = (preds - target) ** 2
        if per_example.ndim > 1:
            per_example = jnp.mean(per_example, axis=tuple(range(1, per_example.ndim)))
        return weighted_mean(per_example, sample_weight)
