"""What the trainer and fit cost per step and once per run, apart, against the hand-written loop.

What it measures
----------------
``loop_overhead.py`` times whole runs of ``--steps`` steps (default 2000): a run of the trainer or
of fit ends with a durable checkpoint save (orbax) and a writer flush, which a hand-written loop
that saves nothing does not do, so on a short run these fixed costs weigh as much as the steps.
This script times the same variants (``loop_overhead.py``'s MLP, steps and runners) at two run
lengths, ``--short`` and ``--long`` steps, interleaved over ``--rounds`` rounds, and splits each
run into

* a **per-step** cost: (time of the long run - time of the short run) / (long - short), the same
  round's two runs (what every further step costs: the loop, the step, the logging);
* a **fixed** cost: the short run's time less its steps at that per-step cost (what a run pays
  once: its start, its final checkpoint save and wait, its writers' flush).

It prints a markdown table of the medians over rounds: per-step microseconds, the per-step ratio
hand-written / variant (1.0 = as fast per step as the hand-written loop), and the fixed
milliseconds, for the hand-written loop, the hand-written loop with orbax's save at the end,
the hand-written loop over the trainer's own compiled step with that save, ``gyre.loop``,
``TrainerModule.train_model`` and ``gyre.fit``. It is a report: no target, exit status 0.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/rung_slope.py --hidden 32
    .venv/bin/python benchmarks/rung_slope.py --hidden 8 --dispatch-wait-us 200 --rounds 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

import jax
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_overhead as lo  # noqa: E402  (installs the dispatch wait from argv before gyre loads)

VARIANTS = (lo.HAND, lo.HAND_SAVE, lo.LOOP, lo.TRAINER, lo.HAND_TRAINER, lo.FIT)  # the trainer compiles its step before the hand loop over it runs


def split(short: int, long: int, short_s: float, long_s: float) -> tuple[float, float]:
    """``(seconds per step, fixed seconds)`` of a variant from its short and long run.

    Example:
        >>> split(1000, 5000, 0.15, 0.55)  # 100 us per step, 50 ms once
        (0.0001, 0.05)
    """
    per_step = (long_s - short_s) / (long - short)
    return round(per_step, 12), round(short_s - per_step * short, 12)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=1000, help="steps of the short run (default 1000)")
    parser.add_argument("--long", type=int, default=5000, help="steps of the long run (default 5000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--hidden", type=int, default=32, help="width of the hidden layers (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dispatch-wait-us", type=float, default=0.0,
                        help="the GPU stand-in of loop_overhead.py (read before gyre is imported)")
    args = parser.parse_args(argv)
    if not 1 <= args.short < args.long or args.rounds < 1:
        parser.error("need 1 <= --short < --long and --rounds >= 1")
    lo.LAYERS = (64, args.hidden, args.hidden, 10)
    batches = lo.make_batches(args.long, args.seed)
    tx = optax.adam(lo.LEARNING_RATE)
    params = lo.init_params(jax.random.PRNGKey(args.seed))
    initial = jax.block_until_ready((params, tx.init(params)))
    step = lo.make_step(tx)
    logdir = tempfile.mkdtemp(prefix="gyre-bench-slope-")
    try:
        trainer, fit_state = lo.make_rungs(batches, args.hidden, args.seed, logdir, 1)
        runners = {}
        for n in (args.short, args.long):
            data, folder = batches[:n], os.path.join(logdir, str(n))  # each length's runs in their own folders
            found = {**lo.make_runners(step, data, n, folder), **lo.rung_runners(trainer, fit_state, data, folder, 1)}
            runners[n] = lo.warm_up({name: found[name] for name in VARIANTS}, initial)
        per_step: dict[str, list[float]] = {name: [] for name in VARIANTS}
        fixed: dict[str, list[float]] = {name: [] for name in VARIANTS}
        ratio: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for r in range(args.rounds):
            times: dict[str, dict[int, float]] = {name: {} for name in VARIANTS}
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for name in order:
                for n in (args.short, args.long):
                    run = runners[n][name]
                    state = lo.fresh_copy(getattr(run, "initial", initial))
                    start = time.perf_counter()
                    run(state)
                    times[name][n] = time.perf_counter() - start
            for name in VARIANTS:
                each, once = split(args.short, args.long, times[name][args.short], times[name][args.long])
                per_step[name].append(each)
                fixed[name].append(once)
            for name in VARIANTS:
                ratio[name].append(per_step[lo.HAND][-1] / per_step[name][-1])
            print(f"round {r + 1}/{args.rounds}: us/step " + ", ".join(
                f"{name} {per_step[name][-1] * 1e6:.1f}" for name in VARIANTS), flush=True)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    print(f"\n{args.short} and {args.long} steps x {args.rounds} rounds, interleaved; MLP {lo.LAYERS}, "
          f"dispatch wait {args.dispatch_wait_us:g} us\n")
    print("| variant | per step (us, median) | per-step ratio hand / variant (median of rounds) | fixed per run (ms, median) |")
    print("|---|---:|---:|---:|")
    for name in VARIANTS:
        print(f"| {name} | {statistics.median(per_step[name]) * 1e6:.1f} | {statistics.median(ratio[name]):.3f} "
              f"| {statistics.median(fixed[name]) * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
