"""What checkpointing costs a training run, as a ratio against the same run without it.

What it measures
----------------
The MLP of ``loop_overhead.py`` (64 -> 256 -> 256 -> 10, relu; optax adam 1e-3) trained on the
scikit-learn digits data with batches of 64 for ``--steps`` steps (default 5000) with
``gyre.loop(state, batches, {gyre.every(1): step, ...}, stop=N)``, three ways in one process on
the same batches:

* ``no checkpoint``: the step alone;
* ``every 500``: ``gyre.every(500): gyre.checkpoint(dir)`` (the defaults: asynchronous saves,
  ``keep=3``, CRC-32 checksums), plus the loop's final save at the end; the run is timed until
  ``gyre.loop`` returns, which is once every save is on disk;
* ``every 50``: the same every 50 steps (for information: 100 saves in a 5000-step run);
* ``orbax by hand, every 500``: the floor that orbax itself sets: a plain callback under
  ``gyre.every(500)`` calling an orbax ``CheckpointManager.save(step, StandardSave(state))``
  (asynchronous, ``max_to_keep=3``) and a last save waited for at the end: no clock, history,
  callback state, checksums, NaN check or integrity record, so it cannot resume exactly.

A save holds the params, the optimizer state, the clock, the history's new records and the
loop's bookkeeping (``loop.snapshot()``); each run writes to a fresh directory, removed after.
The variants run interleaved for ``--rounds`` rounds (the order rotates), each from a fresh copy
of the initial state, after an untimed warm-up of each. The report is a markdown table of the
median steps/s, the median of the per-round ratios to ``no checkpoint`` (a slow patch of the
machine slows a whole round, the ratio within a round cancels it), the time added per save, and
the verdict for ``every 500`` (target: ratio >= 0.95). The script always exits 0: it is a report,
not a test.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/checkpoint_overhead.py                # 5000 steps x 5 rounds
    .venv/bin/python benchmarks/checkpoint_overhead.py --steps 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import optax

import gyre

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loop_overhead import fresh_copy, init_params, make_batches, make_step  # noqa: E402

TARGET = 0.95
NONE = "no checkpoint"
INTERVALS = {"every 500": 500, "every 50": 50}
VERDICT = "every 500"
HAND = "orbax by hand, every 500"
HAND_EVERY = 500

Runner = Callable[[Any], float]


def make_runners(step: Callable[..., Any], batches: Sequence[Any], steps: int, root: str) -> dict[str, Runner]:
    """One function per variant: trains ``steps`` steps from the state it is given, and returns
    the seconds from the call of ``gyre.loop`` to its return (its saves on disk)."""
    counter = iter(range(1_000_000))

    def plain(state: Any) -> float:
        start = time.perf_counter()
        state, _, _ = gyre.loop(state, batches, {gyre.every(1): step}, stop=steps)
        jax.block_until_ready(state)
        return time.perf_counter() - start

    def checkpointed(every: int) -> Runner:
        def run(state: Any) -> float:
            directory = os.path.join(root, f"run{next(counter)}")
            ckpt = gyre.checkpoint(directory)
            start = time.perf_counter()
            state, _, _ = gyre.loop(state, batches, {gyre.every(1): step, gyre.every(every): ckpt}, stop=steps)
            jax.block_until_ready(state)
            seconds = time.perf_counter() - start
            ckpt.close()
            shutil.rmtree(directory, ignore_errors=True)
            return seconds

        return run

    def by_hand(state: Any) -> float:
        import orbax.checkpoint as ocp

        directory = os.path.join(root, f"run{next(counter)}")
        manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=3))

        def save(elapsed: gyre.Elapsed, state: Any) -> None:
            manager.save(int(elapsed.steps) + 1, args=ocp.args.StandardSave(state))

        start = time.perf_counter()
        state, _, elapsed = gyre.loop(state, batches, {gyre.every(1): step, gyre.every(HAND_EVERY): save}, stop=steps)
        if (steps - 1) % HAND_EVERY:
            manager.save(int(elapsed.steps), args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
        seconds = time.perf_counter() - start
        manager.close()
        shutil.rmtree(directory, ignore_errors=True)
        return seconds

    runners = {NONE: plain, **{name: checkpointed(every) for name, every in INTERVALS.items()}}
    return {**runners, HAND: by_hand}


def saves_in(steps: int, every: int) -> int:
    """How many saves a run of ``steps`` steps makes under ``every(every)`` (the scheduled ones
    after steps 0, every, 2*every, ... and the final save unless the last step is saved)."""
    scheduled = len(range(0, steps, every))
    return scheduled + (0 if (steps - 1) % every == 0 else 1)


def report(seconds: dict[str, list[float]], steps: int, rounds: int) -> str:
    """The markdown table and the verdict line."""
    base = seconds[NONE]
    lines = [
        f"{steps} steps x {rounds} rounds, interleaved; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU(s), jax {jax.__version__} on {jax.default_backend()}",
        "",
        "| variant | saves per run | steps/s (median) | ratio to no checkpoint (median of rounds) "
        "| ms added per save (median) |",
        "|---|---:|---:|---:|---:|",
    ]
    verdict_ratio = float("nan")
    for name, values in seconds.items():
        rate = steps / statistics.median(values)
        ratio = statistics.median(b / v for b, v in zip(base, values, strict=True))
        if name == NONE:
            lines.append(f"| {name} | 0 | {rate:,.0f} | 1.000 | - |")
            continue
        saves = saves_in(steps, INTERVALS.get(name, HAND_EVERY))
        added = statistics.median((v - b) / saves * 1e3 for b, v in zip(base, values, strict=True))
        lines.append(f"| {name} | {saves} | {rate:,.0f} | {ratio:.3f} | {added:.1f} |")
        if name == VERDICT:
            verdict_ratio = ratio
    verdict = "PASS" if verdict_ratio >= TARGET else "FAIL"
    lines += ["", f"target: {VERDICT} ratio >= {TARGET:.2f} -> {verdict} ({verdict_ratio:.3f})"]
    if HAND in seconds:
        floor = statistics.median(b / v for b, v in zip(base, seconds[HAND], strict=True))
        lines.append(f"orbax's own floor on this machine ({HAND}): {floor:.3f}; gyre's {VERDICT} against "
                     f"it: {verdict_ratio / floor:.3f}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="steps per run (default 5000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the batches and the model")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the benchmark and prints its report."""
    args = parse_args(argv)
    batches = make_batches(args.steps, args.seed)
    step = make_step(optax.adam(1e-3))
    params = init_params(jax.random.key(args.seed))
    initial = jax.block_until_ready((params, optax.adam(1e-3).init(params)))
    root = tempfile.mkdtemp(prefix="gyre-ckpt-bench-")
    try:
        runners = make_runners(step, batches, args.steps, root)
        warm = make_runners(step, batches[:600], 600, root)
        for run in warm.values():  # compile the step and the history's transfers, warm orbax
            run(fresh_copy(initial))
        seconds: dict[str, list[float]] = {name: [] for name in runners}
        names = tuple(runners)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                seconds[name].append(runners[name](fresh_copy(initial)))
            shown = ", ".join(f"{name} {args.steps / seconds[name][-1]:,.0f}" for name in names)
            print(f"round {r + 1}/{args.rounds}: steps/s {shown}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(report(seconds, args.steps, args.rounds))


if __name__ == "__main__":
    main()
