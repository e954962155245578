"""gyre.distributed: a 2-process run (2 CPU devices each) against 1 process of 4 devices,
and the single-process behaviour of initialize, process queries and process-0-only bars.

The workers report through files they write whole (result_<i>.json, result.npz), never
through their output streams: JAX's collectives (gloo) log to those from several C++
threads, and their lines interleave mid-line. Their streams appear only in failure messages.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import gyre

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_multihost_worker.py")
CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(WORKER))), ".jax_cache")
TIMEOUT = 240  # a hang guard, not a speed claim (benchmarks/ holds those)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(out, processes, index, port, devices):
    env = dict(os.environ)
    env.update(
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        GYRE_TEST_JAX_CACHE=CACHE,
    )
    return subprocess.Popen(
        [sys.executable, WORKER, str(out), str(processes), str(index), str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def finish(procs, deadline):
    """The output of each process (for failure messages); kills them all past the deadline."""
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            outputs.append(out)
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        outputs = [p.communicate()[0] for p in procs]
        pytest.fail(f"the multi-host run did not end within {TIMEOUT}s:\n" + tails(outputs))
    return outputs


def tails(outputs):
    return "\n\n".join(f"process {i} output (tail):\n{out[-3000:]}" for i, out in enumerate(outputs))


def start(out, processes, devices):
    port = free_port()
    return [spawn(out, processes, i, port, devices) for i in range(processes)]


def collect(out, processes, outputs, *, retry_allowed):
    """Each process's result_<i>.json; ``None`` when the run is worth one more try (the
    processes failed while connecting: another program may have taken the port)."""
    found = []
    for i in range(processes):
        path = out / f"result_{i}.json"
        found.append(json.loads(path.read_text()) if path.exists() else None)
    if all(r is not None and r["failed_in"] is None for r in found):
        return found
    connecting = all(r is not None and r["failed_in"] in (None, "initialize") for r in found)
    if retry_allowed and connecting:
        for i in range(processes):
            (out / f"result_{i}.json").unlink(missing_ok=True)
        return None
    errors = "\n\n".join(
        f"process {i}: " + ("wrote no result" if r is None else f"failed in {r['failed_in']}:\n{r['error']}")
        for i, r in enumerate(found)
        if r is None or r["failed_in"] is not None
    )
    pytest.fail(f"{errors}\n\n{tails(outputs)}")


def test_two_processes_match_one_process_of_four_devices(tmp_path):
    reference, multi = tmp_path / "reference", tmp_path / "multi"
    reference.mkdir()
    multi.mkdir()
    deadline = time.monotonic() + TIMEOUT
    reference_procs, multi_procs = start(reference, 1, 4), start(multi, 2, 2)  # side by side
    reference_out, multi_out = finish(reference_procs, deadline), finish(multi_procs, deadline)
    (ref,) = collect(reference, 1, reference_out, retry_allowed=False)
    got = collect(multi, 2, multi_out, retry_allowed=True)
    if got is None:  # a second port
        got = collect(multi, 2, finish(start(multi, 2, 2), deadline), retry_allowed=False)
    assert [(r["process_index"], r["process_count"]) for r in got] == [(0, 2), (1, 2)]
    ref_npz, got_npz = np.load(reference / "result.npz"), np.load(multi / "result.npz")
    assert ref["steps"] == got[0]["steps"] == int(got_npz["steps"]) == 20
    for name in ("w1", "b1", "w2", "b2"):
        np.testing.assert_allclose(got_npz[name], ref_npz[name], atol=1e-5, rtol=0)
    # metrics are global: the per-step losses match the reference, and every process's history
    assert len(got[0]["losses"]) == 20
    np.testing.assert_allclose(got[0]["losses"], ref["losses"], atol=1e-5, rtol=0)
    assert got[1]["losses"] == got[0]["losses"]
    # the checkpoint written by both processes together restores on both: keep=1 leaves the
    # loop's final save (step 20), after the scheduled one at step 11
    assert got_npz["checkpoints"].tolist() == ref_npz["checkpoints"].tolist() == [20]
    assert int(got_npz["restored_steps"]) == 20
    np.testing.assert_allclose(got_npz["restored_w1"], ref_npz["restored_w1"], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(got_npz["restored_w1"], got_npz["w1"])  # the end of training
    # only process 0 draws the bar: process 1 prints nothing at all through Python
    assert "20/20 [" in got[0]["printed"] and "20/20 [" in ref["printed"]
    assert got[1]["printed"] == ""


# -- single process --------------------------------------------------------------------------


def test_process_queries_in_a_single_process():
    assert gyre.distributed.process_count() == 1
    assert gyre.distributed.process_index() == 0
    assert gyre.distributed.is_main_process()
    assert not gyre.distributed.is_initialized()


@pytest.mark.parametrize(
    "args, message",
    [
        (("localhost", 2, 0), "host:port"),
        (("127.0.0.1:99999", 2, 0), "host:port"),
        (("127.0.0.1:1234", 0, 0), "num_processes must be an integer >= 1"),
        (("127.0.0.1:1234", 2, -1), "process_id must be an integer >= 0"),
        (("127.0.0.1:1234", 2, 2), "process_id must be below num_processes"),
        (("127.0.0.1:1234", 2.0, 0), "num_processes must be an integer"),
    ],
)
def test_initialize_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        gyre.distributed.initialize(*args)


def test_initialize_reads_the_environment(monkeypatch):
    monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match="JAX_NUM_PROCESSES"):
        gyre.distributed.initialize("127.0.0.1:1234", process_id=0)
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    with pytest.raises(ValueError, match="process_id=3, num_processes=2"):
        gyre.distributed.initialize("127.0.0.1:1234")


def test_initialize_after_the_backend_started_says_to_move_it():
    import jax

    jax.devices()  # the test process has computed already
    with pytest.raises(RuntimeError, match="before JAX starts its backend"):
        gyre.distributed.initialize("127.0.0.1:1234", 2, 0)
    assert not gyre.distributed.is_initialized()


def test_importing_gyre_does_not_start_the_backend():
    code = (
        "import gyre\n"
        "from gyre.core._compat import backends_started\n"
        "assert not backends_started(), 'importing gyre started JAX'\n"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_main_process_only_runs_on_process_zero(monkeypatch):
    import jax

    calls = []

    @gyre.distributed.main_process_only
    def record(elapsed):
        calls.append(elapsed.steps)
        return gyre.logs().add_metric("seen", 1.0)

    _, history, _ = gyre.loop(None, range(2), {gyre.every(1): record})
    assert calls == [0, 1] and history.collect("seen") == [1.0, 1.0]
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    assert record(gyre.Elapsed()) is None and calls == [0, 1]


def test_one_device_strategies_are_refused_with_several_processes(monkeypatch, tmp_path):
    """With several processes, 'jit' would train one model per process on that process's rows
    (only process 0's logged: a silent wrong run), then fail in orbax at the first save."""
    import jax
    import jax.numpy as jnp
    import optax

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match="strategy 'jit' runs on one device, and this run has 2 processes"):
        gyre.managed.ManagedState.create(params={"w": np.zeros(2, np.float32)}, tx=optax.sgd(0.1), strategy="jit")
    with pytest.raises(ValueError, match="strategy='data_parallel'"):
        gyre.get_strategy("jit").compile(lambda s, b: (gyre.logs(), s))
    state = gyre.TrainState.create(apply_fn=lambda v, x, **_: x @ v["params"]["w"],
                                   params={"w": jnp.zeros((3, 2))}, tx=optax.sgd(0.1))
    with pytest.raises(ValueError, match="runs on one device"):
        gyre.fit(state, [(np.ones((4, 3), np.float32), np.zeros(4, np.int32))],
                 loss_fn=lambda logits, y: (logits.sum(), {}), num_epochs=1, log_dir=str(tmp_path), progress=False)
    assert gyre.get_strategy("eager").compile(lambda s, b: (gyre.logs(), s)) is not None  # eager: uncompiled, for debugging


def test_a_state_that_differs_between_processes_is_refused(monkeypatch):
    """Each process gives its copy of a replicated state, and JAX trusts them to agree: a state
    initialised per process (process 1 with other parameters) trained on silently, the copies
    0.5 apart to the end, the loss a mix of both."""
    import jax
    import optax
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    other = {"value": False}

    def gather(mine):  # process 1's digest: the same, or another state's
        return np.stack([mine, mine + 1 if other["value"] else mine])

    monkeypatch.setattr(multihost_utils, "process_allgather", gather)
    params = {"w": np.ones((4, 2), np.float32), "b": np.zeros(2, np.float32)}
    state = gyre.managed.ManagedState.create(params=params, tx=optax.sgd(0.1), strategy="data_parallel")
    assert np.asarray(state.params["w"]).sum() == 8
    other["value"] = True
    with pytest.raises(ValueError, match="the processes hold different initial states") as err:
        gyre.managed.ManagedState.create(params=params, tx=optax.sgd(0.1), strategy="data_parallel")
    assert "processes [1]" in str(err.value) and "same seed" in str(err.value)


def test_processes_feeding_batches_of_different_sizes_are_refused_at_the_first(monkeypatch):
    """Each process gives its rows of one global batch, and JAX trusts them to agree: processes
    feeding 8 and 6 rows trained on silently, each logging another loss (a real 2-process run
    gave 0.871 and 1.162 against 1.066)."""
    import jax
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_count", lambda: 2)  # 8 devices: 4 of each process
    gathered = []

    def gather(mine):  # process 1 feeds 6 rows
        gathered.append(mine)
        return np.stack([mine, mine - 2])

    monkeypatch.setattr(multihost_utils, "process_allgather", gather)
    with pytest.raises(ValueError, match=r"(?s)the processes feed batches of different sizes.*rows per process: \[8, 6\]"):
        gyre.DataParallel().place_batch((np.zeros((8, 2), np.float32), np.zeros(8, np.int32)))
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: (gathered.append(mine), np.stack([mine, mine]))[1])
    strategy = gyre.DataParallel()
    for _ in range(3):
        strategy.place_batch((np.zeros((8, 2), np.float32), np.zeros(8, np.int32)))
    assert len(gathered) == 2  # once per strategy: its first batch


PREEMPT_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_preempt_worker.py")


def spawn_preempt(out, processes, index, port, devices, mode):
    env = dict(os.environ)
    env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    return subprocess.Popen(
        [sys.executable, PREEMPT_WORKER, str(out), str(processes), str(index), str(port), mode],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def test_sigterm_to_two_processes_saves_one_step_and_resumes_on_one_process(tmp_path):
    deadline = time.monotonic() + TIMEOUT
    port = free_port()
    procs = [spawn_preempt(tmp_path, 2, i, port, 2, "train") for i in range(2)]
    while not all((tmp_path / f"started_{i}").exists() for i in range(2)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            finish(procs, deadline)
            pytest.fail("the two processes did not start training")
        time.sleep(0.05)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    outputs = finish(procs, deadline)
    results = [json.loads((tmp_path / f"train_{i}.json").read_text()) for i in range(2)]
    assert all(r["failed"] is None for r in results), tails(outputs) + str(results)
    steps = results[0]["steps"]
    assert results[1]["steps"] == steps and 5 < steps < 2000  # one step, agreed by both
    assert [r["stop_reason"] for r in results] == ["preempted", "preempted"]
    assert results[0]["checkpoints"] == results[1]["checkpoints"] == [steps]

    resume = spawn_preempt(tmp_path, 1, 0, free_port(), 4, "resume")
    outputs = finish([resume], deadline)
    result = json.loads((tmp_path / "resume_0.json").read_text())
    assert result["failed"] is None, tails(outputs) + str(result)
    assert result["steps"] == 2000 and result["checkpoints"][0] == steps
