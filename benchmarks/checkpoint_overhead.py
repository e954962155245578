"""What checkpointing costs a training run, as a ratio against the same run without it.

What it measures
----------------
The MLP of ``loop_overhead.py`` (64 -> 256 -> 256 -> 10, relu; optax adam 1e-3) trained on the
scikit-learn digits data with batches of 64 for ``--steps`` steps (default 5000) with
``gyre.loop(state, batches, {gyre.every(1): step, ...}, stop=N)``, three ways in one process on
the same batches:

* ``gyre.loop, no checkpoint``: the step alone (the reference of the gyre variants);
* ``gyre.checkpoint every 500``: ``gyre.every(500): gyre.checkpoint(dir)`` (the defaults:
  asynchronous saves, ``keep=3``, CRC-32 checksums), plus the loop's final save; timed until
  ``gyre.loop`` returns, which is once every save is on disk. The verdict (ratio >= 0.95);
* ``gyre.checkpoint every 50``: the same every 50 steps (for information);
* ``gyre.loop + orbax by hand every 500``: a plain callback calling orbax's
  ``CheckpointManager.save(step, StandardSave(state))`` (asynchronous, ``max_to_keep=3``) and a
  last save waited for: no clock, history, callback state, checksums, NaN check or record, so
  it cannot resume exactly; what gyre's own work adds shows against it;
* ``hand-written JAX`` without and with the same orbax saves every 500 steps: the cost orbax
  itself has on this machine, with no gyre at all.

A save holds the params, the optimizer state, the clock, the history's new records and the
loop's bookkeeping (``loop.snapshot()``); each run writes to a fresh directory, removed after.
The variants run interleaved for ``--rounds`` rounds (the order rotates), each from a fresh copy
of the initial state, after an untimed warm-up of each. The report is a markdown table of the
median steps/s, the median of the per-round ratios to each variant's reference (a slow patch of
the machine slows a whole round, the ratio within a round cancels it), the time added per save,
the verdict for ``gyre.checkpoint every 500`` (target: ratio >= 0.95), that ratio against
orbax's own cost (target >= 0.97), the same run against hand-written JAX + orbax every 500 run
for run (steps/s over steps/s: what the issue's "≥ 0.97 of hand-written JAX + orbax" reads as
literally; target >= 0.97), and the time gyre adds per save over orbax by hand in the
same loop (target <= 5 ms). The script always exits 0: it is a report, not a test.

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
import bench_json  # noqa: E402
from loop_overhead import fresh_copy, init_params, make_batches, make_step  # noqa: E402

TARGET = 0.95
AGAINST_ORBAX = 0.97  # gyre.checkpoint's ratio over orbax's own ratio (hand JAX + orbax)
ADDED_MS = 5.0  # what gyre may add per save over orbax by hand in the same loop
EVERY = 500
NONE = "gyre.loop, no checkpoint"
VERDICT = "gyre.checkpoint every 500"
OFTEN = "gyre.checkpoint every 50"
BY_HAND = "gyre.loop + orbax by hand every 500"
JAX = "hand-written JAX, no checkpoint"
JAX_ORBAX = "hand-written JAX + orbax every 500"
BASELINE = {VERDICT: NONE, OFTEN: NONE, BY_HAND: NONE, JAX_ORBAX: JAX}  # each ratio's reference
SAVE_EVERY = {VERDICT: EVERY, OFTEN: 50, BY_HAND: EVERY, JAX_ORBAX: EVERY}

Runner = Callable[[Any], float]


def _orbax_manager(directory: str) -> Any:
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=3))


def _orbax_save(manager: Any, step: int, state: Any) -> None:
    import orbax.checkpoint as ocp

    manager.save(step, args=ocp.args.StandardSave(state))


def make_runners(step: Callable[..., Any], batches: Sequence[Any], steps: int, root: str) -> dict[str, Runner]:
    """One function per variant: trains ``steps`` steps from the state it is given, and returns
    the seconds until the final state is computed and every save is on disk."""
    counter = iter(range(1_000_000))

    def new_directory() -> str:
        return os.path.join(root, f"run{next(counter)}")

    def plain(state: Any) -> float:
        start = time.perf_counter()
        state, _, _ = gyre.loop(state, batches, {gyre.every(1): step}, stop=steps)
        jax.block_until_ready(state)
        return time.perf_counter() - start

    def checkpointed(every: int) -> Runner:
        def run(state: Any) -> float:
            directory = new_directory()
            ckpt = gyre.checkpoint(directory)
            start = time.perf_counter()
            state, _, _ = gyre.loop(state, batches, {gyre.every(1): step, gyre.every(every): ckpt}, stop=steps)
            jax.block_until_ready(state)  # gyre.loop returns once its saves are on disk
            seconds = time.perf_counter() - start
            ckpt.close()
            shutil.rmtree(directory, ignore_errors=True)
            return seconds

        return run

    def loop_by_hand(state: Any) -> float:
        directory = new_directory()
        manager = _orbax_manager(directory)

        def save(elapsed: gyre.Elapsed, state: Any) -> None:
            _orbax_save(manager, int(elapsed.steps) + 1, state)

        start = time.perf_counter()
        state, _, elapsed = gyre.loop(state, batches, {gyre.every(1): step, gyre.every(EVERY): save}, stop=steps)
        if (steps - 1) % EVERY:
            _orbax_save(manager, int(elapsed.steps), state)
        manager.wait_until_finished()
        seconds = time.perf_counter() - start
        manager.close()
        shutil.rmtree(directory, ignore_errors=True)
        return seconds

    def hand_written(save: bool) -> Runner:
        def run(state: Any) -> float:
            directory = new_directory()
            manager = _orbax_manager(directory) if save else None
            start = time.perf_counter()
            for i, batch in enumerate(batches):
                _, state = step(state, batch)
                if manager is not None and i % EVERY == 0:
                    _orbax_save(manager, i + 1, state)
            if manager is not None and (steps - 1) % EVERY:
                _orbax_save(manager, steps, state)
            jax.block_until_ready(state)
            if manager is not None:
                manager.wait_until_finished()
            seconds = time.perf_counter() - start
            if manager is not None:
                manager.close()
            shutil.rmtree(directory, ignore_errors=True)
            return seconds

        return run

    return {
        NONE: plain, VERDICT: checkpointed(EVERY), OFTEN: checkpointed(50), BY_HAND: loop_by_hand,
        JAX: hand_written(False), JAX_ORBAX: hand_written(True),
    }


def saves_in(steps: int, every: int) -> int:
    """How many saves a run of ``steps`` steps makes under ``every(every)`` (the scheduled ones
    after steps 0, every, 2*every, ... and the final save unless the last step is saved).

    Example:
        >>> saves_in(5000, 500), saves_in(1000, 500)
        (11, 3)
    """
    scheduled = len(range(0, steps, every))
    return scheduled + (0 if (steps - 1) % every == 0 else 1)


def report(seconds: dict[str, list[float]], steps: int, rounds: int) -> str:
    """The markdown table and the verdict line (each ratio against its own reference: the
    gyre variants against gyre.loop without a checkpoint, hand-written JAX with orbax against
    hand-written JAX without)."""
    lines = [
        f"{steps} steps x {rounds} rounds, interleaved; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU(s), jax {jax.__version__} on {jax.default_backend()}",
        "",
        "| variant | saves per run | steps/s (median) | ratio to its reference (median of rounds) "
        "| ms added per save (median) |",
        "|---|---:|---:|---:|---:|",
    ]
    ratios: dict[str, float] = {}
    for name, values in seconds.items():
        rate = steps / statistics.median(values)
        if name not in BASELINE:
            lines.append(f"| {name} | 0 | {rate:,.0f} | (reference) | - |")
            continue
        base = seconds[BASELINE[name]]
        ratios[name] = statistics.median(b / v for b, v in zip(base, values, strict=True))
        saves = saves_in(steps, SAVE_EVERY[name])
        added = statistics.median((v - b) / saves * 1e3 for b, v in zip(base, values, strict=True))
        lines.append(f"| {name} | {saves} | {rate:,.0f} | {ratios[name]:.3f} | {added:.1f} |")
    verdict = "PASS" if ratios[VERDICT] >= TARGET else "FAIL"
    against = ratios[VERDICT] / ratios[JAX_ORBAX]
    direct = statistics.median(h / g for h, g in zip(seconds[JAX_ORBAX], seconds[VERDICT], strict=True))
    saves = saves_in(steps, EVERY)
    over = statistics.median(
        (v - b) / saves * 1e3 for b, v in zip(seconds[BY_HAND], seconds[VERDICT], strict=True)
    )
    lines += [
        "",
        f"target: {VERDICT} ratio >= {TARGET:.2f} -> {verdict} ({ratios[VERDICT]:.3f})",
        f"orbax alone costs a hand-written JAX loop {ratios[JAX_ORBAX]:.3f} (the floor on this machine for "
        f"saving every {EVERY} steps with orbax); gyre.checkpoint against it: {against:.3f} "
        f"(target >= {AGAINST_ORBAX:.2f}: {'PASS' if against >= AGAINST_ORBAX else 'FAIL'})",
        f"{VERDICT} against {JAX_ORBAX}, run for run (steps/s over steps/s, median of rounds): {direct:.3f} "
        f"(target >= {AGAINST_ORBAX:.2f}: {'PASS' if direct >= AGAINST_ORBAX else 'FAIL'})",
        f"gyre.checkpoint adds {over:.1f} ms per save over orbax by hand in the same loop (median of rounds; "
        f"target <= {ADDED_MS:.0f} ms: {'PASS' if over <= ADDED_MS else 'FAIL'})",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000, help="steps per run (default 5000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the batches and the model")
    bench_json.add_option(parser)
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
    text = report(seconds, args.steps, args.rounds)
    print(text)
    rows = []
    for name, values in seconds.items():
        base = BASELINE.get(name)
        ratio = None if base is None else statistics.median(b / v for b, v in zip(seconds[base], values, strict=True))
        rows.append(bench_json.row(name, ratio, base or name, value=round(args.steps / statistics.median(values)),
                                   unit="steps/s"))
    bench_json.write(args.json, benchmark="checkpoint_overhead", steps=args.steps, rounds=args.rounds, rows=rows,
                     report=text, note="each ratio is against its own reference: the gyre variants against "
                     f"'{NONE}', '{JAX_ORBAX}' against '{JAX}'")


if __name__ == "__main__":
    main()
