"""A history block's scalars as the writers read them (runs of records holding the same
entries): names by wandb_logger's rule, real numbers only, records without one left out."""

import numpy as np
import pytest

import gyre
from gyre.callbacks._wandb_logger import scalar_rows, scalar_runs


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
    block = gyre.history(records).read(0, wait=True)
    runs = list(scalar_runs(block))
    ordered = [(step, list(data.items())) for step, data in scalar_rows(block)]
    assert ordered == [
        (0, [("loss", 1.0), ("acc", 0.5)]), (1, [("loss", 0.5), ("acc", 0.75)]),
        (2, [("loss", 0.25), ("acc", 1.0), ("metrics.loss", 2.0)]),
        (4, [("acc", 0.125), ("count", 3.0), ("flag", 1.0)]), (5, [("acc", 0.25)]), (6, [("acc", 0.5)]),
    ]
    assert all(type(x) is float for _, data in ordered for _, x in data)
    assert [names for _, names, *_ in runs] == [
        ("loss", "acc"), ("loss", "acc", "metrics.loss"), ("acc", "count", "flag"), ("acc",),
    ]
    assert [steps.tolist() for _, _, steps, _, _ in runs] == [[0, 1], [2], [4], [5, 6]]
    assert [start for start, *_ in runs] == [0, 2, 4, 5]


def test_no_records_and_no_numbers_give_no_runs():
    empty = gyre.history([]).read(0, wait=True)
    arrays = gyre.history([{"outputs": {"pred": np.ones(2)}}]).read(0, wait=True)
    assert list(scalar_runs(empty)) == [] and list(scalar_runs(arrays)) == []
