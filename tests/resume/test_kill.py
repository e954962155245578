"""The kill test: a run SIGKILLed at three steps and resumed each time ends bit for bit as
the run that was never interrupted (params, optimizer state and history).

The job (``kill_job.py``) trains the digits MLP with ``train_loop`` over shuffled
``gyre.data.batches`` (22 steps per epoch), dropout keys drawn from the state's per-step key,
an evaluation every epoch, early stopping, and a checkpoint every 5 steps, with
``resume="latest"``. ``benchmarks/kill_resume.py`` runs the same with 20 random kill points.
"""

import json
import os
import random
import signal
import subprocess
import sys

import numpy as np

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kill_job.py")
STEPS = 70
WALL = ("time", "date")  # the clock's wall-time fields differ between any two runs


def run(run_dir, kill_at=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one device, as a user's run
    args = [sys.executable, JOB, str(run_dir), str(STEPS)] + ([str(kill_at)] if kill_at is not None else [])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def outcome(run_dir):
    with np.load(os.path.join(run_dir, "result.npz")) as leaves:
        arrays = {k: leaves[k] for k in leaves.files}
    with open(os.path.join(run_dir, "history.json")) as f:
        history = json.load(f)
    records = [{k: v for k, v in r.items() if k not in WALL} for r in history["records"]]
    return arrays, records, history["steps"]


def test_three_kills_and_resumes_end_as_the_run_never_interrupted(tmp_path):
    whole = tmp_path / "whole"
    done = run(whole)
    assert done.returncode == 0, done.stdout + done.stderr
    rng = random.Random(10)
    kills = [rng.randrange(2, 21), rng.randrange(27, 40), rng.randrange(48, 62)]  # epochs 0, 1-2, 2-3
    killed = tmp_path / "killed"
    for k in kills:
        done = run(killed, kill_at=k)
        assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    done = run(killed)
    assert done.returncode == 0, done.stdout + done.stderr

    (a, ra, sa), (b, rb, sb) = outcome(whole), outcome(killed)
    assert sa == sb
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key
    assert len(ra) == len(rb)
    for i, (x, y) in enumerate(zip(ra, rb, strict=True)):
        assert x == y, f"history record {i} differs"
