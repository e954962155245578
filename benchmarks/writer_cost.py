"""What a writer costs per written step: CPU time of the whole process (the loop's thread and
the writer's) per step, less the same loop without a writer.

What it measures
----------------
``gyre.loop`` runs ``--steps`` steps of a trivial jitted step that logs two scalars (``loss``
and ``accuracy``), the history kept, once with nothing else and once with
``write_to(writer)`` for each writer below (every step written; the writer closed at the end,
so every event is on disk when the run's time stops). Each run builds a fresh writer in a
fresh folder. Reported: the median over ``--rounds`` interleaved rounds of
``(process CPU of the run with the writer - process CPU of the run without) / steps``, in
microseconds, and the same as a ratio to ``TensorBoardWriter``'s. Process CPU
(``time.process_time``) counts the writer's own thread too, which a host-bound loop pays in
GIL time. The writers:

* ``TensorBoardWriter`` (gyre's: the steps ``write_to`` hands over encoded together);
* ``TensorBoardWriter, event by event (alone)`` (the same writer's ``write_scalars`` per step,
  what a hand-written loop calling it would pay) and ``tensorboardX SummaryWriter (alone)``
  (``add_scalar`` per scalar per step: the library's own path): the writer alone, handed
  Python floats, no loop; their cost counts from zero;
* ``CSVWriter`` and ``JSONLWriter``;
* ``WandbWriter`` (offline) and ``MLflowWriter`` (a local file store), when installed.

The script is a report, not a test, and always exits 0.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/writer_cost.py                  # 2000 steps x 5 rounds
    .venv/bin/python benchmarks/writer_cost.py --steps 500 --rounds 3 --only TensorBoardWriter
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gyre

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402

Run = Callable[[str], None]  # one run in a fresh folder


@jax.jit
def step(state: jax.Array, batch: jax.Array) -> tuple[gyre.Logs, jax.Array]:
    """A trivial step that logs a loss and an accuracy."""
    loss = jnp.mean((batch - state) ** 2)
    return gyre.logs().add_loss("loss", loss).add_metric("accuracy", 1.0 / (1.0 + loss)), state + 1e-3


def loop_run(steps: int, make_writer: Callable[[str], Any] | None) -> Run:
    """``gyre.loop`` over ``steps`` batches, with ``write_to`` of a fresh writer when given."""
    batches = [np.full((8,), i, np.float32) for i in range(steps)]

    def run(folder: str) -> None:
        writer = None if make_writer is None else make_writer(folder)
        tasks: dict[Any, Any] = {gyre.every(1): step}
        if writer is not None:
            tasks.update(gyre.write_to(writer))
        state, _, _ = gyre.loop(jnp.zeros(()), batches, tasks, stop=steps)
        jax.block_until_ready(state)
        if writer is not None:
            writer.close()

    return run


def alone_run(steps: int, write: Callable[[str], tuple[Callable[[int, float, float], None], Callable[[], None]]]) -> Run:
    """The writer alone, no loop: each step's two scalars (Python floats already) handed to
    ``write``'s function, then closed. Its cost counts from zero, not over a loop's."""
    values = [(i, 1.0 / (i + 1), i / (i + 1)) for i in range(steps)]

    def run(folder: str) -> None:
        put, close = write(folder)
        for i, loss, acc in values:
            put(i, loss, acc)
        close()

    run.alone = True  # type: ignore[attr-defined]
    return run


def tensorboard_events(folder: str) -> tuple[Callable[[int, float, float], None], Callable[[], None]]:
    writer = gyre.TensorBoardWriter(folder)
    return (lambda s, loss, acc: writer.write_scalars(s, {"loss": loss, "accuracy": acc})), writer.close


def summary_writer(folder: str) -> tuple[Callable[[int, float, float], None], Callable[[], None]]:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(folder)

    def put(s: int, loss: float, acc: float) -> None:
        writer.add_scalar("loss", loss, s)
        writer.add_scalar("accuracy", acc, s)

    return put, writer.close


def variants(steps: int) -> dict[str, Run]:
    """Every variant this machine can run, the baseline (no writer) first."""
    found: dict[str, Run] = {
        "no writer": loop_run(steps, None),
        "TensorBoardWriter": loop_run(steps, gyre.TensorBoardWriter),
        "TensorBoardWriter, event by event (alone)": alone_run(steps, tensorboard_events),
        "tensorboardX SummaryWriter (alone)": alone_run(steps, summary_writer),
        "CSVWriter": loop_run(steps, lambda d: gyre.CSVWriter(os.path.join(d, "m.csv"))),
        "JSONLWriter": loop_run(steps, lambda d: gyre.JSONLWriter(os.path.join(d, "m.jsonl"))),
    }
    if importlib.util.find_spec("wandb") is not None:
        found["WandbWriter (offline)"] = loop_run(steps, lambda d: gyre.WandbWriter(project="bench", mode="offline", dir=d))
    if importlib.util.find_spec("mlflow") is not None:
        found["MLflowWriter (file store)"] = loop_run(steps, lambda d: gyre.MLflowWriter(os.path.join(d, "mlruns")))
    return found


def cpu_of(run: Run) -> float:
    """Process CPU seconds of one run in a fresh folder."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.process_time()
        run(folder)
        return time.process_time() - start


def measure(runs: dict[str, Run], rounds: int) -> dict[str, list[float]]:
    """Per variant, its process CPU seconds in each round (the order rotates each round)."""
    for run in runs.values():  # warm-up: compiles, imports, first files
        cpu_of(run)
    names, seconds = list(runs), {name: [] for name in runs}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            seconds[name].append(cpu_of(runs[name]))
    return seconds


def extra_us(seconds: dict[str, list[float]], steps: int, alone: set[str]) -> dict[str, float]:
    """Each writer's median extra process CPU per step, in microseconds (over the loop without
    a writer; from zero for the writers run ``alone``)."""
    base = seconds["no writer"]
    return {
        name: statistics.median((s - (0.0 if name in alone else b)) / steps * 1e6 for s, b in zip(values, base, strict=True))
        for name, values in seconds.items() if name != "no writer"
    }


def report(seconds: dict[str, list[float]], steps: int, alone: set[str]) -> str:
    """A markdown table: each writer's median extra process CPU per step (over the loop
    without a writer; from zero for the writers run ``alone``), and its ratio to
    ``TensorBoardWriter``'s."""
    base = seconds["no writer"]
    extra = extra_us(seconds, steps, alone)
    reference = extra.get("TensorBoardWriter") or float("nan")
    lines = [f"{steps} steps x {len(base)} rounds, interleaved; no writer: "
             f"{statistics.median(base) / steps * 1e6:.1f} us of process CPU per step", "",
             "| writer | extra process CPU per written step (us, median) | ratio to TensorBoardWriter |",
             "|---|---:|---:|"]
    lines += [f"| {name} | {us:.1f} | {us / reference:.1f} |" for name, us in extra.items()]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="the variants to run (besides the baseline)")
    bench_json.add_option(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs = variants(args.steps)
    if args.only:
        runs = {k: v for k, v in runs.items() if k == "no writer" or k in args.only}
    print(f"# writer cost: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}\n")
    alone = {k for k, v in runs.items() if getattr(v, "alone", False)}
    seconds = measure(runs, args.rounds)
    text = report(seconds, args.steps, alone)
    print(text)
    extra = extra_us(seconds, args.steps, alone)
    reference = extra.get("TensorBoardWriter")
    rows = [bench_json.row(name, us / reference if reference else None, "TensorBoardWriter", value=round(us, 1),
                           unit="extra process CPU us per written step") for name, us in extra.items()]
    bench_json.write(args.json, benchmark="writer_cost", steps=args.steps, rounds=args.rounds, rows=rows,
                     report=text, lower_is_better=True,
                     note="a cost, not a speed: lower is cheaper; the ratio is to gyre's TensorBoardWriter")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
