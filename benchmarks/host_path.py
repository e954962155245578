"""Where a per-step loop's host time goes: gyre's parts added one at a time to a hand loop.

What it measures
----------------
The digits MLP of ``loop_overhead.py`` (same step, data and optimizer; ``--hidden`` sets the
width, 8 by default: a short step, so the host's share shows, as it does on a GPU), run for
``--steps`` steps by each of these variants, interleaved for ``--rounds`` rounds:

* ``hand``: the hand-written loop, logs dropped at once;
* ``hand + keep logs``: it also keeps each step's logs alive until 256 more steps have run,
  then drops them together (what a history does with device values before its batched
  transfer);
* ``hand + history``: it commits each step's logs to a ``gyre.History`` (kept, stacked and
  moved to the host every 256 steps, as a loop's history does);
* ``gyre.loop, no history``: ``gyre.loop`` with its history's ``commit_owned`` replaced by a no-op;
* ``gyre.loop``: the loop as users run it (no progress bar).

Each variant calls the step through a small wrapper that adds up the CPU time of the loop's
thread spent inside the step's call (``time.thread_time_ns``): on a CPU that includes the
computation, which XLA often runs on the calling thread; on a GPU it is the dispatch. The
report gives, per variant, the loop thread's CPU per step inside and outside the step's call,
and the steps/s and its ratio to ``hand`` (the median of the per-round ratios). The
differences between consecutive rows price each part: keeping device values alive, the
history's bookkeeping and transfers, and the rest of the loop's engine.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/host_path.py                 # hidden 8, 2000 steps x 9 rounds
    .venv/bin/python benchmarks/host_path.py --hidden 256 --rounds 15
    .venv/bin/python benchmarks/host_path.py --dispatch-wait-us 200 --steps 1000   # GPU-like

The script always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loop_overhead as base  # noqa: E402

import gyre  # noqa: E402
from gyre.core._clock import Elapsed  # noqa: E402
from gyre.core._history import History  # noqa: E402

KEEP = 256  # steps a history keeps device values before its batched transfer (flush_every)


class TimedStep:
    """Calls the step and adds up the loop thread's CPU nanoseconds spent inside the call."""

    def __init__(self, step: Callable[..., Any]) -> None:
        self.step = step
        self.inside = 0

    def __call__(self, state: Any, batch: Any) -> Any:
        start = time.thread_time_ns()
        out = self.step(state, batch)
        self.inside += time.thread_time_ns() - start
        return out


def make_variants(step: TimedStep, batches: Sequence[Any], steps: int) -> dict[str, Callable[[Any], Any]]:
    """The variants (see the module docs), each ``state -> final state``."""

    def hand(state: Any) -> Any:
        for batch in batches:
            _, state = step(state, batch)
        return state

    def hand_keep(state: Any) -> Any:
        kept = []
        for batch in batches:
            logs, state = step(state, batch)
            kept.append(logs)
            if len(kept) >= KEEP + 16:
                del kept[:KEEP]
        return state

    def hand_history(state: Any) -> Any:
        history = History()
        for i, batch in enumerate(batches):
            logs, state = step(state, batch)
            history.commit_owned(Elapsed(steps=i), logs, base.BATCH_SIZE)  # as a loop commits
        return state

    def loop_no_history(state: Any) -> Any:
        commit = History.commit_owned
        History.commit_owned = lambda *args, **kwargs: None  # type: ignore[method-assign]
        try:
            state, _, _ = gyre.loop(state, batches, {gyre.every(1): step}, stop=steps)
        finally:
            History.commit_owned = commit  # type: ignore[method-assign]
        return state

    def loop(state: Any) -> Any:
        state, _, _ = gyre.loop(state, batches, {gyre.every(1): step}, stop=steps)
        return state

    return {
        "hand": hand, "hand + keep logs": hand_keep, "hand + history": hand_history,
        "gyre.loop, no history": loop_no_history, "gyre.loop": loop,
    }


def measure(
    variants: dict[str, Callable[[Any], Any]], step: TimedStep, initial: Any, steps: int, rounds: int
) -> dict[str, list[tuple[float, float, float]]]:
    """Per variant and round: (steps/s, CPU us/step inside the step's call, outside it)."""
    names = list(variants)
    out: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            state = base.fresh_copy(initial)
            gc.collect()
            step.inside = 0
            cpu, wall = time.thread_time_ns(), time.perf_counter()
            jax.block_until_ready(variants[name](state))
            wall, cpu = time.perf_counter() - wall, time.thread_time_ns() - cpu
            inside = step.inside / steps / 1e3
            out[name].append((steps / wall, inside, cpu / steps / 1e3 - inside))
    return out


def report(results: dict[str, list[tuple[float, float, float]]]) -> str:
    """A markdown table of the medians (see the module docs)."""
    hand = results["hand"]
    lines = [
        "| variant | steps/s | ratio to hand | CPU us/step inside the step's call | outside it |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rows in results.items():
        ratio = statistics.median(r[0] / h[0] for r, h in zip(rows, hand, strict=True))
        rate, inside, outside = (statistics.median(r[k] for r in rows) for k in range(3))
        lines.append(f"| {name} | {rate:,.0f} | {ratio:.3f} | {inside:.1f} | {outside:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--hidden", type=int, default=8, help="hidden width (default 8)")
    parser.add_argument("--dispatch-wait-us", type=float, default=0.0,
                        help="wait this long outside the GIL before each step call: a CPU stand-in "
                        "for a host-bound GPU (see loop_overhead.py; default 0: off)")
    args = parser.parse_args(argv)
    if min(args.steps, args.rounds, args.hidden) < 1 or args.dispatch_wait_us < 0:
        parser.error("--steps, --rounds and --hidden must be >= 1, --dispatch-wait-us >= 0")
    base.LAYERS = (64, args.hidden, args.hidden, 10)
    tx = optax.adam(base.LEARNING_RATE)
    params = base.init_params(jax.random.PRNGKey(0))
    initial = jax.block_until_ready((params, tx.init(params)))
    jitted = base.make_step(tx)
    step = TimedStep(base.SlowDispatch(jitted, args.dispatch_wait_us) if args.dispatch_wait_us else jitted)
    batches = base.make_batches(args.steps, 0)
    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}), {os.cpu_count()} CPUs, "
          f"MLP {base.LAYERS}, {args.steps} steps x {args.rounds} rounds")
    variants = make_variants(step, batches, args.steps)
    for run in variants.values():  # compiles the step and the history's stacking
        jax.block_until_ready(run(base.fresh_copy(initial)))
    print(report(measure(variants, step, initial, args.steps, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
