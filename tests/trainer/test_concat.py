"""The CONCAT collector: rows of scalars, arrays and fused steps, and its errors (issue 12,
item 2)."""

import jax.numpy as jnp
import pytest

from gyre.trainer._metrics import ConcatCollector, MetricSpec


def test_concat_collector():
    specs = {"p": MetricSpec("p", "concat"), "m": MetricSpec("m")}
    collector = ConcatCollector(specs)
    assert collector.keys == ("p",)
    assert collector.compute()["p"].shape == (0,)
    collector.add({"p": jnp.float32(1.0), "m": 0.0})  # a scalar is one row
    collector.add({"p": jnp.float32(2.0)})  # two steps of one scalar
    collector.add({"p": jnp.float32(3.0)})
    collector.add({"p": (jnp.array([4.0]), None)})
    assert collector.compute()["p"].tolist() == [1.0, 2.0, 3.0, 4.0]
    collector.reset()
    collector.add({"p": jnp.arange(3.0)})  # two steps of three rows
    collector.add({"p": jnp.arange(3.0, 6.0)})
    assert collector.compute()["p"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    collector.reset()
    collector.add({"p": jnp.ones((2, 3))})
    collector.add({"p": jnp.ones((1, 4))})
    with pytest.raises(ValueError, match=r"(?s)CONCAT metric 'p' has rows of different shapes.*\(3,\), \(4,\)"):
        collector.compute()
    with pytest.raises(KeyError, match=r"metric 'p' has no value"):
        collector.add({"m": 1.0})
