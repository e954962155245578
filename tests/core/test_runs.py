"""Records as runs of scalar rows: names by wandb_logger's rule, real numbers only, records
without one left out."""

import numpy as np
import pytest

import gyre
from gyre.core._runs import rows, scalar_runs


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_runs_hold_each_records_numbers_under_their_names():
    records = [
        {"losses": {"loss": 1.0}, "metrics": {"acc": 0.5}},
        {"losses": {"loss": 0.5}, "metrics": {"acc": 0.75}},
        {"losses": {"loss": 0.25}, "metrics": {"loss": 2.0, "acc": 1.0, "note": "text"}},
        {"outputs": {"pred": np.ones(3)}},  # no scalar: left out
        {"metrics": {"acc": np.float32(0.125), "count": 3, "flag": True}},
        {"metrics": {"acc": 0.25}},
        {"metrics": {"acc": 0.5, "none": None, "complex": 1 + 0j, "object": object()}},  # not numbers
    ]
    columns = gyre.history(records).reader(0).read(wait=True)
    runs = scalar_runs(columns)
    ordered = [(step, list(data.items())) for run in runs for step, data in rows(run)]
    assert ordered == [
        (0, [("loss", 1.0), ("acc", 0.5)]), (1, [("loss", 0.5), ("acc", 0.75)]),
        (2, [("loss", 0.25), ("acc", 1.0), ("metrics.loss", 2.0)]),
        (4, [("acc", 0.125), ("count", 3.0), ("flag", 1.0)]), (5, [("acc", 0.25)]), (6, [("acc", 0.5)]),
    ]
    assert all(type(x) is float for _, data in ordered for _, x in data)
    assert [run.names for run in runs] == [
        ("loss", "acc"), ("loss", "acc", "metrics.loss"), ("acc", "count", "flag"), ("acc",),
    ]
    assert [run.steps.tolist() for run in runs] == [[0, 1], [2], [4], [5, 6]]


def test_no_records_and_no_numbers_give_no_runs():
    empty = gyre.history([]).reader(0).read(wait=True)
    arrays = gyre.history([{"outputs": {"pred": np.ones(2)}}]).reader(0).read(wait=True)
    assert scalar_runs(empty) == [] and scalar_runs(arrays) == []
