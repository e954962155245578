"""write_to: the history's scalar entries reach any writer at their own 0-based steps, in the
loop language and in the named loops, without a host sync on the step path."""

import contextlib
import csv
import json
import time

import jax
import jax.numpy as jnp
import pytest

import gyre

from .readers import tensorboard_values


class Recorder(gyre.Writer):
    kinds = frozenset({"scalars"})

    def __init__(self):
        self.calls = []
        self.flushes = 0
        super().__init__()

    def _scalars(self, step, values):
        self.calls.append((step, values))

    def _flush(self):
        self.flushes += 1


@jax.jit
def _step(state, batch):
    loss = jnp.mean((batch - state) ** 2)
    return gyre.logs().add_loss("loss", loss).add_metric("pred", state * jnp.ones(3)), state + 0.5


def test_a_loop_writes_every_step_to_tensorboard_without_host_syncs(tmp_path, sync_detector):
    state = jnp.float32(0.0)
    data = [jnp.full((4,), float(i)) for i in range(600)]
    jax.block_until_ready(_step(state, data[0]))  # compiled before the detector
    writer = gyre.TensorBoardWriter(tmp_path)
    callback = gyre.write_to(writer)
    sent_before_the_end = []

    def watch(elapsed):
        if elapsed.steps == 599:
            sent_before_the_end.append(callback.sent)

    with jax.transfer_guard_device_to_host("disallow"):
        _, history, _ = gyre.loop(
            state, data, {gyre.every(1): [_step, watch], **callback}, on_end=sync_detector.end
        )
    writer.close()
    assert sync_detector.stalls == []
    assert 0 < sent_before_the_end[0] < 600  # written during the run, from the history's own transfers
    written = tensorboard_values(str(tmp_path))
    assert [s for s, _ in written["loss"]] == list(range(600))
    assert [v.simple_value for _, v in written["loss"]] == pytest.approx(history.collect("loss"))
    assert "pred" not in written  # arrays are left out


@pytest.mark.filterwarnings("ignore:.*is logged as:gyre.LoopWarning")  # shared names, on purpose
def test_evaluation_entries_and_shared_names_in_a_train_loop(tmp_path):
    writer = gyre.CSVWriter(tmp_path / "m.csv")

    def train(state, batch):
        return gyre.logs().add_loss("loss", 1.0).add_metric("loss", 2.0), state

    def test(state, batch):
        return gyre.logs().add_metric("accuracy", 0.75)

    callback = gyre.write_to(writer)
    gyre.train_loop(
        0, range(4), {gyre.on_train_step: train, gyre.on_test_step: test},
        callbacks=[callback], test_dataset=lambda: range(2), epoch_duration=2, stop=4,
    )
    writer.close()
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert [r["step"] for r in rows] == ["0", "1", "2", "3"]  # the evaluations' own steps are not written
    assert rows[0]["loss"] == "1.0" and rows[0]["metrics.loss"] == "2.0"
    assert rows[1]["accuracy_test"] == "0.75" and rows[0]["accuracy_test"] == ""
    assert callback.sent == 4


def test_a_run_resumed_at_an_epochs_last_step_writes_no_evaluation_step(tmp_path):
    # Resumed at step 4 of 5-step epochs: the epoch's evaluation ran before the run's first
    # training callback, and its own steps 0 and 1 were written as training steps 0 and 1.
    def train(state, batch):
        return gyre.logs().add_loss("loss", state["s"]), {"s": state["s"] + 1.0}

    def test(state, batch):
        return gyre.logs().add_loss("loss", 100.0)

    written = []
    for stop, resume in ((4, None), (7, "latest")):
        recorder = Recorder()
        gyre.train_loop(
            {"s": jnp.zeros(())}, gyre.data.batches((jnp.arange(20.0),), 4, epochs=2),
            {gyre.on_train_step: train, gyre.on_test_step: test}, test_dataset=lambda: [1, 2],
            callbacks=[gyre.checkpoint(str(tmp_path)), gyre.write_to(recorder)], stop=stop, resume=resume,
        )
        recorder.close()
        written += [(step, values["loss"]) for step, values in recorder.calls]
    assert written == [(s, float(s)) for s in range(7)]


class _Crash(Exception):
    pass


def _crash_at_7_and_resume(tmp_path, make_writer, kind="loop", between=None, before=None):
    """A 10-step run checkpointed every 5 steps, crashed at step 7, then resumed with a new writer
    from ``make_writer()`` into the same place (after ``between()``, if given); the task ``before``
    runs before write_to at each step."""

    def crash_at_7(elapsed):
        if elapsed.steps == 7:
            raise _Crash

    def step(state, batch):
        return gyre.logs().add_loss("loss", state), state + 1.0

    for crash in (True, False):
        if not crash and between is not None:
            between()
        writer = make_writer()
        data = gyre.data.batches((jnp.arange(10.0),), 1, epochs=1)
        steps = [step, *([before] if before else []), *([crash_at_7] if crash else [])]
        save = gyre.checkpoint(str(tmp_path / "ck"))
        resume = None if crash else "latest"
        with contextlib.suppress(_Crash):
            if kind == "loop":
                tasks = {gyre.every(1): [*steps, gyre.write_to(writer)], gyre.every(5): save}
                gyre.loop(jnp.float32(0), data, tasks, stop=10, resume=resume)
            else:
                gyre.train_loop(jnp.float32(0), data, {gyre.every(1): steps, gyre.every(5): save},
                                callbacks=[gyre.write_to(writer)], stop=10, resume=resume)
        writer.close()


@pytest.mark.parametrize("kind", ["loop", "train_loop"])
def test_a_run_resumed_at_its_stop_keeps_every_row_of_a_jsonl_file(tmp_path, kind):
    # was: a resume of a run already at its stop ran no step, so write_to never told the writer
    # of the resume, and the file (truncated when the writer opened it) ended empty: the finished
    # run's 10 rows were lost
    path = str(tmp_path / "metrics.jsonl")
    step = jax.jit(lambda state, batch: (gyre.logs().add_loss("loss", state), state + 1.0))
    for resume, steps_per_call in ((None, 2), ("latest", 1), ("latest", 2)):  # finished, then resumed twice with nothing to do
        writer, save = gyre.JSONLWriter(path), gyre.checkpoint(str(tmp_path / "ck"))
        data = gyre.data.batches((jnp.arange(10.0),), 1, epochs=1)
        if kind == "loop":
            tasks = {gyre.every(1): [step, gyre.write_to(writer)], gyre.every(5): save}
            gyre.loop(jnp.float32(0), data, tasks, stop=10, resume=resume, steps_per_call=steps_per_call)
        else:
            gyre.train_loop(jnp.float32(0), data, {gyre.every(1): step, gyre.every(5): save},
                            callbacks=[gyre.write_to(writer)], stop=10, resume=resume, steps_per_call=steps_per_call)
        writer.close()
        with open(path) as f:
            assert [(r["step"], r["loss"]) for r in map(json.loads, f)] == [(s, float(s)) for s in range(10)]


@pytest.mark.parametrize("kind", ["loop", "train_loop"])
def test_a_run_resumed_after_a_crash_writes_each_step_once_to_tensorboard(tmp_path, kind):
    # was: the crashed run had written steps 5 and 6 after its checkpoint at 5, and the resumed run's
    # new event file wrote them again: TensorBoard read two points at each (no purge_step)
    tb = str(tmp_path / "tb")
    _crash_at_7_and_resume(tmp_path, lambda: gyre.TensorBoardWriter(tb), kind)
    written = tensorboard_values(tb)["loss"]  # (the reader purges as TensorBoard does)
    assert [(s, v.simple_value) for s, v in sorted(written, key=lambda x: x[0])] == [(s, float(s)) for s in range(10)]


def test_what_a_resumed_loop_writes_before_write_to_runs_is_not_purged_by_it(tmp_path):
    # was: write_to told TensorBoard of the resume at its first call, after the tasks before it in the
    # table: their values of the resumed step (6) came before the purge and TensorBoard dropped them
    tb = str(tmp_path / "tb")
    writers = []

    def make_writer():
        writers.append(gyre.TensorBoardWriter(tb))
        return writers[-1]

    def mine(elapsed):
        writers[-1].write_scalars(elapsed.steps, {"mine": float(elapsed.steps)})

    _crash_at_7_and_resume(tmp_path, make_writer, before=mine)
    assert sorted(s for s, _ in tensorboard_values(tb)["mine"]) == list(range(10))


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_run_resumed_after_a_crash_keeps_the_earlier_rows_of_a_csv_or_jsonl_file(tmp_path, kind):
    # was: the resumed run's writer truncated the file, which then held steps 5-9 only
    path = str(tmp_path / f"metrics.{kind}")
    writer = gyre.CSVWriter if kind == "csv" else gyre.JSONLWriter
    _crash_at_7_and_resume(tmp_path, lambda: writer(path))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f)) if kind == "csv" else [json.loads(line) for line in f]
    assert [(int(r["step"]), float(r["loss"])) for r in rows] == [(s, float(s)) for s in range(10)]
    before = open(path).read()
    writer(path).close()  # was: emptied, so a resume the loop refused (PastStopError) lost every row
    assert open(path).read() == before  # a writer closed without writing leaves the file as it was
    with writer(path) as fresh:
        fresh.write_scalars(0, {"loss": 5.0})
    with open(path, newline="") as f:  # a run that writes without resuming starts the file afresh
        rows = list(csv.DictReader(f)) if kind == "csv" else [json.loads(line) for line in f]
    assert [(int(r["step"]), float(r["loss"])) for r in rows] == [(0, 5.0)]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_resume_the_loop_refuses_leaves_the_csv_or_jsonl_file_as_it_was(tmp_path, kind):
    # was: the writer truncated the file when it opened and the refused resume never told it to keep
    # the rows, so a finished 10-step run resumed with stop=5 (PastStopError) left 0 rows
    path, ckpt = str(tmp_path / f"metrics.{kind}"), str(tmp_path / "ckpt")
    writer = gyre.CSVWriter if kind == "csv" else gyre.JSONLWriter

    def step(state, batch):
        return gyre.logs().add_loss("loss", state), state + 1.0

    for resume, stop in ((None, 10), ("latest", 5)):
        refused = pytest.raises(ValueError, match="past stop=5") if resume else contextlib.nullcontext()
        with writer(path) as w, refused:
            gyre.loop(0.0, range(10), {gyre.every(1): [step, gyre.write_to(w)], gyre.every(5): gyre.checkpoint(ckpt)},
                      stop=stop, resume=resume)
        assert len(open(path).read().splitlines()) == 10 + (kind == "csv")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_resumed_run_drops_the_last_line_a_killed_run_left_cut_short(tmp_path, kind):
    # was: a killed run's file ends where its buffer was last written out, mid-line; the CSV's cut
    # line was kept as a record ("3" of "3,3.0": a row at step 3 without a loss; "9,9.2" of
    # "9,9.25" would be a wrong value) when the resume was at a later step
    path = str(tmp_path / f"metrics.{kind}")
    writer = gyre.CSVWriter if kind == "csv" else gyre.JSONLWriter

    def kill_within_step_3():
        text = open(path, newline="").read()
        open(path, "w", newline="").write(text[: text.index("3," if kind == "csv" else '{"step": 3') + 1])

    _crash_at_7_and_resume(tmp_path, lambda: writer(path), between=kill_within_step_3)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f)) if kind == "csv" else [json.loads(line) for line in f]
    assert [(int(r["step"]), float(r["loss"])) for r in rows] == [(s, float(s)) for s in (0, 1, 2, 6, 7, 8, 9)]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_writer_that_wrote_the_failed_loop_resumed_in_the_same_process_writes_each_step_once(tmp_path, kind):
    # was: its own records of the steps from the resumed one were kept (a notebook's cell run again
    # after the crash, with the writer of an earlier cell): step 6 twice in a run crashed at 7, resumed at 6
    path = str(tmp_path / f"metrics.{kind}")
    writer = gyre.CSVWriter(path) if kind == "csv" else gyre.JSONLWriter(path)

    def step(state, batch):
        return gyre.logs().add_loss("loss", state), state + 1.0

    def crash_at_7(elapsed):
        if elapsed.steps == 7:
            raise _Crash

    for steps, resume in (([step, crash_at_7], None), ([step], "latest")):
        with contextlib.suppress(_Crash):
            gyre.loop(jnp.float32(0), gyre.data.batches((jnp.arange(10.0),), 1, epochs=1),
                      {gyre.every(1): [*steps, gyre.write_to(writer)], gyre.every(5): gyre.checkpoint(str(tmp_path / "ck"))},
                      stop=10, resume=resume)
    writer.close()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f)) if kind == "csv" else [json.loads(line) for line in f]
    assert [(int(r["step"]), float(r["loss"])) for r in rows] == [(s, float(s)) for s in range(10)]


def test_a_checkpoints_steps_are_on_disk_soon_after_its_save_so_a_killed_run_resumed_keeps_them(tmp_path):
    # was: the rows sat in the writer's buffer until it was full or closed: a run killed at step 7
    # left no row (one killed at 950 and saved at 801: rows 0-506), so the resumed run's file had
    # nothing before the resumed step (rows 507-800 lost); each save now has write_to flush its rows
    path = str(tmp_path / "metrics.csv")
    left = []

    def read_at_7(elapsed):  # what a kill at step 7 leaves (the writer's thread given a moment)
        if elapsed.steps == 7 and not left:
            deadline = time.monotonic() + 5.0
            while open(path).read().count("\n") < 7 and time.monotonic() < deadline:
                time.sleep(0.01)
            left.append(open(path, newline="").read())

    _crash_at_7_and_resume(tmp_path, lambda: gyre.CSVWriter(path), before=read_at_7,
                           between=lambda: open(path, "w", newline="").write(left[0]))
    with open(path, newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(10))


_EDITS = {  # a CSV of step,loss rows as a user's tool saves it again
    "excel": lambda rows: "\ufeffstep,loss\r\n" + "".join(f"{s},{v}\r\n" for s, v in rows),
    "pandas": lambda rows: ",step,loss\n" + "".join(f"{i},{s},{v}\n" for i, (s, v) in enumerate(rows)),
    "reordered": lambda rows: "loss,step\n" + "".join(f"{v},{s}\n" for s, v in rows),
    "float steps": lambda rows: "step,loss\n" + "".join(f"{s}.0,{v}\n" for s, v in rows),
    "a note": lambda rows: "step,loss\n" + "".join(f"{s},{v}{',checked' if s == 1 else ''}\n" for s, v in rows),
}


@pytest.mark.parametrize("edit", list(_EDITS))
def test_a_resumed_run_keeps_the_rows_of_a_csv_file_the_user_saved_again(tmp_path, edit):
    # was: the earlier rows were dropped (the file truncated) when the header did not start with
    # 'step' (a BOM, pandas' index column, other columns first) or a step read '1.0'; a row with a
    # field beyond the header failed the writer's thread (WriterError) and dropped them too
    path = str(tmp_path / "metrics.csv")

    def save_again():
        with open(path, newline="") as f:
            rows = [(int(r["step"]), r["loss"]) for r in csv.DictReader(f)]
        open(path, "w", newline="").write(_EDITS[edit](rows))

    _crash_at_7_and_resume(tmp_path, lambda: gyre.CSVWriter(path), between=save_again)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(float(r["step"])), float(r["loss"])) for r in rows] == [(s, float(s)) for s in range(10)]


@pytest.mark.parametrize("run", ["test_loop", "predict_loop"])
def test_in_a_test_or_predict_loop_it_writes_that_loops_steps(run):
    writer = Recorder()

    def step(state, batch):
        return gyre.logs().add_metric("x", float(batch))

    hook = gyre.on_test_step if run == "test_loop" else gyre.on_predict_step
    getattr(gyre, run)(None, [1, 2, 3], {hook: step}, callbacks=[gyre.write_to(writer)])
    writer.close()
    assert writer.calls == [(0, {"x": 1.0}), (1, {"x": 2.0}), (2, {"x": 3.0})]
    assert writer.flushes >= 1  # flushed at the loop's end


def test_fused_steps_are_each_written_and_every_reads_less_often():
    writer = Recorder()
    data = [jnp.full((4,), float(i)) for i in range(8)]
    callback = gyre.write_to(writer, every=3)
    gyre.loop(jnp.float32(0.0), data, {gyre.every(1): _step, **callback}, steps_per_call=4)
    writer.flush()
    assert [s for s, _ in writer.calls] == list(range(8))
    assert writer.flushes == 2  # the loop's end, then ours


def test_every_counts_steps_not_calls_when_the_loop_runs_in_blocks(monkeypatch):
    # the block engine calls a display callback once per block (here 10 steps, between events):
    # every=10 must still read the history every 10 steps, not every 10 blocks
    writer = Recorder()
    callback = gyre.write_to(writer, every=10)
    reads = []
    original = type(callback)._send
    monkeypatch.setattr(type(callback), "_send", lambda self, *, wait: (reads.append(wait), original(self, wait=wait)))
    data = [jnp.full((4,), float(i)) for i in range(40)]
    gyre.loop(jnp.float32(0.0), data, {gyre.every(1): _step, gyre.every(10): lambda: None, **callback})
    assert reads == [False, False, False, True]  # at 10, 20 and 30 steps, then the loop's end
    assert [s for s, _ in writer.calls] == list(range(40))


def test_by_hand_it_keeps_its_own_history_until_flushed():
    writer = Recorder()
    callback = gyre.write_to(writer, every=100)
    for elapsed, x in gyre.elapse([1.0, 2.0]):
        callback(elapsed, gyre.logs().add_metric("x", jnp.float32(x)))
    assert writer.calls == []
    callback.flush()
    assert writer.calls == [(0, {"x": 1.0}), (1, {"x": 2.0})]


@pytest.mark.parametrize("every", [0, -1, 1.5, True, "1"])
def test_a_bad_every_is_refused(every):
    with pytest.raises(ValueError, match="every must be a whole number of steps >= 1"):
        gyre.write_to(Recorder(), every=every)


def test_a_writer_is_required():
    with pytest.raises(TypeError, match="needs a gyre writer"):
        gyre.write_to(print)

    class Pictures(gyre.Writer):
        kinds = frozenset({"images"})

    with pytest.raises(TypeError, match=r"Pictures\(\) does not write scalars"):
        gyre.write_to(Pictures())


def test_a_failing_writer_is_named_at_the_loops_end():
    class Broken(gyre.Writer):
        kinds = frozenset({"scalars"})

        def _scalars(self, step, values):
            raise OSError("disk full")

    with pytest.raises(gyre.WriterError, match=r"Broken\(\) failed to write scalars(.|\n)*OSError: disk full"):
        gyre.loop(None, range(3), {gyre.every(1): lambda: gyre.logs().add_loss("loss", 1.0), **gyre.write_to(Broken())})


def test_only_process_zero_reads_and_writes(monkeypatch):
    from gyre.callbacks import _wandb_logger  # where FollowsHistory asks which process it runs on

    monkeypatch.setattr(_wandb_logger, "is_main_process", lambda: False)
    writer = Recorder()
    callback = gyre.write_to(writer)
    gyre.loop(None, range(3), {gyre.every(1): lambda: gyre.logs().add_loss("loss", 1.0), **callback})
    writer.close()
    assert writer.calls == [] and callback.sent == 0


# -- under a schedule in the task table: every record of the loop, from its first step ---------

@jax.jit
def _counting(state, batch):
    return gyre.logs().add_loss("loss", state["s"]), {"s": state["s"] + 1.0}


def _run_scheduled(kind, directory, schedule, *, kill=None, stop=None, resume=None, steps_per_call=1):
    """A run of 60 one-sample steps with write_to under ``schedule`` in the task table (not
    in ``callbacks=``), SIGTERM during step ``kill``; returns what was written and the history."""
    import os
    import signal

    writer = Recorder()

    def sigterm(elapsed):
        if elapsed.steps == kill:
            os.kill(os.getpid(), signal.SIGTERM)

    data = gyre.data.batches((jnp.arange(60.0),), 1, epochs=1)
    state = {"s": jnp.zeros(())}
    options = dict(stop=stop, resume=resume, steps_per_call=steps_per_call)
    if kind == "train_loop":
        tasks = {gyre.on_train_step: _counting, schedule: gyre.write_to(writer), gyre.on_train_batch_end: sigterm}
        _, history, elapsed = gyre.train_loop(
            state, data, tasks, callbacks=[gyre.checkpoint(str(directory))], epoch_duration=20, **options
        )
    else:
        tasks = {gyre.every(1): _counting, schedule: gyre.write_to(writer),
                 gyre.every(1000): gyre.checkpoint(str(directory))}
        if kill is not None:
            tasks[gyre.every(1)] = sigterm
        _, history, elapsed = gyre.loop(state, data, tasks, **options)
    writer.close()
    return writer.calls, history, elapsed


@pytest.mark.parametrize("kind", ["loop", "train_loop"])
@pytest.mark.parametrize("ends", ["sigterm", "stop"])
def test_under_a_schedule_a_resumed_run_writes_the_steps_before_its_first_call(tmp_path, kind, ends):
    # Killed during step 44 (or stopped after it), resumed at step 45: every(10) first calls
    # write_to at step 50, and the records of steps 45 to 49 were never written.
    if ends == "sigterm":
        with pytest.warns(gyre.LoopWarning, match="preempted"):
            first, history, elapsed = _run_scheduled(kind, tmp_path, gyre.every(10), kill=44)
    else:
        first, history, elapsed = _run_scheduled(kind, tmp_path, gyre.every(10), stop=45)
    assert elapsed.steps == 45 and history.stop_reason == ("preempted" if ends == "sigterm" else None)
    resumed, history, elapsed = _run_scheduled(kind, tmp_path, gyre.every(10), resume="latest")
    assert elapsed.steps == 60 and len(history) == 60
    written = first + resumed
    assert [step for step, _ in written] == list(range(60))  # every record, exactly once
    assert [values["loss"] for _, values in written] == history.collect("loss")


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_under_a_schedule_that_starts_late_the_first_steps_are_written(tmp_path, steps_per_call):
    schedule = gyre.after(steps=3).every(10)  # first call at step 3
    written, history, _ = _run_scheduled("loop", tmp_path, schedule, stop=25, steps_per_call=steps_per_call)
    assert [step for step, _ in written] == history.collect("steps") == list(range(25))


def test_wandb_logger_under_a_schedule_sends_the_steps_before_its_first_call():
    class Run:
        def __init__(self):
            self.steps = []

        def log(self, data, step):
            self.steps.append(step)

    def step(elapsed):
        return gyre.logs().add_loss("loss", float(elapsed.steps))

    run = Run()
    gyre.loop(None, range(8), {gyre.every(1): step, gyre.after(steps=5): gyre.wandb_logger(run, interval=0)})
    assert run.steps == list(range(8))


@pytest.mark.parametrize("continued", [True, False])
def test_a_later_loop_on_the_same_history_writes_only_its_own_records(continued):
    # The second loop's write_to, first called at its step 3, reads from the loop's first
    # record, not from the first loop's (a continued clock, or one started again at 0).
    def step(elapsed):
        return gyre.logs().add_loss("loss", float(elapsed.steps))

    def end():  # the first loop's last record, at the continued loop's first step
        return gyre.logs().add_metric("end", 1.0)

    _, history, elapsed = gyre.loop(None, range(4), {gyre.every(1): step}, on_end=end)
    writer = Recorder()
    gyre.loop(None, range(6), {gyre.every(1): step, gyre.after(steps=(4 if continued else 0) + 3): gyre.write_to(writer)},
              history=history, elapsed=elapsed if continued else None)
    writer.close()
    new = list(range(4, 10)) if continued else list(range(6))
    assert len(history) == 11 and [s for s, _ in writer.calls] == new


@jax.jit
def _count(state, batch):
    return gyre.logs().add_loss("loss", state.astype(jnp.float32)), state + 1


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_write_every_writes_multiples_evaluations_and_the_last_step(steps_per_call):
    first, second = Recorder(), Recorder()
    callback = gyre.write_to(gyre.MultiWriter([first, second]), write_every=10)
    evaluation = lambda: gyre.logs().add_metric("loss_test", -1.0)  # noqa: E731
    tasks = {gyre.every(1): _count, (lambda elapsed: elapsed.steps == 17): evaluation, **callback}
    fusing = pytest.warns(gyre.LoopWarning, match="cannot fuse") if steps_per_call > 1 else contextlib.nullcontext()
    with fusing:  # the lambda schedule cannot say when it fires: the table runs step by step
        gyre.loop(jnp.int32(0), range(35), tasks, steps_per_call=steps_per_call)
    first.close(), second.close()
    expected = [(0, {"loss": 0.0}), (10, {"loss": 10.0}), (17, {"loss": 17.0, "loss_test": -1.0}),
                (20, {"loss": 20.0}), (30, {"loss": 30.0}), (34, {"loss": 34.0})]
    assert first.calls == second.calls == expected
    assert callback.sent == 35 and "write_every=10" in repr(callback)


@pytest.mark.parametrize("steps_per_call", [1, 2, 3, 7])
def test_write_every_in_a_train_loop_writes_no_step_before_an_evaluation(steps_per_call):
    # the end of each evaluation (a loop of its own) flushed as if the run had ended: the last
    # training record read then was written as "the last step" (18, 28, 38 of a 43-step run;
    # and with steps_per_call > 1, whose blocks commit earlier, 8 too)
    @jax.jit
    def train_step(state, batch):
        return gyre.logs().add_loss("loss", state), state + 1.0

    @jax.jit
    def test_step(state, batch):
        return gyre.logs().add_loss("loss", state)

    writer = Recorder()
    gyre.train_loop(jnp.float32(0), [jnp.ones(2)] * 43, {gyre.on_train_step: train_step, gyre.on_test_step: test_step},
                    callbacks=[gyre.write_to(writer, write_every=7)], test_dataset=lambda: [jnp.ones(2)],
                    epoch_duration=10, steps_per_call=steps_per_call)
    assert [step for step, _ in writer.calls] == [0, 7, 9, 14, 19, 21, 28, 29, 35, 39, 42]
    assert writer.calls[2] == (9, {"loss": 9.0, "loss_test": 10.0})


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_a_bad_write_every_is_refused(bad):
    with pytest.raises((ValueError, TypeError), match="write_every must be a whole number of steps >= 1"):
        gyre.write_to(gyre.ConsoleWriter(), write_every=bad)


def test_a_bfloat16_training_step_reaches_the_csv_and_the_bar(tmp_path):
    import io

    import optax

    from gyre.steps import managed

    @managed.train_step(policy="bfloat16")
    def train_step(state, batch):
        return gyre.logs().add_loss("mse", jnp.mean((batch * state.params["w"] - 1.0) ** 2)), state

    state = managed.ManagedState.create(params={"w": jnp.float32(0.0)}, tx=optax.sgd(0.1))
    writer, out = gyre.CSVWriter(tmp_path / "m.csv"), io.StringIO()
    gyre.loop(state, [jnp.ones(4)] * 3, {gyre.every(1): [train_step, gyre.keras_bar(total=3, file=out)],
                                         **gyre.write_to(writer)})
    writer.close()
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert [r["step"] for r in rows] == ["0", "1", "2"] and float(rows[0]["mse"]) == 1.0
    assert "mse: " in out.getvalue().splitlines()[-1]


@pytest.mark.parametrize("steps_per_call", [1, 4])
@pytest.mark.parametrize("named", [False, True])
def test_a_loop_that_fails_sends_the_records_of_its_steps(named, steps_per_call):
    # was: a NaN (or any error) ended the loop without sending the history's records: of 40 steps,
    # the writer had step 0 alone, the steps before the NaN never written
    @jax.jit
    def step(state, batch):
        return gyre.logs().add_loss("loss", jnp.where(batch == 30, jnp.nan, batch)), state + 1

    writer, run = Recorder(), []
    logger = gyre.wandb_logger(type("Run", (), {"log": lambda self, data, step: run.append(step)})(), interval=60)
    data = [jnp.float32(i) for i in range(40)]
    with pytest.raises(gyre.NonFiniteError, match="at step 30"):
        if named:
            gyre.train_loop(jnp.float32(0), data, {gyre.on_train_step: step}, steps_per_call=steps_per_call,
                            callbacks=[gyre.write_to(writer), logger])
        else:
            gyre.loop(jnp.float32(0), data, {gyre.every(1): [step], **gyre.write_to(writer), gyre.always(): logger},
                      steps_per_call=steps_per_call)
    steps = [s for s, _ in writer.calls]
    assert steps[:31] == list(range(31)) and run[:31] == list(range(31)) and writer.flushes >= 1
    assert [v["loss"] for _, v in writer.calls[:30]] == [float(i) for i in range(30)]
    assert writer.calls[30][1]["loss"] != writer.calls[30][1]["loss"]  # the NaN itself
