"""gyre.trainer._run: a run's curves.png, read at a glance (the demo's plot)."""

import matplotlib

matplotlib.use("Agg")

import gyre
from gyre.trainer import _run as _curves


def test_each_metric_is_one_panel_with_one_name_per_series():
    names = ["loss", "acc", "grad_norm", "train/loss_epoch", "train/acc_step", "train/loss_step", "train/time",
             "val/loss", "val/acc", "test/acc", "val/time", "lr", "epoch"]
    assert _curves.series_groups(names) == [
        ("loss", [("loss", "train, per step"), ("train/loss_epoch", "train, epoch mean"), ("val/loss", "validation")]),
        ("acc", [("acc", "train, per step"), ("val/acc", "validation"), ("test/acc", "test")]),
        ("grad_norm", [("grad_norm", "train, per step")]), ("lr", [("lr", "train, per step")]),
    ]  # train/<m>_step is a window mean of the steps already drawn: left out
    assert _curves.series_groups(["train/acc_step"]) == [("acc", [("train/acc_step", "train, window mean")])]


def digits_like_history():
    """Two epochs of 4 steps: a per-step loss and accuracy, the epochs' means, validations."""
    h = gyre.history()
    for step in range(8):
        epoch, position = divmod(step, 4)
        logs = gyre.logs().add_loss("loss", 2.0 / (step + 1)).add_metric("acc", 0.5 + 0.05 * step)
        if position == 3:
            logs.add_loss("train/loss_epoch", 1.0 / (epoch + 1)).add_metric("val/acc", [0.9, 0.88][epoch])
            logs.add_loss("val/loss", 0.5 / (epoch + 1)).add_metric("train/acc_step", 0.6)
        h.commit(gyre.Elapsed(steps=step, epochs=epoch, step_in_epoch=position), logs)
    return h


def test_the_plot_has_epochs_a_log_loss_a_zoomed_accuracy_the_best_checkpoint_and_the_runs_name(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    figures, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k)))
    h = digits_like_history()
    _curves.plot_curves(h, tmp_path / "curves.png", title="20240501-120000", monitor="val/acc", mode="max")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = figures
    loss, acc = fig.axes
    assert fig._suptitle.get_text() == "20240501-120000"
    assert [loss.get_xlabel(), acc.get_xlabel()] == ["epoch", "epoch"]
    assert loss.get_yscale() == "log" and acc.get_yscale() == "linear"
    labels = [t.get_text() for t in acc.get_legend().get_texts()]
    assert len(labels) == len(set(labels))  # one name per series
    assert labels == ["train, per step", "validation", "best checkpoint (val/acc, epoch 1)"]  # no acc_step twice
    bottom, top = acc.get_ylim()
    assert bottom > 0.5 and top < 1.0  # zoomed on the values past the first epoch, not 0..1
    assert _curves.best_step(h, "val/acc", "max") == 4  # the first epoch's end: the checkpoint numbered 4
    assert max(x for line in acc.get_lines() for x in line.get_xdata()) == 2.0  # the last step ends epoch 2


def test_the_best_checkpoint_marker_skips_a_nan_as_the_checkpoint_does():
    h = gyre.history()
    for step, acc in ((3, float("nan")), (7, 0.8), (11, 0.8)):
        h.commit(gyre.Elapsed(steps=step), gyre.logs().add_metric("val/acc", acc))
    assert _curves.best_step(h, "val/acc", "max") == 8  # not the NaN; of equals, the earlier
    assert _curves.best_step(h, "val/acc", "min") == 8
    nan = gyre.history()
    nan.commit(gyre.Elapsed(steps=3), gyre.logs().add_metric("val/acc", float("nan")))
    assert _curves.best_step(nan, "val/acc", "max") is None


def test_a_monitor_that_no_validation_logged_marks_no_best_and_still_draws(tmp_path):
    # a run whose epochs end before its first validation (train_epochs < check_val_every_n_epoch,
    # or a SIGTERM in epoch 1) logged no val/acc: gyre fit drew no curves.png and exited with 2
    h = gyre.history()
    for step in range(4):
        h.commit(gyre.Elapsed(steps=step, step_in_epoch=step), gyre.logs().add_loss("loss", 1.0 / (step + 1)))
    assert _curves.best_step(h, "val/acc", "max") is None
    _curves.plot_curves(h, tmp_path / "curves.png", monitor="val/acc", mode="max")
    assert (tmp_path / "curves.png").is_file()
