"""core.metrics: every metric through one contract table, then each one's own semantics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core import metrics as M

VALUES = np.array(
    [[1.0, -2.0, 3.0], [4.0, 5.0, -6.0], [0.5, 0.25, 8.0], [-1.0, 7.0, 2.0], [3.0, 3.0, 3.0], [9.0, -9.0, 0.0]],
    np.float32,
)
COUNTS = np.array([2.0, 0.0, 1.0, 3.0, 1.0, 0.5], np.float32)


def numpy_answer(name, values, counts):
    values = np.asarray(values, np.float64)
    counts = np.ones(len(values)) if counts is None else np.asarray(counts, np.float64)
    present = counts > 0
    w = counts.reshape((-1,) + (1,) * (values.ndim - 1))
    if name == "mean":
        return (values * w).sum(0) / counts.sum()
    if name == "std":
        mean = (values * w).sum(0) / counts.sum()
        return np.sqrt((w * (values - mean) ** 2).sum(0) / counts.sum())
    if name == "sum":
        return values[present].sum(0)
    if name == "first":
        return values[present][0]
    if name == "last":
        return values[present][-1]
    if name == "max":
        return values[present].max(0)
    if name == "min":
        return values[present].min(0)
    if name == "concat":
        return values.reshape((-1,) + values.shape[2:]) if values.ndim > 1 else values
    raise AssertionError(name)


def fold(cls, values, counts):
    m = cls.empty()
    for i in range(len(values)):
        m = m.update(values[i], 1.0 if counts is None else counts[i])
    return m


def close(a, b, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


ALL = sorted(M.REDUCTIONS.items())


# -- the contract table ------------------------------------------------------------------------


@pytest.mark.parametrize("name,cls", ALL)
@pytest.mark.parametrize("counts", [None, COUNTS], ids=["unweighted", "counts"])
def test_from_stacked_equals_folding_from_value_equals_numpy(name, cls, counts):
    stacked = cls.from_stacked(VALUES, counts).compute()
    folded = fold(cls, VALUES, counts).compute()
    expected = numpy_answer(name, VALUES, None if name == "concat" else counts)
    close(stacked, expected)
    close(folded, expected)
    assert stacked.shape == folded.shape == expected.shape
    total = VALUES.shape[0] if counts is None else COUNTS.sum()
    assert float(cls.from_stacked(VALUES, counts).count) == pytest.approx(total)


@pytest.mark.parametrize("name,cls", ALL)
def test_merge_is_associative(name, cls):
    a = cls.from_stacked(VALUES[:2], COUNTS[:2])
    b = cls.from_stacked(VALUES[2:3], COUNTS[2:3])
    c = cls.from_stacked(VALUES[3:], COUNTS[3:])
    left = a.merge(b).merge(c)
    right = a.merge(b.merge(c))
    for x, y in zip(jax.tree_util.tree_leaves(left), jax.tree_util.tree_leaves(right), strict=True):
        close(x, y)
    close(left.compute(), cls.from_stacked(VALUES, COUNTS).compute())


@pytest.mark.parametrize("name,cls", ALL)
def test_empty_is_the_identity_of_merge_exactly(name, cls):
    m = cls.from_stacked(VALUES, COUNTS)
    for merged in (m.merge(cls.empty()), cls.empty().merge(m)):
        for x, y in zip(jax.tree_util.tree_leaves(merged), jax.tree_util.tree_leaves(m), strict=True):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
    # an empty metric computes to 0 (a zero-length array for concat), never NaN
    empty = cls.empty().merge(cls.empty()).compute()
    assert np.all(np.asarray(empty) == 0) and not np.any(np.isnan(empty))
    assert float(cls.empty().count) == 0.0


@pytest.mark.parametrize("name,cls", ALL)
def test_jit_and_eager_agree(name, cls):
    eager = cls.from_stacked(VALUES, COUNTS).merge(cls.from_value(VALUES[0], 2.0)).compute()
    jitted = jax.jit(lambda v, c: cls.from_stacked(v, c).merge(cls.from_value(v[0], 2.0)).compute())(VALUES, COUNTS)
    np.testing.assert_allclose(eager, jitted, rtol=1e-6)
    # update under jit, with a traced 0-d count
    up = jax.jit(lambda m, v, c: m.update(v, c))(cls.empty(), VALUES[1], jnp.float32(3.0))
    close(up.compute(), cls.from_value(VALUES[1], 3.0).compute())


@pytest.mark.parametrize("name,cls", ALL)
def test_no_value_is_read_on_the_host(name, cls):
    values, counts = jnp.asarray(VALUES), jnp.asarray(COUNTS)
    reduce = jax.jit(lambda m, v, c: m.merge(cls.from_stacked(v, c)))
    reduce(cls.empty(), values, counts)  # compiled outside the guard
    with jax.transfer_guard_device_to_host("disallow"):
        eager = cls.empty().merge(cls.from_stacked(values, counts)).update(values[0], counts[0])
        result = eager.compute()
        jitted = reduce(cls.empty(), values, counts).compute()
    close(result, numpy_answer(name, np.concatenate([VALUES, VALUES[:1]]),
                               None if name == "concat" else np.concatenate([COUNTS, COUNTS[:1]])))
    assert jitted.shape == cls.from_stacked(VALUES, COUNTS).compute().shape


@pytest.mark.parametrize("name,cls", ALL)
def test_vector_values_are_reduced_elementwise_and_scalars_work(name, cls):
    scalars = VALUES[:, 0]
    close(cls.from_stacked(scalars, COUNTS).compute(), numpy_answer(name, scalars, None if name == "concat" else COUNTS))
    if name == "concat":  # a step's vector adds its elements as rows
        assert cls.from_stacked(VALUES, COUNTS).compute().shape == (VALUES.size,)
        return
    per_class = cls.from_stacked(VALUES, COUNTS).compute()
    for j in range(VALUES.shape[1]):
        close(per_class[j], cls.from_stacked(VALUES[:, j], COUNTS).compute())


@pytest.mark.parametrize("name,cls", ALL)
def test_a_scan_can_carry_every_fixed_shape_metric(name, cls):
    if name == "concat":
        pytest.skip("concat grows: not a scan carry (documented)")
    first = cls.from_value(VALUES[0], COUNTS[0])

    def body(m, row):
        v, c = row
        return m.update(v, c), None

    out, _ = jax.lax.scan(body, first, (jnp.asarray(VALUES[1:]), jnp.asarray(COUNTS[1:])))
    close(out.compute(), cls.from_stacked(VALUES, COUNTS).compute())


# -- each metric's own semantics ---------------------------------------------------------------


def test_mean_weighted_by_batch_size_is_the_mean_over_examples():
    batches = [np.arange(4.0), np.arange(4.0, 10.0), np.array([10.0])]
    m = M.Mean.empty()
    for b in batches:
        m = m.update(b.mean(), count=len(b))
    assert float(m.compute()) == pytest.approx(np.concatenate(batches).mean())
    assert float(m.count) == 11.0


def test_std_is_stable_on_a_large_offset():
    rng = np.random.default_rng(0)
    values = (1e6 + rng.standard_normal(256)).astype(np.float32)
    expected = np.std(values.astype(np.float64))

    @jax.jit
    def three_ways(v):
        stacked = M.Std.from_stacked(v).compute()
        one_by_one = jax.lax.scan(lambda m, x: (m.update(x), None), M.Std.empty(), v)[0].compute()
        halves = M.Std.from_stacked(v[:100]).merge(M.Std.from_stacked(v[100:])).compute()
        return stacked, one_by_one, halves

    for result in three_ways(values):
        assert float(result) == pytest.approx(expected, rel=1e-5)
    # the naive E[x^2] - E[x]^2 in float32 is useless here: the test is not vacuous
    naive = np.sqrt(abs(np.mean(values**2, dtype=np.float32) - np.mean(values, dtype=np.float32) ** 2))
    assert abs(naive - expected) / expected > 0.1


def test_std_reset_is_exact():
    m = M.Std.from_stacked(np.array([1e6, 1e6 + 1, 1e6 + 3], np.float32))
    reset = M.Std.empty()
    assert [float(x) for x in (reset.count, reset.shift, reset.mean, reset.m2)] == [0.0] * 4
    again = reset.update(5.0)
    assert float(again.average()) == 5.0 and float(again.m2) == 0.0 and float(again.compute()) == 0.0
    assert float(m.compute()) > 0.0


def test_dtypes():
    ints = np.array([1, 2, 3], np.int32)
    bools = np.array([True, False, True])
    assert M.Mean.from_stacked(ints).compute().dtype == jnp.float32
    assert M.Mean.from_stacked(bools).compute().dtype == jnp.float32
    assert float(M.Mean.from_stacked(bools).compute()) == pytest.approx(2 / 3)
    assert M.Mean.from_value(jnp.ones(2, jnp.bfloat16)).compute().dtype == jnp.float32
    assert M.Std.from_stacked(ints).compute().dtype == jnp.float32
    assert M.Sum.from_stacked(bools).compute().dtype == jnp.int32
    assert M.Sum.empty().update(np.int8(3)).compute().dtype == jnp.int32
    assert M.Sum.empty().update(np.float32(3)).compute().dtype == jnp.float32
    for cls in (M.First, M.Last, M.Max, M.Min):
        assert cls.empty().update(np.int8(3)).compute().dtype == jnp.int8
        assert cls.empty().merge(cls.from_stacked(bools)).compute().dtype == jnp.bool_
        assert cls.from_value(jnp.bfloat16(1)).merge(cls.empty()).compute().dtype == jnp.bfloat16
    assert M.Concat.empty().merge(M.Concat.from_value(ints)).compute().dtype == jnp.int32


def test_max_and_min_propagate_nan_and_ignore_absent_steps():
    values = np.array([1.0, np.nan, -5.0], np.float32)
    assert np.isnan(float(M.Max.from_stacked(values).compute()))
    assert float(M.Min.from_stacked(values, counts=np.array([1.0, 0.0, 1.0])).compute()) == -5.0
    assert float(M.Max.from_stacked(values, counts=np.array([1.0, 0.0, 0.0])).compute()) == 1.0
    assert float(M.Max.from_stacked(values, counts=np.zeros(3)).compute()) == 0.0  # nothing counted


def test_empty_columns():
    for cls in M.REDUCTIONS.values():
        m = cls.from_stacked(np.zeros((0, 2), np.float32))
        assert float(m.count) == 0.0
        assert not np.any(np.isnan(m.compute()))


def test_registry_and_unknown_names():
    assert set(M.REDUCTIONS) == {"mean", "sum", "first", "last", "min", "max", "std", "concat"}
    assert all(M.get_reduction(name) is cls and cls.reduction == name for name, cls in M.REDUCTIONS.items())
    with pytest.raises(ValueError, match="unknown reduction 'avg'") as info:
        M.get_reduction("avg")
    assert "'mean'" in str(info.value) and "expected:" in str(info.value)
    with pytest.raises(ValueError, match="Did you mean 'last'"):
        M.get_reduction("lsat")
    with pytest.raises(TypeError, match="named by a string"):
        M.get_reduction(3)


def test_bad_input_is_explained():
    with pytest.raises(ValueError, match="one count per value") as info:
        M.Mean.from_value(1.0, count=np.ones(3))
    assert "from_stacked" in str(info.value)
    with pytest.raises(ValueError, match="one count per step") as info:
        M.Sum.from_stacked(np.ones((4, 2)), counts=np.ones(3))
    assert "(4,)" in str(info.value)
    with pytest.raises(ValueError, match="needs a leading steps axis"):
        M.Max.from_stacked(3.0)
    with pytest.raises(TypeError, match="Mean.merge takes another Mean"):
        M.Mean.empty().merge(M.Sum.empty())
    with pytest.raises(TypeError, match="not an array"):
        M.Last.from_value({"a": object()})
    with pytest.raises(ValueError, match="rows of different shapes"):
        M.Concat.from_value(np.ones((2, 3))).merge(M.Concat.from_value(np.ones((2, 4))))
