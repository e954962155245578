"""Per-step overhead of gyre's loops, as a ratio against a hand-written JAX loop.

What it measures
----------------
One MLP (64 -> 256 -> 256 -> 10, relu; optax adam 1e-3; softmax cross-entropy) trained on the
scikit-learn digits data (features / 16, float32) with batches of 64, for ``--steps`` steps,
three ways, all in one process and on the same data:

* ``hand-written``: ``for batch in batches: logs, state = step(state, batch)`` with no host
  reads, then ``jax.block_until_ready(state)``;
* ``gyre.loop``: ``gyre.loop(state, batches, {gyre.every(1): [step, keras_bar]}, stop=N)``,
  which also keeps a history (the default);
* ``gyre.train_loop``: ``gyre.train_loop(state, batches, {gyre.on_train_step: [step]},
  callbacks=[keras_bar], stop=N)``;
* ``jaxloop.OuterLoop``: ``gyre.jaxloop.OuterLoop(train_loop=TrainLoop(jaxloop_step))(state,
  train_dataset=iter(batches), train_total_steps=N, train_loop_steps=100)`` with no evaluation,
  where ``jaxloop_step`` calls the same step and returns its logs as the step's outputs (kept
  per step, on the device, as jaxloop does); each inner loop ends by waiting for the state
  (its ``steps_per_sec``), as jaxloop's do;
* ``gyre.loop + write_to(TensorBoardWriter)``: the ``gyre.loop`` variant plus
  ``gyre.write_to(gyre.TensorBoardWriter(tmpdir))`` in the table: every step's loss and
  accuracy become TensorBoard scalars, written by the writer's thread in the same process;
  the writer is made and closed (its last events written to disk) inside the timed region.

Every variant calls the same ``jax.jit(step, donate_argnums=0)``, which returns
``(gyre.logs().add_loss(...).add_metric(...), state)`` (the hand-written loop drops the logs),
on the same list of numpy batches, generated once from a fixed seed outside the timed region.
The progress bars write to a null sink. The step is compiled once before timing, and each
variant is warmed up once, for long enough (300 steps) to compile the history's batched transfer.

Timing noise on a small machine is several percent, so the variants run interleaved for
``--rounds`` rounds (the order rotates each round), each run from a fresh copy of the initial
state (the step donates its state). The report is a markdown table of the median steps/s of
each variant, the ratio of each gyre variant's median to the hand-written median, and the
ratio of the best runs, followed by the target (ratio >= 0.95, DESIGN.md "Performance rules")
and PASS/FAIL. A second table gives the CPU time per step of the thread that runs the loop
(``time.thread_time``), which is much less disturbed by other processes than wall time; its
excess over the hand-written loop is gyre's per-step host overhead. The script always exits
0: it is a report, not a test.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/loop_overhead.py                  # 2000 steps x 15 rounds
    .venv/bin/python benchmarks/loop_overhead.py --steps 5000 --rounds 11
    .venv/bin/python benchmarks/loop_overhead.py --profile        # cProfile of gyre.loop
    .venv/bin/python benchmarks/loop_overhead.py --hidden 8 --dispatch-wait-us 200 --steps 1000

The last line is a CPU stand-in for a GPU whose per-step loop is host-bound: each step call
first waits 200 us outside the GIL (as a slow accelerator dispatch does), then runs a model too
small to take long. On the 2-vCPU VM it put ``gyre.loop`` at about 0.91 of the hand-written loop
and ``OuterLoop`` at about 0.94 (0.93 and 0.94 since the history sorts its records a block at
a time), with the H200's ordering (0.82, 0.81 there), where the plain run shows 0.98 or more:
gyre's per-step Python costs more after a long wait, its caches cold (about a microsecond per
Python frame or small object touched), so work done a block of steps at a time is cheaper
there than the same work done at every step.

``--profile`` runs the ``gyre.loop`` variant under :mod:`cProfile` (after the warm-up) and
prints the 25 functions with the most own time, with their time per training step, to show
where gyre's per-step Python overhead goes (``--profile-variant`` picks another variant, e.g.
``hand-written`` for the baseline cost of dispatching the jitted step). Profiling inflates the
cost of small Python calls, so read those numbers as relative, not absolute.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre

Batch = tuple[np.ndarray, np.ndarray]
State = Any
Step = Callable[[State, Batch], tuple[gyre.Logs, State]]
Runner = Callable[[State], State]

TARGET = 0.95
BATCH_SIZE = 64
LAYERS = (64, 256, 256, 10)
LEARNING_RATE = 1e-3
HAND = "hand-written"
LOOP = "gyre.loop"
TRAIN_LOOP = "gyre.train_loop"
OUTER_LOOP = "jaxloop.OuterLoop"
OUTER_LOOP_STEPS = 100  # steps per inner train loop of the OuterLoop variant
WRITE_TO = "gyre.loop + write_to(TensorBoardWriter)"
VARIANTS = (HAND, LOOP, TRAIN_LOOP, OUTER_LOOP, WRITE_TO)


class NullSink(io.TextIOBase):
    """A text stream that discards everything (not a terminal), for the progress bars."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


# -- data and model --------------------------------------------------------------------------


def make_batches(steps: int, seed: int) -> list[Batch]:
    """``steps`` batches of 64 digits (x float32 in [0, 1], y int32), from a fixed seed.

    The data is shuffled once per pass, so consecutive batches do not repeat.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    rng = np.random.default_rng(seed)
    batches: list[Batch] = []
    order = rng.permutation(len(x))
    pos = 0
    while len(batches) < steps:
        if pos + BATCH_SIZE > len(order):
            order, pos = rng.permutation(len(x)), 0
        idx = order[pos : pos + BATCH_SIZE]
        pos += BATCH_SIZE
        batches.append((np.ascontiguousarray(x[idx]), np.ascontiguousarray(y[idx])))
    return batches


def init_params(key: jax.Array) -> list[dict[str, jax.Array]]:
    """He-initialised weights and zero biases for the layers in ``LAYERS``."""
    params = []
    keys = jax.random.split(key, len(LAYERS) - 1)
    for k, n_in, n_out in zip(keys, LAYERS[:-1], LAYERS[1:], strict=True):
        w = jax.random.normal(k, (n_in, n_out), jnp.float32) * jnp.sqrt(2.0 / n_in)
        params.append({"w": w, "b": jnp.zeros((n_out,), jnp.float32)})
    return params


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """Logits of the MLP: relu between dense layers, none after the last."""
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    last = params[-1]
    return x @ last["w"] + last["b"]


def make_step_fn(tx: optax.GradientTransformation) -> Callable[[State, Batch], tuple[gyre.Logs, State]]:
    """The training step shared by all variants, undecorated (state = (params, opt_state))."""

    def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = mlp(params, x)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return loss, logits

    def step(state: State, batch: Batch) -> tuple[gyre.Logs, State]:
        params, opt_state = state
        x, y = batch
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
        logs = gyre.logs().add_loss("loss", loss).add_metric("accuracy", accuracy)
        return logs, (params, opt_state)

    return step


def make_step(tx: optax.GradientTransformation) -> Step:
    """The jitted training step shared by all variants (the state donated)."""
    return jax.jit(make_step_fn(tx), donate_argnums=0)


class SlowDispatch:
    """The jitted step behind a wait that releases the GIL, as a slow accelerator dispatch
    does (``--dispatch-wait-us``): on a virtualised GPU one jit call costs 170-290 us of host
    time, most of it outside the GIL, and the loop's own Python runs with cold caches after
    it. Every variant calls the same wrapped step."""

    def __init__(self, step: Step, wait_us: float) -> None:
        self.step = step
        self.wait = wait_us / 1e6

    def __call__(self, state: State, batch: Batch) -> tuple[gyre.Logs, State]:
        time.sleep(self.wait)
        return self.step(state, batch)


def fresh_copy(state: State) -> State:
    """A device copy of ``state`` (the step donates its input, so each run needs its own)."""
    copied = jax.tree_util.tree_map(jnp.copy, state)
    return jax.block_until_ready(copied)


# -- the three variants ----------------------------------------------------------------------


def make_runners(step: Step, batches: Sequence[Batch], steps: int, logdir: str) -> dict[str, Runner]:
    """One function per variant: takes a fresh state, trains one step per batch of
    ``batches`` (which holds exactly ``steps``), returns the final state once computed.
    The TensorBoard variant writes its event files under ``logdir``, one folder per run."""
    runs = iter(range(1 << 30))

    def hand_written(state: State) -> State:
        for batch in batches:
            _, state = step(state, batch)
        return jax.block_until_ready(state)

    def with_loop(state: State) -> State:
        bar = gyre.keras_bar(total=steps, file=NullSink())
        state, _, _ = gyre.loop(state, batches, {gyre.every(1): [step, bar]}, stop=steps)
        return jax.block_until_ready(state)

    def with_train_loop(state: State) -> State:
        bar = gyre.keras_bar(total=steps, file=NullSink())
        state, _, _ = gyre.train_loop(
            state, batches, {gyre.on_train_step: [step]}, callbacks=[bar], stop=steps
        )
        return jax.block_until_ready(state)

    def jaxloop_step(state: State, batch: Batch, per_loop_step_number: int, **kwargs: Any) -> tuple[State, Any]:
        logs, state = step(state, batch)
        return state, logs

    def with_outer_loop(state: State) -> State:
        outer = gyre.jaxloop.OuterLoop(train_loop=gyre.jaxloop.TrainLoop(jaxloop_step))
        state, _ = outer(state, train_dataset=iter(batches), train_total_steps=steps,
                         train_loop_steps=min(OUTER_LOOP_STEPS, steps), log_train_total_steps=False)
        return jax.block_until_ready(state)


    def with_write_to(state: State) -> State:
        bar = gyre.keras_bar(total=steps, file=NullSink())
        writer = gyre.TensorBoardWriter(os.path.join(logdir, str(next(runs))))
        tasks = {gyre.every(1): [step, bar], **gyre.write_to(writer)}
        state, _, _ = gyre.loop(state, batches, tasks, stop=steps)
        writer.close()
        return jax.block_until_ready(state)

    return {HAND: hand_written, LOOP: with_loop, TRAIN_LOOP: with_train_loop, OUTER_LOOP: with_outer_loop,
            WRITE_TO: with_write_to}


def time_run(run: Runner, initial: State, steps: int) -> tuple[float, float, float]:
    """One run from a fresh copy of ``initial``: steps per second of wall time, and CPU
    microseconds per step spent by the thread that runs the loop and by the whole process
    (XLA's compute threads included)."""
    state = fresh_copy(initial)
    gc.collect()
    cpu_start, process_start = time.thread_time(), time.process_time()
    start = time.perf_counter()
    final = run(state)
    seconds = time.perf_counter() - start
    cpu, process = time.thread_time() - cpu_start, time.process_time() - process_start
    del final
    return steps / seconds, cpu / steps * 1e6, process / steps * 1e6


Samples = dict[str, list[float]]


def interleave(
    runners: dict[str, Runner], initial: State, steps: int, rounds: int
) -> tuple[Samples, Samples, Samples]:
    """Times every runner once per round, in an order that rotates each round, and prints each
    round's rates; returns, per variant, the steps/s, loop-thread CPU us/step and process CPU
    us/step of every round."""
    names = tuple(runners)
    rates: Samples = {name: [] for name in names}
    cpu: Samples = {name: [] for name in names}
    process: Samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            rate, cpu_per_step, process_per_step = time_run(runners[name], initial, steps)
            rates[name].append(rate)
            cpu[name].append(cpu_per_step)
            process[name].append(process_per_step)
        shown = ", ".join(f"{name} {rates[name][-1]:,.0f}" for name in names)
        print(f"round {r + 1}/{rounds}: steps/s {shown}", flush=True)
    return rates, cpu, process


# -- reporting -------------------------------------------------------------------------------


def report(rates: dict[str, list[float]], cpu: dict[str, list[float]], steps: int, rounds: int) -> str:
    """The markdown tables and the PASS/FAIL line.

    The first table is the verdict (wall-clock throughput). The second shows the CPU time of
    the loop's thread per step, which other processes on the machine disturb much less than
    wall time: its difference to the hand-written loop is gyre's per-step host overhead.
    """
    hand_median = statistics.median(rates[HAND])
    hand_best = max(rates[HAND])
    lines = [
        f"{steps} steps x {rounds} rounds, interleaved",
        "",
        "| variant | steps/s (median) | ratio (median of rounds) | ratio of medians | ratio (best) |",
        "|---|---:|---:|---:|---:|",
    ]
    worst = float("inf")
    for name in VARIANTS:
        median = statistics.median(rates[name])
        # Each round runs every variant back to back, so a slow patch of the machine slows all
        # of them: the ratio within a round cancels it, the ratio of medians does not.
        paired = statistics.median(v / h for v, h in zip(rates[name], rates[HAND], strict=True))
        best_ratio = max(rates[name]) / hand_best
        if name != HAND:
            worst = min(worst, paired)
        lines.append(
            f"| {name} | {median:,.0f} | {paired:.3f} | {median / hand_median:.3f} | {best_ratio:.3f} |"
        )
    verdict = "PASS" if worst >= TARGET else "FAIL"
    lines += ["", f"target: ratio (median of rounds) >= {TARGET:.2f} for every gyre variant -> "
              f"{verdict} (lowest {worst:.3f})"]
    spread = max(rates[HAND]) / min(rates[HAND]) - 1
    if spread > 0.10:
        lines.append(f"warning: the hand-written runs differ by {spread:.0%} (max/min): the "
                     "machine is noisy, read the ratios with care (or raise --rounds)")
    hand_cpu = statistics.median(cpu[HAND])
    lines += [
        "",
        "| variant | loop-thread CPU us/step (median) | extra vs hand-written (us/step) |",
        "|---|---:|---:|",
    ]
    for name in VARIANTS:
        median = statistics.median(cpu[name])
        lines.append(f"| {name} | {median:.1f} | {median - hand_cpu:+.1f} |")
    return "\n".join(lines)


def print_profile(profile: cProfile.Profile, steps: int, top: int = 25) -> None:
    """The ``top`` functions by own time, with microseconds per training step."""
    stats = pstats.Stats(profile)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tottime, ncalls, cumtime, _where(filename, line, name)))
    rows.sort(key=lambda r: r[0], reverse=True)
    print(f"\nprofile: {steps} steps, {total * 1e3:.1f} ms profiled "
          f"({total / steps * 1e6:.1f} us/step); top {top} by own time\n")
    print("(the jitted step is C++: its dispatch, and any wait for the device, count as own time of\n"
          " the Python frame that calls it, e.g. gyre/loop/binding.py's <lambda>)\n")
    print(f"{'ncalls':>9} {'calls/step':>10} {'own us/step':>11} {'cum us/step':>11}  function")
    for tottime, ncalls, cumtime, where in rows[:top]:
        print(f"{ncalls:>9} {ncalls / steps:>10.2f} {tottime / steps * 1e6:>11.2f} "
              f"{cumtime / steps * 1e6:>11.2f}  {where}")


def _where(filename: str, line: int, name: str) -> str:
    if filename == "~":
        return name  # a built-in
    marker = os.sep + "gyre" + os.sep
    if marker in filename:
        filename = "gyre/" + filename.split(marker, 1)[1]
    elif "site-packages" in filename:
        filename = filename.split("site-packages" + os.sep, 1)[1]
    else:
        filename = os.path.basename(filename)
    return f"{filename}:{line}({name})"


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the batches and the model")
    parser.add_argument("--warmup-steps", type=int, default=300,
                        help="steps of the untimed warm-up run of each variant (default 300: "
                        "enough for one of the history's batched transfers, every 256 steps, so "
                        "that its stacking is compiled before timing)")
    parser.add_argument("--hidden", type=int, default=256,
                        help="width of the two hidden layers (default 256; 32 gives a tiny model "
                        "whose step is short, so gyre's per-step host overhead shows)")
    parser.add_argument("--dispatch-wait-us", type=float, default=0.0,
                        help="before each step call, wait this many microseconds outside the "
                        "GIL (time.sleep), in every variant: a CPU stand-in for a GPU whose "
                        "dispatch is slow and host-bound (200 resembles the virtualised H200; "
                        "default 0: off)")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, run one variant under cProfile and print the "
                        "top 25 functions by own time")
    parser.add_argument("--profile-variant", choices=VARIANTS, default=LOOP,
                        help=f"the variant --profile runs (default {LOOP})")
    parser.add_argument("--profile-top", type=int, default=25,
                        help="functions --profile lists, by own time (default 25)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup_steps < 1 or args.hidden < 1:
        parser.error("--steps, --rounds, --warmup-steps and --hidden must be >= 1")
    if args.dispatch_wait_us < 0:
        parser.error("--dispatch-wait-us must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    global LAYERS
    LAYERS = (64, args.hidden, args.hidden, 10)
    steps = args.steps
    batches = make_batches(max(steps, args.warmup_steps), args.seed)
    tx = optax.adam(LEARNING_RATE)
    params = init_params(jax.random.PRNGKey(args.seed))
    initial = jax.block_until_ready((params, tx.init(params)))
    step = make_step(tx)
    if args.dispatch_wait_us:
        step = SlowDispatch(step, args.dispatch_wait_us)  # type: ignore[assignment]

    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}), "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, MLP {LAYERS}")

    # Compile once, then run each variant briefly so that first-call costs are not timed.
    jax.block_until_ready(step(fresh_copy(initial), batches[0]))
    logdir = tempfile.TemporaryDirectory(prefix="gyre-bench-tb-")
    warm = make_runners(step, batches[: args.warmup_steps], args.warmup_steps, logdir.name)
    for run in warm.values():
        run(fresh_copy(initial))
    runners = make_runners(step, batches[:steps], steps, logdir.name)

    if args.profile:
        run = runners[args.profile_variant]
        state = fresh_copy(initial)
        gc.collect()
        profile = cProfile.Profile()
        profile.enable()
        run(state)
        profile.disable()
        print(f"variant: {args.profile_variant}")
        print_profile(profile, steps, args.profile_top)
        return 0

    rates, cpu, _ = interleave(runners, initial, steps, args.rounds)
    logdir.cleanup()
    print()
    print(report(rates, cpu, steps, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
