"""gyre.core._reader: a HistoryReader (History.read from a position that moves) hands out a
history's new records as columns, in order, as soon as they can be read, and never waits
for a value that is not computed."""

import jax.numpy as jnp
import numpy as np

from gyre.core._clock import Elapsed
from gyre.core._history import History
from gyre.core._logs import Logs
from gyre.core._reader import Columns, HistoryReader


class Late(float):
    """A logged number whose device computation finishes when the test says so."""

    done = False

    def is_ready(self):
        return type(self).done


def _commit(h, i, value):
    h.commit(Elapsed(steps=i, epochs=i // 4), Logs().add_loss("loss", value), batch_size=2)


def test_a_reader_starts_after_what_was_already_committed():
    h = History()
    _commit(h, 0, jnp.float32(0))
    reader = h.reader()
    assert reader.position == 1 and reader.read().count == 0
    _commit(h, 1, jnp.float32(1))
    cols = reader.read()
    assert isinstance(cols, Columns) and cols.count == 1
    assert cols.clocks["steps"].tolist() == [1] and cols.entries[("losses", "loss")][1].tolist() == [1.0]
    assert HistoryReader(h, 0).read().count == 2  # from the first record


def test_records_on_the_host_in_transit_and_on_the_device_come_in_order():
    h = History(flush_every=4, lag=2)
    for i in range(13):
        _commit(h, i, jnp.float32(i))
    reader = HistoryReader(h, 0)
    seen_steps, seen_loss = [], []
    for _ in range(5):  # values in transit are read once they landed
        cols = reader.read()
        seen_steps += cols.clocks["steps"].tolist()
        if cols.count:
            rows, values = cols.entries[("losses", "loss")]
            assert rows.tolist() == list(range(cols.count))
            seen_loss += values.tolist()
    assert seen_steps == list(range(13)) and seen_loss == [float(i) for i in range(13)]
    assert reader.position == 13


def test_a_value_not_computed_yet_holds_back_it_and_everything_after_it():
    Late.done = False
    h = History(flush_every=1000, lag=0)  # everything stays on the device
    _commit(h, 0, 0.5)
    _commit(h, 1, Late(1.5))
    _commit(h, 2, 2.5)
    reader = h.reader(0)
    first = reader.read()
    assert first.count == 1 and first.entries[("losses", "loss")][1].tolist() == [0.5]
    assert reader.read().count == 0  # still not computed: nothing, and no wait
    Late.done = True
    rest = reader.read()
    assert rest.clocks["steps"].tolist() == [1, 2]
    assert rest.entries[("losses", "loss")][1].tolist() == [1.5, 2.5]


def test_entries_logged_now_and_then_keep_their_positions():
    h = History(flush_every=1000, lag=0)
    for i in range(6):
        logs = Logs().add_loss("loss", float(i))
        if i % 3 == 2:
            logs.add_metric("acc_test", float(i) / 10)
        h.commit(Elapsed(steps=i), logs)
    cols = h.reader(0).read(wait=True)
    rows, values = cols.entries[("metrics", "acc_test")]
    assert rows.tolist() == [2, 5] and np.allclose(values, [0.2, 0.5])
    rows, values = cols.entries[("losses", "loss")]  # rows of two structures: by group
    assert sorted(zip(rows.tolist(), values.tolist(), strict=True)) == [(i, float(i)) for i in range(6)]
