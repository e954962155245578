"""JAXProfiler (a real trace, and its schedule on a fake clock), DisableGC and EarlyStopping:
exact behaviour, resume, and every bad input."""

import gc
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core._errors import LoopWarning
from gyre.trainer._callback import Callback, DisableGC, EarlyStopping, JAXProfiler

from .fakes import FakeTrainer, drive

# -- JAXProfiler --------------------------------------------------------------------------------


def test_a_real_trace_of_two_steps(tmp_path):
    step = jax.jit(lambda x: x * 2.0 + 1.0)
    trainer = FakeTrainer(tmp_path, state=jnp.zeros(4))
    profiler = JAXProfiler(first_step=1, profile_n_steps=2)
    active = []

    def metrics(epoch, global_step):
        trainer.state = step(trainer.state)
        return {}

    class Watch(Callback):  # records whether a trace runs after each step
        def on_training_step(self, step_metrics, epoch_idx, global_step):
            active.append(profiler.active)

    drive([profiler, Watch()], trainer, epochs=1, steps=4, step_metrics=metrics)
    assert active == [True, True, False, False]  # after step 1 it starts; after step 3 it stops
    assert profiler.traces == 1 and not profiler.active
    traces = list((tmp_path / "profile").rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0


class FakeProfiler:
    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(jax.profiler, "start_trace", lambda path: self.calls.append(("start", path)))
        monkeypatch.setattr(jax.profiler, "stop_trace", lambda: self.calls.append(("stop",)))


def _steps(profiler, trainer, steps, clock, times=None, epoch=1):
    for s in steps:
        if times:
            clock[0] = times.get(s, clock[0])
        trainer.global_step = s
        profiler.on_training_step({}, epoch, s)
        if profiler.calls_log is not None:
            profiler.calls_log.append((s, profiler.active))


def _profiler(tmp_path, monkeypatch, **kwargs):
    fake = FakeProfiler(monkeypatch)
    trainer = FakeTrainer(tmp_path)
    profiler = JAXProfiler(**kwargs)
    profiler.calls_log = None
    clock = [0.0]
    profiler._clock = lambda: clock[0]
    profiler.bind(trainer)
    profiler.on_training_start()
    return profiler, trainer, fake, clock


def test_traces_again_after_every_n_minutes(tmp_path, monkeypatch):
    profiler, trainer, fake, clock = _profiler(tmp_path, monkeypatch, every_n_minutes=1, first_step=2,
                                               profile_n_steps=3)
    profiler.calls_log = log = []
    # the first trace: after step 2 to after step 5 (stopped at t=10); the next at the first
    # step at least 60 s later: step 9 (t=70), stopped after step 12
    _steps(profiler, trainer, range(1, 14), clock, times={5: 10.0, 8: 69.0, 9: 70.0})
    started = [s for (s, a), (_, b) in zip(log[1:], log, strict=False) if a and not b]
    assert started == [2, 9]
    assert [s for s, a in log if a] == [2, 3, 4, 9, 10, 11]
    assert fake.calls == [("start", str(tmp_path / "profile")), ("stop",)] * 2


def test_one_trace_without_minutes_and_a_resumed_run_starts_at_once(tmp_path, monkeypatch):
    profiler, trainer, fake, clock = _profiler(tmp_path, monkeypatch, every_n_minutes=None, first_step=10,
                                               profile_n_steps=1)
    _steps(profiler, trainer, range(25, 30), clock, times={27: 1e6})
    assert fake.calls == [("start", str(tmp_path / "profile")), ("stop",)]  # after 25, stopped after 26


@pytest.mark.parametrize("end", ["epoch", "training", "failed"])
def test_a_running_trace_stops_at_epoch_end_training_end_and_finalize(tmp_path, monkeypatch, end):
    profiler, trainer, fake, clock = _profiler(tmp_path, monkeypatch, first_step=1, profile_n_steps=100)
    _steps(profiler, trainer, [1, 2], clock)
    assert profiler.active
    {"epoch": lambda: profiler.on_training_epoch_end({}, 1), "training": profiler.on_training_end,
     "failed": lambda: profiler.finalize("failed")}[end]()
    assert not profiler.active and fake.calls[-1] == ("stop",)
    profiler.on_training_end()
    profiler.finalize("success")
    assert fake.calls.count(("stop",)) == 1  # stopped once


def test_a_trace_that_cannot_start_warns_and_does_not_retry(tmp_path, monkeypatch):
    trainer = FakeTrainer(tmp_path)
    profiler = JAXProfiler(first_step=1, every_n_minutes=None)
    profiler.bind(trainer)

    def busy(path):
        raise RuntimeError("Profile has already been started. Only one profile may be run at a time.")

    monkeypatch.setattr(jax.profiler, "start_trace", busy)
    with pytest.warns(LoopWarning, match="JAXProfiler: no trace at step 1: Profile has already been started"):
        for s in (1, 2, 3):
            profiler.on_training_step({}, 1, s)
    assert not profiler.active


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"first_step": -1}, "first_step must be a whole number >= 0"),
    ({"first_step": 1.5}, "first_step must be a whole number >= 0"),
    ({"profile_n_steps": 0}, "profile_n_steps must be a whole number >= 1"),
    ({"every_n_minutes": 0}, "every_n_minutes must be a number > 0"),
])
def test_bad_profiler_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        JAXProfiler(**kwargs)


# -- DisableGC ----------------------------------------------------------------------------------


@pytest.fixture
def gc_state():
    before = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if before else gc.disable)()


def test_gc_off_during_training_collected_at_each_epoch_end_and_restored(tmp_path, monkeypatch, gc_state):
    collected, seen = [], []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)

    class Watch(Callback):  # after DisableGC: is the collector on during each epoch?
        def on_filtered_training_epoch_start(self, epoch_idx):
            seen.append((epoch_idx, gc.isenabled(), len(collected)))

        def on_test_epoch_start(self, epoch_idx):
            seen.append(("test", gc.isenabled(), len(collected)))

    drive([DisableGC(), Watch()], FakeTrainer(tmp_path), epochs=3)
    # collected at the training and validation ends of each epoch; on again for the test
    assert seen == [(1, False, 0), (2, False, 2), (3, False, 4), ("test", True, 6)]
    assert gc.isenabled() and len(collected) == 6


def test_gc_restored_when_training_failed(gc_state):
    callback = DisableGC()
    callback.on_training_start()
    assert not gc.isenabled()
    callback.finalize("failed")
    assert gc.isenabled()


def test_gc_left_off_when_it_was_off_before(gc_state):
    gc.disable()
    callback = DisableGC()
    callback.on_training_start()
    callback.on_training_end()
    callback.finalize("success")
    assert not gc.isenabled()


def test_disable_gc_takes_no_arguments():
    with pytest.raises(TypeError):
        DisableGC(every_n_epochs=2)


# -- EarlyStopping ------------------------------------------------------------------------------


def _stop_run(tmp_path, values, **kwargs):
    trainer = FakeTrainer(tmp_path)
    stopper = EarlyStopping(**kwargs)
    stopper.bind(trainer)
    for epoch, value in enumerate(values, start=1):
        stopper.on_validation_epoch_end({"val/loss": jnp.float32(value), "val/acc": value}, epoch)
    return stopper, trainer.stops


def test_min_mode_with_min_delta_stops_after_patience(tmp_path):
    # improvements need a drop of more than 0.1: 1.0 (best), 0.95 (no), 0.85 (yes), 0.8 (no), 0.9 (no)
    stopper, stops = _stop_run(tmp_path, [1.0, 0.95, 0.85, 0.8, 0.9, 0.1], patience=2, min_delta=0.1)
    assert stops == ["EarlyStopping: val/loss did not improve for 2 validation epochs (best 0.85 at epoch 3)"]
    assert (stopper.stopped_epoch, stopper.best_epoch) == (5, 6)  # it asked once; epoch 6 still counted


def test_max_mode(tmp_path):
    stopper, stops = _stop_run(tmp_path, [0.1, 0.2, 0.2, 0.15, 0.3], monitor="val/acc", mode="max", patience=2)
    assert stops == ["EarlyStopping: val/acc did not improve for 2 validation epochs (best 0.2 at epoch 2)"]
    assert stopper.stopped_epoch == 4


def test_nan_never_improves(tmp_path):
    _, stops = _stop_run(tmp_path, [math.nan, math.nan], patience=2)
    assert stops == ["EarlyStopping: val/loss did not improve for 2 validation epochs (no finite value yet)"]
    stopper, stops = _stop_run(tmp_path, [1.0, math.nan, 0.5, math.nan], patience=2)
    assert stops == [] and (stopper.best, stopper.wait) == (0.5, 1)


def test_only_filtered_validations_count(tmp_path):
    trainer = FakeTrainer(tmp_path)
    stopper = EarlyStopping(patience=1, every_n_epochs=2)
    drive([stopper], trainer, epochs=4, val=lambda e: {"val/loss": [5.0, 1.0, 0.5, 2.0][e - 1]})
    assert trainer.stops == ["EarlyStopping: val/loss did not improve for 1 validation epochs (best 1 at epoch 2)"]
    assert stopper.stopped_epoch == 4


def test_resume_gives_the_same_stop(tmp_path):
    values = [1.0, 0.9, 0.95, 0.97, 0.99, 0.8]
    whole, _ = _stop_run(tmp_path, values, patience=3)
    first, _ = _stop_run(tmp_path, values[:3], patience=3)
    state = json.loads(json.dumps(first.state_dict()))
    assert state == {"has_best": 1, "best": pytest.approx(0.9), "best_epoch": 2, "wait": 1, "stopped_epoch": 0}
    trainer = FakeTrainer(tmp_path)
    second = EarlyStopping(patience=3)
    second.bind(trainer)
    second.load_state_dict({k: np.asarray(v) for k, v in state.items()})  # as a checkpoint may give them
    for epoch, value in enumerate(values[3:], start=4):
        second.on_validation_epoch_end({"val/loss": jnp.float32(value)}, epoch)
    assert second.state_dict() == whole.state_dict()
    assert trainer.stops == ["EarlyStopping: val/loss did not improve for 3 validation epochs (best 0.9 at epoch 2)"]


def test_a_monitor_never_logged_names_the_metric_and_the_keys(tmp_path):
    stopper = EarlyStopping(monitor="val/los")
    stopper.bind(FakeTrainer(tmp_path))
    with pytest.raises(KeyError, match=r"(?s)monitors 'val/los', which was not logged in the validation of "
                                       r"epoch 1. Did you mean 'val/loss'.*\['val/acc', 'val/loss'\]"):
        stopper.on_validation_epoch_end({"val/loss": 1.0, "val/acc": 0.5}, 1)


@pytest.mark.parametrize("value", [jnp.ones(3), "low", True])
def test_a_monitor_that_is_not_one_number(tmp_path, value):
    stopper = EarlyStopping()
    stopper.bind(FakeTrainer(tmp_path))
    with pytest.raises(ValueError, match="monitors 'val/loss', which is not one number"):
        stopper.on_validation_epoch_end({"val/loss": value}, 1)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"mode": "mni"}, "unknown mode 'mni'. Did you mean 'min'"), ({"mode": "minimum"}, "unknown mode"),
    ({"patience": 0}, "patience must be a whole number >= 1"), ({"patience": 2.0}, "patience"),
    ({"min_delta": -0.1}, "min_delta must be a number >= 0"), ({"min_delta": math.nan}, "min_delta"),
    ({"min_delta": "0"}, "min_delta"), ({"monitor": ""}, "monitor must name a validation metric"),
    ({"every_n_epochs": 0}, "every_n_epochs"),
])
def test_bad_early_stopping_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        EarlyStopping(**kwargs)


def test_early_stopping_refuses_a_mode_against_the_name_and_infers_a_left_out_one():
    with pytest.raises(ValueError, match=r"(?s)EarlyStopping: mode 'min' on 'val/acc'.*its name says mode 'max'"):
        EarlyStopping(monitor="val/acc", mode="min")
    assert EarlyStopping(monitor="val/acc").mode == "max" and EarlyStopping().mode == "min"


def test_a_bfloat16_monitor_is_one_number(tmp_path):
    stopper = EarlyStopping(patience=1)
    stopper.bind(FakeTrainer(tmp_path))
    stopper.on_validation_epoch_end({"val/loss": jnp.bfloat16(0.5)}, 1)
    assert stopper.best == 0.5
