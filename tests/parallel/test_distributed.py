"""gyre.distributed: a 2-process run (2 CPU devices each) against 1 process of 4 devices,
and the single-process behaviour of initialize, process queries and process-0-only bars."""

import io
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import gyre
from gyre.callbacks import bars

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_multihost_worker.py")
CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(WORKER))), ".jax_cache")
TIMEOUT = 90


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
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(procs, deadline):
    """(returncode, stdout, stderr) of each process; kills them all past the deadline."""
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            results.append((proc.returncode, out, err))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        outputs = [p.communicate() for p in procs]
        pytest.fail(
            f"multi-host run took more than {TIMEOUT}s; stderr:\n"
            + "\n".join(err[-3000:] for _, err in outputs)
        )
    return results


def test_two_processes_match_one_process_of_four_devices(tmp_path):
    reference, multi = tmp_path / "reference", tmp_path / "multi"
    reference.mkdir()
    multi.mkdir()
    start = time.monotonic()
    deadline = start + TIMEOUT
    for attempt in range(2):  # a second port if another program took the first meanwhile
        port = free_port()
        procs = [spawn(reference, 1, 0, free_port(), 4)] if attempt == 0 else []
        procs += [spawn(multi, 2, i, port, 2) for i in range(2)]
        results = finish(procs, deadline)
        if attempt == 0:
            ref_result, results = results[0], results[1:]
            assert ref_result[0] == 0, ref_result[2][-3000:]
        if all(rc == 0 for rc, _, _ in results):
            break
        if attempt == 1 or not any("in use" in err for _, _, err in results):
            pytest.fail("\n\n".join(f"process {i} rc={rc}:\n{err[-3000:]}" for i, (rc, _, err) in enumerate(results)))
    duration = time.monotonic() - start

    ref = np.load(reference / "result.npz")
    got = np.load(multi / "result.npz")
    assert int(got["steps"]) == int(ref["steps"]) == 20
    for name in ("w1", "b1", "w2", "b2"):
        np.testing.assert_allclose(got[name], ref[name], atol=1e-5, rtol=0)
    # metrics are global: the per-step losses match the reference and every process's history
    np.testing.assert_allclose(got["losses"], ref["losses"], atol=1e-5, rtol=0)
    assert len(got["losses"]) == 20
    for i in range(2):
        np.testing.assert_array_equal(np.load(multi / f"losses_{i}.npy"), got["losses"])
    # the checkpoint written by both processes together restores on both
    assert got["checkpoints"].tolist() == ref["checkpoints"].tolist() == [11]
    assert int(got["restored_steps"]) == 11
    np.testing.assert_allclose(got["restored_w1"], ref["restored_w1"], atol=1e-5, rtol=0)
    # only process 0 draws the bar; process 1 prints nothing of gyre's (gloo logs its peers)
    (_, out0, _), (_, out1, _) = results
    assert "20/20 [" in out0
    assert [line for line in out1.splitlines() if not line.startswith("[Gloo]")] == []
    assert duration < 60, f"the multi-host test took {duration:.1f}s"


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
        "from jax._src import xla_bridge\n"
        "assert not xla_bridge.backends_are_initialized(), 'importing gyre started JAX'\n"
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


@pytest.mark.parametrize("make", [lambda out: gyre.keras_bar(total=3, file=out),
                                  lambda out: gyre.tqdm_bar(total=3, file=out)])
def test_bars_draw_only_on_process_zero(monkeypatch, make):
    out = io.StringIO()
    bar = make(out)
    monkeypatch.setattr(bars, "is_main_process", lambda: False)
    metric = lambda: gyre.logs().add_metric("m", 1.0)  # noqa: E731
    gyre.loop(None, range(3), {gyre.every(1): [metric, bar]}, on_end=bar.on_train_end)
    assert out.getvalue() == ""
    monkeypatch.setattr(bars, "is_main_process", lambda: True)
    out = io.StringIO()
    bar = make(out)
    gyre.loop(None, range(3), {gyre.every(1): [metric, bar]}, on_end=bar.on_train_end)
    assert "3/3" in out.getvalue()
