"""update_metrics / get_metrics: the fork's entry dicts, folded with gyre's weight rule and
reduced by gyre's monoids, inside jit too; the divergences from the fork are pinned here."""

import jax
import jax.numpy as jnp
import pytest
from flax.core import FrozenDict

from gyre.trainer import LogFreq, LogMetricMode, LogMode, get_metrics, update_metrics


def test_train_steps_feed_step_and_epoch_entries_and_reduce_per_mode():
    metrics = None
    for loss, acc, high in ((1.0, 0.5, -3.0), (3.0, 0.75, -1.0)):
        metrics = update_metrics(metrics, {
            "loss": loss,
            "acc": {"value": acc, "mode": "single", "log_freq": LogFreq.EPOCH},
            "high": {"value": high, "mode": LogMetricMode.MAX, "log_freq": "step"},
            "spread": {"value": loss, "mode": "std"},
            "n": {"value": 2, "mode": "sum", "log_mode": LogMode.TRAIN},
        }, train=True, batch_size=4)
    assert isinstance(metrics, FrozenDict)
    assert sorted(metrics) == ["acc_epoch", "high_step", "loss_epoch", "loss_step", "n_epoch", "n_step",
                               "spread_epoch", "spread_step"]
    assert metrics["loss_epoch"]["count"] == 8 and metrics["loss_epoch"]["value"] == 16.0
    _, epoch = get_metrics(metrics, LogFreq.EPOCH, reset_metrics=False)
    assert epoch == {"loss": 2.0, "acc": 0.75, "spread": 1.0, "n": 4}
    _, step = get_metrics(metrics, LogFreq.STEP, reset_metrics=False)
    assert step["high"] == -1.0


def test_evaluation_keeps_all_but_train_metrics_in_epoch_entries():
    metrics = update_metrics(None, {"a": {"value": 1.0, "log_mode": "train"}, "b": {"value": 1.0, "log_mode": "eval"},
                                    "c": {"value": 1.0, "log_mode": "val", "log_freq": "step"}},
                             train=False, batch_size=1)
    assert sorted(metrics) == ["b_epoch", "c_epoch"]


def test_a_mean_with_a_count_is_a_mean_over_that_count():  # the fork read it as a sum
    metrics = update_metrics(None, {"acc": {"value": 0.5, "count": 10}}, train=False, batch_size=999)
    metrics = update_metrics(metrics, {"acc": {"value": 1.0, "count": 30}}, train=False, batch_size=999)
    assert get_metrics(metrics)[1]["acc"] == pytest.approx(0.875)


def test_reset_max_starts_empty_so_negative_maxima_survive():  # the fork reset to 0
    metrics = update_metrics(None, {"m": {"value": 5.0, "mode": "max"}}, train=False, batch_size=1)
    metrics, first = get_metrics(metrics)
    assert first["m"] == 5.0 and metrics["m_epoch"]["count"] == 0
    metrics = update_metrics(metrics, {"m": {"value": -2.0, "mode": "max"}}, train=False, batch_size=1)
    metrics = update_metrics(metrics, {"m": {"value": -4.0, "mode": "max"}}, train=False, batch_size=1)
    assert get_metrics(metrics)[1]["m"] == -2.0


def test_reset_std_clears_its_squares():  # the fork kept value2
    metrics = update_metrics(None, {"s": {"value": 10.0, "mode": "std"}}, train=False, batch_size=1)
    metrics, _ = get_metrics(metrics)
    for v in (1.0, 3.0):
        metrics = update_metrics(metrics, {"s": {"value": v, "mode": "std"}}, train=False, batch_size=1)
    assert get_metrics(metrics)[1]["s"] == pytest.approx(1.0)


def test_a_constant_std_is_exactly_zero():  # the fork added 1e-6 under the root
    metrics = None
    for _ in range(3):
        metrics = update_metrics(metrics, {"s": {"value": 2.0, "mode": "std"}}, train=False, batch_size=1)
    assert get_metrics(metrics)[1]["s"] == 0.0


def test_std_of_values_far_from_zero_keeps_its_precision():  # a plain sum of squares in float32 lost it
    import numpy as np

    values = (1000.0 + 0.01 * np.random.default_rng(0).normal(size=50)).astype(np.float32)
    metrics = None
    for repeat in range(2):  # and again after the reset
        for v in values:
            metrics = update_metrics(metrics, {"s": {"value": jnp.float32(v), "mode": "std"}}, train=False, batch_size=1)
        metrics, host = get_metrics(metrics)
        assert float(host["s"]) == pytest.approx(np.std(values.astype(np.float64)), rel=1e-3), repeat  # was 0.4, not 0.01


def test_update_runs_inside_jit_with_array_values():
    @jax.jit
    def step(values):
        out = update_metrics(None, {"loss": values.mean(), "top": {"value": values.max(), "mode": "max"}},
                             train=False, batch_size=values.shape[0])
        return {k: {"value": e["value"], "count": e["count"]} for k, e in out.items()}

    out = step(jnp.array([1.0, 2.0, 6.0]))
    assert float(out["loss_epoch"]["value"]) == pytest.approx(9.0) and float(out["top_epoch"]["value"]) == 6.0


def test_malformed_inputs_are_explained():
    with pytest.raises(ValueError, match="unknown option 'value2'"):
        update_metrics(None, {"s": {"value": 1.0, "value2": 1.0}}, train=True, batch_size=1)
    with pytest.raises(ValueError, match="has mode CONCAT") as info:
        update_metrics(None, {"c": {"value": jnp.ones(2), "mode": "concat"}}, train=True, batch_size=1)
    assert "fix" in str(info.value)
    with pytest.raises(ValueError, match="is not a metric entry"):
        get_metrics({"x_epoch": {"value": 1.0}})
    with pytest.raises(ValueError, match="unknown mode"):
        get_metrics({"x_epoch": {"value": 1.0, "count": 1, "mode": "median"}})
