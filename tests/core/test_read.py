"""History.read from a position that moves: a history's new records come as one block, in
order, as soon as they can be read, and never wait for a value that is not computed."""

import jax.numpy as jnp
import numpy as np

from gyre.core._clock import Elapsed
from gyre.core._history import Block, History
from gyre.core._logs import Logs


class Late(float):
    """A logged number whose device computation finishes when the test says so."""

    done = False

    def is_ready(self):
        return type(self).done


def _commit(h, i, value):
    h.commit(Elapsed(steps=i, epochs=i // 4), Logs().add_loss("loss", value), batch_size=2)


def test_a_read_from_the_length_gets_only_what_comes_next():
    h = History()
    _commit(h, 0, jnp.float32(0))
    position = len(h)
    assert position == 1 and h.read(position).count == 0
    _commit(h, 1, jnp.float32(1))
    block = h.read(position)
    assert isinstance(block, Block) and block.count == 1
    assert block.clocks["steps"].tolist() == [1] and block.entries[("losses", "loss")][1].tolist() == [1.0]
    assert h.read(0).count == 2  # from the first record


def test_records_on_the_host_in_transit_and_on_the_device_come_in_order():
    h = History(flush_every=4, lag=2)
    for i in range(13):
        _commit(h, i, jnp.float32(i))
    position, seen_steps, seen_loss = 0, [], []
    for _ in range(5):  # values in transit are read once they landed
        block = h.read(position)
        position += block.count
        seen_steps += block.clocks["steps"].tolist()
        if block.count:
            rows, values = block.entries[("losses", "loss")]
            assert rows.tolist() == list(range(block.count))
            seen_loss += values.tolist()
    assert seen_steps == list(range(13)) and seen_loss == [float(i) for i in range(13)]
    assert position == 13


def test_a_value_not_computed_yet_holds_back_it_and_everything_after_it():
    Late.done = False
    h = History(flush_every=1000, lag=0)  # everything stays on the device
    _commit(h, 0, 0.5)
    _commit(h, 1, Late(1.5))
    _commit(h, 2, 2.5)
    first = h.read(0)
    assert first.count == 1 and first.entries[("losses", "loss")][1] == [0.5]
    assert h.read(1).count == 0  # still not computed: nothing, and no wait
    Late.done = True
    rest = h.read(1)
    assert rest.clocks["steps"].tolist() == [1, 2]
    assert rest.entries[("losses", "loss")][1] == [1.5, 2.5]


def test_entries_logged_now_and_then_keep_their_positions():
    h = History(flush_every=1000, lag=0)
    for i in range(6):
        logs = Logs().add_loss("loss", float(i))
        if i % 3 == 2:
            logs.add_metric("acc_test", float(i) / 10)
        h.commit(Elapsed(steps=i), logs)
    block = h.read(0, wait=True)
    rows, values = block.entries[("metrics", "acc_test")]
    assert rows.tolist() == [2, 5] and np.allclose(values, [0.2, 0.5])
    rows, values = block.entries[("losses", "loss")]  # rows of two structures: by group
    assert sorted(zip(rows.tolist(), values, strict=True)) == [(i, float(i)) for i in range(6)]
