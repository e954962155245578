"""gyre.core._history: records kept by column (Block) and the Record view."""

import numpy as np
import pytest

from gyre.core._clock import Elapsed
from gyre.core._errors import ExplainedKeyError
from gyre.core._history import Block, Record, join
from gyre.core._logs import Logs


def _clocks(n, **given):
    fields = ("steps", "samples", "epochs", "step_in_epoch", "time", "date")
    return {f: np.asarray(given.get(f, [0] * n)) for f in fields}


def _block():
    """Five records: loss in all, acc in records 0 and 3."""
    entries = {
        ("losses", "loss"): (np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 5.0])),
        ("metrics", "acc"): (np.array([0, 3]), np.array([0.1, 0.4])),
    }
    return Block(5, _clocks(5, steps=range(5), samples=[4 * i for i in range(5)]), entries, [4, 4, 4, 4, None])


def test_block_records_rebuild_each_record_in_order():
    block = _block()
    records = list(block.records())
    assert [r.elapsed.steps for r in records] == [0, 1, 2, 3, 4]
    assert [float(r.logs.losses.loss) for r in records] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [("acc" in r.logs.get("metrics", {})) for r in records] == [True, False, False, True, False]
    assert [r.batch_size for r in records] == [4, 4, 4, 4, None]
    (fourth,) = block.take(3, 4).records()
    assert fourth.elapsed.samples == 12 and float(fourth.logs.metrics.acc) == 0.4


def test_block_collect_skips_records_without_a_key_and_finds_keys_as_a_record_does():
    block = _block()
    assert block.collect(["steps", "loss"]) == [[0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 5.0]]
    assert block.collect(["samples", "acc"]) == [[0, 12], [0.1, 0.4]]
    assert block.collect(["metrics.acc", "elapsed.steps"]) == [[0.1, 0.4], [0, 3]]
    assert block.collect(["nope"]) == [[]]
    shadow = Block(2, _clocks(2, steps=[0, 1]), {("metrics", "steps"): (np.array([1]), [9])}, [None, None])
    assert shadow.collect(["steps"]) == [[0, 9]]  # a logged entry wins over the clock counter
    assert shadow.collect(["elapsed.steps"]) == [[0, 1]]
    both = Block(1, _clocks(1), {("metrics", "x"): (np.array([0]), [2]), ("losses", "x"): (np.array([0]), [1])})
    assert both.collect(["x"]) == [[1]] and both.collect(["metrics.x"]) == [[2]]  # losses first


def test_block_collect_gives_python_numbers_and_arrays_for_array_rows():
    block = Block(2, _clocks(2), {("outputs", "y"): (np.arange(2), np.array([[0.0, 0.0], [1.0, 1.0]]))}, [None] * 2)
    (ys,) = block.collect(["y"])
    assert [y.tolist() for y in ys] == [[0.0, 0.0], [1.0, 1.0]]
    listed = Block(2, _clocks(2), {("metrics", "n"): (np.arange(2), [np.float32(1.5), 2])}, [None] * 2)
    assert listed.collect(["n"]) == [[1.5, 2]] and type(listed.collect(["n"])[0][0]) is float


def test_take_and_join_keep_every_entry_at_its_record():
    block = _block()
    head, tail = block.take(0, 2), block.take(2, 5)
    assert tail.entries[("metrics", "acc")][0].tolist() == [1] and ("metrics", "acc") in head.entries
    again = join([head, tail])
    assert again.count == 5 and again.collect(["steps", "acc"]) == block.collect(["steps", "acc"])
    assert again.sizes == [4, 4, 4, 4, None]
    mixed = join([block.take(0, 1), Block(1, _clocks(1), {("losses", "loss"): (np.array([0]), ["x"])}, [None])])
    assert mixed.entries[("losses", "loss")][1] == [1.0, "x"]  # a list where the parts differ


def test_record_reads_like_ciclos_dict_and_explains_a_missing_collection():
    record = Record(Elapsed(steps=3), Logs().add_metric("acc", 0.5), 8)
    assert record["metrics"]["acc"] == 0.5 and record["elapsed"]["steps"] == 3
    assert record.keys() == ["elapsed", "metrics"]
    assert record[0] is record.elapsed and record[2] == 8  # still a tuple by position
    with pytest.raises(ExplainedKeyError) as err:
        record["losses"]
    assert str(err.value).splitlines()[0] == "this record has no collection 'losses'"
    assert "one of ['elapsed', 'metrics']" in str(err.value)
