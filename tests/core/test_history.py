"""gyre.History: commits on the step path, blocks moved to the host, and reading (read,
records, latest, segments; collect, to_records, to_csv and plot: test_history_views.py)."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.core._clock import Elapsed
from gyre.core._history import History
from gyre.core._logs import Logs


def make_history():
    h = gyre.history()
    h.commit(Elapsed(steps=0), gyre.logs().add_loss("loss", jnp.float32(3.0)).add_metric("acc", jnp.float32(0.25)))
    h.commit(Elapsed(steps=1), gyre.logs().add_loss("loss", jnp.float32(2.0)))
    h.commit(Elapsed(steps=2), gyre.logs().add_loss("loss", jnp.float32(1.0)).add_metric("acc", jnp.float32(0.75)))
    return h


def test_per_step_commits_move_to_the_host_in_blocks(monkeypatch):
    import gyre.core._history as history_module

    calls = []
    real = history_module.stacked

    def counting(values):
        calls.append(len(values))
        return real(values)

    monkeypatch.setattr(history_module, "stacked", counting)
    h = gyre.history(flush_every=10, lag=2)
    for i in range(35):
        h.commit(Elapsed(steps=i), gyre.logs().add_metric("x", jnp.float32(i)))
    # every 10 commits past the lag: three blocks of 10 records stacked on the device, none per step
    assert calls == [10, 10, 10]
    assert len(h) == 35
    assert h.collect("x") == [float(i) for i in range(35)]
    assert calls == [10, 10, 10]  # the last 5: fewer than 8 values, read as they are
    first = h[0].logs.metrics.x
    assert isinstance(first, (np.ndarray, np.generic)) and first.dtype == np.float32


def test_the_step_path_never_waits_for_a_transfer(monkeypatch):
    import gyre.core._history as history_module

    fetched = []
    real_fetch = history_module.fetch
    # values that never arrive: commits must go on without reading them
    monkeypatch.setattr(history_module, "is_ready", lambda tree: False)
    monkeypatch.setattr(history_module, "fetch", lambda tree: fetched.append(len(tree)) or real_fetch(tree))
    h = gyre.history(flush_every=8, lag=0)
    for i in range(40):
        h.commit(Elapsed(steps=i), gyre.logs().add_loss("loss", jnp.float32(i)))
    assert fetched == [] and len(h) == 40 and h.read(0).count == 0
    # a reader that waits gets everything, in order, in one transfer of the five blocks
    assert h.collect("steps", "loss") == (list(range(40)), [float(i) for i in range(40)])
    assert fetched == [5]


def test_sent_values_let_go_of_the_per_step_arrays():
    import weakref

    h = gyre.history(flush_every=16, lag=0)
    refs = []
    for i in range(16):
        loss = jnp.float32(i) + 0  # a fresh device array no one else holds
        refs.append(weakref.ref(loss))
        h.commit(Elapsed(steps=i), gyre.logs().add_loss("loss", loss))
        del loss
    # sent as one stacked array: the 16 per-step arrays are no longer kept alive
    assert [r() for r in refs] == [None] * 16
    assert h.collect("loss") == [float(i) for i in range(16)]


def test_history_index_errors():
    h = make_history()
    with pytest.raises(IndexError, match="3 records"):
        h[3]
    with pytest.raises(TypeError, match="integers or slices"):
        h["loss"]
    with pytest.raises(TypeError, match="gyre.Elapsed"):
        h.commit(3, gyre.logs())


def test_history_retains_no_python_object_per_record():
    import gc

    logs = [gyre.logs().add_loss("loss", jnp.float32(i)).add_metric("acc", jnp.float32(i)) for i in range(8)]
    elapsed = [Elapsed(steps=i, samples=8 * i) for i in range(2048)]
    warm = gyre.history(flush_every=64, lag=0)  # compiles the stacking of 64 rows
    for i in range(64):
        warm.commit(elapsed[i], logs[i % 8])
    warm.collect("loss")
    h = gyre.history(flush_every=64, lag=0)
    gc.collect()
    before = len(gc.get_objects())
    for i, e in enumerate(elapsed):
        h.commit(e, logs[i % 8], batch_size=8)
    h.flush()
    gc.collect()
    # 2048 records kept as numpy columns: a few objects per block of 64, none per record
    assert len(gc.get_objects()) - before < 2048 // 4
    assert h.collect("samples")[-1] == 8 * 2047 and len(h) == 2048


def test_history_keeps_order_across_shapes_and_host_values():
    h = gyre.history(flush_every=8, lag=1)
    for i in range(20):
        logs = gyre.logs().add_loss("loss", jnp.float32(i))
        if i % 5 == 4:  # an occasional entry, a host value, and an array output
            logs.add_metric("acc", float(i)).add_output("y", jnp.full((2,), i, jnp.int32))
        h.commit(Elapsed(steps=i), logs)
    assert len(h) == 20
    assert h.collect("steps") == list(range(20))
    assert h.collect("loss") == [float(i) for i in range(20)]
    assert h.collect("steps", "acc") == ([4, 9, 14, 19], [4.0, 9.0, 14.0, 19.0])
    assert [y.tolist() for y in h.collect("y")] == [[i, i] for i in (4, 9, 14, 19)]


def test_commit_stacked_keeps_order_and_splits_rows_on_the_host():
    h = History(flush_every=2, lag=1)
    h.commit(Elapsed(steps=0), Logs().add_loss("loss", jnp.float32(0)))
    h.commit_stacked([Elapsed(steps=i) for i in (1, 2, 3)], Logs().add_loss("loss", jnp.arange(4.0)), start=1)
    h.commit(Elapsed(steps=4), Logs().add_loss("loss", jnp.float32(4)))
    h.commit_stacked([Elapsed(steps=5)], Logs().add_loss("loss", jnp.full(2, 5.0)), batch_sizes=[8])
    assert len(h) == 6
    assert h.collect("steps", "loss") == ([0, 1, 2, 3, 4, 5], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert h[5].batch_size == 8
    with pytest.raises(ValueError, match="no row for every step"):
        h.commit_stacked([Elapsed()] * 3, Logs().add_loss("loss", jnp.zeros(2)))


def test_commit_keeps_the_values_not_the_logs():
    h = History()
    logs = Logs().add_loss("loss", 1.0).add_metric("acc", 0.5)
    h.commit(Elapsed(), logs)
    logs.add_metric("late", 2.0)
    logs.metrics["acc"] = 0.0
    logs.losses.clear()
    assert h.names() == {"losses": ["loss"], "metrics": ["acc"]}
    assert h.collect("loss", "acc") == ([1.0], [0.5])


def test_owned_commits_mixed_with_stacked_ones_keep_their_rows_at_every_stage():
    # commit_owned sorts its records by structure only when the history is read or sent
    h = History(flush_every=3, lag=1)
    h.commit_owned(Elapsed(steps=0), Logs().add_loss("loss", jnp.float32(0)), 8)
    h.commit_owned(Elapsed(steps=1), Logs().add_loss("loss", jnp.float32(1)).add_metric("m", 1.0), 8)
    assert [(start, block.count) for start, block in h.segments()] == [(0, 2)]
    h.commit_owned(Elapsed(steps=2), Logs().add_loss("loss", jnp.float32(2)), 8)  # not sorted yet
    h.commit_stacked([Elapsed(steps=3), Elapsed(steps=4)], Logs().add_loss("loss", jnp.arange(2.0) + 3))
    h.commit_owned(Elapsed(steps=5), Logs().add_loss("loss", jnp.float32(5)), None)
    h.commit(Elapsed(steps=6), Logs().add_loss("loss", jnp.float32(6)))
    assert len(h) == 7
    assert h.batch_sizes() == [8, 8, 8, None, None, None, None]
    assert h.collect("steps", "loss") == (list(range(7)), [float(i) for i in range(7)])
    assert h.collect("m") == [1.0]


# -- reading while records sit in every stage of the pipeline ---------------------------------


def _spread_history():
    """Records on the host, in transit and still on the device, with two structures."""
    h = History(flush_every=4, lag=3)
    for i in range(11):
        logs = Logs().add_loss("loss", jnp.float32(i))
        if i % 3 == 0:
            logs.add_metric("acc", jnp.float32(i / 10))
        h.commit(Elapsed(steps=i), logs, batch_size=i + 1)
    return h


def test_segments_cover_every_record_once_wherever_it_is_without_waiting():
    h = _spread_history()
    rows = {k: sorted(start + int(r) for start, block in h.segments() for r in block.entries[k][0])
            for k in (("losses", "loss"), ("metrics", "acc"))}
    assert rows[("metrics", "acc")] == [0, 3, 6, 9]
    assert rows[("losses", "loss")] == list(range(11))
    assert h.batch_sizes() == [i + 1 for i in range(11)]
    assert len(h) == 11


def test_latest_has_the_newest_value_of_every_entry():
    h = _spread_history()
    latest = h.latest()
    assert float(latest.losses.loss) == 10.0
    assert float(latest.metrics.acc) == pytest.approx(0.9)


def test_names_records_and_extend():
    h = _spread_history()
    assert h.names() == {"losses": ["loss"], "metrics": ["acc"]}
    assert h[3]["metrics"]["acc"] == pytest.approx(0.3) and h[3]["elapsed"]["steps"] == 3
    assert [r.elapsed.steps for r in h[-2:]] == [9, 10]
    other = History()
    other.extend(h)
    assert other.collect("steps", "acc") == h.collect("steps", "acc")
    assert other.batch_sizes() == h.batch_sizes()


@pytest.mark.parametrize("kwargs", [{"flush_every": 0}, {"lag": -1}])
def test_bad_flush_settings_are_explained(kwargs):
    with pytest.raises(ValueError, match="flush_every >= 1 and lag >= 0") as err:
        History(**kwargs)
    assert "fix:" in str(err.value)


def test_bfloat16_and_float8_entries_are_numbers_in_columns_csv_and_plot(tmp_path):
    h = gyre.history(flush_every=8, lag=0)
    for i in range(10):  # a block stacked on the device (8 records), then one of host values
        h.commit(Elapsed(steps=i), gyre.logs().add_loss("loss", jnp.bfloat16(1.0 / (i + 1)))
                 .add_metric("f8", jnp.asarray(0.5, jnp.float8_e4m3fn)))
    assert h.collect("loss")[:2] == [1.0, 0.5] and type(h.collect("f8")[0]) is float
    path = tmp_path / "h.csv"
    h.to_csv(str(path))
    lines = path.read_text().splitlines()
    assert lines[0].endswith(",loss,f8") and lines[2].endswith(",0.5,0.5") and len(lines) == 11
    fig = h.plot(str(tmp_path / "curves.png"), ["loss", "f8"])
    assert [len(ax.lines[0].get_xdata()) for ax in fig.axes] == [10, 10]
    from gyre.core._host import numeric_dtype

    assert numeric_dtype(jnp.bfloat16) and numeric_dtype(jnp.float8_e5m2) and not numeric_dtype(jnp.complex64)


def test_a_name_logged_as_a_loss_and_a_metric_is_explained_and_both_are_plotted(tmp_path):
    h = gyre.history()
    with pytest.warns(gyre.LoopWarning, match="'x' is logged as losses.x and metrics.x") as caught:
        h.commit(Elapsed(steps=0), gyre.logs().add_loss("x", 1.0).add_metric("x", 2.0).add_metric("acc", 0.5))
    assert "metrics.x must be read by its qualified name" in str(caught[0].message)
    assert "fix" in str(caught[0].message)
    assert h.collect("x") == [1.0]  # a bare name reads the loss
    fig = h.plot(str(tmp_path / "c.png"))
    assert [[line.get_label() for line in ax.lines] for ax in fig.axes] == [["losses.x"], ["metrics.x"], ["acc"]]


def test_one_value_logged_as_a_loss_and_a_metric_on_purpose_is_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logs = gyre.logs().add_loss("x", 1.0, add_metric=True).add_losses(y=2.0, add_metrics=True)
    assert logs.metrics == {"x": 1.0, "y": 2.0}


# -- blocks committed by the engine, and the one read --------------------------------------------


@pytest.mark.parametrize("first, epoch_steps", [
    (Elapsed(steps=7, samples=30, epochs=1, step_in_epoch=2, time=1.5, date=9.0), 4),
    (Elapsed(steps=0), None),
    (Elapsed(steps=3, step_in_epoch=5), 4),  # already past the epoch's length: rolls at once
    (Elapsed(steps=3, step_in_epoch=0), 1),
])
def test_commit_block_clocks_are_those_elapsed_after_gives(first, epoch_steps):
    sizes = [8, 8, 5, 8, 8, 8, 3, 8, 8, 8]
    h = History()
    h.commit_block(first, sizes, Logs().add_loss("loss", jnp.arange(16.0)), epoch_steps=epoch_steps)
    expected = [first]
    for size in sizes[:-1]:
        expected.append(expected[-1]._after(size, first.time, first.date, epoch_steps))
    assert [r.elapsed for r in h] == expected
    assert h.batch_sizes() == sizes and h.collect("loss") == [float(i) for i in range(10)]


def test_commit_block_keeps_dtypes_and_reads_only_its_rows_of_a_longer_ring():
    h = History()
    h.commit(Elapsed(steps=0), Logs().add_loss("loss", jnp.float32(9)))
    ring = Logs().add_loss("loss", jnp.arange(256, dtype=jnp.bfloat16)).add_output("y", jnp.ones((256, 2), jnp.int8))
    h.commit_block(Elapsed(steps=1), [4, 4, 4], ring, epoch_steps=None)
    assert len(h) == 4 and h.collect("steps", "loss") == ([0, 1, 2, 3], [9.0, 0.0, 1.0, 2.0])
    assert h[2].logs.losses.loss.dtype == jnp.bfloat16 and h[3].logs.outputs.y.dtype == np.int8
    with pytest.raises(ValueError, match="no row for every step"):
        h.commit_block(Elapsed(), [1] * 300, ring, epoch_steps=None)
    with pytest.raises(TypeError, match="gyre.Elapsed"):
        h.commit_block(3, [1], ring, epoch_steps=None)


class _Late(float):
    """A logged number whose device computation finishes when the test says so."""

    done = False

    def is_ready(self):
        return type(self).done


def test_read_hands_out_the_computed_records_from_a_position_in_one_block():
    _Late.done = False
    h = History(flush_every=1000, lag=0)
    h.commit_stacked([Elapsed(steps=i) for i in range(3)], Logs().add_loss("loss", np.arange(3.0)))
    h.commit(Elapsed(steps=3), Logs().add_loss("loss", 3.0).add_metric("acc", 0.5))
    h.commit(Elapsed(steps=4), Logs().add_loss("loss", _Late(4.0)))
    h.commit(Elapsed(steps=5), Logs().add_loss("loss", 5.0))
    first = h.read(1)
    assert first.count == 3 and first.clocks["steps"].tolist() == [1, 2, 3]  # step 4 holds back 5
    assert first.entries[("metrics", "acc")][0].tolist() == [2] and first.sizes == [None] * 3
    assert h.read(4).count == 0 and len(h) == 6  # nothing waits
    _Late.done = True
    rest = h.read(4)
    assert rest.clocks["steps"].tolist() == [4, 5] and rest.entries[("losses", "loss")][1] == [4.0, 5.0]
    assert h.read(0, wait=True).count == 6 and h.read(6).count == 0


def test_a_read_that_is_not_fresh_leaves_the_per_step_commits_to_the_historys_own_blocks():
    h = History(flush_every=4, lag=0)
    for i in range(6):
        h.commit(Elapsed(steps=i), Logs().add_loss("loss", float(i)))
    assert h.read(0, fresh=False).count == 4  # the block of 4 the history made itself
    assert h.read(4, fresh=False).count == 0 and h.read(4).count == 2


def test_each_record_keeps_its_own_order_of_collections_and_entries():
    h = History(flush_every=1000, lag=0)
    h.commit(Elapsed(steps=0), Logs().add_metric("a", 1.0).add_output("y", 2.0))
    h.commit(Elapsed(steps=1), Logs().add_output("y", 3.0).add_metric("b", 4.0).add_metric("a", 5.0))
    h.commit(Elapsed(steps=2), Logs().add_metric("a", 6.0))
    orders = [[(c, n) for c, n, _ in r.logs.entries()] for r in h]
    assert orders == [[("metrics", "a"), ("outputs", "y")],
                      [("outputs", "y"), ("metrics", "b"), ("metrics", "a")], [("metrics", "a")]]
    assert [list(r.logs) for r in h.records(1, 3)] == [["outputs", "metrics"], ["metrics"]]
    assert list(h.to_records()[1]) == ["steps", "samples", "epochs", "step_in_epoch", "time", "date", "y", "b", "a"]
