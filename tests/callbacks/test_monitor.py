"""gyre.callbacks._monitor: finding the monitored entry in the logs and reading it as one
number, the mode a name implies, and the improvement rule and ranking score (what every early
stopping and checkpoint ranking shares)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.callbacks._monitor import Improvement, as_number, check_name, find, monitor_mode, score
from gyre.core._errors import ExplainedKeyError


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_find_by_bare_and_qualified_name():
    logs = gyre.logs().add_loss("loss", 0.5).add_metric("loss", 0.7).add_metric("acc", 0.9)
    assert find(logs, "acc", owner="x", step=0, fix="") == 0.9
    assert find(logs, "loss", owner="x", step=0, fix="") == 0.5  # losses first
    assert find(logs, "metrics.loss", owner="x", step=0, fix="") == 0.7


def test_a_missing_entry_lists_the_logged_ones_and_the_callers_fix():
    logs = gyre.logs().add_loss("loss", 0.5).add_metric("acc", 0.9)
    with pytest.raises(ExplainedKeyError) as err:
        find(logs, "accuracy", owner="early_stopping", step=7, fix="monitor 'acc'")
    assert str(err.value).splitlines() == [
        "early_stopping monitors 'accuracy', which was not logged at step 7",
        "  expected: an entry named 'accuracy' in the logs when early_stopping runs",
        "  received: entries ['losses.loss', 'metrics.acc']",
        "  fix: monitor 'acc'",
    ]
    with pytest.raises(KeyError, match="no logs"):
        find(None, "loss", owner="checkpoint", step=0, fix="")


@pytest.mark.parametrize("value", [0.25, np.float32(0.25), jnp.float32(0.25), jnp.full((1,), 0.25),
                                   np.array([[0.25]])])
def test_one_number_in_any_form_is_read_as_a_float(value):
    got = as_number(value, "loss", owner="checkpoint", step=0)
    assert got == 0.25 and type(got) is float
    assert type(as_number(jnp.int32(3), "n", owner="checkpoint", step=0)) is float


def test_a_vector_is_refused_before_any_transfer(monkeypatch):
    import jax

    monkeypatch.setattr(jax, "device_get", lambda tree: pytest.fail("read the value"))
    with pytest.raises(ValueError) as err:
        as_number(jnp.ones((2, 3)), "loss", owner="early_stopping", step=4)
    lines = str(err.value).splitlines()
    assert lines[0] == "early_stopping monitors 'loss', which is not a single number at step 4"
    assert lines[2] == "  received: an array of shape (2, 3) (float32)"


@pytest.mark.parametrize("value", ["0.5", True, np.bool_(False), None])
def test_a_value_that_is_not_a_number_is_explained(value):
    with pytest.raises(TypeError, match="which is not a number at step 2"):
        as_number(value, "loss", owner="checkpoint", step=2)


def test_the_mode_a_name_implies_and_a_mode_against_it():
    assert monitor_mode("ModelCheckpoint", "val/acc", "auto") == "max"
    assert monitor_mode("x", "metrics.f1_test", "auto") == "max"
    assert monitor_mode("x", "val/foo", "auto") == "min"  # a name that implies nothing
    assert monitor_mode("x", "acc", "min", strict=False) == "min"
    with pytest.raises(ValueError) as err:
        monitor_mode("ModelCheckpoint", "val/acc", "min")
    assert str(err.value).splitlines()[0] == (
        "ModelCheckpoint: mode 'min' on 'val/acc' keeps the lowest value, but its name says mode 'max' "
        "(higher is better)")
    with pytest.raises(ValueError, match="checkpoint's mode must be 'min' or 'max'"):
        monitor_mode("checkpoint", "loss", "auto", auto=False)


def test_the_improvement_rule_min_delta_nan_baseline_and_patience():
    rule = Improvement("min", min_delta=0.1, patience=2)
    assert [rule.update(v) for v in (1.0, 0.95, 0.8, float("nan"), 0.75)] == [True, False, True, False, False]
    assert rule.best == 0.8 and rule.exhausted
    baseline = Improvement("max", baseline=0.5)
    assert (baseline.update(0.5), baseline.update(0.6), baseline.wait) == (False, True, 0)  # a tie is no improvement
    once = Improvement("min", patience=1)
    assert (once.update(1.0), once.exhausted, once.update(1.5), once.exhausted) == (True, False, False, True)
    relative = Improvement("min", min_delta=0.1, relative=True)
    assert relative.update(10.0) and not relative.update(9.5) and relative.update(8.9)


def test_the_ranking_score_puts_better_first_and_missing_or_nan_last():
    assert score("min", 0.5) > score("min", 0.6) and score("max", 0.6) > score("max", 0.5)
    assert (score("min", 0.25), score("max", None), score("min", float("nan")), score("max", True)) == (
        -0.25, -math.inf, -math.inf, -math.inf)


def test_a_monitor_name_is_a_non_empty_string():
    assert check_name("loss", "p", "'loss'", "f") == "loss" and check_name(None, "p", "'x'", "f", optional=True) is None
    with pytest.raises(TypeError) as err:
        check_name("", "x needs a name", "'loss_test'", "x('loss_test')")
    assert str(err.value).splitlines() == [
        "x needs a name", "  expected: a logged name, e.g. 'loss_test'", "  received: str ''", "  fix: x('loss_test')"]
