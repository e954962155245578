import io
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.callbacks import _wandb_logger


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
    assert last.endswith("loss: 0.5208 - acc: 0.5000")  # running means over the epoch, as Keras


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


# the bar's own test: its step logs and trains nothing, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
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


# the bar's own test: its step logs and trains nothing, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_tqdm_bar():
    out = io.StringIO()
    bar = gyre.tqdm_bar(total=5, file=out, interval=0)
    gyre.train_loop(None, range(5), {gyre.on_train_step: metric_step}, callbacks=[bar])
    text = out.getvalue()
    assert "5/5" in text and "loss=0.457" in text  # the mean of 1, 1/2, ... 1/5


def test_bar_values_mode_is_checked():
    with pytest.raises(ValueError, match="values='mean'"):
        gyre.keras_bar(values="average")
    with pytest.raises(ValueError, match="must be 'mean' or 'last'"):
        gyre.tqdm_bar(values=None)


def test_fused_bar_means_count_every_step():
    import jax

    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", batch), state

    out = io.StringIO()
    data = [np.float32(i) for i in range(8)]
    gyre.loop(0.0, data, {gyre.every(1): [step, gyre.keras_bar(total=8, file=out, interval=3600)]},
              steps_per_call=4)
    assert out.getvalue().splitlines()[-1].endswith("loss: 3.5000")  # mean of 0..7, not of 3 and 7


@pytest.mark.parametrize("total", [0, -5, 2.5, True])
def test_bad_total(total):
    with pytest.raises(ValueError, match="total"):
        gyre.keras_bar(total=total)
    with pytest.raises(ValueError, match="total"):
        gyre.tqdm_bar(total=total)


def test_non_tty_bar_final_line_shows_evaluation_logged_between_redraws():
    out = io.StringIO()
    evaluation = lambda elapsed: gyre.logs().add_metric("acc_test", 0.7) if elapsed.steps == 5 else None  # noqa: E731
    gyre.loop(None, range(40), {gyre.every(1): [metric_step, evaluation, gyre.keras_bar(total=40, file=out, interval=3600)]})
    assert out.getvalue().splitlines()[-1].endswith("acc_test: 0.7000")


# -- the end of a loop, and a bar listed before the step -----------------------------------


def test_keras_bar_without_total_ends_its_line_on_loop_end():
    out = FakeTTY()
    bar = gyre.keras_bar(file=out, interval=0)
    gyre.loop(None, range(3), {gyre.every(1): [metric_step, bar]})  # calls bar.on_loop_end()
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.split("\r")[-1].startswith("3 steps - ")
    assert text.rstrip().endswith("loss: 0.6111 - acc: 0.5000")
    bar.on_train_end()  # a named loop calls both: the second does nothing
    bar.on_loop_end()
    assert out.getvalue() == text


def test_keras_bar_on_loop_end_after_data_ran_out():
    out = io.StringIO()
    bar = gyre.keras_bar(total=10, file=out, interval=3600)
    with pytest.warns(gyre.LoopWarning, match="the data ended after 4 steps"):
        gyre.loop(None, range(4), {gyre.every(1): [metric_step, bar]}, stop=10)
    assert out.getvalue().splitlines()[-1].startswith(" 4/10 [===========>   ")
    assert out.getvalue().endswith("loss: 0.5208 - acc: 0.5000\n")


def test_keras_bar_is_reusable_after_its_line_ended():
    out = io.StringIO()
    bar = gyre.keras_bar(file=out, interval=3600)
    _, _, elapsed = gyre.loop(None, range(2), {gyre.every(1): [metric_step, bar]})
    gyre.loop(None, range(2), {gyre.every(1): [metric_step, bar]}, elapsed=elapsed)
    lines = out.getvalue().splitlines()
    assert [line.split(" - ")[0] for line in lines] == ["1 steps", "2 steps", "3 steps", "4 steps"]


@pytest.mark.parametrize("interval", [0, 3600])
def test_keras_bar_listed_before_the_step_shows_its_values(interval):
    out = io.StringIO()
    bar = gyre.keras_bar(total=4, file=out, interval=interval)
    gyre.loop(None, range(4), {gyre.every(1): [bar, metric_step]})
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("4/4 [==============================] - ")
    assert lines[-1].endswith("loss: 0.5208 - acc: 0.5000")
    if interval == 0:  # in between, each line shows the newest finished step
        assert lines[0].startswith("1/4") and "loss" not in lines[0]
        assert lines[1].endswith("loss: 1.0000 - acc: 0.5000")


def test_keras_bar_between_two_callbacks_of_a_step_shows_both():
    out = io.StringIO()
    bar = gyre.keras_bar(file=out, interval=0)
    late = lambda elapsed: gyre.logs().add_metric("late", float(elapsed.steps))  # noqa: E731
    gyre.loop(None, range(3), {gyre.every(1): [metric_step, bar], gyre.every(steps=1): [late]})
    lines = out.getvalue().splitlines()
    # while the run goes on: every entry of the steps committed so far
    assert lines[1].endswith("loss: 1.0000 - acc: 0.5000 - late: 0.0000")
    assert lines[-1].endswith("loss: 0.6111 - acc: 0.5000 - late: 1.0000")


def test_tqdm_bar_listed_before_the_step_and_on_loop_end():
    out = io.StringIO()
    bar = gyre.tqdm_bar(total=3, file=out, interval=0)
    gyre.loop(None, range(3), {gyre.every(1): [bar, metric_step]})
    bar.on_loop_end()
    bar.on_train_end()  # idempotent
    text = out.getvalue()
    assert "3/3" in text and "loss=0.611" in text
    assert bar._bar is None  # closed


# -- arguments are checked when the bar is made --------------------------------------------


@pytest.mark.parametrize("make", [gyre.keras_bar, gyre.tqdm_bar])
@pytest.mark.parametrize("total", [np.int64(100), np.int32(100), np.array(100), jnp.array(100), jnp.int32(100)])
def test_numpy_and_jax_integers_are_totals(make, total):
    bar = make(total=total, file=io.StringIO())
    assert bar.total == 100 and type(bar.total) is int


def test_numpy_total_fills_the_bar():
    out = io.StringIO()
    gyre.loop(None, range(3), {gyre.every(1): [metric_step, gyre.keras_bar(total=np.int64(3), file=out, width=np.int8(10))]})
    assert out.getvalue().splitlines()[-1].startswith("3/3 [==========] - ")


def test_bad_total_message_does_not_contradict_itself():
    with pytest.raises(ValueError) as info:
        gyre.keras_bar(total=np.float64(2.5))
    assert str(info.value).splitlines() == [
        "a progress bar's total must be a number of steps >= 1 or None",
        "  expected: total=1000 (the loop's stop), or None for a bar without an end",
        "  received: float64 np.float64(2.5)",
        "  fix: pass the number of steps the loop will run",
    ]


@pytest.mark.parametrize("width", ["wide", 0, 2.5, None])
def test_keras_bar_bad_width(width):
    with pytest.raises(ValueError) as info:
        gyre.keras_bar(width=width)
    assert str(info.value).startswith("keras_bar's width must be a number of characters >= 1")
    assert "fix: pass width as an int, e.g. width=30" in str(info.value)


@pytest.mark.parametrize("path", ["out.txt", pathlib.Path("out.txt"), b"out.txt"])
@pytest.mark.parametrize("name", ["keras_bar", "tqdm_bar"])
def test_a_path_as_file_says_to_open_it(name, path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make = getattr(gyre, name)
    with pytest.raises(TypeError) as info:
        make(file=path)
    lines = str(info.value).splitlines()
    assert lines[0] == f"{name}'s file must be an open text file, not a path"
    assert lines[-1] == f"  fix: open the file yourself and close it after the loop: f = open('out.txt', 'w'); {name}(..., file=f)"
    assert not any(tmp_path.iterdir())  # nothing was created


@pytest.mark.parametrize("make", [gyre.keras_bar, gyre.tqdm_bar])
def test_file_without_write(make):
    with pytest.raises(TypeError, match="file must be an open text file or None"):
        make(file=3)


@pytest.mark.parametrize("interval", [-1, "fast", float("nan"), float("inf"), True])
def test_bad_interval(interval):
    with pytest.raises(ValueError, match=r"keras_bar's interval must be a number of seconds >= 0 or None"):
        gyre.keras_bar(interval=interval)
    with pytest.raises(ValueError, match=r"tqdm_bar's interval must be a number of seconds >= 0\n"):
        gyre.tqdm_bar(interval=interval)


def test_tqdm_bar_unknown_option_suggests_the_closest():
    with pytest.raises(TypeError) as info:
        gyre.tqdm_bar(dsec="train")
    assert str(info.value).startswith("tqdm_bar got 'dsec', which tqdm does not take")
    assert str(info.value).endswith("fix: check the name. Did you mean 'desc'?")


@pytest.mark.parametrize("name", ["initial", "iterable"])
def test_tqdm_bar_options_it_sets_itself(name):
    with pytest.raises(TypeError, match=f"tqdm_bar sets tqdm's '{name}' itself"):
        gyre.tqdm_bar(**{name: 3})


# -- multi-process runs ------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda out: gyre.keras_bar(total=3, file=out),
                                  lambda out: gyre.tqdm_bar(total=3, file=out)])
def test_bars_draw_only_on_process_zero(monkeypatch, make):
    out = io.StringIO()
    bar = make(out)
    monkeypatch.setattr(_wandb_logger, "is_main_process", lambda: False)
    metric = lambda: gyre.logs().add_metric("m", 1.0)  # noqa: E731
    gyre.loop(None, range(3), {gyre.every(1): [metric, bar]}, on_end=bar.on_train_end)
    assert out.getvalue() == ""
    monkeypatch.setattr(_wandb_logger, "is_main_process", lambda: True)
    out = io.StringIO()
    bar = make(out)
    gyre.loop(None, range(3), {gyre.every(1): [metric, bar]}, on_end=bar.on_train_end)
    assert "3/3" in out.getvalue()


@pytest.mark.parametrize("make", [gyre.keras_bar, gyre.tqdm_bar])
def test_bars_show_bfloat16_and_float8_values(make):
    out = io.StringIO()

    def step():
        return gyre.logs().add_loss("loss", jnp.bfloat16(0.5)).add_metric("f8", jnp.asarray(0.25, jnp.float8_e4m3fn))

    gyre.loop(None, range(2), {gyre.every(1): [step, make(total=2, file=out)]})
    text = out.getvalue()
    assert "loss" in text and "f8" in text and ("0.5000" in text or "0.5" in text)
