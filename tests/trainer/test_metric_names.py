"""Metric names and routing: logged names, clashes, the phase's time and the writers' scalars
(issue 12, item 2)."""

import jax.numpy as jnp
import numpy as np
import pytest

from gyre.trainer._metrics import (
    MetricSpec,
    logged_name,
    metric_names,
    scalars_for_writers,
    time_name,
)


def test_names():
    assert logged_name("acc", "train", "step") == "train/acc_step"
    assert logged_name("acc", "train", "epoch") == "train/acc_epoch"
    assert logged_name("acc", "val") == "val/acc"
    assert logged_name("acc", "test", "epoch") == "test/acc"
    assert logged_name("val/top5", "val") == "val/top5"
    assert logged_name("extra/acc", "train", "step") == "extra/acc_step"
    assert [time_name(p) for p in ("train", "val", "test")] == ["train/time", "val/time", "test/time"]
    specs = {"a": MetricSpec("a", log_freq="step"), "b": MetricSpec("b", log_freq="epoch"), "c": MetricSpec("c")}
    assert metric_names(specs, "train", "step") == {"a": "train/a_step", "c": "train/c_step"}
    assert metric_names(specs, "train", "epoch") == {"b": "train/b_epoch", "c": "train/c_epoch"}
    assert metric_names(specs, "val") == {"a": "val/a", "b": "val/b", "c": "val/c"}


def test_name_errors():
    with pytest.raises(ValueError, match=r"(?s)unknown phase 'validation'.*expected: phase in"):
        metric_names({}, "validation")
    with pytest.raises(ValueError, match=r"unknown phase 'train' or frequency 'steps'"):
        logged_name("a", "train", "steps")
    with pytest.raises(ValueError, match=r"val metrics are logged once per evaluation, not per step"):
        metric_names({}, "val", "step")
    clash = {"acc": MetricSpec("acc"), "train/acc": MetricSpec("train/acc")}
    with pytest.raises(ValueError, match=r"metric 'train/acc' would be logged as 'train/acc_step', the name of metric 'acc'"):
        metric_names(clash, "train", "step")
    with pytest.raises(ValueError, match=r"metric 'time' would be logged as 'val/time', the name of the epoch's duration"):
        metric_names({"time": MetricSpec("time")}, "val")
    assert metric_names({"time": MetricSpec("time")}, "train", "epoch") == {"time": "train/time_epoch"}


def test_scalars_for_writers_keeps_numbers_only():
    specs = {"p": MetricSpec("p", "concat"), "c": MetricSpec("c", "concat"), "s": MetricSpec("s", "sum")}
    metrics = {
        "train/p_step": jnp.ones(3), "train/p_epoch": jnp.ones(3), "val/p": jnp.ones(3),
        "test/c": jnp.ones(()),  # a CONCAT metric is dropped even when its value is 0-d
        "train/s_epoch": jnp.int32(4), "per_class": jnp.ones(2), "train/time": 3.5,
        "np": np.float64(1.0), "flag": True, "note": "text",
    }
    assert list(scalars_for_writers(metrics, specs)) == ["train/s_epoch", "train/time", "np", "flag"]



def test_scalars_for_writers_keeps_bfloat16_and_float8_numbers():
    metrics = {"loss": jnp.bfloat16(0.5), "f8": jnp.asarray(0.5, jnp.float8_e4m3fn), "c": jnp.complex64(1)}
    assert list(scalars_for_writers(metrics, {})) == ["loss", "f8"]


def test_a_scalar_is_a_python_number_or_a_zero_dimensional_array():
    from gyre.trainer._metrics import is_scalar

    assert (is_scalar(1.5), is_scalar(jnp.ones(())), is_scalar(jnp.ones(2))) == (True, True, False)
