"""gyre.callbacks._bars: what progress bars show (running means over the epoch, or last
values), read from the loop's history without ever waiting for the device."""

import numpy as np
import pytest

import gyre
from gyre.callbacks._bars import BarValues, RunningValues, check_mode
from gyre.core._history import Block as Columns


class NotReady:
    """A stand-in for a device value the device has not finished."""

    def is_ready(self):
        return False


def test_bar_values_never_wait_for_unfinished_values():
    shown = BarValues("last")
    shown.see(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 2.0), None)
    shown.see(gyre.Elapsed(steps=1), gyre.logs().add_loss("loss", NotReady()), None)
    assert shown.read() == {"loss": 2.0}  # the newest *finished* step
    assert shown.read() == {"loss": 2.0}  # still waiting on the unfinished one, not blocking


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_bar_values_name_clashes_are_qualified_and_outputs_left_out():
    shown = BarValues("mean")
    shown.see(gyre.Elapsed(), gyre.logs().add_loss("x", 1.0).add_metric("x", 2.0).add_output("y", 3.0), None)
    assert shown.read() == {"losses.x": 1.0, "metrics.x": 2.0}


def test_running_means_reset_each_epoch_and_keep_occasional_entries():
    running = RunningValues("mean")
    epochs = np.array([0, 0, 0, 1, 1])
    loss = (np.arange(5), np.array([1.0, 2.0, 3.0, 10.0, 20.0]))
    acc_test = (np.array([2]), np.array([0.8]))  # an evaluation at the end of epoch 0
    kept = (np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    entries = {("losses", "loss"): (loss[0][:3], loss[1][:3]), ("metrics", "acc_test"): acc_test,
               ("stateful_metrics", "auc"): (kept[0][:3], kept[1][:3])}
    running.absorb(Columns(3, {"epochs": epochs[:3]}, entries))
    assert running.shown() == {"loss": 2.0, "acc_test": 0.8, "auc": 3.0}
    later = {("losses", "loss"): (np.arange(2), loss[1][3:]), ("stateful_metrics", "auc"): (np.arange(2), kept[1][3:])}
    running.absorb(Columns(2, {"epochs": epochs[3:]}, later))
    assert running.shown() == {"loss": 15.0, "acc_test": 0.8, "auc": 5.0}  # epoch 1 alone
    last = RunningValues("last")
    last.absorb(Columns(3, {"epochs": epochs[:3]}, entries))
    assert last.shown() == {"loss": 3.0, "acc_test": 0.8, "auc": 3.0}


def test_check_mode_accepts_mean_and_last_only():
    assert check_mode("mean", "keras_bar") == "mean" and check_mode("last", "tqdm_bar") == "last"
    with pytest.raises(ValueError) as err:
        check_mode("average", "keras_bar")
    assert str(err.value).splitlines()[0] == "keras_bar(values=...) must be 'mean' or 'last'"
    assert "fix: keras_bar(values='mean')" in str(err.value)


def test_running_means_over_the_whole_run_without_epochs_and_non_numbers_left_out():
    running = RunningValues("mean")
    zeros = np.zeros(4, np.int64)
    running.absorb(Columns(4, {"epochs": zeros}, {
        ("losses", "loss"): (np.arange(4), np.array([1.0, 2.0, 3.0, 6.0])),
        ("metrics", "name"): (np.arange(2), ["a", "b"]),  # not numbers: never shown
        ("metrics", "vector"): (np.arange(1), [np.zeros(3)]),
    }))
    assert running.shown() == {"loss": 3.0}
    running.absorb(Columns(0, {"epochs": np.zeros(0)}, {}))  # nothing new: nothing changes
    assert running.shown() == {"loss": 3.0}


def test_bar_values_by_hand_keep_their_own_history_and_reset_forgets_it():
    shown = BarValues("mean")
    for step, loss in enumerate([1.0, 2.0, 6.0]):
        shown.see(gyre.Elapsed(steps=step), gyre.logs().add_loss("loss", loss), None)
    assert shown.read(wait=True) == {"loss": 3.0}
    shown.reset()
    assert shown.read() == {}
    shown.see(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 5.0), None)
    assert shown.read(wait=True) == {"loss": 5.0}


def test_bar_values_in_a_loop_follow_the_loops_history_from_where_they_joined():
    shown = BarValues("last")

    def watch(elapsed, logs, loop):
        shown.see(elapsed, logs, loop)

    step = lambda elapsed: gyre.logs().add_metric("m", float(elapsed.steps))  # noqa: E731
    _, history, elapsed = gyre.loop(None, range(3), {gyre.every(1): [step, watch]})
    assert shown.read(wait=True) == {"m": 2.0}
    # a new loop with a new history: the values follow it
    gyre.loop(None, range(2), {gyre.every(1): [lambda: gyre.logs().add_metric("n", 7.0), watch]})
    assert shown.read(wait=True) == {"m": 2.0, "n": 7.0}


def test_the_last_value_is_the_newest_records_when_rows_come_grouped_by_structure():
    # A history hands out an entry's rows grouped by record structure: "loss" of the steps
    # that also logged "acc_test" comes after the others. The last value is the newest row's.
    running = RunningValues("last")
    rows_alone, rows_with_test = np.array([0, 1, 3, 4, 6]), np.array([2, 5])
    loss = (np.concatenate([rows_alone, rows_with_test]), np.array([0.0, 1.0, 3.0, 4.0, 6.0, 2.0, 5.0]))
    running.absorb(Columns(7, {"epochs": np.zeros(7)}, {("losses", "loss"): loss}))
    assert running.shown() == {"loss": 6.0}


def test_a_bar_showing_last_values_shows_the_last_step():
    import io

    out = io.StringIO()

    def step(elapsed):
        logs = gyre.logs().add_loss("loss", float(elapsed.steps))
        if elapsed.steps in (2, 5):
            logs.add_metric("acc_test", 0.5)
        return logs

    bar = gyre.keras_bar(total=7, file=out, interval=3600, values="last")
    gyre.loop(None, range(7), {gyre.every(1): [step, bar]})
    assert out.getvalue().splitlines()[-1].endswith("loss: 6.0000 - acc_test: 0.5000")
