"""The run encoder of TensorBoard scalar events: byte for byte what tensorboardX writes."""

import numpy as np
import pytest

import gyre
from gyre.loggers._tensorboard import ScalarEvents, _record, varint_length

from .readers import tensorboard_events

tbx = pytest.importorskip("tensorboardX")
from tensorboardX.crc32c import crc32c  # noqa: E402
from tensorboardX.proto.event_pb2 import Event  # noqa: E402


def _theirs(names, steps, dates, values, event_type=Event):
    out = b""
    for step, date, row in zip(steps, dates, values, strict=True):
        event = event_type(wall_time=float(date), step=int(step))
        for name, number in zip(names, row, strict=True):
            event.summary.value.add(tag=name, simple_value=float(number))
        out += _record(event.SerializeToString(), crc32c)
    return out


@pytest.mark.parametrize("names", [("loss",), ("loss", "accuracy"), ("λ" * 70, "metrics.loss", "x")])
def test_runs_encode_as_tensorboardx_serializes_and_frames_each_event(names):
    rng = np.random.default_rng(0)
    steps = np.array(
        [0, 1, 127, 128, 16383, 16384, *sorted(rng.integers(16385, 2**40, 20)), 2**62, 2**63 - 1], np.int64
    )
    n = len(steps)
    dates = rng.uniform(1.0, 2e9, n)
    values = rng.normal(size=(n, len(names))) * 10.0 ** rng.integers(-40, 40, (n, len(names)))
    values[:5, 0] = [0.0, -0.0, np.nan, -np.inf, 1e300]  # beyond float32: inf, as protobuf stores it
    assert ScalarEvents(Event, crc32c).encode(names, steps, dates, values) == _theirs(names, steps, dates, values)


def test_varint_lengths_follow_protobuf():
    steps = np.array([0, 1, 127, 128, 2**14 - 1, 2**14, 2**63 - 1])
    assert varint_length(steps).tolist() == [0, 1, 1, 2, 2, 3, 9]


class _StepAsText:
    """An Event whose serialization writes the step as decimal text, which no byte of a
    template can hold: the encoder must refuse it (and the caller write event by event)."""

    def __init__(self, wall_time, step):
        self.event = Event(wall_time=wall_time)
        self.step = step
        self.summary = self.event.summary

    def SerializeToString(self):
        return self.event.SerializeToString() + str(self.step).encode()


class _StepAfterSummary(_StepAsText):
    def SerializeToString(self):
        return self.event.SerializeToString() + Event(step=self.step).SerializeToString()


def test_a_template_is_used_only_where_it_encodes_as_the_library_does():
    run = ("loss",), np.array([3, 4]), np.array([1.0, 2.0]), np.array([[0.5], [0.25]])
    assert ScalarEvents(_StepAsText, crc32c).encode(*run) is None
    # another field order is found, and encoded as that library serializes it
    assert ScalarEvents(_StepAfterSummary, crc32c).encode(*run) == _theirs(*run, event_type=_StepAfterSummary)


def test_a_writer_whose_encoder_refuses_writes_event_by_event(tmp_path, monkeypatch):
    monkeypatch.setattr(ScalarEvents, "encode", lambda *args: None)
    writer = gyre.TensorBoardWriter(tmp_path)
    step = lambda elapsed: gyre.logs().add_loss("loss", float(elapsed.steps))  # noqa: E731
    gyre.loop(None, range(40), {gyre.every(1): step, **gyre.write_to(writer)})
    writer.close()
    scalars = [e for e in tensorboard_events(str(tmp_path)) if e.summary.value]
    assert [(e.step, e.summary.value[0].simple_value) for e in scalars] == [(i, float(i)) for i in range(40)]


def test_write_to_stamps_each_event_with_its_steps_wall_time(tmp_path):
    writer = gyre.TensorBoardWriter(tmp_path)
    step = lambda elapsed: gyre.logs().add_loss("loss", 1.0).add_metric("acc", 0.5)  # noqa: E731
    _, history, _ = gyre.loop(None, range(300), {gyre.every(1): step, **gyre.write_to(writer)})
    writer.close()
    scalars = [e for e in tensorboard_events(str(tmp_path)) if e.summary.value]
    assert [e.step for e in scalars] == list(range(300))
    assert [e.wall_time for e in scalars] == history.collect("date")
    assert {tuple(v.tag for v in e.summary.value) for e in scalars} == {("loss", "acc")}
