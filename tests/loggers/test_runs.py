"""Records as runs of scalar rows: the same rows, names and numbers as rows_of gives."""

import numpy as np

import gyre
from gyre.callbacks._wandb_logger import rows_of
from gyre.loggers._runs import rows, scalar_runs


def test_runs_hold_what_rows_of_gives_record_by_record():
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
    numbers_only = gyre.history(records[:-1]).reader(0).read(wait=True)  # rows_of fails on None
    expected = [(step, data) for step, data in rows_of(numbers_only) if data] + [(6, {"acc": 0.5})]
    runs = scalar_runs(columns)
    ordered = lambda pairs: [(step, list(data.items())) for step, data in pairs]  # noqa: E731
    assert ordered(row for run in runs for row in rows(run)) == ordered(expected)
    assert [run.names for run in runs] == [
        ("loss", "acc"), ("loss", "acc", "metrics.loss"), ("acc", "count", "flag"), ("acc",),
    ]
    assert [run.steps.tolist() for run in runs] == [[0, 1], [2], [4], [5, 6]]


def test_no_records_and_no_numbers_give_no_runs():
    empty = gyre.history([]).reader(0).read(wait=True)
    arrays = gyre.history([{"outputs": {"pred": np.ones(2)}}]).reader(0).read(wait=True)
    assert scalar_runs(empty) == [] and scalar_runs(arrays) == []
