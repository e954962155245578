"""Logs.add_metrics / add_losses / add_stateful_metrics / add_outputs: dict and keyword forms.

(Kept beside tests/core/test_logs.py, which covers the rest of logs.py.)
"""

import pytest

import gyre


@pytest.mark.parametrize("collection", ["metrics", "losses", "stateful_metrics", "outputs"])
def test_dict_and_keyword_forms(collection):
    add = getattr(gyre.Logs(), f"add_{collection}")
    logs = add({"a": 1}, b=2)
    assert dict(logs[collection]) == {"a": 1, "b": 2}
    assert dict(getattr(gyre.Logs(), f"add_{collection}")(**{"a": 1})[collection]) == {"a": 1}
    assert dict(getattr(gyre.Logs(), f"add_{collection}")({"a": 1})[collection]) == {"a": 1}
    # an entry may be called "values": the dict form is positional-only
    assert dict(getattr(gyre.Logs(), f"add_{collection}")(values=3)[collection]) == {"values": 3}


def test_ciclo_spreads_a_computed_dict():
    computed = {"accuracy": 0.5, "loss": 0.25}
    logs = gyre.logs().add_stateful_metrics(**computed)
    assert logs.stateful_metrics.accuracy == 0.5 and logs.stateful_metrics.loss == 0.25


def test_a_non_mapping_is_still_explained():
    with pytest.raises(TypeError, match="takes a mapping of names to values"):
        gyre.logs().add_metrics([("a", 1)])
