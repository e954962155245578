"""gyre.core._columns: records kept by column on the host (Block, Group) and the Record view."""

import numpy as np
import pytest

from gyre.core._clock import Elapsed
from gyre.core._columns import Block, Group, Record, as_list, pack, place
from gyre.core._errors import ExplainedKeyError
from gyre.core._logs import Logs

LOSS = (("losses", ("loss",)),)
LOSS_ACC = (("losses", ("loss",)), ("metrics", ("acc",)))


def test_pack_makes_numeric_columns_and_keeps_the_rest_as_lists():
    assert pack([1, 2, 3]).dtype.kind == "i" and pack([0.5, 1.0]).dtype.kind == "f"
    assert pack([True, False]).dtype.kind == "b"
    assert pack([1, None]) == [1, None] and pack(["a", "b"]) == ["a", "b"]
    assert pack([]) == []
    vectors = [np.zeros(2), np.ones(2)]
    assert pack(vectors) is vectors  # rows that are arrays stay a list
    assert as_list(pack([1, 2])) == [1, 2] and type(as_list(pack([1, 2]))[0]) is int
    assert as_list((3, 4)) == [3, 4]


def test_place_finds_entries_before_clock_counters():
    assert place(LOSS_ACC, "loss") == ("entry", 0)
    assert place(LOSS_ACC, "metrics.acc") == ("entry", 1)
    assert place(LOSS_ACC, "steps") == ("clock", 0)
    assert place(LOSS_ACC, "elapsed.samples") == ("clock", 1)
    assert place(LOSS_ACC, "elapsed.nope") is None and place(LOSS, "acc") is None
    shadow = (("metrics", ("steps",)),)
    assert place(shadow, "steps") == ("entry", 0)  # a logged entry wins over the clock
    assert place(shadow, "elapsed.steps") == ("clock", 0)


def _block():
    clocks = [Elapsed(steps=i, samples=4 * i) for i in range(5)]
    groups = [
        Group.of(LOSS_ACC, [0, 3], [np.array([1.0, 4.0]), np.array([0.1, 0.4])]),
        Group.of(LOSS, [1, 2, 4], [np.array([2.0, 3.0, 5.0])]),
    ]
    return Block.build(clocks, [4, 4, 4, 4, None], groups)


def test_block_records_rebuild_each_record_in_order():
    block = _block()
    records = list(block.records())
    assert [r.elapsed.steps for r in records] == [0, 1, 2, 3, 4]
    assert [float(r.logs.losses.loss) for r in records] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [("acc" in r.logs.get("metrics", {})) for r in records] == [True, False, False, True, False]
    assert [r.batch_size for r in records] == [4, 4, 4, 4, None]
    assert block.record(3).elapsed.samples == 12 and float(block.record(3).logs.metrics.acc) == 0.4
    assert block.record(4).batch_size is None


def test_block_collect_merges_groups_in_record_order_and_skips_records_without_a_key():
    block = _block()
    assert block.collect(["steps", "loss"]) == [[0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0]]
    assert block.collect(["samples", "acc"]) == [[0, 12], [0.1, 0.4]]
    assert block.collect(["nope"]) == [[]]
    assert Block.build([], [], []).collect(["steps"]) == [[]]


def test_block_collect_gives_python_numbers_and_arrays_for_array_rows():
    block = Block.build(
        [Elapsed(steps=0), Elapsed(steps=1)], [None, None],
        [Group.of((("outputs", ("y",)),), [0, 1], [[np.zeros(2), np.ones(2)]])],
    )
    (ys,) = block.collect(["y"])
    assert [y.tolist() for y in ys] == [[0.0, 0.0], [1.0, 1.0]]


def test_record_reads_like_ciclos_dict_and_explains_a_missing_collection():
    record = Record(Elapsed(steps=3), Logs().add_metric("acc", 0.5), 8)
    assert record["metrics"]["acc"] == 0.5 and record["elapsed"]["steps"] == 3
    assert record.keys() == ["elapsed", "metrics"]
    assert record[0] is record.elapsed and record[2] == 8  # still a tuple by position
    with pytest.raises(ExplainedKeyError) as err:
        record["losses"]
    assert str(err.value).splitlines()[0] == "this record has no collection 'losses'"
    assert "one of ['elapsed', 'metrics']" in str(err.value)
