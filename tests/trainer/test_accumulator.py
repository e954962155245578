"""The packed metric accumulator: dtypes, shapes, reset, merge, errors, the carry's buffers
and init inside jit (issue 12, item 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.trainer._metrics import MetricAccumulator, MetricSpec, parse_metrics
from tests.trainer.test_metrics import metrics_of


def test_accumulator_dtypes_shapes_and_reset():
    specs, values = parse_metrics(
        {"hits": {"value": jnp.array([1, 0, 2], jnp.int32), "mode": "sum"},
         "per_class": jnp.array([1.0, 0.0]), "top": {"value": jnp.int32(3), "mode": "max"}},
        where="t",
    )
    acc = MetricAccumulator.init(specs, values)
    before = jax.tree.map(lambda x: (x.shape, x.dtype), acc)
    acc = acc.update(specs, values, 2).update(specs, {**values, "per_class": (jnp.array([0.0, 1.0]), 2)}, 2)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), acc) == before
    result = jax.device_get(acc.compute())
    assert result["hits"].tolist() == [2, 0, 4] and result["hits"].dtype == np.int32
    assert result["per_class"].tolist() == [0.5, 0.5]
    assert result["top"].tolist() == 3 and result["top"].dtype == np.int32
    assert jax.device_get(acc.reset().compute())["hits"].tolist() == [0, 0, 0]
    assert jax.tree.map(lambda x: (x.shape, x.dtype), acc.reset()) == before


def test_an_empty_accumulator_gives_zeros_and_python_numbers_work():
    specs = {"m": MetricSpec("m", "max"), "s": MetricSpec("s", "std")}
    acc = MetricAccumulator.init(specs, {"m": (0.5, None), "s": (0.5, None)})
    assert jax.device_get(acc.compute()) == {"m": 0.0, "s": 0.0}
    acc = acc.update(specs, {"m": (-0.5, None), "s": (2.0, 0)}, 1).update(specs, {"m": (-1.5, 1), "s": (3.0, 5)}, 1)
    assert jax.device_get(acc.compute()) == {"m": -0.5, "s": 0.0}  # count 0: left out; 5: as 1
    assert float(acc.metrics["s"].count) == 1.0


def test_merge_folds_a_window_into_an_epoch():
    specs = {"m": MetricSpec("m"), "s": MetricSpec("s", "std"), "x": MetricSpec("x", "max")}
    steps = [{"m": (v, None), "s": (v, None), "x": (-v, None)} for v in (1.0, 2.0, 6.0)]
    init = MetricAccumulator.init(specs, steps[0])
    whole = init
    for s, n in zip(steps, (1, 2, 3), strict=True):
        whole = whole.update(specs, s, n)
    first = init.update(specs, steps[0], 1)
    second = init.update(specs, steps[1], 2).update(specs, steps[2], 3)
    assert jax.device_get(first.merge(second).compute()) == jax.device_get(whole.compute())
    assert jax.device_get(whole.compute())["m"] == (1 + 4 + 18) / 6
    with pytest.raises(ValueError, match=r"only accumulators of the same metrics merge"):
        first.merge(MetricAccumulator.init({}, {}))


def test_accumulator_errors():
    specs = {"m": MetricSpec("m"), "p": MetricSpec("p", "concat")}
    acc = MetricAccumulator.init(specs, {"m": (1.0, None)})  # CONCAT needs no value here
    assert list(acc.metrics) == ["m"]
    with pytest.raises(KeyError, match=r"metric 'm' has no value"):
        MetricAccumulator.init(specs, {})
    with pytest.raises(KeyError, match=r"metric 'm' has no value"):
        acc.update(specs, {"p": (1.0, None)}, 1)
    with pytest.raises(KeyError, match=r"metric 'm' has no spec"):
        acc.update({}, {"m": (1.0, None)}, 1)
    with pytest.raises(ValueError, match=r"(?s)metric 'm' changed its mode.*received: mode MAX"):
        acc.update({"m": MetricSpec("m", "max")}, {"m": (1.0, None)}, 1)
    with pytest.raises(ValueError, match=r"(?s)metric 'm' changed its shape.*expected: values of shape \(\).*received: a value of shape \(3,\)"):
        acc.update(specs, {"m": (jnp.ones(3), None)}, 1)


def test_the_carry_is_one_buffer_per_dtype_in_the_specs_order():
    specs, values = parse_metrics(metrics_of(jnp.float32(1.0), 4.0, 2.0), where="t")
    acc = MetricAccumulator.init(specs, values)
    # value and count per metric (Std: count, shift, mean, m2): 3 MEAN, 4 SUM, 1 SINGLE,
    # 3 MAX, 2 MIN -> 26, 2 STD -> 8
    assert [(x.dtype, x.shape) for x in jax.tree.leaves(acc)] == [(np.float32, (34,))]
    assert list(acc.compute()) == [k for k in specs if k != "rows"] == list(acc.metrics)
    specs = {"a": MetricSpec("a", "sum"), "b": MetricSpec("b"), "c": MetricSpec("c", "sum")}
    acc = MetricAccumulator.init(specs, {"a": (1, None), "b": (1.0, None), "c": (jnp.ones(2, jnp.int32), None)})
    assert sorted(acc.buffers) == ["float32", "int32"]
    acc = acc.update(specs, {"a": (2, None), "b": (0.5, None), "c": (jnp.array([3, 4]), None)}, 2)
    assert list(acc.compute()) == ["a", "b", "c"]
    assert jax.device_get(acc.compute()["c"]).tolist() == [3, 4]
    assert jax.device_get({k: m.count for k, m in acc.metrics.items()}) == {"a": 1.0, "b": 2.0, "c": 1.0}


def test_init_inside_jit_from_tracers():
    @jax.jit
    def first_step(x):
        specs, values = parse_metrics({"m": x.mean(), "top": {"value": x.max(), "mode": "max"}}, where="t")
        return MetricAccumulator.init(specs, values).update(specs, values, x.shape[0]).compute()

    assert jax.device_get(first_step(jnp.arange(4.0))) == {"m": 1.5, "top": 3.0}
