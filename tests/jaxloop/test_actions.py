"""gyre.jaxloop's actions: summary (a fake writer), checkpoint, step number, early stopping."""


import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre import jaxloop
from gyre.jaxloop import MetricType, MetricWithMetadata
from tests.jaxloop._helpers import FakeWriter, add_step, fresh


def test_a_metric_type_is_a_member_or_its_value_and_a_misspelt_one_is_explained():
    assert MetricWithMetadata([1.0], "histogram").type is MetricType.HISTOGRAM
    with pytest.raises(ValueError, match=r"(?s)MetricWithMetadata's type must be one of 'scalar'.*received: str 'histogramm'"):
        MetricWithMetadata([1.0], "histogramm")  # used to fail later, inside SummaryAction, as 'str' has no .name


def test_summary_action_writes_each_type_at_the_state_step():
    writer = FakeWriter()
    action = jaxloop.SummaryAction(writer, flush_each_call=True)
    image = np.zeros((1, 2, 2, 1))
    action(
        {"step": jnp.int32(30)},
        {
            "loss": [jnp.float32(1.0), jnp.float32(2.0)],
            jaxloop.STAT_STEPS_PER_SEC: 10.0,
            "weights": MetricWithMetadata(np.arange(4.0), MetricType.HISTOGRAM),
            "sample": MetricWithMetadata(image, MetricType.IMAGE),
            "note": [MetricWithMetadata("a", MetricType.TEXT), MetricWithMetadata("b", MetricType.TEXT)],
        },
    )
    kinds = {call[0]: call for call in writer.calls}
    assert kinds["scalars"] == ("scalars", 30, {"loss": 1.5, jaxloop.STAT_STEPS_PER_SEC: 10.0})
    assert kinds["histograms"][1] == 30 and list(kinds["histograms"][2]["weights"]) == [0, 1, 2, 3]
    assert kinds["images"][2]["sample"] is image
    assert kinds["texts"] == ("texts", 30, {"note": "b"})  # the last of a per-step list
    assert writer.flushed == 1
    action.close()
    action.close()
    assert writer.closed == 1 and writer.flushed == 2


def test_summary_action_says_once_which_bare_outputs_it_cannot_write(caplog):
    writer = FakeWriter()
    action = jaxloop.SummaryAction(writer)
    outputs = {"loss": [jnp.float32(1.0)], "logits": [jnp.ones((4, 3))], "name": ["abc"]}
    with caplog.at_level("WARNING"):
        action({"step": 1}, outputs)
        action({"step": 2}, outputs)
    said = [r.getMessage() for r in caplog.records if "SummaryAction" in r.getMessage()]
    assert len(said) == 2  # once per name, not per call
    assert "'logits': it is not one number per step (shape (4, 3) per step)" in said[0]
    assert "MetricType.HISTOGRAM" in said[0]
    assert "'name'" in said[1] and "MetricType.TEXT" in said[1]
    assert [call[2] for call in writer.calls] == [{"loss": 1.0}, {"loss": 1.0}]


def test_summary_action_in_a_train_loop_every_second_loop():
    writer = FakeWriter()
    loop = jaxloop.TrainLoop(add_step, end_actions=[jaxloop.SummaryAction(writer, interval=2)])
    state = fresh()
    for _ in range(4):
        state, _ = loop(state, [1, 2, 3])
    assert [(c[1], c[2]["batch"]) for c in writer.calls] == [(6, 2.0), (12, 2.0)]
    assert writer.flushed == 0


def test_summary_action_refuses_an_unsupported_type_and_a_non_writer():
    action = jaxloop.SummaryAction(FakeWriter())
    with pytest.raises(ValueError, match="type AUDIO is not supported") as info:
        action({"step": 1}, {"clip": MetricWithMetadata(np.zeros(3), MetricType.AUDIO, {"sample_rate": 8000})})
    assert "expected" in str(info.value) and "fix" in str(info.value)
    with pytest.raises(TypeError, match="SummaryAction needs a writer"):
        jaxloop.SummaryAction(object())

    class ScalarsOnly:
        def write_scalars(self, step, values):
            pass

    with pytest.raises(TypeError, match="cannot write histogram values"):
        jaxloop.SummaryAction(ScalarsOnly())({"step": 1}, {"h": MetricWithMetadata([1.0], MetricType.HISTOGRAM)})
    with pytest.raises(TypeError, match="cannot write video values"):  # gyre's writers have no write_videos
        jaxloop.SummaryAction(ScalarsOnly())({"step": 1}, {"v": MetricWithMetadata(np.zeros(3), MetricType.VIDEO)})


def test_bare_values_go_to_write_scalars_as_given_and_metadata_scalars_join_them():
    calls = []

    class Clu:  # CLU's MetricWriter methods
        def write_scalars(self, step, values):
            calls.append(("scalars", step, values))

        def write_videos(self, step, values):
            calls.append(("videos", step, values))

    action = jaxloop.SummaryAction(summary_writer=Clu(), interval=1, flush_each_call=False)
    loss, pair, clip = jnp.float32(0.25), jnp.array([5.0, 6.0]), np.zeros((2, 4, 4, 3))
    action({"step": 4}, {
        "loss": loss,  # a 0-d device value, as an `end` that reduced its outputs leaves it
        "pair": pair,  # not one number: jaxloop hands it to the writer all the same
        "acc": [1.0, 0.0],  # a raw per-step list: its mean
        "lr": MetricWithMetadata(0.1, MetricType.SCALAR),
        "clip": MetricWithMetadata(clip, MetricType.VIDEO),
    })
    scalars = next(c for c in calls if c[0] == "scalars")
    assert scalars[1] == 4 and set(scalars[2]) == {"loss", "pair", "acc", "lr"}
    assert scalars[2]["loss"] is loss and scalars[2]["pair"] is pair and scalars[2]["lr"] == 0.1
    assert float(scalars[2]["acc"]) == 0.5
    assert ("videos", 4, {"clip": clip}) in calls
    assert action.summary_writer is not None and [t.name for t in MetricType][-2:] == ["HISTOGRAM", "OTHER"]


def test_checkpoint_action_saves_at_the_state_step(tmp_path):
    action = jaxloop.CheckpointAction(str(tmp_path / "ckpt"), interval=2, keep=2)
    loop = jaxloop.TrainLoop(lambda s, b, n: ({"step": s["step"] + 1, "w": s["w"] + b}, {}), end_actions=[action])
    state = {"step": jnp.int32(0), "w": jnp.zeros(2)}
    for _ in range(6):
        state, _ = loop(state, [1.0, 1.0])
    action.close()
    assert action.checkpoint.all_steps() == [8, 12]  # saved at loops 2, 4, 6 (steps 4, 8, 12); keep=2
    restored, elapsed = action.checkpoint.restore({"step": jnp.int32(0), "w": jnp.zeros(2)})
    assert int(restored["step"]) == 12 and restored["w"].tolist() == [12.0, 12.0] and elapsed.steps == 12
    with pytest.raises(TypeError, match="needs a checkpoint manager or a directory"):
        jaxloop.CheckpointAction(42)


def test_checkpoint_action_and_spec_report_an_absolute_directory(tmp_path, monkeypatch):
    # the doctests of CheckpointAction.directory/.ckpt_manager and CheckpointSpec.directory
    monkeypatch.chdir(tmp_path)
    action = jaxloop.CheckpointAction("ckpt")
    assert action.directory == str(tmp_path / "ckpt") and action.ckpt_manager is None
    assert isinstance(action.checkpoint, gyre.Checkpoint)
    action.close()
    assert jaxloop.CheckpointSpec("ckpt").directory == str(tmp_path / "ckpt")


def test_an_action_needs_the_state_step():
    with pytest.raises(TypeError, match="needs the state's step"):
        jaxloop.StepNumberAction(jaxloop.StepNumberWriter())({"w": 1})


def test_checkpoint_action_ranks_by_a_monitored_output(tmp_path):
    import gyre

    ckpt = gyre.checkpoint(str(tmp_path / "ckpt"), keep=1, keep_best=1, monitor="loss", mode="min")
    action = jaxloop.CheckpointAction(ckpt)
    for step, losses in ((1, [0.5, 0.3]), (2, [0.9, 0.9]), (3, [0.8])):
        action({"step": jnp.int32(step), "w": jnp.ones(2)}, {"loss": [jnp.float32(x) for x in losses]})
    action.close()
    assert ckpt.best_step() == 1 and ckpt.all_steps() == [1, 3]
