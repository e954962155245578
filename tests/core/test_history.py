"""gyre.History: commits on the step path, the batched send / land pipeline, and reading
(collect, records, to_records, plot, latest, segments)."""

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


def test_collect_skips_records_missing_a_key():
    h = make_history()
    assert h.collect("loss") == [3.0, 2.0, 1.0]
    assert h.collect("steps", "acc") == ([0, 2], [0.25, 0.75])
    assert h.collect("losses.loss", "elapsed.steps") == ([3.0, 2.0, 1.0], [0, 1, 2])
    with pytest.raises(KeyError, match="no record of this history has the key 'acc_'") as err:
        h.collect("acc_")  # a typo is an error naming the logged names, closest first
    assert "closest first: ['acc'," in str(err.value) and "\n  fix:" in str(err.value)
    apart = gyre.history()
    apart.commit(Elapsed(steps=0), gyre.logs().add_metric("a", 1.0))
    apart.commit(Elapsed(steps=1), gyre.logs().add_metric("b", 2.0))
    assert apart.collect("a", "b") == ([], [])  # both logged, never together: no error


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_collect_bare_name_resolution_and_clock_fallback():
    h = gyre.history()
    h.commit(Elapsed(steps=5), gyre.logs().add_metric("loss", 9.0).add_loss("loss", 1.0))
    h.commit(Elapsed(steps=6), gyre.logs().add_metric("steps", 42))
    assert h.collect("loss") == [1.0]  # losses before metrics
    assert h.collect("metrics.loss") == [9.0]
    assert h.collect("steps") == [5, 42]  # a logged entry wins over the clock counter
    assert h.collect("elapsed.steps") == [5, 6]


def test_collect_errors():
    with pytest.raises(ValueError, match="at least one key"):
        gyre.history().collect()
    with pytest.raises(TypeError, match="strings"):
        gyre.history().collect(3)


def test_history_moves_values_to_host_in_batches(monkeypatch):
    import gyre.core._history as history_module

    calls = []
    real = history_module.start_fetch

    def counting(columns):
        calls.append(len(columns[0]))
        return real(columns)

    monkeypatch.setattr(history_module, "start_fetch", counting)
    h = gyre.history(flush_every=10, lag=2)
    for i in range(35):
        h.commit(Elapsed(steps=i), gyre.logs().add_metric("x", jnp.float32(i)))
    # every 10 commits past the lag: three batched transfers of 10 records, none per step
    assert calls == [10, 10, 10]
    assert len(h) == 35
    assert h.collect("x") == [float(i) for i in range(35)]
    assert calls == [10, 10, 10, 5]
    first = h[0].logs.metrics.x
    assert isinstance(first, (np.ndarray, np.generic)) and first.dtype == np.float32


def test_the_step_path_never_waits_for_a_transfer(monkeypatch):
    from gyre.core._host import ColumnFetch

    waited = []
    real_result = ColumnFetch.result

    def result(self):
        waited.append(self._lengths[0])
        return real_result(self)

    # values that never arrive: commits must go on without reading them
    monkeypatch.setattr(ColumnFetch, "ready", lambda self: False)
    monkeypatch.setattr(ColumnFetch, "result", result)
    h = gyre.history(flush_every=8, lag=0)
    for i in range(40):
        h.commit(Elapsed(steps=i), gyre.logs().add_loss("loss", jnp.float32(i)))
    assert waited == [] and len(h) == 40
    # a reader waits for everything, in order
    assert h.collect("steps", "loss") == (list(range(40)), [float(i) for i in range(40)])
    assert waited == [8, 8, 8, 8, 8]


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


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_to_records_and_csv(tmp_path):
    h = gyre.history()
    h.commit(Elapsed(steps=0), gyre.logs().add_loss("loss", 1.0).add_metric("loss", 2.0).add_metric("acc", 0.5))
    h.commit(Elapsed(steps=1), gyre.logs().add_output("pred", np.zeros(3)))
    rows = h.to_records()
    assert rows[0]["losses.loss"] == 1.0 and rows[0]["metrics.loss"] == 2.0 and rows[0]["acc"] == 0.5
    assert rows[1]["steps"] == 1 and rows[1]["pred"].shape == (3,)
    path = tmp_path / "h.csv"
    h.to_csv(str(path))
    header = path.read_text().splitlines()[0].split(",")
    assert header[:6] == ["steps", "samples", "epochs", "step_in_epoch", "time", "date"]
    assert set(header[6:]) == {"losses.loss", "metrics.loss", "acc"}


def test_plot_writes_png(tmp_path):
    h = make_history()
    h.commit(Elapsed(steps=3), gyre.logs().add_loss("loss_test", 1.5))
    path = tmp_path / "curves.png"
    fig = h.plot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["loss", "acc"]
    assert [line.get_label() for line in fig.axes[0].lines] == ["loss", "loss_test"]


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
    assert [seg.rows.tolist() for seg in h.segments()] == [[0], [1]]
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
    rows = sorted(int(r) for seg in h.segments() for r in seg.rows if seg.shape == (("losses", ("loss",)),))
    with_acc = sorted(int(r) for seg in h.segments() for r in seg.rows if len(seg.shape) == 2)
    assert with_acc == [0, 3, 6, 9]
    assert sorted(rows + with_acc) == list(range(11))
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
    from gyre.core._columns import numeric_dtype

    assert numeric_dtype(jnp.bfloat16) and numeric_dtype(jnp.float8_e5m2) and not numeric_dtype(jnp.complex64)


def test_to_csv_and_plot_create_a_missing_folder(tmp_path):
    h = make_history()
    h.to_csv(str(tmp_path / "a" / "h.csv"))
    h.plot(str(tmp_path / "b" / "c" / "h.png"), ["loss"])
    assert (tmp_path / "a" / "h.csv").exists() and (tmp_path / "b" / "c" / "h.png").exists()


def test_plot_of_a_name_instead_of_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    h = make_history()
    with pytest.raises(KeyError, match="no series is named 'los'") as info:
        h.plot("los")  # plot(path, keys): 'los' was taken as the file, and los.png written
    assert "Did you mean 'loss'?" in str(info.value) and "keys=['loss']" in str(info.value)
    with pytest.raises(KeyError, match="'loss' is the name of a series"):
        h.plot("loss")
    with pytest.raises(ValueError, match="has no extension") as info:
        h.plot("curves")
    assert "history.plot('curves.png')" in str(info.value)
    with pytest.raises(KeyError, match="no record of this history has the key 'los'"):
        h.plot("c.png", ["los"])
    assert list(tmp_path.iterdir()) == []


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
