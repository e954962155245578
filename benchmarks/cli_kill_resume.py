"""Exact resume of the command line after SIGKILL: ``gyre fit`` killed at a random moment and
continued with ``gyre resume`` ends as the run that was never interrupted, bit for bit.

What it measures
----------------
The job is ``gyre fit examples/configs/digits_mlp.yaml`` made small (6 epochs of 19 steps, 32
hidden units), run as a user runs it: ``python -m gyre`` in its own process, into its own run
folder. First uninterrupted runs give the reference (``--jobs`` of them at once, as the trials
run, and all equal bit for bit; with ``trainer.resume_every_minutes=0``: a resume checkpoint every
epoch). Then ``--trials`` times (default 20): ``gyre fit`` into a fresh
folder, killed with SIGKILL after a random wall time (no clean-up of any kind: a save of the best
model or of the resume checkpoint may be in flight), then one ``gyre resume`` that must finish.
Half the trials keep the default ``resume_every_minutes`` (10: no resume checkpoint before the
end, so the resume starts over), half save one every epoch.

The kill moments are drawn from ``--seed`` between the moment the run folder holds its
``config.yaml`` (before it there is no run: ``gyre resume`` says so) and 1.5 times the reference's
length after it, so they fall in start-up, compilation, mid-epoch, validation and the saves (a
run that ends before its kill runs again, killed twice as soon).

A trial is exact when, against the reference: the final training state (``resume/<last step>``:
parameters, optimizer state, every leaf's dtype and bytes), the best model (``checkpoints/``:
its step and its leaves), the printed test metrics, ``metrics/*.json`` and ``history.csv`` are
equal (their wall-time fields left out). The last line is ``exact resumes: N/T`` (target:
every trial). The script exits 0 either way: it is a report, not a test (the suite's
``tests/trainer/test_run.py`` kills at the moments that used to lose a run).

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/cli_kill_resume.py               # 20 trials, one at a time
    .venv/bin/python benchmarks/cli_kill_resume.py --jobs 3      # three at a time
    .venv/bin/python benchmarks/cli_kill_resume.py --trials 4 --seed 1 --keep  # failed trials' folders kept
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "examples", "configs", "digits_mlp.yaml")
_READING = threading.Lock()
#: The kill moments span this many times the reference's length: a trial runs beside others, on a
#: machine as busy as at the reference or busier (one that ends first runs again, killed sooner).
STRETCH = 1.5
SMALL = ["trainer.train_epochs=6", "model.c_hid=32", "trainer.enable_progress_bar=false"]


def _env() -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    env.pop("XLA_FLAGS", None)  # one device, as a user's run
    return env


def fit(run_dir: str, minutes: int) -> subprocess.Popen[str]:
    """``gyre fit`` of the small digits MLP into ``run_dir``, started (not waited for)."""
    args = [sys.executable, "-m", "gyre", "fit", CONFIG, *SMALL, f"trainer.resume_every_minutes={minutes}",
            f"trainer.logger.log_dir={run_dir}"]
    return subprocess.Popen(args, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def resume(run_dir: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "gyre", "resume", run_dir, "--quiet"]
    return subprocess.run(args, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)


def leaves(step_dir: str) -> dict[str, np.ndarray]:
    """Every leaf of a checkpoint's saved state, by its path (keys as their raw bits)."""
    import jax
    import orbax.checkpoint as ocp

    tree = ocp.StandardCheckpointer().restore(os.path.join(step_dir, "state"))
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    out = {}
    for path, leaf in flat:
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out[jax.tree_util.keystr(path)] = np.asarray(leaf)
    return out


def _steps(folder: str) -> list[int]:
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit()) if os.path.isdir(folder) else []


def _timeless(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("time", "date") and not k.endswith("/time")}


def outcome(run_dir: str, stdout: str) -> dict[str, Any]:
    """What a finished run leaves, its wall-time fields left out."""
    resumes, bests = _steps(os.path.join(run_dir, "resume")), _steps(os.path.join(run_dir, "checkpoints"))
    with open(os.path.join(run_dir, "history.csv")) as f:
        history = [_timeless(row) for row in csv.DictReader(f)]
    metrics = {}
    for name in sorted(os.listdir(os.path.join(run_dir, "metrics"))):
        with open(os.path.join(run_dir, "metrics", name)) as f:
            metrics[name] = _timeless(json.load(f))
    return {
        "resume steps": resumes,
        "best steps": bests,
        "final state": leaves(os.path.join(run_dir, "resume", str(resumes[-1]))) if resumes else {},
        "best model": leaves(os.path.join(run_dir, "checkpoints", str(bests[-1]))) if bests else {},
        "printed test metrics": [line for line in stdout.splitlines() if line.startswith("test/")],
        "metrics files": metrics,
        "history.csv": history,
    }


def differences(reference: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """What differs between two outcomes (empty when they are equal bit for bit)."""
    found = []
    for key, want in reference.items():
        have = got[key]
        if key in ("final state", "best model"):
            if want.keys() != have.keys():
                found.append(f"{key}: other leaves")
            else:
                bad = [k for k in want if want[k].dtype != have[k].dtype or want[k].tobytes() != have[k].tobytes()]
                found += [f"{key}: {len(bad)} leaves differ ({bad[0]})"] if bad else []
        elif want != have:
            found.append(f"{key} differ")
    return found


def state_at_kill(run_dir: str) -> str:
    """What the killed run left: its resume and best-model steps (``+tmp``: a save cut short)."""
    def listing(name: str) -> str:
        folder = os.path.join(run_dir, name)
        if not os.path.isdir(folder):
            return "-"
        names = sorted(n for n in os.listdir(folder) if n[0].isdigit())
        return ",".join(n.replace(".orbax-checkpoint-tmp", "+tmp").split("-")[0] for n in names) or "-"

    if not os.path.isfile(os.path.join(run_dir, "config.yaml")):
        return "no config.yaml"
    return f"resume/ {listing('resume')}, checkpoints/ {listing('checkpoints')}"


def trial(run_dir: str, minutes: int, after: float, reference: dict[str, Any]) -> tuple[bool, str]:
    """Kills ``gyre fit`` ``after`` seconds after its run folder holds ``config.yaml``, resumes
    it to the end, compares. A run that ends before its kill is run again, killed sooner."""
    reruns = 0
    for _ in range(4):
        shutil.rmtree(run_dir, ignore_errors=True)
        job = fit(run_dir, minutes)
        while job.poll() is None and not os.path.isfile(os.path.join(run_dir, "config.yaml")):
            time.sleep(0.005)
        try:
            job.wait(timeout=after)
        except subprocess.TimeoutExpired:
            os.kill(job.pid, signal.SIGKILL)
            job.communicate()
            break
        if job.returncode != 0:
            return False, f"gyre fit exited {job.returncode}: {job.stderr.read()[-300:]}"
        after, reruns = after / 2, reruns + 1  # it ran faster than the reference
    else:
        return False, "gyre fit ended before every kill"
    left = state_at_kill(run_dir) + (f" (ran to its end {reruns}x, then killed at {after:.2f} s)" if reruns else "")
    done = resume(run_dir)
    if done.returncode != 0:
        return False, f"{left}; gyre resume exited {done.returncode}: {done.stderr.strip()[-600:]}"
    with _READING:  # one orbax read at a time
        found = differences(reference, outcome(run_dir, done.stdout))
    return not found, f"{left} -> " + (", ".join(found) or "exact")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="killed-and-resumed runs (default 20)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the kill moments")
    parser.add_argument("--jobs", type=int, default=1, help="trials run at once (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the run folders of failed trials")
    bench_json.add_option(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the reference and the trials, printing one line per trial and the count."""
    args = parse_args(argv)
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="gyre-cli-kill-bench-")
    try:
        # the reference runs as the trials will: --jobs runs at once (a busy machine's pace), all
        # equal bit for bit; their mean length spreads the kill moments over the whole run
        starts = time.perf_counter()
        jobs = [fit(os.path.join(root, f"reference{j}"), 0) for j in range(args.jobs)]
        first = total = 0.0
        outcomes = []
        for j, job in enumerate(jobs):
            while job.poll() is None and not os.path.isfile(os.path.join(root, f"reference{j}", "config.yaml")):
                time.sleep(0.01)
            first += (time.perf_counter() - starts) / args.jobs  # the run folder holds a run from here on
        for j, job in enumerate(jobs):
            stdout, stderr = job.communicate()
            total += (time.perf_counter() - starts) / args.jobs
            if job.returncode != 0:
                print(stdout + stderr)
                raise SystemExit(f"the uninterrupted run failed with exit code {job.returncode}")
            outcomes.append(outcome(os.path.join(root, f"reference{j}"), stdout))
        reference = outcomes[0]
        unequal = [j for j, other in enumerate(outcomes) if differences(reference, other)]
        if unequal:
            raise SystemExit(f"uninterrupted runs {unequal} differ from the first: the run is not deterministic")
        print(f"reference: {len(reference['history.csv'])} steps in {total:.1f} s (config.yaml at {first:.1f} s; "
              f"{args.jobs} run(s) at once, equal)", flush=True)
        draws = [(i, 0 if i % 2 == 0 else 10, rng.random() * STRETCH * (total - first)) for i in range(args.trials)]

        def one(draw: tuple[int, int, float]) -> bool:
            i, minutes, after = draw
            t0 = time.perf_counter()
            ok, detail = trial(os.path.join(root, f"trial{i}"), minutes, after, reference)
            print(f"trial {i + 1:2d}: resume_every_minutes={minutes:2d}, killed {after:5.2f} s after config.yaml: "
                  f"{detail} ({time.perf_counter() - t0:.1f} s)", flush=True)
            if ok:
                shutil.rmtree(os.path.join(root, f"trial{i}"), ignore_errors=True)
            return ok

        with ThreadPoolExecutor(args.jobs) as pool:  # the trials are processes: threads wait for them
            exact = sum(pool.map(one, draws))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"exact resumes: {exact}/{args.trials}")
    bench_json.write(args.json, benchmark="cli_kill_resume", steps=None, rounds=args.trials, report=f"exact resumes: {exact}/{args.trials}",
                     rows=[bench_json.row("exact resumes", exact / args.trials, "every trial",
                                          value=f"{exact}/{args.trials}", unit="trials")],
                     note="a correctness check, not a speed: the share of killed-and-resumed runs that end "
                     "bit for bit as the uninterrupted run (target: 1.0)")


if __name__ == "__main__":
    main()
