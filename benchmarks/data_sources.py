"""Where grain pays for ``gyre.data.arrays``: batches per second of the grain path
(``workers=2``) as a ratio against the numpy path (``workers=0``) on the same arrays.

What it measures
----------------
The training batches of ``gyre.data.arrays((x, y), batch_size, workers=...)``, pulled as
fast as they come (no step consumes them: the data path alone), on three workloads:

* ``CIFAR-shaped``: 10,000 float32 images of 32 x 32 x 3 with int32 labels, batch 128 (a
  gather of 128 random rows: 1.5 MB a batch);
* ``CIFAR-shaped + augment``: the same with ``augment=True`` (a random crop with padding 4
  and a random horizontal flip of every image, in numpy);
* ``digits-shaped``: 1,797 float32 vectors of 64 values, batch 64 (the digits MLP's batches).

Each workload builds its sources once (the grain pipeline runs one element per batch on two
threads; both paths give the same batches, bit for bit), warms them up, then runs
``--rounds`` interleaved rounds (the order alternates) of ``--batches`` batches each. The
report is a markdown table of the median batches/s of each path and the median of the
per-round ratios ``grain / numpy`` (a slow patch of the machine slows a whole round; the
ratio within a round cancels it). Above 1: grain pays. The script is a report, not a test,
and always exits 0.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/data_sources.py                   # 300 batches x 7 rounds
    .venv/bin/python benchmarks/data_sources.py --batches 100 --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import gyre

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

WORKERS = 2


def workloads(seed: int) -> dict[str, tuple[tuple[np.ndarray, np.ndarray], int, bool]]:
    """``name -> ((x, y), batch_size, augment)``."""
    rng = np.random.default_rng(seed)
    images = rng.random((10_000, 32, 32, 3), dtype=np.float32)
    image_labels = rng.integers(0, 10, 10_000).astype(np.int32)
    digits = rng.random((1_797, 64), dtype=np.float32)
    digit_labels = rng.integers(0, 10, 1_797).astype(np.int32)
    return {
        "CIFAR-shaped, batch 128": ((images, image_labels), 128, False),
        "CIFAR-shaped + augment, batch 128": ((images, image_labels), 128, True),
        "digits-shaped, batch 64": ((digits, digit_labels), 64, False),
    }


def pull(source: Any, count: int) -> float:
    """Seconds to pull ``count`` batches."""
    start = time.perf_counter()
    for _ in itertools.islice(source, count):
        pass
    return time.perf_counter() - start


def measure(data: Any, batch_size: int, augment: bool, batches: int, rounds: int, seed: int) -> dict[str, list[float]]:
    """Seconds per round of each path, interleaved."""
    paths = {
        workers: gyre.data.arrays(data, batch_size, seed=seed, augment=augment or None, workers=workers).train
        for workers in (0, WORKERS)
    }
    for source in paths.values():
        pull(source, max(20, batches // 5))  # warm-up: the first epoch's order, grain's threads
    seconds: dict[str, list[float]] = {"numpy": [], "grain": []}
    for r in range(rounds):
        order = (0, WORKERS) if r % 2 == 0 else (WORKERS, 0)
        for workers in order:
            seconds["numpy" if workers == 0 else "grain"].append(pull(paths[workers], batches))
    paths[WORKERS].close()
    return seconds


def report(results: dict[str, dict[str, list[float]]], batches: int, rounds: int) -> str:
    lines = [
        f"gyre.data.arrays training batches/s, workers=0 (numpy) vs workers={WORKERS} (grain), "
        f"{batches} batches x {rounds} rounds, medians; {os.cpu_count()} CPU cores, "
        f"{platform.python_implementation()} {platform.python_version()}",
        "",
        f"| workload | numpy batches/s | grain ({WORKERS} threads) batches/s | grain / numpy |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds in results.items():
        numpy_rate = batches / statistics.median(seconds["numpy"])
        grain_rate = batches / statistics.median(seconds["grain"])
        ratio = statistics.median(n / g for n, g in zip(seconds["numpy"], seconds["grain"], strict=True))
        lines.append(f"| {name} | {numpy_rate:,.0f} | {grain_rate:,.0f} | {ratio:.2f} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=300, help="batches per round (default 300)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arrays and the shuffles")
    bench_json.add_option(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the benchmark and prints its report."""
    args = parse_args(argv)
    results = {}
    for name, (data, batch_size, augment) in workloads(args.seed).items():
        results[name] = measure(data, batch_size, augment, args.batches, args.rounds, args.seed)
        shown = ", ".join(f"{path} {args.batches / statistics.median(s):,.0f}" for path, s in results[name].items())
        print(f"{name}: batches/s {shown}", flush=True)
    print()
    text = report(results, args.batches, args.rounds)
    print(text)
    rows = [bench_json.row(name, statistics.median(n / g for n, g in zip(s["numpy"], s["grain"], strict=True)),
                           "numpy path (workers=0)", value=round(args.batches / statistics.median(s["grain"])),
                           unit="grain batches/s") for name, s in results.items()]
    bench_json.write(args.json, benchmark="data_sources", steps=args.batches, rounds=args.rounds, rows=rows,
                     report=text, note="not against hand-written JAX: the grain path against the numpy path of "
                     "the same gyre.data.arrays (above 1: grain pays)")


if __name__ == "__main__":
    main()
