"""The views and exports of a history (core/_history): collect, to_records, to_csv,
plot and their errors."""

import numpy as np
import pytest

import gyre
from gyre.core._clock import Elapsed
from tests.core.test_history import make_history


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


def test_plot_to_a_file_leaves_the_users_backend_and_pyplot_figures_alone(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    from gyre.trainer._run import plot_curves

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a backend of the user's, not the Agg the figures are saved with
    try:
        h = make_history()
        h.plot(str(tmp_path / "curves.png"))
        plot_curves(h, tmp_path / "run.png", title="run")
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == []
        assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"
        shown = h.plot()  # no file: a pyplot figure, to show
        assert plt.get_fignums() == [shown.number]
        plt.close(shown)
    finally:
        matplotlib.use(before)


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
