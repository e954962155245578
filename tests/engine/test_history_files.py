"""History blocks in a checkpoint (``gyre.engine._snapshot``): exact values, chains, the
blocks of a dead run that must never be read, and the blocks of the previous format."""

import json
import pathlib

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gyre
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.engine._snapshot import block_name, chain_crc, encode_block, load_history, new_block


def _history(n, start=0):
    h = History()
    for i in range(start, start + n):
        logs = (
            Logs()
            .add_loss("loss", jnp.float32(1.0 / (i + 1)))
            .add_metric("count", i)
            .add_metric("half", np.asarray(i / 2, dtype=ml_dtypes.bfloat16))
            .add_output("vec", jnp.arange(3, dtype=jnp.int32) * i)
        )
        h.commit(gyre.Elapsed(steps=i, samples=8 * i, time=0.1 * i), logs, batch_size=8)
    return h


def _encoded(h, start, stop):
    return encode_block(h.read(start, wait=True).take(0, stop - start), start)


def _records(h):
    return [(r.elapsed, r.batch_size, r.logs) for r in h]


def _equal(a, b):
    assert len(a) == len(b)
    for (ca, sa, la), (cb, sb, lb) in zip(_records(a), _records(b), strict=True):
        assert ca == cb and sa == sb
        for (col, name, x), (col2, name2, y) in zip(la.entries(), lb.entries(), strict=True):
            assert (col, name) == (col2, name2)
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)


def test_blocks_round_trip_values_dtypes_and_clocks_exactly():
    h = _history(7)
    files = {}
    for start, stop in ((0, 3), (3, 7)):
        files[block_name(start)] = _encoded(h, start, stop)
    _equal(load_history(files.get, 7, "test"), h)


def test_a_resume_truncates_to_the_checkpoint_and_ignores_later_blocks():
    h = _history(9)
    files = {block_name(0): _encoded(h, 0, 4),
             block_name(4): _encoded(h, 4, 9)}
    loaded = load_history(files.get, 6, "test")  # a checkpoint of 6 records: truncated
    assert loaded.collect("count") == [0, 1, 2, 3, 4, 5]
    assert load_history(files.get, 4, "test").collect("count") == [0, 1, 2, 3]  # 4..9 not read
    assert len(load_history(files.get, 0, "test")) == 0


def test_a_block_file_is_the_text_json_dumps_gives_of_its_object():
    # the file is written without the JSON encoder's scan of its base64 columns: the bytes
    # must still be json.dumps's, for every kind of column (sparse entries, strings, orders)
    h = _history(5)
    for i in range(5, 9):
        logs = Logs().add_metric("a", jnp.float32(i))
        logs = logs.add_metric("note", "é\"x") if i == 6 else logs.add_loss("loss", jnp.float32(i))
        h.commit(gyre.Elapsed(steps=i), logs, batch_size=None if i == 7 else 4)
    for start, stop in ((0, 9), (2, 5), (5, 9)):
        data = _encoded(h, start, stop)
        assert data == json.dumps(json.loads(data)).encode()


def test_non_finite_values_survive():
    h = History()
    h.commit(gyre.Elapsed(), Logs().add_loss("loss", jnp.float32(np.nan)).add_metric("m", float("inf")))
    files = dict([new_block(h, 0)])
    loss, m = load_history(files.get, 1, "test").collect("loss", "m")
    assert np.isnan(loss[0]) and m == [float("inf")]


def test_new_block_is_none_without_new_records():
    h = _history(3)
    assert new_block(h, 3) is None
    name, data = new_block(h, 1)
    assert name == "history/000000000001.json" and json.loads(data)["stop"] == 3


def test_a_missing_block_is_a_clear_error():
    h = _history(4)
    files = {block_name(2): _encoded(h, 2, 4)}
    with pytest.raises(FileNotFoundError, match=r"history of ckpt 7 is incomplete(.|\n)*no block starting at record 0"):
        load_history(files.get, 4, "ckpt 7")


def test_unsaveable_values_are_named():
    h = History()
    h.commit(gyre.Elapsed(), Logs().add_metric("m", object()))
    with pytest.raises(TypeError, match="a history value cannot be saved"):
        new_block(h, 0)


def _mixed_history():
    """Records of several structures over several host blocks: device and host values,
    stacked and listed columns, float64 numbers (a Python float's subclass), strings, no logs,
    unknown batch sizes."""
    h = History(flush_every=7, lag=2)
    for i in range(40):
        logs = Logs().add_loss("loss", jnp.float32(i) / 3)
        if i % 3 == 0:
            logs.add_metric("acc", np.float64(i) / 7).add_metric("flag", np.bool_(i % 2))
        if i % 5 == 0:
            logs.add_output("vec", jnp.arange(2.0) * i).add_entry("notes", "text", f"step {i}")
        if i == 11:
            logs = Logs()
        h.commit(gyre.Elapsed(steps=i, samples=4 * i, time=0.25 * i, date=1.7e9 + i), logs,
                 batch_size=None if i % 4 == 1 else 4)
    return h


@pytest.mark.parametrize("start", [0, 1, 6, 7, 23, 39])
def test_a_chain_of_blocks_from_any_start_loads_the_same_records(start):
    h = _mixed_history()
    files = dict([new_block(h, 0)])
    if start:
        files = {block_name(0): _encoded(h, 0, start), block_name(start): new_block(h, start)[1]}
    assert new_block(h, start)[0] == block_name(start)
    loaded = load_history(files.get, 40, "ckpt")
    _equal(loaded, h)
    assert loaded.collect("steps", "acc") == h.collect("steps", "acc")
    assert [type(v) for v in loaded.collect("text")] == [str] * 8
    assert chain_crc(files.get, 40) is not None


@pytest.mark.parametrize("column", [
    np.arange(4, dtype=np.float64) / 3, np.arange(4, dtype=np.float32), np.arange(4, dtype=np.int32),
    np.array([True, False, True, True]), np.arange(8.0).reshape(4, 2),
    np.arange(4).astype(ml_dtypes.bfloat16), np.array([np.nan, -np.inf, np.inf, -0.0], np.float32),
    [1.5, "a", None, np.float32(2)], [1, 2, True, 2.5],
])
def test_a_column_round_trips_exactly_to_the_bit_and_type(column):
    from gyre.engine._snapshot import _column_text, _decode_column

    back = _decode_column(json.loads(_column_text(column)))
    if isinstance(column, np.ndarray):
        assert back.dtype == column.dtype and back.shape == column.shape
        assert back.tobytes() == column.tobytes()  # NaN payloads and -0.0 included
    else:
        assert [type(v) for v in back] == [type(v) if not isinstance(v, np.generic) else np.ndarray for v in column]
        assert [np.asarray(v).tolist() for v in back] == [np.asarray(v).tolist() for v in column]


def _format1_history():
    """The history the file ``history_format1.json`` was written from, by gyre's format 1
    (a JSON object per record): two blocks, records 0-3 and 4-8."""
    h = History(flush_every=3, lag=1)
    for i in range(9):
        logs = Logs().add_loss("loss", jnp.float32(1.0 / (i + 1)))
        if i % 2 == 0:
            logs.add_metric("half", np.asarray(i / 2, dtype=ml_dtypes.bfloat16)).add_metric("count", i)
        if i % 3 == 0:
            logs.add_output("vec", jnp.arange(3, dtype=jnp.int32) * i).add_entry("notes", "text", f"step {i}")
            logs.add_metric("flag", bool(i % 2)).add_metric("ratio", i / 7)
        h.commit(gyre.Elapsed(steps=i, samples=4 * i, epochs=i // 4, step_in_epoch=i % 4, time=0.25 * i,
                              date=1.7e9 + i), logs, batch_size=None if i == 5 else 4)
    return h


def test_blocks_of_the_previous_format_are_read_and_continued_with_blocks_of_this_one():
    files = {k: v.encode() for k, v in json.loads((pathlib.Path(__file__).parent / "history_format1.json").read_text()).items()}
    assert all(json.loads(v)["format"] == 1 for v in files.values())
    h = _format1_history()
    _equal(load_history(files.get, 9, "old"), h)
    loaded = load_history(files.get, 6, "old")  # truncated inside the second block
    assert loaded.collect("steps") == list(range(6)) and loaded.batch_sizes() == [4] * 5 + [None]
    assert [type(v) for v in loaded.collect("count")] == [int] * 3 and loaded.collect("flag") == [False, True]
    assert chain_crc(files.get, 9) is not None
    # a run resumed from the old checkpoint appends its own blocks (this format) to the old chain
    resumed = load_history(files.get, 9, "old")
    resumed.commit(gyre.Elapsed(steps=9), Logs().add_loss("loss", jnp.float32(0.5)))
    files[block_name(9)] = new_block(resumed, 9)[1]
    assert load_history(files.get, 10, "mixed").collect("loss")[-2:] == [pytest.approx(1 / 9), 0.5]
    assert chain_crc(files.get, 10) is not None
