"""The metric options: LogMetricMode / LogFreq / LogMode, MetricSpec and parse_metrics."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.trainer._metrics import LogFreq, LogMetricMode, LogMode, MetricSpec, parse_metrics


def test_enums_are_str_enums_found_by_name_in_any_case():
    assert [m.value for m in LogMetricMode] == ["mean", "sum", "single", "max", "min", "std", "concat"]
    assert [m.value for m in LogFreq] == ["step", "epoch", "any"]
    assert [m.value for m in LogMode] == ["train", "val", "test", "eval", "any"]
    assert LogMetricMode("max") is LogMetricMode.MAX
    assert LogMetricMode("Max") is LogMetricMode.MAX
    assert LogFreq("EPOCH") is LogFreq.EPOCH
    assert LogMode("val") is LogMode.VAL
    assert LogMetricMode.STD == "std"  # a str
    with pytest.raises(ValueError):
        LogMode("validation")


def test_metric_spec_defaults_strings_and_hashing():
    spec = MetricSpec("loss")
    assert (spec.mode, spec.log_freq, spec.log_mode) == (LogMetricMode.MEAN, LogFreq.ANY, LogMode.ANY)
    named = MetricSpec("acc", "MAX", "epoch", "val")
    assert named == MetricSpec("acc", LogMetricMode.MAX, LogFreq.EPOCH, LogMode.VAL)
    assert len({named, MetricSpec("acc", "max", "epoch", "val"), spec}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        named.mode = LogMetricMode.MIN  # type: ignore[misc]


def test_metric_spec_errors():
    with pytest.raises(ValueError, match=r"metric 'acc': unknown mode 'maxx'\. Did you mean 'max'\?"):
        MetricSpec("acc", "maxx")
    with pytest.raises(ValueError, match=r"unknown log_mode 'validation'"):
        MetricSpec("acc", log_mode="validation")
    with pytest.raises(TypeError, match="a metric's name must be a non-empty str"):
        MetricSpec("")


def test_plain_values_take_the_defaults_and_keep_their_order():
    out = {"loss": 0.5, "acc": np.float32(0.25), "per_class": jnp.ones(3), "hits": True, "n": 3}
    specs, values = parse_metrics(out, where="my loss")
    assert list(specs) == list(values) == ["loss", "acc", "per_class", "hits", "n"]
    assert all(s == MetricSpec(k) for k, s in specs.items())
    assert values["loss"] == (0.5, None)
    assert values["per_class"][0] is out["per_class"] and values["per_class"][1] is None


def test_options_dicts():
    out = {
        "acc": {"value": 0.75, "count": 3, "mode": "mean", "log_mode": LogMode.VAL},
        "worst": {"value": -2.0, "mode": LogMetricMode.MAX, "log_freq": "EPOCH"},
        "preds": {"value": jnp.arange(4), "mode": "concat", "log_mode": "eval"},
    }
    specs, values = parse_metrics(out, where="my loss")
    assert specs["acc"] == MetricSpec("acc", "mean", "any", "val")
    assert specs["worst"] == MetricSpec("worst", "max", "epoch", "any")
    assert specs["preds"] == MetricSpec("preds", "concat", "any", "eval")
    assert values["acc"] == (0.75, 3) and values["worst"] == (-2.0, None)


def test_parse_runs_at_trace_time_without_reading_values():
    seen = []

    @jax.jit
    def step(x):
        specs, values = parse_metrics(
            {"loss": x.mean(), "acc": {"value": x, "count": x.sum(), "mode": "sum"}}, where="step"
        )
        seen.append(specs)
        return values["loss"][0], values["acc"][1]

    loss, count = step(jnp.arange(4.0))
    assert (float(loss), float(count)) == (1.5, 6.0)
    assert seen == [{"loss": MetricSpec("loss"), "acc": MetricSpec("acc", "sum")}]


@pytest.mark.parametrize(
    ("out", "error", "match"),
    [
        ([("loss", 1.0)], TypeError, r"my loss: the metrics must be a dict"),
        ({3: 1.0}, TypeError, r"my loss: a metric's name must be a non-empty str"),
        ({"": 1.0}, TypeError, r"a metric's name must be a non-empty str"),
        ({"acc": {"value": 1.0, "mdoe": "max"}}, ValueError,
         r"metric 'acc' has an unknown option 'mdoe'\. Did you mean 'mode'\?"),
        ({"acc": {"value": 1.0, "logfreq": "step"}}, ValueError,
         r"unknown option 'logfreq'\. Did you mean 'log_freq'\?"),
        ({"acc": {"value": 1.0, "value2": 1.0, "mode": "std"}}, ValueError,
         r"(?s)unknown option 'value2'.*fix: remove 'value2': gyre's STD is exact"),
        ({"acc": {"mode": "max"}}, ValueError, r"metric 'acc' is an options dict without a 'value'"),
        ({"acc": {"value": 1.0, "mode": "maxx"}}, ValueError,
         r"metric 'acc' has an unknown mode 'maxx'\. Did you mean 'max'\?"),
        ({"acc": {"value": 1.0, "mode": 4}}, ValueError, r"(?s)unknown mode 4.*expected: a LogMetricMode"),
        ({"acc": {"value": 1.0, "log_freq": "steps"}}, ValueError,
         r"unknown log_freq 'steps'\. Did you mean 'step'\?"),
        ({"acc": {"value": 1.0, "log_mode": "validation"}}, ValueError, r"unknown log_mode 'validation'"),
        ({"acc": "high"}, TypeError, r"my loss: the value of metric 'acc' is not a number"),
        ({"acc": None}, TypeError, r"the value of metric 'acc' is not a number"),
        ({"acc": [1.0, 2.0]}, TypeError, r"the value of metric 'acc' is not a number"),
        ({"acc": {"value": {"value": 1.0}}}, TypeError, r"the value of metric 'acc' is not a number"),
        ({"key": jax.random.key(0)}, TypeError, r"the value of metric 'key' is not a number"),
        ({"acc": {"value": 1.0, "count": "4"}}, TypeError, r"the count of metric 'acc' is not a number"),
        ({"acc": {"value": 1.0, "count": jnp.ones(2)}}, ValueError,
         r"(?s)the count of metric 'acc' must be one number.*shape \(2,\)"),
    ],
)
def test_errors_name_the_metric(out, error, match):
    with pytest.raises(error, match=match):
        parse_metrics(out, where="my loss")


def test_bfloat16_values_are_numbers():
    specs, values = parse_metrics({"loss": jnp.bfloat16(0.5), "n": {"value": jnp.ones(2, jnp.bfloat16), "count": 2}}, where="f")
    assert list(specs) == ["loss", "n"] and values["loss"][0].dtype == jnp.bfloat16
