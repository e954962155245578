"""Exact resume after SIGKILL: runs killed at random steps and resumed end as the run that was
never interrupted, bit for bit.

What it measures
----------------
The job is the suite's kill test job (``tests/resume/kill_job.py``): the digits MLP trained with
``gyre.train_loop`` over shuffled ``gyre.data.batches`` (22 steps per epoch), dropout drawn from
the state's per-step key, an evaluation every epoch, ``gyre.early_stopping``, and a checkpoint
every 5 steps, with ``resume="latest"``. Each job is its own Python process, as a user's run.

First one uninterrupted run gives the reference. Then ``--trials`` times (default 20): a fresh
run folder, ``--kills`` processes (default 1) that each kill themselves with SIGKILL during a
random step (no clean-up of any kind; an asynchronous save may be in flight), then one process
that resumes and runs to the end. A trial is exact when its final params and optimizer state
(every leaf: dtype and bytes) and its history (every record, the wall-clock fields ``time`` and
``date`` left out) equal the reference's. The kill steps are drawn from ``--seed`` over the
whole run, so they fall in the first epoch, mid-epoch, at epoch ends and next to the saves.

The last line is ``exact resumes: N/T`` (target: every trial). The script exits 0 either way:
it is a report, not a test (the suite's ``tests/resume/test_kill.py`` is the test).

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/kill_resume.py                     # 20 trials, one kill each
    .venv/bin/python benchmarks/kill_resume.py --trials 5 --kills 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "resume", "kill_job.py")
WALL = ("time", "date")  # the clock's wall-time fields differ between any two runs


def run_job(run_dir: str, steps: int, kill_at: int | None = None) -> subprocess.CompletedProcess[str]:
    """One process of the job: to the end, or killed during step ``kill_at``."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one device, as a user's run
    args = [sys.executable, JOB, run_dir, str(steps)] + ([str(kill_at)] if kill_at is not None else [])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)


def outcome(run_dir: str) -> tuple[dict[str, np.ndarray], list[dict[str, Any]], int]:
    """The final leaves, the history's records without wall time, and the step count."""
    with np.load(os.path.join(run_dir, "result.npz")) as leaves:
        arrays = {k: leaves[k] for k in leaves.files}
    with open(os.path.join(run_dir, "history.json")) as f:
        history = json.load(f)
    records = [{k: v for k, v in r.items() if k not in WALL} for r in history["records"]]
    return arrays, records, history["steps"]


def differences(reference: tuple[Any, ...], got: tuple[Any, ...]) -> list[str]:
    """What differs between two outcomes (empty when they are equal bit for bit)."""
    (a, ra, sa), (b, rb, sb) = reference, got
    found = []
    if sa != sb:
        found.append(f"steps {sb} != {sa}")
    if a.keys() != b.keys():
        found.append("different leaves")
    else:
        found += [f"leaf {k}" for k in a if a[k].dtype != b[k].dtype or not np.array_equal(a[k], b[k])]
    if len(ra) != len(rb):
        found.append(f"{len(rb)} history records != {len(ra)}")
    else:
        found += [f"history record {i}" for i, (x, y) in enumerate(zip(ra, rb, strict=True)) if x != y][:3]
    return found


def trial(root: str, index: int, steps: int, kills: list[int], reference: tuple[Any, ...]) -> tuple[bool, str]:
    """Kills a fresh run at each of ``kills`` in turn, resumes it to the end, compares."""
    run_dir = os.path.join(root, f"trial{index}")
    for k in kills:
        done = run_job(run_dir, steps, kill_at=k)
        if done.returncode != -signal.SIGKILL:
            return False, f"the job killed at step {k} exited {done.returncode}: {done.stderr[-500:]}"
    done = run_job(run_dir, steps)
    if done.returncode != 0:
        return False, f"the resumed job exited {done.returncode}: {done.stderr[-500:]}"
    found = differences(reference, outcome(run_dir))
    shutil.rmtree(run_dir, ignore_errors=True)
    return not found, ", ".join(found) or "exact"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="killed-and-resumed runs (default 20)")
    parser.add_argument("--kills", type=int, default=1, help="kills per trial before the resume (default 1)")
    parser.add_argument("--steps", type=int, default=70, help="steps of each run (default 70: 3 epochs and a bit)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the kill steps")
    bench_json.add_option(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the reference and the trials, printing one line per trial and the count."""
    args = parse_args(argv)
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="gyre-kill-bench-")
    try:
        start = time.perf_counter()
        reference_dir = os.path.join(root, "reference")
        done = run_job(reference_dir, args.steps)
        if done.returncode != 0:
            print(done.stdout + done.stderr)
            raise SystemExit(f"the uninterrupted run failed with exit code {done.returncode}")
        reference = outcome(reference_dir)
        print(f"reference: {reference[2]} steps, {len(reference[1])} history records "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
        exact = 0
        for i in range(args.trials):
            kills = sorted(rng.sample(range(1, args.steps), args.kills))
            t0 = time.perf_counter()
            ok, detail = trial(root, i, args.steps, kills, reference)
            exact += ok
            print(f"trial {i + 1:2d}: killed at step(s) {kills} -> {detail} ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"exact resumes: {exact}/{args.trials}")
    bench_json.write(args.json, benchmark="kill_resume", steps=None, rounds=args.trials, report=f"exact resumes: {exact}/{args.trials}",
                     rows=[bench_json.row("exact resumes", exact / args.trials, "every trial",
                                          value=f"{exact}/{args.trials}", unit="trials")],
                     note="a correctness check, not a speed: the share of killed-and-resumed runs that end "
                     "bit for bit as the uninterrupted run (target: 1.0)")


if __name__ == "__main__":
    main()
