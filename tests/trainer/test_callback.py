"""The trainer's callback contract: hook order, every_n_epochs / every_n_minutes filtering,
binding, state, the registry entries, and every bad input."""

import inspect
import types

import pytest

import gyre
from gyre.config import CALLBACKS
from gyre.trainer._callback import (
    Callback,
    ConfusionMatrixCallback,
    DisableGC,
    EarlyStopping,
    GradientSpikeMonitor,
    JAXProfiler,
    LearningRateMonitor,
    overrides_training_step,
)

from .fakes import FakeTrainer, drive


class Recorder(Callback):
    """Records every hook it receives, filtered ones under their filtered names."""

    def __init__(self, calls, tag="", **kwargs):
        super().__init__(**kwargs)
        self.calls, self.tag = calls, tag

    def _log(self, *item):
        self.calls.append((self.tag + item[0], *item[1:]) if self.tag else item)

    def on_training_start(self):
        self._log("training_start")

    def on_training_end(self):
        self._log("training_end")

    def on_filtered_training_epoch_start(self, epoch_idx):
        self._log("train_start", epoch_idx)

    def on_filtered_training_epoch_end(self, train_metrics, epoch_idx):
        self._log("train_end", epoch_idx, train_metrics["train/loss_epoch"])

    def on_filtered_validation_epoch_start(self, epoch_idx):
        self._log("val_start", epoch_idx)

    def on_filtered_validation_epoch_end(self, eval_metrics, epoch_idx):
        self._log("val_end", epoch_idx, eval_metrics["val/loss"])

    def on_test_epoch_start(self, epoch_idx):
        self._log("test_start", epoch_idx)

    def on_test_epoch_end(self, test_metrics, epoch_idx):
        self._log("test_end", epoch_idx, test_metrics["test/loss"])

    def on_training_step(self, step_metrics, epoch_idx, global_step):
        self._log("step", epoch_idx, global_step, step_metrics["loss"])

    def finalize(self, status):
        super().finalize(status)
        self._log("finalize", status)


def _run(callbacks, tmp_path, epochs=4):
    drive(callbacks, FakeTrainer(tmp_path), epochs=epochs, steps=2,
          train=lambda e: {"train/loss_epoch": 10 * e}, val=lambda e: {"val/loss": 100 * e},
          test=lambda e: {"test/loss": -e}, step_metrics=lambda e, s: {"loss": s})


def test_hook_order_with_every_2_epochs(tmp_path):
    calls = []
    _run([Recorder(calls, every_n_epochs=2)], tmp_path)
    assert calls == [
        ("training_start",),
        ("step", 1, 1, 1), ("step", 1, 2, 2),
        ("train_start", 2), ("step", 2, 3, 3), ("step", 2, 4, 4), ("train_end", 2, 20),
        ("val_start", 2), ("val_end", 2, 200),
        ("step", 3, 5, 5), ("step", 3, 6, 6),
        ("train_start", 4), ("step", 4, 7, 7), ("step", 4, 8, 8), ("train_end", 4, 40),
        ("val_start", 4), ("val_end", 4, 400),
        ("training_end",),
        ("test_start", 4), ("test_end", 4, -4),
        ("finalize", "success"),
    ]


def test_two_callbacks_interleave_in_their_order_each_with_its_own_filter(tmp_path):
    calls = []
    _run([Recorder(calls, "a:", every_n_epochs=1), Recorder(calls, "b:", every_n_epochs=3)], tmp_path, epochs=3)
    epochs = [c for c in calls if c[0].endswith(("train_start", "val_end"))]
    assert epochs == [
        ("a:train_start", 1), ("a:val_end", 1, 100),
        ("a:train_start", 2), ("a:val_end", 2, 200),
        ("a:train_start", 3), ("b:train_start", 3), ("a:val_end", 3, 300), ("b:val_end", 3, 300),
    ]
    assert calls[-2:] == [("a:finalize", "success"), ("b:finalize", "success")]


def test_jax_trainer_minus_one_means_every_epoch(tmp_path):
    calls = []
    _run([Recorder(calls, every_n_epochs=-1, every_n_minutes=-1)], tmp_path, epochs=2)
    assert [c[1] for c in calls if c[0] == "train_start"] == [1, 2]
    cb = Callback(every_n_epochs=-1, every_n_minutes=-1)
    assert (cb.every_n_epochs, cb.every_n_minutes) == (1, None)


def test_every_n_minutes_fires_filtered_hooks_when_time_passed():
    calls = []
    cb = Recorder(calls, every_n_epochs=3, every_n_minutes=1)
    now = [0.0]
    cb._clock = lambda: now[0]

    def epoch(e, start, end):
        now[0] = start
        cb.on_training_epoch_start(e)
        cb.on_validation_epoch_start(e)
        now[0] = end  # the decision taken at the start holds at the end
        cb.on_training_epoch_end({"train/loss_epoch": e}, e)
        cb.on_validation_epoch_end({"val/loss": e}, e)

    epoch(1, 0.0, 59.0)     # the clocks start: no
    epoch(2, 70.0, 75.0)    # 70 s since the phases were first seen: yes; the clocks restart at 75
    epoch(3, 80.0, 80.0)    # 3 % 3 == 0: yes; restart at 80
    epoch(4, 130.0, 145.0)  # 50 s at the start: no (though 65 s at the end)
    epoch(5, 200.0, 200.0)  # 120 s: yes
    fired = [(c[0], c[1]) for c in calls]
    assert fired == [(name, e) for e in (2, 3, 5) for name in ("train_start", "val_start", "train_end", "val_end")]


def test_every_n_minutes_end_without_start_decides_at_the_end():
    calls = []
    cb = Recorder(calls, every_n_epochs=5, every_n_minutes=0.5)
    now = [0.0]
    cb._clock = lambda: now[0]
    for e, t in ((1, 0.0), (2, 20.0), (3, 31.0), (4, 40.0)):
        now[0] = t
        cb.on_validation_epoch_end({"val/loss": e}, e)
    assert calls == [("val_end", 3, 3)]


def test_base_hooks_do_nothing_and_state_is_empty(tmp_path):
    cb = Callback()
    drive([cb], FakeTrainer(tmp_path))
    assert cb.state_dict() == {}
    cb.load_state_dict({})
    assert not overrides_training_step(cb)


def test_overrides_training_step_looks_at_the_class():
    assert overrides_training_step(Recorder([]))
    assert overrides_training_step(GradientSpikeMonitor()) and overrides_training_step(JAXProfiler())
    for cb in (LearningRateMonitor(), ConfusionMatrixCallback(), DisableGC(), EarlyStopping()):
        assert not overrides_training_step(cb), type(cb).__name__


def test_bind_keeps_the_trainer_and_rebinding_replaces_it(tmp_path):
    cb = Callback()
    assert cb.trainer is None
    first, second = FakeTrainer(tmp_path), FakeTrainer(tmp_path)
    cb.bind(first)
    assert cb.trainer is first
    cb.bind(second)
    assert cb.trainer is second


def test_bind_rejects_an_object_missing_trainer_members(tmp_path):
    partial = types.SimpleNamespace(log_dir=tmp_path, state=None, writer=gyre.MultiWriter([]))
    with pytest.raises(TypeError, match=r"(?s)needs a trainer.*lacks global_step, stop_training, learning_rate"):
        Callback().bind(partial)


def test_a_hook_that_needs_the_trainer_says_bind_first():
    with pytest.raises(RuntimeError, match=r"(?s)LearningRateMonitor is not bound to a trainer.*bind"):
        LearningRateMonitor().on_training_epoch_start(1)


@pytest.mark.parametrize("value", [0, -2, 1.5, 2.0, True, "2", None])
def test_bad_every_n_epochs(value):
    with pytest.raises(ValueError, match=r"(?s)Callback: every_n_epochs must be a whole number >= 1.*received"):
        Callback(every_n_epochs=value)


@pytest.mark.parametrize("value", [0, -5, float("inf"), float("nan"), True, "10"])
def test_bad_every_n_minutes(value):
    with pytest.raises(ValueError, match=r"(?s)every_n_minutes must be a number > 0, or None"):
        Callback(every_n_minutes=value)


def test_the_configuration_is_keyword_only():
    with pytest.raises(TypeError):
        Callback(2)


def test_finalize_rejects_an_unknown_status():
    for status in ("success", "failed", "stopped"):
        Callback().finalize(status)
    with pytest.raises(ValueError, match=r"(?s)unknown status 'ok'.*'success', 'failed' or 'stopped'"):
        Callback().finalize("ok")


def test_load_state_dict_rejects_a_state_it_did_not_write():
    with pytest.raises(ValueError, match=r"(?s)Callback.load_state_dict got a state it did not write.*\['best'\]"):
        Callback().load_state_dict({"best": 1.0})
    with pytest.raises(ValueError, match=r"(?s)got a state it did not write.*list"):
        EarlyStopping().load_state_dict([1, 2])


EXPECTED = {
    "LearningRateMonitor": {"every_n_epochs": 1},
    "GradientSpikeMonitor": {"every_n_epochs": 1, "ema_decay": 0.99, "threshold": 3.0, "log_to_disk": True,
                             "metric": "grad_norm"},
    "ConfusionMatrixCallback": {"normalize": True, "cmap": "Blues", "figsize": (8, 8), "format": None, "dpi": 100,
                                "every_n_epochs": 1},
    "JAXProfiler": {"every_n_minutes": 60, "first_step": 10, "profile_n_steps": 5},
    "DisableGC": {},
    "EarlyStopping": {"monitor": "val/loss", "mode": "auto", "patience": 3, "min_delta": 0.0, "every_n_epochs": 1},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_registered_under_its_class_name_with_keyword_annotated_config(name):
    cls = CALLBACKS.get(name)
    assert cls.__name__ == name and issubclass(cls, Callback)
    params = dict(inspect.signature(cls.__init__).parameters)
    params.pop("self")
    assert {k: p.default for k, p in params.items()} == EXPECTED[name]
    for p in params.values():
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, p
        assert p.annotation is not inspect.Parameter.empty and not isinstance(p.annotation, str), p
    cls()  # the defaults build
