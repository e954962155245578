"""LearningRateMonitor and GradientSpikeMonitor: exact values written, no host read on the
step path, resume, and every bad input."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.core._errors import LoopWarning
from gyre.trainer import _callback as _monitors
from gyre.trainer._callback import GradientSpikeMonitor, LearningRateMonitor
from tests.loggers.readers import tensorboard_values

from .fakes import FakeTrainer, RecordingWriter, drive

# -- LearningRateMonitor ------------------------------------------------------------------------


def test_lr_written_at_filtered_epoch_starts_as_the_unread_device_value(tmp_path, sync_detector):
    lr = jnp.float32(0.25) * 2
    trainer = FakeTrainer(tmp_path, lr=lr)
    drive([LearningRateMonitor(every_n_epochs=2)], trainer, epochs=4, steps=3)
    calls = trainer.writer.of("scalars")
    assert [(step, list(values)) for step, values in calls] == [(2, ["optimizer/lr"]), (8, ["optimizer/lr"])]
    assert all(values["optimizer/lr"] is lr for _, values in calls)  # passed as it is: not read
    assert sync_detector.explicit == 0


def test_lr_arrives_in_a_real_writer(tmp_path):
    path = tmp_path / "m.jsonl"
    trainer = FakeTrainer(tmp_path, lr=jnp.float32(0.5), writer=gyre.JSONLWriter(str(path)))
    drive([LearningRateMonitor()], trainer, epochs=2, steps=2)
    trainer.writer.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"step": 0, "optimizer/lr": 0.5}, {"step": 1, "optimizer/lr": 0.5}]


def test_lr_is_written_at_the_step_that_used_it(tmp_path):
    # was: lr(3), the rate of the last update, written at step 4 beside step 4's values (which used
    # lr(4)): a rate dropping at an epoch's first step showed the drop one epoch late
    import optax
    from flax import nnx

    class Fit(gyre.TrainerModule):
        def loss_function(self, model, batch, train=True):
            return ((model(batch[0])[:, 0] - batch[1]) ** 2).mean(), {}

    x = np.linspace(-1, 1, 64, dtype=np.float32)[:, None]
    t = Fit(model=nnx.Linear(1, 1, rngs=nnx.Rngs(0)), train_epochs=3, enable_progress_bar=False, log_dir=str(tmp_path),
            optimizer=optax.inject_hyperparams(optax.sgd)(learning_rate=lambda count: 1.0 / (count + 1.0)),
            callbacks=[LearningRateMonitor()])
    t.train_model(gyre.data.batches((x, 3 * x[:, 0]), 16, seed=0))  # 4 steps an epoch
    t.close_writer()
    written = tensorboard_values(str(tmp_path / "tensorboard"))["optimizer/lr"]
    assert [(s, v.simple_value) for s, v in written] == [(0, 1.0), (3, 0.25), (7, 0.125)]  # 1 / (step + 1)


def test_lr_unknown_warns_once_and_writes_nothing(tmp_path):
    trainer = FakeTrainer(tmp_path, lr=None)
    with pytest.warns(LoopWarning, match="cannot tell the learning rate") as caught:
        drive([LearningRateMonitor()], trainer, epochs=3)
    assert len([w for w in caught if "learning rate" in str(w.message)]) == 1
    assert trainer.writer.calls == []
    # the fix names the config key that hides it (a schedule alone does not keep it)
    assert "optimizer.log_learning_rate: false" in str(caught[0].message)


def test_lr_with_a_writer_that_writes_no_scalars_is_silent(tmp_path):
    trainer = FakeTrainer(tmp_path, lr=jnp.float32(0.1), writer=gyre.MultiWriter([]))
    drive([LearningRateMonitor()], trainer, epochs=1)  # no error: nothing to write to


# -- GradientSpikeMonitor -----------------------------------------------------------------------

NORMS = [1.0, 1.0, 10.0, 1.0, 2.0, 100.0]  # 3 steps an epoch; decay 0.5, threshold 3
# step: ema after the step (spike?): 1:1, 2:1, 3:5.5 (10 > 3*1), 4:3.25, 5:2.625, 6:51.3125 (100 > 3*2.625)
ROWS = [(1, 1, 1.0, 1.0, False), (2, 1, 1.0, 1.0, False), (3, 1, 10.0, 5.5, True),
        (4, 2, 1.0, 3.25, False), (5, 2, 2.0, 2.625, False), (6, 2, 100.0, 51.3125, True)]


def _norms(values, key="grad_norm"):
    return lambda epoch, step: {"loss": jnp.float32(0.0), key: jnp.float32(values[step - 1])}


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _as_rows(lines):
    return [(d["step"], d["epoch"], d["grad_norm"], d["ema"], d["spike"]) for d in lines]


def test_spikes_ema_and_per_step_lines_exact(tmp_path, chunk):
    trainer = FakeTrainer(tmp_path)
    drive([GradientSpikeMonitor(ema_decay=0.5, threshold=3.0)], trainer, epochs=2, steps=3,
          step_metrics=_norms(NORMS))
    written = [(step, {k: float(v) for k, v in values.items()}) for step, values in trainer.writer.of("scalars")]
    assert written == [(3, {"grad/spikes": 1.0, "grad/ema": 5.5}), (6, {"grad/spikes": 1.0, "grad/ema": 51.3125})]
    assert _as_rows(_lines(tmp_path / "grad_spikes.jsonl")) == ROWS


def test_no_host_read_on_the_step_path(tmp_path, sync_detector):
    trainer = FakeTrainer(tmp_path)
    monitor = GradientSpikeMonitor(ema_decay=0.5)
    monitor.bind(trainer)
    metrics = _norms(NORMS)
    for step in range(1, 7):
        monitor.on_training_step(metrics(1, step), 1, step)
    assert sync_detector.explicit == 0 and sync_detector.stalls == []
    monitor.on_training_epoch_end({}, 1)
    assert sync_detector.explicit == 1  # the one read of the epoch, for the file


def test_every_2_epochs_counts_over_both_and_training_end_writes_the_rest(tmp_path, chunk):
    trainer = FakeTrainer(tmp_path)
    norms = NORMS + [1.0, 1.0, 1000.0]
    drive([GradientSpikeMonitor(every_n_epochs=2, ema_decay=0.5)], trainer, epochs=3, steps=3,
          step_metrics=_norms(norms))
    written = [(step, {k: float(v) for k, v in values.items()}) for step, values in trainer.writer.of("scalars")]
    # steps 7, 8: ema 26.15625, 13.578125; step 9: 1000 > 40.734375: a spike, ema 506.7890625
    assert written == [(6, {"grad/spikes": 2.0, "grad/ema": 51.3125}),
                       (9, {"grad/spikes": 1.0, "grad/ema": 506.7890625})]
    assert [d["step"] for d in _lines(tmp_path / "grad_spikes.jsonl")] == list(range(1, 10))


def test_non_finite_norm_is_a_spike_and_leaves_the_ema(tmp_path):
    trainer = FakeTrainer(tmp_path)
    norms = [float("nan"), 2.0, float("inf"), 2.0]
    drive([GradientSpikeMonitor(ema_decay=0.5)], trainer, epochs=1, steps=4, step_metrics=_norms(norms))
    (step, values), = trainer.writer.of("scalars")
    assert (step, float(values["grad/spikes"]), float(values["grad/ema"])) == (4, 2.0, 2.0)
    assert _as_rows(_lines(tmp_path / "grad_spikes.jsonl")) == [
        (1, 1, None, 0.0, True), (2, 1, 2.0, 2.0, False), (3, 1, None, 2.0, True), (4, 1, 2.0, 2.0, False)]


def test_without_log_to_disk_no_file_but_values_written(tmp_path):
    trainer = FakeTrainer(tmp_path)
    monitor = GradientSpikeMonitor(ema_decay=0.5, log_to_disk=False)
    drive([monitor], trainer, epochs=2, steps=3, step_metrics=_norms(NORMS))
    assert not (tmp_path / "grad_spikes.jsonl").exists()
    assert [float(v["grad/ema"]) for _, v in trainer.writer.of("scalars")] == [5.5, 51.3125]
    state = monitor.state_dict()
    assert (state["rows"], state["chunks"], state["pending_steps"]) == ([], [], [])


def test_log_to_disk_changed_between_runs_resumes(tmp_path):
    writing = GradientSpikeMonitor(ema_decay=0.5)
    writing.bind(FakeTrainer(tmp_path))
    _play(writing, EVENTS[:2])
    quiet = GradientSpikeMonitor(ema_decay=0.5, log_to_disk=False)
    quiet.load_state_dict(writing.state_dict())  # the pending rows are dropped
    assert float(quiet.state_dict()["ema"]) == 1.0 and quiet.state_dict()["pending_steps"] == []
    again = GradientSpikeMonitor(ema_decay=0.5)
    again.bind(FakeTrainer(tmp_path))
    again.load_state_dict(quiet.state_dict())  # no rows saved: a fresh buffer
    _play(again, EVENTS[2:4])
    assert _as_rows(_lines(tmp_path / "grad_spikes.jsonl")) == ROWS[2:3]


def test_the_trainers_logged_name_is_found_too(tmp_path):
    trainer = FakeTrainer(tmp_path)
    drive([GradientSpikeMonitor(ema_decay=0.5)], trainer, epochs=2, steps=3,
          step_metrics=_norms(NORMS, key="train/grad_norm_step"))
    assert _as_rows(_lines(tmp_path / "grad_spikes.jsonl")) == ROWS


def _checkpointed(state):
    """What a checkpoint gives back: host values (numpy arrays, lists, ints)."""
    return jax.device_get(state)


EVENTS = [("step", 1, 1), ("step", 1, 2), ("step", 1, 3), ("end", 1, None),
          ("step", 2, 4), ("step", 2, 5), ("step", 2, 6), ("end", 2, None)]


def _play(monitor, events):
    metrics = _norms(NORMS)
    for kind, epoch, step in events:
        if kind == "step":
            monitor.trainer.global_step = step
            monitor.on_training_step(metrics(epoch, step), epoch, step)
        else:
            monitor.on_training_epoch_end({}, epoch)


def _scalars(trainer):
    return [(step, {k: float(v) for k, v in values.items()}) for step, values in trainer.writer.of("scalars")]


@pytest.fixture(params=[1024, 2], ids=["chunk1024", "chunk2"])
def chunk(request, monkeypatch):
    """The per-step rows' device buffer size: the real one, and 2 (full buffers kept aside)."""
    monkeypatch.setattr(_monitors, "CHUNK", request.param)
    return request.param


@pytest.mark.parametrize("cut", [2, 3, 4, 5])  # mid-epoch, before the epoch's end, after it, mid-epoch 2
def test_resume_is_exact(tmp_path, cut, chunk):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    whole.mkdir(), resumed.mkdir()
    ref = FakeTrainer(whole)
    monitor = GradientSpikeMonitor(ema_decay=0.5)
    monitor.bind(ref)
    _play(monitor, EVENTS)

    trainer = FakeTrainer(resumed)
    first = GradientSpikeMonitor(ema_decay=0.5)
    first.bind(trainer)
    _play(first, EVENTS[:cut])
    state = _checkpointed(first.state_dict())
    json.dumps(_plain(state))  # numbers, lists and arrays only
    second = GradientSpikeMonitor(ema_decay=0.5)
    second.bind(trainer)
    second.load_state_dict(state)
    _play(second, EVENTS[cut:])
    assert (resumed / "grad_spikes.jsonl").read_text() == (whole / "grad_spikes.jsonl").read_text()
    assert _scalars(trainer) == _scalars(ref) == [(3, {"grad/spikes": 1.0, "grad/ema": 5.5}),
                                                  (6, {"grad/spikes": 1.0, "grad/ema": 51.3125})]


def test_missing_grad_norm_names_log_grad_norm(tmp_path):
    monitor = GradientSpikeMonitor()
    monitor.bind(FakeTrainer(tmp_path))
    with pytest.raises(KeyError, match=r"(?s)needs the step metric 'grad_norm'.*log_grad_norm.*\['loss'\]"):
        monitor.on_training_step({"loss": jnp.float32(1.0)}, 1, 1)


def test_a_non_scalar_norm_is_an_error(tmp_path):
    monitor = GradientSpikeMonitor()
    monitor.bind(FakeTrainer(tmp_path))
    with pytest.raises(ValueError, match=r"(?s)'grad_norm' is not one number.*shape \(3,\)"):
        monitor.on_training_step({"grad_norm": jnp.ones(3)}, 1, 1)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ema_decay": 1.0}, "bad ema_decay"), ({"ema_decay": -0.1}, "bad ema_decay"),
    ({"ema_decay": "0.9"}, "bad ema_decay"), ({"threshold": 0}, "bad threshold"),
    ({"threshold": math.inf}, "bad threshold"), ({"threshold": True}, "bad threshold"),
    ({"log_to_disk": "yes"}, "bad log_to_disk"), ({"metric": ""}, "bad metric"),
    ({"every_n_epochs": 0}, "every_n_epochs"),
])
def test_bad_spike_monitor_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        GradientSpikeMonitor(**kwargs)


def test_spike_state_from_another_callback_is_refused():
    with pytest.raises(ValueError, match="got a state it did not write"):
        GradientSpikeMonitor().load_state_dict({"best": 1.0})


def test_lr_monitor_takes_no_other_key():
    with pytest.raises(TypeError):
        LearningRateMonitor(every_n_minutes=3)
    assert isinstance(RecordingWriter(), gyre.Writer)


def test_state_survives_a_real_checkpoint_round_trip(tmp_path, chunk):
    """The state_dict through the loop's checkpoint path: JSON beside arrays saved by orbax
    (which refuses zero-size arrays: nothing pending must not give one)."""
    import orbax.checkpoint as ocp

    from gyre.engine._snapshot import join_arrays, split_arrays

    monitor = GradientSpikeMonitor(ema_decay=0.5)
    monitor.bind(FakeTrainer(tmp_path))
    _play(monitor, EVENTS[:5])  # epoch 1 written; step 4 pending
    for name, state in (("pending", monitor.state_dict()), ("empty", GradientSpikeMonitor().state_dict())):
        arrays = {}
        tree = json.loads(json.dumps(split_arrays(state, arrays, "GradientSpikeMonitor")))
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(tmp_path / name, arrays)
        checkpointer.wait_until_finished()
        restored = join_arrays(tree, checkpointer.restore(tmp_path / name))
        checkpointer.close()
        again = GradientSpikeMonitor(ema_decay=0.5)
        again.load_state_dict(restored)
        assert _plain(again.state_dict()) == _plain(state)


def _plain(state):
    return {k: [np.asarray(c).tolist() for c in v] if k == "chunks" else np.asarray(v).tolist()
            for k, v in state.items()}


def test_norms_replicated_over_a_mesh_as_a_data_parallel_step_gives_them(tmp_path):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    replicated = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec())
    trainer = FakeTrainer(tmp_path)
    drive([GradientSpikeMonitor(ema_decay=0.5)], trainer, epochs=2, steps=3,
          step_metrics=lambda e, s: {"grad_norm": jax.device_put(jnp.float32(NORMS[s - 1]), replicated)})
    assert _as_rows(_lines(tmp_path / "grad_spikes.jsonl")) == ROWS


def test_a_constant_rate_reaches_tensorboard_from_a_real_trainer(tmp_path, digits):
    # the rate is the optimizer state's own array, donated to the next step: the writer's thread
    # read it deleted ("Array has been deleted") and the run died with a WriterError
    from gyre.trainer import ImgClassifierTrainer
    from tests.loggers.readers import tensorboard_values

    t = ImgClassifierTrainer({"train_epochs": 3, "enable_progress_bar": False, "logger": {"log_dir": str(tmp_path)},
                              "callbacks": {"LearningRateMonitor": {}}},
                             {"class_name": "SimpleClassifier", "c_hid": 8}, {"class_name": "SGD", "learning_rate": 0.05})
    t.train_model(digits.train_loader)
    t.close_writer()
    rates = tensorboard_values(str(tmp_path / "tensorboard"))["optimizer/lr"]
    assert [round(v.simple_value, 6) for _, v in rates] == [0.05] * 3
