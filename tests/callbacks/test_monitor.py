"""gyre.callbacks._monitor: finding the monitored entry in the logs and reading it as one
number (what checkpoint and early stopping share)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.callbacks._monitor import as_number, find
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
