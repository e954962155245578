"""Model adapters: what a linen model reports in its step collections, and which collections
it may write in training and evaluation."""

import flax.linen as nn
import jax.numpy as jnp
import pytest

from gyre.frameworks._adapters import STEP_COLLECTIONS, adapt


class Writes(nn.Module):
    @nn.compact
    def __call__(self, x, training: bool = False):
        self.sow("losses", "kl", x.mean())
        self.put_variable("metrics", "m", x.sum())
        count = self.variable("counters", "n", lambda: jnp.zeros((), jnp.int32))
        count.value = count.value + 1
        x = nn.BatchNorm(use_running_average=not training)(x)
        return nn.Dense(2)(x)


def test_step_collections_are_reported_not_kept():
    adapter, params, state = adapt(Writes(), inputs=jnp.zeros((1, 3)))
    assert sorted(state) == ["batch_stats", "counters"]
    assert set(adapter.reported) == {"losses", "metrics"} and set(STEP_COLLECTIONS) >= set(adapter.reported)
    out, new, reported = adapter.apply_collect(params, state, jnp.ones((4, 3)), training=True, rngs={})
    assert out.shape == (4, 2) and int(new["counters"]["n"]) == 2
    assert float(reported["losses"]["kl"][0]) == 1.0 and float(reported["metrics"]["m"]) == 12.0
    # evaluation: may write other collections (dropped), never batch_stats
    out, same, reported = adapter.apply_collect(params, new, jnp.ones((4, 3)), training=False, rngs={})
    assert int(same["counters"]["n"]) == 2 and "kl" in reported["losses"]
    # apply keeps its two results
    out, kept = adapter.apply(params, new, jnp.ones((4, 3)), training=False, rngs={})
    assert sorted(kept) == ["batch_stats", "counters"]


def test_other_frameworks_report_nothing():
    from flax import nnx

    adapter, params, state = adapt(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))
    out, _, reported = adapter.apply_collect(params, state, jnp.ones((1, 3)), training=False, rngs={})
    assert reported == {} and out.shape == (1, 2)


def test_writing_batch_stats_in_evaluation_is_flax_error():
    class AlwaysTrains(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False)(x)

    adapter, params, state = adapt(AlwaysTrains(), inputs=jnp.zeros((2, 3)))
    with pytest.raises(Exception, match="batch_stats"):
        adapter.apply_collect(params, state, jnp.ones((2, 3)), training=False, rngs={})
