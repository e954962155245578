"""Two versions of gyre in the same run: does a change lower any ratio of a benchmark?

What it does
------------
A ratio such as ``gyre.loop / hand-written`` moves by several percent between two runs on a
small machine, so "no ratio lower than before" cannot be read from two runs made an hour apart.
This script runs one benchmark (``loop_overhead.py`` by default, with the options you give it)
as alternating processes, one against the source tree of ``--base`` (a git revision, extracted
with ``git archive`` into a temporary folder) and one against this checkout's ``src/``: base,
new, new, base, base, new... (``--pairs`` pairs; the order flips each pair, so that neither
side always runs first). Both sides run this checkout's benchmark file; only ``import gyre``
differs (``PYTHONPATH``). Each process writes its rows (``--json``); each row's ratio is
against the hand-written loop of the same process, which cancels a slow patch of the machine
for that process.

The report gives, per variant, the median ratio of each side, and the median over pairs of
``new / base`` (the pair's two processes ran back to back) with its min..max. A variant whose
median ``new / base`` is below ``1 - --tolerance`` (default 0.02) is listed as lower. The
script always exits 0: it is a report, not a test.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/ab_checkouts.py --base 015430f --pairs 5 -- --hidden 32 --rounds 3
    .venv/bin/python benchmarks/ab_checkouts.py --base HEAD~10 -- --hidden 8 --dispatch-wait-us 200 --rounds 3
    .venv/bin/python benchmarks/ab_checkouts.py --base 9f4a01d --pairs 10 -- --hidden 32 --rounds 5 --variant gyre.loop

On a 2-vCPU VM, ratios of the same gyre move by up to 10% between processes: 4 pairs of 3
rounds each could not tell a change from noise, 10 pairs of 5 rounds of one or two variants
(``--variant``, fewer compilations per process) could. The hand-written reference rows
(``hand-written keeping its outputs``, no gyre in them) show how far noise alone moves a row.

Everything after ``--`` goes to the benchmark (``--json`` is added).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def extract(revision: str, into: str) -> str:
    """``src/`` of ``revision`` under ``into``; returns that ``src`` folder."""
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return os.path.join(into, "src")


def run_once(src: str, benchmark: str, options: Sequence[str], out: str) -> dict[str, float]:
    """One process of ``benchmark`` importing gyre from ``src``: ``{variant: ratio}``."""
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run([sys.executable, os.path.join(HERE, benchmark), *options, "--json", out],
                          env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{benchmark} failed with {src}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with open(out) as f:
        rows = json.load(f)["rows"]
    return {row["variant"]: row["ratio"] for row in rows if row["ratio"] is not None}


def compare(base: list[dict[str, float]], new: list[dict[str, float]], tolerance: float) -> str:
    """The markdown table of the module docs.

    Example:
        >>> print(compare([{"a": 1.0}, {"a": 0.9}], [{"a": 0.99}, {"a": 0.92}], 0.02))
        | variant | base (median) | new (median) | new / base, median of pairs (min..max) |
        |---|---:|---:|---:|
        | a | 0.950 | 0.955 | 1.006 (0.990..1.022) |
        <BLANKLINE>
        no variant's new / base is below 0.98
    """
    lines = ["| variant | base (median) | new (median) | new / base, median of pairs (min..max) |",
             "|---|---:|---:|---:|"]
    lower = []
    for name in base[0]:
        pairs = [n[name] / b[name] for b, n in zip(base, new, strict=True) if name in n]
        if not pairs:
            continue
        mid = statistics.median(pairs)
        if mid < 1 - tolerance:
            lower.append(name)
        lines.append(f"| {name} | {statistics.median(b[name] for b in base):.3f} "
                     f"| {statistics.median(n[name] for n in new if name in n):.3f} "
                     f"| {mid:.3f} ({min(pairs):.3f}..{max(pairs):.3f}) |")
    verdict = f"lower than base by more than {tolerance:.0%}: {', '.join(lower)}" if lower else \
        f"no variant's new / base is below {1 - tolerance:.2f}"
    return "\n".join([*lines, "", verdict])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--pairs", type=int, default=5, help="base/new process pairs (default 5)")
    parser.add_argument("--benchmark", default="loop_overhead.py", help="the benchmark file (default loop_overhead.py)")
    parser.add_argument("--tolerance", type=float, default=0.02, help="a drop below 1 - this is listed (default 0.02)")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.pairs < 1:
        parser.error(f"--pairs must be >= 1, got {args.pairs}")
    folder = tempfile.mkdtemp(prefix="gyre-ab-")
    try:
        sides = {"base": extract(args.base, folder), "new": os.path.join(ROOT, "src")}
        results: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
        for i in range(args.pairs):
            for side in ("base", "new") if i % 2 == 0 else ("new", "base"):
                results[side].append(run_once(sides[side], args.benchmark, options, os.path.join(folder, "out.json")))
                print(f"pair {i + 1}/{args.pairs} {side}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in results[side][-1].items()), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{args.benchmark} {' '.join(options)}: base {args.base} against this checkout, {args.pairs} pairs\n")
    print(compare(results["base"], results["new"], args.tolerance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
