"""Runs every benchmark and writes the benchmark page, ``docs/benchmarks.md``, with its plots.

What it does
------------
Each benchmark of this folder runs in its own process (``python benchmarks/<name>.py <options>
--json <file>``), one after the other, its printed report shown as it goes. From the JSON each
one writes (``bench_json.py``), the page gets, per benchmark: what it measures, the command that
runs it alone, a bar chart of its ratios (``images/bench_<name>.png``, beside the page, a line
at 1.0), the table of its ratios (each the median over the rounds of the per-round ratio, the
rounds said) and its own full report. At the top: the machine (CPU model and core count, the GPU
if ``jax.devices()`` has one, the load average at the start), the date, the git commit (and
whether the tree had uncommitted changes), the jax and jaxlib versions and the command that
reproduces the page (``GYRE_BENCH_KEEP=DIR`` in the environment keeps each benchmark's JSON
results in DIR). A benchmark that fails is on the page as failed, with the end of its
output; the others still run.

A full run keeps each benchmark's own defaults except where :data:`BENCHMARKS` says otherwise
(the page says so too); ``--quick`` runs each with a few steps and rounds, to check that this
script and the benchmarks run (the page then says its figures mean nothing).

How to run
----------
From the repository root::

    PYTHONPATH=src .venv/bin/python benchmarks/run_all.py                 # every benchmark, ~35 min
    PYTHONPATH=src .venv/bin/python benchmarks/run_all.py --quick         # a few minutes
    PYTHONPATH=src .venv/bin/python benchmarks/run_all.py --only fused_steps --out /tmp/b.md
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One entry of the page: a script of this folder and its options."""

    name: str
    script: str
    about: str  # what it measures, one or two sentences
    full: tuple[str, ...] = ()  # the options of a full run (empty: the script's defaults)
    quick: tuple[str, ...] = ()  # the options of --quick
    reduced: str = ""  # why a full run does not use the script's defaults, when it does not


BENCHMARKS = (
    Benchmark(
        "loop_overhead", "loop_overhead.py",
        "Steps per second of every rung (`gyre.loop`, `train_loop`, jaxloop's `OuterLoop`, `write_to` a "
        "TensorBoard writer, `TrainerModule.train_model`, `gyre.fit`) training the same digits MLP "
        "(64-256-256-10) as a hand-written `for batch in batches: state = step(state, batch)` loop.",
        full=("--rounds", "5"),
        quick=("--steps", "40", "--rounds", "2"),
        reduced="5 rounds instead of 15",
    ),
    Benchmark(
        "slow_jit", "loop_overhead.py",
        "`loop_overhead.py` under `slow_jit.py`'s stand-in for a host-bound GPU: every `jax.jit` call waits "
        "200 us outside the GIL, as a dispatch on a virtualised GPU costs, on a tiny MLP (hidden 8) whose "
        "step is mostly that fixed cost; fusing steps (`steps_per_call`) pays one wait for many steps.",
        full=("--hidden", "8", "--dispatch-wait-us", "200", "--steps", "1000", "--rounds", "5"),
        quick=("--hidden", "8", "--dispatch-wait-us", "200", "--steps", "40", "--rounds", "2"),
        reduced="5 rounds instead of 15",
    ),
    Benchmark(
        "host_path", "host_path.py",
        "Where a per-step loop's host time goes on a tiny MLP (hidden 8): the loop thread's CPU per step of "
        "`gyre.loop` (with and without a progress bar) against the hand-written loop, split into inside "
        "and outside the step's call.",
        full=("--rounds", "5"),
        quick=("--steps", "40", "--rounds", "2"),
        reduced="5 rounds instead of 9",
    ),
    Benchmark(
        "checkpoint_overhead", "checkpoint_overhead.py",
        "What `gyre.checkpoint` (asynchronous orbax saves, checksums, the loop's snapshot) costs a run "
        "that saves every 500 or 50 steps, against the same loop without saves, and what orbax alone "
        "costs a hand-written JAX loop.",
        full=("--steps", "2000", "--rounds", "3"),
        quick=("--steps", "60", "--rounds", "1"),
        reduced="2000 steps x 3 rounds instead of 5000 x 5",
    ),
    Benchmark(
        "fit_overhead", "fit_overhead.py",
        "A whole `gyre.fit` call (its step, evaluation every epoch, TensorBoard writer and final "
        "checkpoint) against a hand-written JAX loop doing the same epochs and evaluations, with and "
        "without orbax saves.",
        quick=("--steps", "22", "--rounds", "1"),
    ),
    Benchmark(
        "trainer_overhead", "trainer_overhead.py",
        "A whole `TrainerModule.train_model` call (validation every epoch, step logs, metric files, its "
        "resume checkpoint) against a hand-written JAX loop doing the same epochs, with and without an "
        "orbax save at the end.",
        quick=("--steps", "19", "--rounds", "1"),
    ),
    Benchmark(
        "fused_steps", "fused_steps.py",
        "Fused steps: `gyre.loop(..., steps_per_call=100)` against a hand-written `lax.scan` over the same "
        "stacked batches, and against the per-step jit loop.",
        full=("--rounds", "5"),
        quick=("--steps", "40", "--rounds", "2", "--chunk", "10"),
        reduced="5 rounds instead of 15",
    ),
    Benchmark(
        "writer_cost", "writer_cost.py",
        "What each writer (TensorBoard, CSV, JSONL, W&B and MLflow when installed) costs per written step, "
        "in process CPU over the same loop without a writer; the ratio is to gyre's TensorBoardWriter "
        "(lower is cheaper).",
        quick=("--steps", "20", "--rounds", "1", "--only", "TensorBoardWriter"),
    ),
    Benchmark(
        "data_sources", "data_sources.py",
        "Batches per second of `gyre.data.arrays`'s grain path (2 threads) against its numpy path on the "
        "same arrays, for CIFAR-shaped images (with and without augmentation) and digits-shaped vectors.",
        quick=("--batches", "5", "--rounds", "1"),
    ),
    Benchmark(
        "kill_resume", "kill_resume.py",
        "Exact resume: a `gyre.train_loop` job killed with SIGKILL at a random step and resumed ends bit "
        "for bit as the run never interrupted (params, optimizer state, history).",
        full=("--trials", "2"),
        quick=("--trials", "1", "--steps", "12"),
        reduced="2 trials instead of 20 (each trial is two processes that start JAX; on the busy machine of a "
        "trial run one job process took a minute)",
    ),
    Benchmark(
        "cli_kill_resume", "cli_kill_resume.py",
        "Exact resume from the command line: `gyre fit` killed with SIGKILL at a random moment and continued "
        "with `gyre resume` ends bit for bit as the run never interrupted.",
        full=("--trials", "1"),
        quick=("--trials", "1"),
        reduced="1 trial instead of 20 (with a resume checkpoint every epoch): a trial is a `gyre fit` and "
        "a `gyre resume` process, and on the busy machine of a trial run the uninterrupted reference alone "
        "took two minutes",
    ),
)
NAMES = tuple(b.name for b in BENCHMARKS)
TAIL = 30  # lines of a failed benchmark's output shown on the page


# -- the machine -------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (or :mod:`platform`'s guess elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def gpus() -> str:
    """The accelerators ``jax.devices()`` sees (``"no GPU"`` when it only has CPUs)."""
    try:
        import jax

        devices = jax.devices()
    except Exception as err:  # noqa: BLE001  (a broken backend is worth a line, not a crash)
        return f"unknown (jax.devices() failed: {type(err).__name__})"
    found = collections.Counter(d.device_kind for d in devices if d.platform != "cpu")
    if not found:
        return "no GPU"
    return ", ".join(f"{n} x {kind}" for kind, n in found.items())


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit() -> str:
    """The checked-out commit and whether the tree has uncommitted changes."""
    head = git("rev-parse", "--short=12", "HEAD")
    if not head:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    subject = git("log", "-1", "--format=%s")
    state = "the tree had uncommitted changes" if dirty else "clean tree"
    return f"`{head}` ({state}): {subject if len(subject) <= 80 else subject[:79] + '…'}"


def machine(argv: Sequence[str]) -> dict[str, str]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return {
        "CPU": f"{cpu_model()}, {os.cpu_count()} cores",
        "GPU": gpus(),
        "load average at start": f"{load} (1, 5, 15 min)",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "jax / jaxlib": f"{version('jax')} / {version('jaxlib')}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}, {platform.system()}",
        "command": "`" + shlex.join(["python", "benchmarks/run_all.py", *argv]) + "`",
    }


# -- running ---------------------------------------------------------------------------------


def run_one(bench: Benchmark, options: Sequence[str], folder: str) -> dict[str, Any]:
    """Runs one benchmark in its own process, its output shown as it comes; returns its JSON
    results, with ``seconds`` and, when it failed, ``failed`` and ``tail`` (its last lines)."""
    path = os.path.join(folder, f"{bench.name}.json")
    command = [sys.executable, os.path.join(HERE, bench.script), *options, "--json", path]
    print(f"\n=== {bench.name}: {shlex.join(command[1:])}", flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL)
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line.rstrip("\n"))
    seconds = time.perf_counter() - start
    if proc.returncode == 0 and os.path.isfile(path):
        with open(path) as f:
            result = json.load(f)
    else:
        result = {"failed": f"exit code {proc.returncode}" + ("" if proc.returncode else ", no results written"),
                  "tail": list(tail), "rows": []}
    result["seconds"] = seconds
    return result


# -- the page --------------------------------------------------------------------------------


def plot(bench: Benchmark, result: dict[str, Any], path: str) -> bool:
    """A horizontal bar chart of the benchmark's ratios with a line at 1.0; False when it has
    no ratio to draw."""
    rows = [r for r in result["rows"] if r["ratio"] is not None]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    against = {r["against"] for r in rows}
    labels = [r["variant"] for r in rows][::-1]
    ratios = [r["ratio"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.38 * len(rows) + 1.1), dpi=80)
    ax.barh(labels, ratios, color=["#c44e52" if x < 1.0 else "#4c72b0" for x in ratios]
            if not result.get("lower_is_better") else "#4c72b0")
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    for y, x in enumerate(ratios):
        ax.text(x, y, f" {x:.3f}", va="center", fontsize=8)
    ax.set_xlim(0, max(ratios + [1.0]) * 1.18)
    ax.set_xlabel(f"ratio to {against.pop()}" if len(against) == 1 else "ratio to its reference")
    ax.set_title(bench.name, fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def ratio_table(result: dict[str, Any]) -> list[str]:
    """The rows as a markdown table: variant, ratio (and its reference), value."""
    rounds = result.get("rounds")
    trials = result["benchmark"].endswith("kill_resume")
    head = f"median of {rounds} rounds" if not trials else f"{rounds} trials"
    lines = [f"| variant | ratio ({head}) | against | {'value' if not result['rows'] else result['rows'][0]['unit']} |",
             "|---|---:|---|---:|"]
    for r in result["rows"]:
        ratio = "(reference)" if r["ratio"] is None else f"{r['ratio']:.3f}"
        value = r["value"]
        shown = f"{value:,}" if isinstance(value, int) else ("" if value is None else str(value))
        lines.append(f"| {r['variant']} | {ratio} | {r['against']} | {shown} |")
    return lines


def report_block(report: str) -> list[str]:
    """A benchmark's printed report as markdown: its tables kept, every other line its own
    paragraph (a line of plain text would otherwise run into the next)."""
    out: list[str] = []
    for line in report.strip().splitlines():
        if line.startswith("|"):
            if out and out[-1] and not out[-1].startswith("|"):
                out.append("")
            out.append(line)
        elif line.strip():
            out += ["", line.lstrip("# ")] if out else [line.lstrip("# ")]
        else:
            out.append("")
    return out


def page(results: dict[str, dict[str, Any]], info: dict[str, str], quick: bool, total: float,
         image_dir: str, pending: Sequence[str] = ()) -> str:
    lines = ["# Benchmarks", "",
             "gyre's loops against hand-written JAX on the same model, data and machine. This page is written by "
             "`benchmarks/run_all.py` (do not edit it by hand): rerun it to refresh every figure.", ""]
    if quick:
        lines += ["!!! warning \"A quick run\"", "    This page comes from `run_all.py --quick`: a few steps and "
                  "rounds per benchmark, to check that the scripts run. Its figures are noise, not measurements.", ""]
    if pending:
        lines += ["!!! note \"Not finished\"", "    The run that wrote this page had not run these yet: "
                  + ", ".join(f"`{name}`" for name in pending) + ".", ""]
    lines += ["## The machine", "",
              f"**Machine:** {info['CPU']}; {info['GPU']}. Load average at start: {info['load average at start']}.",
              "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in info.items()]
    lines += [f"| wall time of the run | {total / 60:.1f} min |", ""]
    if os.cpu_count() and os.cpu_count() <= 4:
        lines += ["The machine is small (and busy when the load average above exceeds its cores): wall-time "
                  "figures move by several percent between runs. Each benchmark interleaves "
                  "its variants and reports the median of the per-round ratios, so a slow patch slows every "
                  "variant of a round alike; the CPU-time tables in the full reports are less disturbed still.",
                  ""]
    lines += ["## How to read the figures", "",
              "Each ratio is a variant's speed (steps or batches per second) divided by its reference's, measured "
              "in the same round, then the median over the rounds: 1.0 is as fast as the reference, above 1.0 "
              "faster. The reference is hand-written JAX unless the row says otherwise (the checkpoint, writer "
              "and data benchmarks compare like with like; the kill benchmarks count exact resumes). Each "
              "benchmark's own report, below its table, gives its targets (PASS/FAIL) and CPU times.", ""]
    reduced = [b for b in BENCHMARKS if b.name in results and b.reduced and not quick]
    if reduced:
        lines += ["Run with fewer rounds or trials than their scripts' defaults, so that the whole page ran in "
                  "about half an hour on this machine (the command under each benchmark runs it as here; without "
                  "options it runs its defaults):", ""]
        lines += [f"- `{b.name}`: {b.reduced}." for b in reduced]
        lines.append("")
    for bench in BENCHMARKS:
        if bench.name not in results:
            continue
        result = results[bench.name]
        options = bench.quick if quick else bench.full
        lines += [f"## {bench.name}", "", bench.about, "",
                  "Run alone: `" + shlex.join(["python", f"benchmarks/{bench.script}", *options]) + "` "
                  f"({result['seconds'] / 60:.1f} min here).", ""]
        if "failed" in result:
            lines += [f"**Failed** ({result['failed']}). The end of its output:", "", "```text",
                      *result["tail"], "```", ""]
            continue
        if result.get("note"):
            lines += [result["note"][0].upper() + result["note"][1:] + ".", ""]
        image = f"bench_{bench.name}.png"
        if plot(bench, result, os.path.join(image_dir, image)):
            lines += [f"![{bench.name}: ratios](images/{image})", ""]
        lines += ratio_table(result) + ["", "### Its full report", ""] + report_block(result["report"]) + [""]
    return "\n".join(lines).rstrip() + "\n"


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a few steps and rounds per benchmark: checks that everything runs (minutes)")
    parser.add_argument("--only", action="append", choices=NAMES, metavar="NAME",
                        help=f"run only this benchmark (repeatable; one of: {', '.join(NAMES)})")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"),
                        help="the page to write (default docs/benchmarks.md); its plots go to images/ beside it")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    info = machine(argv)
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only]
    out = os.path.abspath(args.out)
    image_dir = os.path.join(os.path.dirname(out), "images")
    os.makedirs(image_dir, exist_ok=True)
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    keep = os.environ.get("GYRE_BENCH_KEEP")  # a folder that keeps each benchmark's JSON
    with tempfile.TemporaryDirectory(prefix="gyre-run-all-") as scratch:
        folder = keep or scratch
        if keep:
            os.makedirs(keep, exist_ok=True)
            with open(os.path.join(keep, "machine.json"), "w") as f:
                json.dump({"info": info, "quick": args.quick}, f)
        for i, bench in enumerate(chosen):
            results[bench.name] = run_one(bench, bench.quick if args.quick else bench.full, folder)
            if keep:  # with its wall time, so that a page can be written again from the folder
                with open(os.path.join(keep, f"{bench.name}.json"), "w") as f:
                    json.dump(results[bench.name], f, indent=1)
            pending = [b.name for b in chosen[i + 1:]]  # the page so far: a run cut short keeps it
            text = page(results, info, args.quick, time.perf_counter() - start, image_dir, pending)
            with open(out, "w") as f:
                f.write(text)
    failed = [name for name, r in results.items() if "failed" in r]
    print(f"\nwrote {out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
