import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.core._clock import Elapsed


def test_collections_and_attribute_access():
    logs = gyre.logs()
    logs.add_loss("loss", 1.0).add_metric("acc", 0.5).add_stateful_metric("mean", 2.0)
    logs.add_output("pred", 3).add_entry("custom", "thing", 4)
    logs.add_losses({"aux": 0.1}).add_metrics({"f1": 0.2}).add_stateful_metrics({"s": 5}).add_outputs({"y": 6})
    assert logs.losses.loss == 1.0 and logs.losses.aux == 0.1
    assert logs.metrics.acc == 0.5 and logs.metrics.f1 == 0.2
    assert logs.stateful_metrics.mean == 2.0 and logs.outputs.y == 6
    assert logs.custom.thing == 4
    with pytest.raises(AttributeError, match="no collection"):
        logs.nothing  # noqa: B018
    with pytest.raises(AttributeError, match="no entry"):
        logs.metrics.nothing  # noqa: B018


def test_merge_and_write_only_updates():
    logs = gyre.logs().add_metric("a", 1)
    logs.updates = gyre.logs().add_metric("a", 2).add_loss("l", 3)
    logs.updates = None
    assert dict(logs.metrics) == {"a": 2} and dict(logs.losses) == {"l": 3}
    with pytest.raises(AttributeError, match="write-only"):
        logs.updates  # noqa: B018
    with pytest.raises(TypeError, match="merged"):
        logs.merge(5)
    with pytest.raises(TypeError, match="not a mapping"):
        logs.merge({"metrics": 5})


def test_logs_is_a_pytree_that_leaves_jit():
    @jax.jit
    def f(x):
        return gyre.logs().add_metric("m", x * 2).add_loss("l", x)

    out = f(jnp.float32(3))
    assert isinstance(out, gyre.Logs)
    assert float(out.metrics.m) == 6.0 and float(out.losses.l) == 3.0
    doubled = jax.tree_util.tree_map(lambda v: v * 2, out)
    assert isinstance(doubled, gyre.Logs) and float(doubled.metrics.m) == 12.0


def test_lookup_resolution_order():
    logs = gyre.logs().add_entry("zz", "v", 1).add_entry("aa", "v", 2).add_metric("m", 3)
    assert logs.lookup("v") == (True, 2)  # custom collections by name
    logs.add_stateful_metric("v", 4)
    assert logs.lookup("v") == (True, 4)  # standard collections first
    logs.add_loss("v", 5)
    assert logs.lookup("v") == (True, 5)
    assert logs.lookup("zz.v") == (True, 1)
    assert logs.lookup("missing") == (False, None)


def test_add_entry_needs_string_names():
    with pytest.raises(TypeError, match="strings"):
        gyre.logs().add_entry("metrics", 3, 1.0)
    with pytest.raises(TypeError, match="mapping"):
        gyre.logs().add_metrics([1, 2])


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


def test_fetched_columns_keep_unstackable_columns_as_lists():
    from gyre.core._host import start_fetch

    mixed = [jnp.zeros((i % 2 + 1,)) for i in range(8)]  # two shapes: not stackable
    same = [jnp.float32(i) for i in range(9)]
    host_mixed, host_same = start_fetch([mixed, same]).result()
    assert [v.shape for v in host_mixed] == [(1,), (2,)] * 4
    assert isinstance(host_same, np.ndarray) and host_same.tolist() == list(range(9))
