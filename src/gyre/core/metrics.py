"""Metrics as mergeable device values: ``Mean``, ``Sum``, ``First``, ``Last``, ``Max``, ``Min``,
``Std`` and ``Concat``.

Each is an immutable pytree holding a reduction's sufficient statistics, so partial results
combine exactly: ``M.empty()`` (the identity of ``merge``), ``M.from_value(value, count=1)``,
``M.from_stacked(values, counts=None)`` (a column of per-step values), ``m.update(value,
count=1)``, ``m.merge(other)``, ``m.compute()``. All run under ``jit``, never reading a device
value; vector values reduce elementwise.

``count`` (float32, 0: empty) weighs ``Mean`` and ``Std``; the others leave out steps with
count 0, except ``Concat``, which keeps every value. ``Mean``/``Std`` accumulate in float32 at
least, ``Sum`` in int32/float32 at least; the others keep the values' dtype. ``compute()`` of
an empty metric is 0 (a zero-length array for ``Concat``), never NaN: check ``m.count == 0``.
``REDUCTIONS`` maps ``"mean"``, ``"sum"``, ... to the classes (:func:`get_reduction`).
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar, Self

import jax
import jax.numpy as jnp
from flax import struct

from gyre.core._checks import instance, scalar
from gyre.core._errors import describe, explain

_F32 = jnp.float32


# -- helpers -----------------------------------------------------------------------------------


def _array(value: Any, metric: str, what: str = "value") -> jax.Array:
    """``value`` as a numeric array, or a clear error naming the metric."""
    try:
        out = jnp.asarray(value)
    except TypeError as err:
        raise TypeError(explain(
            f"{metric} got a {what} that is not an array",
            expected="a number or an array (one leaf; map a metric over a pytree with "
            "jax.tree_util.tree_map)",
            received=describe(value), fix=f"pass one array per {metric}")) from err
    if not (jnp.issubdtype(out.dtype, jnp.number) or out.dtype == jnp.bool_):
        raise TypeError(explain(
            f"{metric} got a {what} of dtype {out.dtype}",
            expected="a numeric or bool array", received=describe(value),
            fix="log numbers: convert the value to an array of numbers"))
    return out


def _count(count: Any, metric: str) -> jax.Array:
    """A step's count as a float32 scalar."""
    return scalar(
        _array(count, metric, "count").astype(_F32), "count",
        problem=f"{metric}.from_value takes one count per value",
        expected="count= a number or a 0-d array (e.g. the batch size)",
        fix="pass the step's total weight, e.g. count=batch_size; for a column of steps use "
        "from_stacked(values, counts)")


def _column(values: Any, counts: Any, metric: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(values, counts of shape (steps,), counts broadcastable to values)``."""
    v = _array(values, metric, "column")
    if v.ndim == 0:
        raise ValueError(explain(
            f"{metric}.from_stacked needs a leading steps axis",
            expected="values of shape (steps, ...), one row per step", received="a scalar",
            fix=f"use {metric}.from_value(value) for one step's value"))
    steps = v.shape[0]
    if counts is None:
        c = jnp.ones((steps,), _F32)
    else:
        c = _array(counts, metric, "counts").astype(_F32)
        if c.shape != (steps,):
            raise ValueError(explain(
                f"{metric}.from_stacked takes one count per step",
                expected=f"counts of shape ({steps},) for values of shape {v.shape}",
                received=f"counts of shape {c.shape}",
                fix="pass counts=None (every step counts 1) or one count per row"))
    return v, c, c.reshape((steps,) + (1,) * (v.ndim - 1))


def _averaged(v: jax.Array) -> jax.Array:
    """``v`` in the dtype a mean accumulates in: float32 at least."""
    floating = jnp.issubdtype(v.dtype, jnp.floating) or jnp.issubdtype(v.dtype, jnp.complexfloating)
    return v.astype(jnp.promote_types(v.dtype, _F32) if floating else _F32)


def _weak(x: jax.Array) -> bool:
    return bool(jax.typeof(x).weak_type)


def _aligned(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``a`` and ``b`` in one dtype; an empty metric's weakly typed zero takes the other's."""
    if _weak(a) and not _weak(b):
        return a.astype(b.dtype), b
    if _weak(b) and not _weak(a):
        return a, b.astype(a.dtype)
    dtype = jnp.result_type(a, b)
    return a.astype(dtype), b.astype(dtype)


def _extreme(dtype: Any, *, high: bool) -> Any:
    """The highest (or lowest) value of ``dtype``: where a min (a max) starts."""
    if dtype == jnp.bool_:
        return high
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.iinfo(dtype).max if high else jnp.iinfo(dtype).min
    return jnp.inf if high else -jnp.inf


def _safe(count: jax.Array) -> jax.Array:
    """A divisor: ``count``, or 1 where it is 0 (an empty metric divides 0 by 1)."""
    return jnp.where(count > 0, count, jnp.ones_like(count))


# -- the base class ----------------------------------------------------------------------------


class Metric(struct.PyTreeNode):
    """A mergeable reduction, the base class of every metric here: subclasses define ``empty``,
    ``from_value``, ``from_stacked``, ``merge`` and ``compute``.

    Example:
        >>> issubclass(Mean, Metric), Mean.empty().update(3.0).compute().tolist()
        (True, 3.0)
    """

    #: The name of the reduction in :data:`REDUCTIONS`.
    reduction: ClassVar[str] = ""

    @classmethod
    def empty(cls) -> Self:
        """The identity of :meth:`merge`."""
        raise NotImplementedError

    @classmethod
    def from_value(cls, value: Any, count: Any = 1) -> Self:
        """The metric of one step's ``value`` (any shape), weighing ``count``."""
        raise NotImplementedError

    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Self:
        """The metric of a column of per-step values (leading axis: steps)."""
        raise NotImplementedError

    def merge(self, other: Self) -> Self:
        """The metric of both ``self``'s and ``other``'s steps."""
        raise NotImplementedError

    def compute(self) -> jax.Array:
        """The reduction's result."""
        raise NotImplementedError

    def update(self, value: Any, count: Any = 1) -> Self:
        """``self.merge(type(self).from_value(value, count))``.

        Example:
            >>> Sum.empty().update(2).update(3).compute().tolist()
            5
        """
        return self.merge(type(self).from_value(value, count))

    def _check(self, other: Any) -> None:
        if type(other) is not type(self):
            raise TypeError(explain(
                f"{type(self).__name__}.merge takes another {type(self).__name__}",
                expected=f"a {type(self).__name__} (from empty(), from_value() or from_stacked())",
                received=describe(other),
                fix=f"merge metrics of one kind: {type(self).__name__}.from_value(value)"))


# -- Mean, Sum ---------------------------------------------------------------------------------


class Mean(Metric):
    """The weighted mean: ``sum(value * count) / sum(count)``; 0 when empty.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Mean.from_value(jnp.array([1.0, 0.0]), count=3).update(jnp.array([0.0, 1.0]))
        >>> m.compute().tolist(), float(m.count)      # per-class means, 4 examples
        ([0.75, 0.25], 4.0)
    """

    reduction: ClassVar[str] = "mean"
    total: jax.Array
    count: jax.Array

    @classmethod
    def empty(cls) -> Mean:
        return cls(total=jnp.zeros((), _F32), count=jnp.zeros((), _F32))

    @classmethod
    def from_value(cls, value: Any, count: Any = 1) -> Mean:
        """``value`` weighing ``count`` (e.g. a batch's mean loss and the batch size)."""
        v = _averaged(_array(value, "Mean"))
        c = _count(count, "Mean")
        return cls(total=jnp.where(c > 0, v * c, jnp.zeros_like(v)), count=c)

    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Mean:
        v, c, w = _column(values, counts, "Mean")
        v = _averaged(v)
        total = jnp.sum(jnp.where(w > 0, v * w, jnp.zeros_like(v)), axis=0)
        return cls(total=total, count=jnp.sum(c))

    def merge(self, other: Mean) -> Mean:
        self._check(other)
        return Mean(total=self.total + other.total, count=self.count + other.count)

    def compute(self) -> jax.Array:
        return self.total / _safe(self.count).astype(self.total.dtype)


class _Valued(Metric):
    """A ``value`` and the ``count`` of the steps behind it (0 and 0 when empty)."""

    value: jax.Array
    count: jax.Array

    @classmethod
    def empty(cls) -> Self:
        """A weakly typed 0 (it takes the dtype of what it is merged with) and zero count."""
        return cls(value=jnp.asarray(0), count=jnp.zeros((), _F32))

    @classmethod
    def from_value(cls, value: Any, count: Any = 1) -> Self:
        """``value``, present when ``count`` is positive (else 0)."""
        v = cls._cast(_array(value, cls.__name__))
        c = _count(count, cls.__name__)
        return cls(value=jnp.where(c > 0, v, jnp.zeros_like(v)), count=c)

    @staticmethod
    def _cast(value: jax.Array) -> jax.Array:
        return value

    def compute(self) -> jax.Array:
        return self.value


class Sum(_Valued):
    """The sum of the values of the steps that count (count > 0); 0 when empty.

    Example:
        >>> import jax.numpy as jnp
        >>> Sum.from_stacked(jnp.array([1, 2, 3]), counts=jnp.array([1, 0, 1])).compute().tolist()
        4
    """

    reduction: ClassVar[str] = "sum"

    @staticmethod
    def _cast(value: jax.Array) -> jax.Array:
        if value.dtype == jnp.bool_:
            return value.astype(jnp.int32)
        wider = jnp.int32 if jnp.issubdtype(value.dtype, jnp.integer) else _F32
        return value.astype(jnp.promote_types(value.dtype, wider))

    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Sum:
        v, c, w = _column(values, counts, "Sum")
        v = cls._cast(v)
        return cls(value=jnp.sum(jnp.where(w > 0, v, jnp.zeros_like(v)), axis=0), count=jnp.sum(c))

    def merge(self, other: Sum) -> Sum:
        self._check(other)
        a, b = _aligned(self.value, other.value)
        return Sum(value=a + b, count=self.count + other.count)


# -- First, Last, Max, Min ---------------------------------------------------------------------


class _Selecting(_Valued):
    """One value chosen among the steps that count; ``count`` says whether there is one."""

    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Self:
        v, c, w = _column(values, counts, cls.__name__)
        if v.shape[0] == 0:
            return cls(value=jnp.zeros(v.shape[1:], v.dtype), count=jnp.zeros((), _F32))
        chosen = cls._choose(v, c > 0, w > 0)
        return cls(value=jnp.where(jnp.any(c > 0), chosen, jnp.zeros_like(chosen)), count=jnp.sum(c))

    @classmethod
    def _choose(cls, values: jax.Array, present: jax.Array, mask: jax.Array) -> jax.Array:
        raise NotImplementedError

    @staticmethod
    def _pick(a: jax.Array, b: jax.Array, has_a: jax.Array, has_b: jax.Array) -> jax.Array:
        raise NotImplementedError

    def merge(self, other: Self) -> Self:
        """Associative: an empty side (count 0) never wins."""
        self._check(other)
        a, b = _aligned(self.value, other.value)
        value = self._pick(a, b, self.count > 0, other.count > 0)
        return type(self)(value=value, count=self.count + other.count)


class First(_Selecting):
    """The value of the first step that counts; 0 when empty.

    Example:
        >>> import jax.numpy as jnp
        >>> First.from_stacked(jnp.array([5, 6, 7]), counts=jnp.array([0, 1, 1])).compute().tolist()
        6
    """

    reduction: ClassVar[str] = "first"

    @classmethod
    def _choose(cls, values: jax.Array, present: jax.Array, mask: jax.Array) -> jax.Array:
        return jnp.take(values, jnp.argmax(present), axis=0)

    @staticmethod
    def _pick(a: jax.Array, b: jax.Array, has_a: jax.Array, has_b: jax.Array) -> jax.Array:
        return jnp.where(has_a, a, b)


class Last(_Selecting):
    """The value of the last step that counts; 0 when empty.

    Example:
        >>> import jax.numpy as jnp
        >>> Last.empty().update(1.0).update(2.0).compute().tolist()
        2.0
    """

    reduction: ClassVar[str] = "last"

    @classmethod
    def _choose(cls, values: jax.Array, present: jax.Array, mask: jax.Array) -> jax.Array:
        return jnp.take(values, present.shape[0] - 1 - jnp.argmax(present[::-1]), axis=0)

    @staticmethod
    def _pick(a: jax.Array, b: jax.Array, has_a: jax.Array, has_b: jax.Array) -> jax.Array:
        return jnp.where(has_b, b, a)


class _Extreme(_Selecting):
    """The elementwise max (``jnp.max``/``maximum``) or min over the steps that count."""

    _reduce: ClassVar[Any]
    _pair: ClassVar[Any]

    @classmethod
    def _choose(cls, values: jax.Array, present: jax.Array, mask: jax.Array) -> jax.Array:
        fill = _extreme(values.dtype, high=cls._reduce is jnp.min)
        return cls._reduce(jnp.where(mask, values, fill), axis=0, initial=fill)

    @classmethod
    def _pick(cls, a: jax.Array, b: jax.Array, has_a: jax.Array, has_b: jax.Array) -> jax.Array:
        return jnp.where(has_a & has_b, cls._pair(a, b), jnp.where(has_a, a, b))


class Max(_Extreme):
    """The elementwise maximum over the steps that count (NaN propagates); 0 when empty.

    Example:
        >>> import jax.numpy as jnp
        >>> Max.from_stacked(jnp.array([[1, 9], [4, 2]])).compute().tolist()
        [4, 9]
    """

    reduction: ClassVar[str] = "max"
    _reduce = staticmethod(jnp.max)
    _pair = staticmethod(jnp.maximum)


class Min(_Extreme):
    """The elementwise minimum over the steps that count (NaN propagates); 0 when empty.

    Example:
        >>> Min.empty().update(3).update(-2).compute().tolist()
        -2
    """

    reduction: ClassVar[str] = "min"
    _reduce = staticmethod(jnp.min)
    _pair = staticmethod(jnp.minimum)


# -- Std ---------------------------------------------------------------------------------------


class Std(Metric):
    """The weighted population standard deviation (``ddof=0``, as ``numpy.std``); 0 when empty.

    Numerically stable (a shift and Chan et al.'s parallel merge, never a sum of squares), so
    values with a large offset keep their precision.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Std.from_stacked(jnp.array([1.0, 2.0, 3.0, 4.0]))
        >>> round(float(m.compute()), 4), round(float(m.variance()), 4), float(m.average())
        (1.118, 1.25, 2.5)
    """

    reduction: ClassVar[str] = "std"
    count: jax.Array
    shift: jax.Array
    mean: jax.Array
    m2: jax.Array

    @classmethod
    def empty(cls) -> Std:
        zero = jnp.zeros((), _F32)
        return cls(count=zero, shift=zero, mean=zero, m2=zero)

    @classmethod
    def from_value(cls, value: Any, count: Any = 1) -> Std:
        """One observation of ``value`` weighing ``count`` (it becomes the shift)."""
        v = _averaged(_array(value, "Std"))
        c = _count(count, "Std")
        zeros = jnp.zeros_like(v)
        return cls(count=c, shift=jnp.where(c > 0, v, zeros), mean=zeros, m2=zeros)

    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Std:
        """Two passes over the deviations from the first counted row."""
        v, c, w = _column(values, counts, "Std")
        v = _averaged(v)
        if v.shape[0] == 0:
            zeros = jnp.zeros(v.shape[1:], v.dtype)
            return cls(count=jnp.zeros((), _F32), shift=zeros, mean=zeros, m2=zeros)
        n = jnp.sum(c)
        shift = jnp.where(jnp.any(c > 0), jnp.take(v, jnp.argmax(c > 0), axis=0), jnp.zeros(v.shape[1:], v.dtype))
        zeros = jnp.zeros_like(v)
        d = jnp.where(w > 0, v - shift[None], zeros)
        mean = jnp.sum(w * d, axis=0) / _safe(n).astype(v.dtype)
        deviation = jnp.where(w > 0, d - mean[None], zeros)
        return cls(count=n, shift=shift, mean=mean, m2=jnp.sum(w * deviation * deviation, axis=0))

    def merge(self, other: Std) -> Std:
        """Chan et al. on a common shift: ``mean = ma + d*nb/n``, ``m2 = m2a + m2b + d**2*na*nb/n``."""
        self._check(other)
        has_a, has_b = self.count > 0, other.count > 0
        shift = jnp.where(has_a, self.shift, other.shift)
        mean_a = jnp.where(has_a, self.mean, jnp.zeros_like(self.mean))
        mean_b = jnp.where(has_b, other.mean + (other.shift - shift), jnp.zeros_like(other.mean))
        n = self.count + other.count
        fraction = other.count / _safe(n)
        delta = mean_b - mean_a
        mean = mean_a + delta * fraction.astype(delta.dtype)
        m2 = self.m2 + other.m2 + delta * delta * (self.count * fraction).astype(delta.dtype)
        return Std(count=n, shift=shift, mean=mean, m2=m2)

    def average(self) -> jax.Array:
        """The weighted mean of the values (0 when empty).

        Example:
            >>> Std.empty().update(1e6).update(1e6 + 2).average().tolist()
            1000001.0
        """
        return self.shift + self.mean

    def variance(self) -> jax.Array:
        """``m2 / count`` (0 when empty)."""
        return self.m2 / _safe(self.count).astype(self.m2.dtype)

    def compute(self) -> jax.Array:
        return jnp.sqrt(self.variance())


# -- Concat ------------------------------------------------------------------------------------


class Concat(Metric):
    """Every value, concatenated along the leading axis (a scalar adds one row); empty: a
    zero-length float32 array. Its shape grows: not a ``lax.scan`` carry, and each new total
    length compiles again under ``jit``.

    Example:
        >>> import jax.numpy as jnp
        >>> m = Concat.from_value(jnp.array([[1, 2]])).update(jnp.array([[3, 4], [5, 6]]))
        >>> m.compute().tolist()
        [[1, 2], [3, 4], [5, 6]]
    """

    reduction: ClassVar[str] = "concat"
    values: jax.Array
    count: jax.Array

    @classmethod
    def empty(cls) -> Concat:
        return cls(values=jnp.zeros((0,), _F32), count=jnp.zeros((), _F32))

    @classmethod
    def from_value(cls, value: Any, count: Any = 1) -> Concat:
        """``value``'s rows (a scalar is one row)."""
        return cls(values=jnp.atleast_1d(_array(value, "Concat")), count=_count(count, "Concat"))

    @classmethod
    def from_stacked(cls, values: Any, counts: Any = None) -> Concat:
        v, c, _ = _column(values, counts, "Concat")
        rows = v if v.ndim == 1 else v.reshape((v.shape[0] * v.shape[1],) + v.shape[2:])
        return cls(values=rows, count=jnp.sum(c))

    def merge(self, other: Concat) -> Concat:
        """``other``'s rows after ``self``'s (an empty side is dropped, whatever its dtype)."""
        self._check(other)
        count = self.count + other.count
        if self.values.shape[0] == 0:
            return Concat(values=other.values, count=count)
        if other.values.shape[0] == 0:
            return Concat(values=self.values, count=count)
        if self.values.shape[1:] != other.values.shape[1:]:
            raise ValueError(explain(
                "Concat cannot join rows of different shapes",
                expected=f"rows of shape {self.values.shape[1:]}",
                received=f"rows of shape {other.values.shape[1:]}",
                fix="log values of one shape per entry (pad or reduce them first)"))
        return Concat(values=jnp.concatenate([self.values, other.values]), count=count)

    def compute(self) -> jax.Array:
        return self.values


# -- the registry ------------------------------------------------------------------------------

#: The reductions by name, for aggregation tables: ``{"metrics": "mean", "outputs": "concat"}``.
REDUCTIONS: dict[str, type[Metric]] = {m.reduction: m for m in (Mean, Sum, First, Last, Min, Max, Std, Concat)}


def get_reduction(name: str | type[Metric]) -> type[Metric]:
    """The metric class of a reduction's name (a :class:`Metric` subclass is returned as is).

    Raises:
        ValueError: an unknown name (the message lists the closest and all names).
        TypeError: neither a name nor a metric class.

    Example:
        >>> get_reduction("mean").__name__, get_reduction(Std).__name__
        ('Mean', 'Std')
    """
    if isinstance(name, type) and issubclass(name, Metric):
        return name
    instance(name, "a reduction", str, problem="a reduction is named by a string", fix="e.g. 'mean'",
             expected=f"one of {sorted(REDUCTIONS)} or a gyre.core.metrics.Metric class")
    found = REDUCTIONS.get(name)
    if found is not None:
        return found
    close = difflib.get_close_matches(name.lower(), list(REDUCTIONS), n=3, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(explain(
        f"unknown reduction {name!r}.{hint}",
        expected=f"one of {', '.join(repr(k) for k in REDUCTIONS)}",
        received=repr(name) + (f" (closest: {', '.join(map(repr, close))})" if close else ""),
        fix=f"use {close[0]!r}" if close else "pick one of the names above"))
