"""Per-step overhead of ``gyre.fit``, as a ratio against a hand-written JAX loop.

What it measures
----------------
Seed 004's recipe on the digits MLP of ``loop_overhead.py``: a ``flax.linen`` module written
as Jax Fit's ``Model`` (``__call__(self, x, train=False)``: 64 -> 256 -> 256 -> 10, relu),
optax adam 1e-3, ``loss_fn(logits, labels) -> (loss, {"loss": loss})`` (softmax
cross-entropy) and a jitted ``eval_step(state, batch)`` returning the batch's accuracy, as in
the seed. Training data: the training split of ``gyre.data.digits()`` (1,437 examples, 22
batches of 64 per epoch, the last 29 examples of each shuffled epoch dropped), read from a
fresh ``gyre.data.batches((x, y), 64, seed=0)`` by every variant; ``--steps`` steps rounded
to whole epochs (default 2000 -> 91 epochs, 2,002 steps). The test split (360 examples) is a
list of 6 numpy batches (5 of 64 and one of 40), evaluated after every epoch. In one
process:

* ``hand-written JAX``: ``state = train_step(state, next(batches))`` with a
  ``jax.jit(donate_argnums=0)`` step applying the same linen module (``train=True``) that
  adds its loss to a running sum kept in the state; after each epoch the test accuracy
  (a jitted ``eval_step`` per batch, summed on the device weighted by batch size) and one
  ``jax.device_get`` of the epoch's mean loss and test accuracy (the host read a real loop
  makes to print them); ``jax.block_until_ready`` at the end;
* ``hand-written JAX + orbax at the end``: the same, plus one
  ``CheckpointManager.save(StandardSave({"params", "opt_state"}))`` when training ends. This
  is the baseline that does fit's work: with no ``val_ds``, ``fit`` saves its resume
  checkpoint every ``save_every_minutes`` (10 by default, which a run this short never
  reaches) and when training ends;
* ``hand-written JAX + orbax every epoch`` (information: what ``fit`` did before, and does
  with ``save_every_minutes=0``): the same, saving after every epoch (orbax's asynchronous
  save, ``max_to_keep=1``), waited for at the end;
* ``gyre.fit`` (the verdict): ``gyre.fit(state, batches, test_ds, loss_fn=, eval_step=,
  num_epochs=, log_dir=root, log_name=<fresh>, progress=False)``: its TensorBoard writer,
  its final checkpoint, its history.

Steady state, and what is timed
-------------------------------
The first run of each variant is an untimed warm-up of 3 epochs (it compiles the hand-written
steps and the user's ``eval_step``, orbax's first save). Every timed run is a whole call,
from its start to its return, in a fresh ``log_name`` (a fresh orbax folder for the
baselines), deleted afterwards. ``fit`` builds its jitted training step inside each call
(``make_train_step``), so **every fit call traces and compiles its step again**: that cost is
inside every timed fit run. The benchmark measures it separately (the trace and compile of
fit's step, and the whole fixed cost of a one-epoch fit call against a one-epoch hand-written
run) and prints it in microseconds per step amortised over ``--steps``.

Timing noise on a small machine is several percent, so the variants run interleaved for
``--rounds`` rounds (the order rotates each round); the report gives the median of the
per-round ratios of fit's steps/s to each baseline's, with their spread (min..max), the
median steps/s, and the loop thread's CPU time per step (``time.thread_time``). Target:
ratio >= 0.95 to the hand-written loop (issue 13). The script always exits 0: it is a
report, not a test.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/fit_overhead.py                  # 2000 steps x 5 rounds
    .venv/bin/python benchmarks/fit_overhead.py --steps 1000 --rounds 9
    .venv/bin/python benchmarks/fit_overhead.py --profile        # where fit's time goes

``--profile`` (after the warm-up) times the hand-written loop (best of 3), then breaks one fit
run down with perf-counter timers around the engine's and fit's per-step and per-epoch parts
(wall and thread-CPU microseconds per training step), then the same with the checkpoint
store's writes skipped (a what-if), then fit's compiled step and the hand-written one alone
in a bare Python loop, and last one fit run under :mod:`cProfile` (the 25 functions with the
most own time; profiling inflates small Python calls, so read those as relative). The
breakdown reaches into private names of gyre: a part gyre renamed is skipped with a note.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402
from loop_overhead import fresh_copy, print_profile  # noqa: E402
from trainer_overhead import (  # noqa: E402
    ENGINE_PARTS,
    SAVE_PARTS,
    Samples,
    Timers,
    _seconds,
    best_of_5,
    interleave,
    overhead_report,
    ratio_rows,
    without_checkpoint_writes,
)
from trainer_overhead import install_timers as timers_around  # noqa: E402
from trainer_overhead import print_breakdown as breakdown  # noqa: E402

TARGET = 0.95
BATCH_SIZE = 64
HIDDEN = 256
LEARNING_RATE = 1e-3
WARMUP_EPOCHS = 3
HAND = "hand-written JAX"
HAND_END = "hand-written JAX + orbax at the end"
HAND_EPOCH = "hand-written JAX + orbax every epoch"
FIT = "gyre.fit"
VARIANTS = (HAND, HAND_END, HAND_EPOCH, FIT)

Arrays = tuple[np.ndarray, np.ndarray]
Runner = Callable[[int], None]  # trains that many epochs, returns once all is computed and saved


# -- model, loss, evaluation (seed 004's shapes) ----------------------------------------------


class Model(nn.Module):
    """The digits MLP, written as Jax Fit's ``Model``: 64 -> 256 -> 256 -> 10, relu."""

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = nn.relu(nn.Dense(features=HIDDEN)(x))
        x = nn.relu(nn.Dense(features=HIDDEN)(x))
        return nn.Dense(features=10)(x)


model = Model()


def loss_fn(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Seed 004's loss: softmax cross-entropy, and the dict of values to log."""
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, {"loss": loss}


@jax.jit
def eval_step(state: Any, batch: Arrays) -> jax.Array:
    """Seed 004's evaluation: the batch's accuracy."""
    x, y = batch
    logits = state.apply_fn({"params": state.params}, x, train=False)
    return jnp.equal(jnp.argmax(logits, -1), y).mean()


def init_params(seed: int) -> Any:
    return model.init(jax.random.key(seed), jnp.ones((1, 64), jnp.float32))["params"]


def test_batches(test: Arrays) -> list[Arrays]:
    """The test split as a list of numpy batches of 64 (the last one smaller)."""
    x, y = test
    return [(x[i:i + BATCH_SIZE], y[i:i + BATCH_SIZE]) for i in range(0, len(y), BATCH_SIZE)]


def hand_functions(tx: optax.GradientTransformation) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The hand-written loop's jitted ``train_step(state, batch) -> state`` (donated; the
    state is ``(params, opt_state, loss_sum)``) and ``correct(params, x, y)`` (the batch's
    number of right answers)."""

    def objective(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        return loss_fn(model.apply({"params": params}, x, train=True), y)[0]

    def train_step(state: Any, batch: Arrays) -> Any:
        params, opt_state, loss_sum = state
        loss, grads = jax.value_and_grad(objective)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss_sum + loss

    def correct(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        logits = model.apply({"params": params}, x, train=False)
        return jnp.sum(jnp.argmax(logits, -1) == y)

    return jax.jit(train_step, donate_argnums=0), jax.jit(correct)


# -- the variants ------------------------------------------------------------------------------


def make_runners(train: Arrays, tests: list[Arrays], seed: int, root: str) -> dict[str, Runner]:
    """One function per variant: trains the given number of epochs on a fresh loader,
    evaluating the test batches after each, and returns once the result is computed and
    every save is on disk."""
    import orbax.checkpoint as ocp

    counter = iter(range(1 << 30))
    tx = optax.adam(LEARNING_RATE)
    params = init_params(seed)
    initial = jax.block_until_ready((params, tx.init(params), jnp.zeros((), jnp.float32)))
    fit_state = jax.block_until_ready(gyre.TrainState.create(apply_fn=model.apply, params=params, tx=tx, rng=seed))
    train_step, correct = hand_functions(tx)
    test_size = sum(len(y) for _, y in tests)
    host_log: list[Any] = []  # what a hand-written loop would print

    def new_name() -> str:
        return f"run{next(counter)}"

    def loader() -> Iterator[Arrays]:
        return gyre.data.batches(train, BATCH_SIZE, seed=0)

    def hand_written(save: str | None) -> Runner:
        def run(epochs: int) -> None:
            state = fresh_copy(initial)
            data = loader()
            epoch_steps = data.epoch_steps
            directory = os.path.join(root, new_name())
            manager = ocp.CheckpointManager(
                directory, options=ocp.CheckpointManagerOptions(max_to_keep=1)
            ) if save else None
            host_log.clear()
            for epoch in range(epochs):
                for _ in range(epoch_steps):
                    state = train_step(state, next(data))
                params, opt_state, loss_sum = state
                right = sum(correct(params, x, y) for x, y in tests)
                host_log.append(jax.device_get((loss_sum / epoch_steps, right / test_size)))  # one read per epoch
                state = (params, opt_state, jnp.zeros((), jnp.float32))
                if save == "epoch" or (save == "end" and epoch == epochs - 1):
                    manager.save(epoch, args=ocp.args.StandardSave({"params": params, "opt_state": opt_state}))
            jax.block_until_ready(state)
            if manager is not None:
                manager.wait_until_finished()
                manager.close()
            shutil.rmtree(directory, ignore_errors=True)

        return run

    def fit_run(epochs: int) -> None:
        name = new_name()
        state, _ = gyre.fit(
            fresh_copy(fit_state), loader(), tests, loss_fn=loss_fn, eval_step=eval_step,
            num_epochs=epochs, log_dir=root, log_name=name, progress=False,
        )
        jax.block_until_ready(state)
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    fit_run.state = fit_state  # type: ignore[attr-defined]
    return {HAND: hand_written(None), HAND_END: hand_written("end"), HAND_EPOCH: hand_written("epoch"), FIT: fit_run}


# -- fit's per-call fixed cost (its step compiles again in every call) ---------------------------


def per_call_costs(runners: dict[str, Runner], state: Any, batch: Arrays, steps: int, repeats: int = 3) -> str:
    """The trace + compile of fit's training step (as each fit call does it), and the whole
    fixed cost of a one-epoch fit call against a one-epoch hand-written run saving every epoch."""
    from gyre.fitting._fit_steps import make_train_step

    compiles = []
    for _ in range(repeats):
        start = time.perf_counter()
        make_train_step(loss_fn, state).lower(state, batch).compile()
        compiles.append(time.perf_counter() - start)
    fixed = []
    for _ in range(repeats):
        fit_one = _seconds(runners[FIT], 1)
        fixed.append(fit_one - _seconds(runners[HAND_EPOCH], 1))
    c, f = statistics.median(compiles), statistics.median(fixed)
    return (f"per fit call (median of {repeats}): trace + compile of fit's training step {c * 1e3:.1f} ms "
            f"= {c / steps * 1e6:.1f} us/step over {steps} steps; one-epoch fit call minus one-epoch "
            f"{HAND_EPOCH}: {f * 1e3:.1f} ms = {f / steps * 1e6:.1f} us/step over {steps} steps")


# -- reporting -------------------------------------------------------------------------------


def report(rates: Samples, cpu: Samples, steps: int, epochs: int, rounds: int) -> str:
    """The markdown tables and the PASS/FAIL line (see the module docstring)."""
    return overhead_report(rates, cpu, steps, epochs, rounds, subject=FIT, hand=HAND, saved=HAND_END,
                           saved_note="against the baseline that also saves at the end as fit does")


# -- profiling -------------------------------------------------------------------------------

# (label, module, attribute path): the parts of a fit run timed by --profile: the block engine's
# and the checkpoint's (trainer_overhead.py's), and fit's own. Nested parts are indented under the
# part that calls them; a part gyre no longer has is skipped.
PARTS = ENGINE_PARTS + (
    ("evaluation: test_loop (the test pass)", "gyre.engine._named", "test_loop"),
    ("  fit: eval_entries (per test batch)", "gyre.fitting._fit", "eval_entries"),
    ("writer: WriteTo._send", "gyre.loggers._write_to", "WriteTo._send"),
    ("fit: make_train_step (builds the jitted step)", "gyre.fitting._fit", "make_train_step"),
    ("fit: gyre.checkpoint (manager per call)", "gyre", "checkpoint"),
    ("fit: TensorBoardWriter (per call)", "gyre", "TensorBoardWriter"),
) + SAVE_PARTS


def print_breakdown(title: str, timers: Timers, seconds: float, steps: int, hand: float) -> None:
    """``trainer_overhead.print_breakdown`` over this benchmark's :data:`PARTS`."""
    breakdown(title, timers, seconds, steps, hand, parts=PARTS, hand_name=HAND)


def timed_fit_run(run: Runner, epochs: int) -> tuple[Timers, float]:
    timers = timers_around(PARTS)
    try:
        gc.collect()
        start = time.perf_counter()
        run(epochs)
        return timers, time.perf_counter() - start
    finally:
        timers.restore()


def dispatch_alone(state: Any, hand_step: Callable[..., Any], hand_state: Any, batches: list[Arrays]) -> None:
    """fit's compiled step and the hand-written one, each alone in a bare Python loop over
    the same batches (best of 5)."""
    from gyre.fitting._fit_steps import make_train_step

    step = make_train_step(loss_fn, state)
    state = fresh_copy(state)
    _, state = step(state, batches[0])  # compile
    hand_state = hand_step(hand_state, batches[0])
    state, hand_state, fit_best, hand_best = best_of_5(step, state, hand_step, hand_state, batches)
    n = len(batches)
    print(f"\nthe compiled steps alone in a Python loop ({n} batches, best of 5): fit's step "
          f"{fit_best / n * 1e6:.1f} us/step ({len(jax.tree_util.tree_leaves(state))} state leaves), "
          f"hand-written {hand_best / n * 1e6:.1f} us/step ({len(jax.tree_util.tree_leaves(hand_state))} leaves)")


def profile(runners: dict[str, Runner], epochs: int, steps: int, train: Arrays) -> None:
    """``--profile``: timer breakdowns of a fit run with and without its checkpoint writes,
    the compiled steps alone, and a cProfile run of fit."""
    hand = min(_seconds(runners[HAND], epochs) for _ in range(3))
    run = runners[FIT]
    timers, seconds = timed_fit_run(run, epochs)
    print_breakdown(f"{FIT}, timed parts", timers, seconds, steps, hand)
    undo = without_checkpoint_writes()
    try:
        timers, seconds = timed_fit_run(run, epochs)
    finally:
        undo()
    print_breakdown(f"{FIT} with its checkpoint writes skipped (what-if)", timers, seconds, steps, hand)
    loader = gyre.data.batches(train, BATCH_SIZE, seed=0)
    tx = optax.adam(LEARNING_RATE)
    params = init_params(0)
    dispatch_alone(run.state, hand_functions(tx)[0],  # type: ignore[attr-defined]
                   (params, tx.init(params), jnp.zeros((), jnp.float32)), [next(loader) for _ in range(1000)])
    gc.collect()
    prof = cProfile.Profile()
    prof.enable()
    run(epochs)
    prof.disable()
    print(f"\nvariant: {FIT}")
    print_profile(prof, steps)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000,
                        help="steps per run, rounded to whole epochs of 22 steps (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, break one fit run down with timers and cProfile")
    bench_json.add_option(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark (or the profile) and prints its report."""
    args = parse_args(argv)
    train, test = gyre.data.digits()
    tests = test_batches(test)
    epoch_steps = len(train[1]) // BATCH_SIZE
    epochs = max(1, round(args.steps / epoch_steps))
    steps = epochs * epoch_steps
    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}), {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; linen MLP 64-{HIDDEN}-{HIDDEN}-10, {len(train[1])} training "
          f"examples, {epoch_steps} steps per epoch, {len(test[1])} test examples in {len(tests)} batches")
    root = tempfile.mkdtemp(prefix="gyre-fit-bench-")
    try:
        runners = make_runners(train, tests, args.seed, root)
        for run in runners.values():  # compile the steps, eval_step, orbax's first save
            run(WARMUP_EPOCHS)
        if args.profile:
            profile(runners, epochs, steps, train)
            return 0
        rates, cpu = interleave(runners, epochs, steps, args.rounds)
        costs = per_call_costs(runners, runners[FIT].state, tests[0], steps)  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    text = report(rates, cpu, steps, epochs, args.rounds) + "\n\n" + costs
    print(text)
    bench_json.write(args.json, benchmark="fit_overhead", steps=steps, rounds=args.rounds,
                     rows=ratio_rows(rates, HAND), report=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
