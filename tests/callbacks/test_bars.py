import io

import pytest

import gyre
from gyre.callbacks.lagged import LaggedValues


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def metric_step(elapsed):
    return gyre.logs().add_loss("loss", 1.0 / (elapsed.steps + 1)).add_metric("acc", 0.5)


def test_keras_bar_final_line_format():
    out = io.StringIO()
    gyre.loop(None, range(4), {gyre.every(1): [metric_step, gyre.keras_bar(total=4, file=out)]})
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("4/4 [==============================] - 0s - ")
    assert last.endswith("loss: 0.2500 - acc: 0.5000")


def test_keras_bar_on_a_terminal_redraws_in_place_and_ends_with_newline():
    out = FakeTTY()
    gyre.loop(None, range(3), {gyre.every(1): [metric_step, gyre.keras_bar(total=3, file=out, interval=0.0)]})
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "ETA:" in text  # intermediate redraws show an ETA


def test_keras_bar_rate_limits_redraws():
    out = io.StringIO()
    gyre.loop(None, range(50), {gyre.every(1): [metric_step, gyre.keras_bar(total=50, file=out, interval=3600)]})
    assert len(out.getvalue().splitlines()) == 2  # the first step and the last


def test_keras_bar_without_total_and_on_train_end():
    out = io.StringIO()
    bar = gyre.keras_bar(file=out, interval=3600)
    gyre.train_loop(None, range(3), {gyre.on_train_step: metric_step}, callbacks=[bar])
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("1 steps") and lines[-1].startswith("3 steps")


def test_keras_bar_keeps_values_logged_now_and_then():
    out = io.StringIO()
    occasional = lambda elapsed: gyre.logs().add_metric("acc_test", 0.9) if elapsed.steps == 1 else None  # noqa: E731
    gyre.loop(None, range(4), {gyre.every(1): [metric_step, occasional, gyre.keras_bar(total=4, file=out, interval=0)]})
    assert out.getvalue().splitlines()[-1].endswith("acc_test: 0.9000")


def test_tqdm_bar():
    out = io.StringIO()
    bar = gyre.tqdm_bar(total=5, file=out, interval=0)
    gyre.train_loop(None, range(5), {gyre.on_train_step: metric_step}, callbacks=[bar])
    text = out.getvalue()
    assert "5/5" in text and "loss=0.2" in text


class NotReady:
    """A stand-in for a device value the device has not finished."""

    def is_ready(self):
        return False


def test_lagged_values_never_wait_for_unfinished_values():
    lagged = LaggedValues()
    lagged.push(gyre.logs().add_loss("loss", 2.0))
    lagged.push(gyre.logs().add_loss("loss", NotReady()))
    assert lagged.read() == {"loss": 2.0}  # the newest *finished* step
    assert lagged.read() == {"loss": 2.0}  # still waiting on the unfinished one, not blocking


def test_lagged_values_name_clashes_are_qualified():
    lagged = LaggedValues()
    lagged.push(gyre.logs().add_loss("x", 1.0).add_metric("x", 2.0).add_output("y", 3.0))
    assert lagged.read() == {"losses.x": 1.0, "metrics.x": 2.0}


@pytest.mark.parametrize("total", [0, -5, 2.5, True])
def test_bad_total(total):
    with pytest.raises(ValueError, match="total"):
        gyre.keras_bar(total=total)
    with pytest.raises(ValueError, match="total"):
        gyre.tqdm_bar(total=total)


def test_lagged_values_keep_occasional_entries_between_reads():
    lagged = LaggedValues()
    lagged.push(gyre.logs().add_loss("loss", 1.0))
    lagged.push(gyre.logs().add_loss("loss", 0.9).add_metric("acc_test", 0.8))  # epoch end
    for i in range(20):  # many ordinary steps before the next redraw
        lagged.push(gyre.logs().add_loss("loss", 0.5 - i / 100))
    assert lagged.read() == {"loss": 0.31, "acc_test": 0.8}


def test_non_tty_bar_final_line_shows_evaluation_logged_between_redraws():
    out = io.StringIO()
    evaluation = lambda elapsed: gyre.logs().add_metric("acc_test", 0.7) if elapsed.steps == 5 else None  # noqa: E731
    gyre.loop(None, range(40), {gyre.every(1): [metric_step, evaluation, gyre.keras_bar(total=40, file=out, interval=3600)]})
    assert out.getvalue().splitlines()[-1].endswith("acc_test: 0.7000")
