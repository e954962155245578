"""Mixed precision: parameters kept in float32, the step computed in a lower precision."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core._errors import describe, explain


@dataclass(frozen=True)
class MixedPrecision:
    """Which dtype the step computes in: floating params and batch leaves are cast to
    ``compute_dtype``; gradients flow back to the float32 params.

    Example:
        >>> import jax.numpy as jnp
        >>> MixedPrecision(compute_dtype=jnp.bfloat16).cast_to_compute(jnp.ones(2)).dtype
        dtype(bfloat16)
    """

    compute_dtype: Any = None

    @property
    def casts(self) -> bool:
        """Whether this policy changes any dtype."""
        return self.compute_dtype is not None

    def cast_to_compute(self, tree: Any) -> Any:
        """``tree`` with its floating leaves in the compute dtype (others untouched)."""
        if self.compute_dtype is None:
            return tree
        dtype = self.compute_dtype
        return jax.tree_util.tree_map(
            lambda x: jnp.asarray(x, dtype) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) else x, tree
        )


class Policy(MixedPrecision):
    """Deprecated: the old name of :class:`MixedPrecision` (it warns when built).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     p = Policy()
        >>> str(caught[0].message).startswith("gyre.Policy is deprecated"), isinstance(p, MixedPrecision)
        (True, True)
    """

    def __init__(self, compute_dtype: Any = None) -> None:
        warnings.warn(
            "gyre.Policy is deprecated: use gyre.MixedPrecision (the same class, renamed: "
            "'Policy' read like any policy; policy= arguments keep their name)",
            DeprecationWarning,
            stacklevel=2)
        super().__init__(compute_dtype=compute_dtype)


POLICIES = {
    "float32": MixedPrecision(),
    "bfloat16": MixedPrecision(compute_dtype=jnp.bfloat16),
    "float16": MixedPrecision(compute_dtype=jnp.float16),
}


def get_policy(policy: str | MixedPrecision | None) -> MixedPrecision:
    """A precision from its name (``"float32"``, ``"bfloat16"``, ``"float16"``), ``None`` (float32)
    or a :class:`MixedPrecision`.

    Example:
        >>> get_policy("bfloat16").casts, get_policy(None).casts
        (True, False)
    """
    if isinstance(policy, MixedPrecision):
        return policy
    if policy is None or (isinstance(policy, str) and policy in POLICIES):
        return POLICIES[policy or "float32"]
    raise ValueError(explain(
        f"unknown precision policy {policy!r}",
        expected=f"one of {list(POLICIES)}, None, or gyre.MixedPrecision(compute_dtype=...)",
        received=describe(policy),
        fix="e.g. policy='bfloat16' to compute in bfloat16 with float32 parameters"))
