"""jaxloop's early stopping: the stop handler's modes, patience and baseline, and the error it raises."""

import math

import jax.numpy as jnp
import pytest

from gyre import jaxloop


def test_stop_handler_modes_patience_and_baseline():
    auto = jaxloop.MetricMonitoringStopHandler("val_accuracy", patience=2)
    assert auto.mode == "max"
    assert [auto.update_state(v, s) for s, v in enumerate([0.5, 0.7, 0.69, 0.7])] == [True, True, False, False]
    assert auto.should_stop() and auto.get_best_info() == (0.7, 1)
    loss = jaxloop.MetricMonitoringStopHandler("loss", min_delta=0.1, patience=1, mode="auto")
    loss.update_state(1.0, 0)
    assert not loss.update_state(0.95, 1) and loss.should_stop()  # below min_delta
    base = jaxloop.MetricMonitoringStopHandler("loss", patience=1, mode="min", baseline=0.5)
    assert not base.update_state(0.6, 3) and base.should_stop() and base.get_best_info() == (0.5, 0)
    assert jaxloop.MetricMonitoringStopHandler("loss", mode="min").monitored_op is jnp.less
    assert auto.monitored_op is jnp.greater  # auto picked max for an accuracy
    with pytest.raises(ValueError, match="mode is not known"):
        jaxloop.MetricMonitoringStopHandler("loss", mode="up")
    with pytest.raises(ValueError, match="patience must be a positive whole number"):
        jaxloop.MetricMonitoringStopHandler("loss", patience=0)


@pytest.mark.parametrize("kwargs, first_line", [
    ({"baseline": float("nan")}, "MetricMonitoringStopHandler's baseline must be a number or None"),
    ({"baseline": "low"}, "MetricMonitoringStopHandler's baseline must be a number or None"),
    ({"min_delta": float("nan")}, "MetricMonitoringStopHandler's min_delta must be a number"),
    ({"min_delta": "0.1"}, "MetricMonitoringStopHandler's min_delta must be a number"),
])
def test_a_nan_or_non_number_baseline_or_min_delta_is_refused(kwargs, first_line):
    # a NaN baseline or min_delta used to be taken: no value then ever improved, so training
    # stopped after `patience` checks whatever the metric did
    with pytest.raises(ValueError) as info:
        jaxloop.MetricMonitoringStopHandler("loss", patience=2, **kwargs)
    lines = str(info.value).splitlines()
    assert lines[0] == first_line
    assert lines[2].startswith("  received: ") and lines[3].startswith("  fix: pass ")


def test_numpy_and_jax_numbers_are_a_baseline_and_min_delta_keeps_jaxloops_sign_rule():
    handler = jaxloop.MetricMonitoringStopHandler("loss", patience=2, baseline=jnp.float32(0.45), min_delta=-0.01)
    assert handler.min_delta == pytest.approx(0.01) and handler.baseline == pytest.approx(0.45)
    assert [handler.update_state(v, s) for s, v in enumerate([1.0, 0.5, 0.4, 0.3])] == [False, False, True, True]
    assert not handler.should_stop() and handler.get_best_info() == (0.3, 3)



def test_early_stopping_action_raises_with_the_best_step_and_metric():
    action = jaxloop.EarlyStoppingAction(jaxloop.MetricMonitoringStopHandler("loss", patience=2))
    action({"step": 10}, {"loss": [1.0, 0.0]})  # mean 0.5
    action({"step": 20}, {"loss": [0.4]})
    action({"step": 30}, {"loss": [0.4]})
    with pytest.raises(jaxloop.StopTrainingError) as info:
        action({"step": 40}, {"loss": [0.9]})
    assert info.value.best_step == 20 and info.value.best_metric == pytest.approx(0.4)
    assert "Best step: 20" in str(info.value)
    nan = jaxloop.EarlyStoppingAction(jaxloop.MetricMonitoringStopHandler("loss"))
    with pytest.raises(jaxloop.StopTrainingError, match="was NaN"):
        nan({"step": 1}, {"loss": [math.nan]})
    assert nan({"step": 1}, {"other": [1.0]}) == {"other": [1.0]}  # missing: warned, not raised
    with pytest.raises(TypeError, match="needs a MetricMonitoringStopHandler"):
        jaxloop.EarlyStoppingAction("loss")



def test_a_missing_metric_is_said_once_with_the_name_meant(caplog):
    action = jaxloop.EarlyStoppingAction(jaxloop.MetricMonitoringStopHandler("los", patience=1))
    with caplog.at_level("WARNING"):
        for step in range(3):
            assert action({"step": step}, {"loss": [1.0]}) == {"loss": [1.0]}
    said = [r.getMessage() for r in caplog.records if "EarlyStoppingAction" in r.getMessage()]
    assert len(said) == 1
    assert "'los' is not available in the outputs dictionary (it holds ['loss'])" in said[0]
    assert "Did you mean 'loss'?" in said[0]


def test_the_handler_keeps_jaxloops_patience_counter():
    """jaxloop's own tests read ``_patience_left``: checks left before the stop."""
    handler = jaxloop.MetricMonitoringStopHandler("loss", patience=3)
    handler.update_state(1.0, 10)
    assert handler._patience_left == 3
    handler.update_state(2.0, 20)
    handler.update_state(2.0, 30)
    assert handler._patience_left == 1 and not handler.should_stop()
    handler.update_state(0.5, 40)
    assert handler._patience_left == 3
