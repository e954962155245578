"""Readers of what the writers wrote, for the tests: TensorBoard event files (TFRecord
framing, tensorboardX's own ``Event`` proto: no TensorFlow) and W&B's offline ``.wandb``
files (the LevelDB-style log W&B writes, records parsed with wandb's ``Record`` proto)."""

import glob
import os
import struct
import time


def tensorboard_events(logdir):
    """Every event of every event file in ``logdir``, in order; each record's two checksums
    (of its length and of its data) are checked, as TensorBoard does."""
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c

    events = []
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        data = open(path, "rb").read()
        pos = 0
        while pos < len(data):
            header = data[pos:pos + 8]
            (length,) = struct.unpack("<Q", header)
            body = data[pos + 12:pos + 12 + length]
            (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
            (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
            assert (header_crc, body_crc) == (masked_crc32c(header), masked_crc32c(body)), path
            event = Event()
            event.ParseFromString(body)
            events.append(event)
            pos += 12 + length + 4
    return events


def tensorboard_values(logdir):
    """``{tag: [(step, value_proto), ...]}`` of every summary value written, less those a later
    ``SessionLog`` START purges as TensorBoard does (a resumed run's: the values at its step or later)."""
    from tensorboardX.proto.event_pb2 import SessionLog

    found = {}
    for event in tensorboard_events(logdir):
        if event.HasField("session_log") and event.session_log.status == SessionLog.START:
            found = {tag: [(s, v) for s, v in values if s < event.step] for tag, values in found.items()}
        for value in event.summary.value:
            found.setdefault(value.tag, []).append((event.step, value))
    return found


def wandb_records(root, timeout=30.0):
    """The records of the one offline run under ``root`` (its ``wandb/offline-run-*``).

    ``run.finish()`` can return before wandb's service process has written the last
    records (seen about once in five runs on a loaded machine): read until the run's
    ``exit`` record is there."""
    deadline = time.monotonic() + timeout
    while True:
        records = _wandb_records(root)
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def _wandb_records(root):
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(os.path.join(root, "wandb", "offline-run-*", "run-*.wandb"))
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, raw, parts = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):  # still being written
            break
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            raw.append(chunk)
        elif kind == 2:
            parts = chunk
        elif kind == 3:
            parts += chunk
        elif kind == 4:
            raw.append(parts + chunk)
    records = []
    for item in raw:
        record = pb.Record()
        record.ParseFromString(item)
        records.append(record)
    return records
