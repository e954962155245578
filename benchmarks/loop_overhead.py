"""Per-step overhead of gyre's loops, as a ratio against a hand-written JAX loop.

What it measures
----------------
One MLP (64 -> ``--hidden`` -> ``--hidden`` -> 10, relu; optax adam 1e-3; softmax
cross-entropy) trained on the scikit-learn digits data (features / 16, float32) with batches
of 64, for ``--steps`` steps, several ways, all in one process and on the same data:

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
  the writer is made and closed (its last events written to disk) inside the timed region;
* ``TrainerModule.train_model``: ``ImgClassifierTrainer.train_model(batches, num_epochs=1)``
  (one epoch = the ``--steps`` batches), built by ``trainer_overhead.py``'s ``make_trainer``
  with its defaults (steps logged every 50 to its TensorBoard writer, no progress bar, no
  validation data): the same layer sizes, but an nnx ``SimpleClassifier`` and the trainer's own
  step (its loss and accuracy summed in the state), and a resume checkpoint (orbax) written
  when training ends;
* ``gyre.fit``: ``gyre.fit(state, batches, num_epochs=1, progress=False)`` with
  ``fit_overhead.py``'s linen ``Model`` and ``loss_fn`` at the same sizes: fit's own step (a
  ``TrainState``, its rng folded per step), its TensorBoard writer and its checkpoint when
  training ends;
* ``hand-written + orbax at the end`` (a reference, no target): the hand-written loop plus
  one orbax ``CheckpointManager.save`` of the parameters and optimizer state when it ends,
  waited for: the work the trainer and fit add at the end of a run, which a run of a few
  thousand short steps does not amortise. fit's row also gives the ratio to it;
* ``hand-written over the trainer's step + orbax at the end`` (a reference, no target): the
  trainer's own compiled step (it also computes accuracy and adds both values to its epoch and
  window sums) in the hand-written loop, then the same orbax save: the trainer's row also gives
  the ratio to it, which is what the trainer's loop costs apart from what its step computes;
* ``hand-written keeping its outputs`` (a reference, no target): the hand-written loop that
  keeps what jaxloop's loops return, every step's logs appended to per-key lists that start
  afresh every 100 steps (an inner loop's outputs). ``jaxloop.OuterLoop``'s row also gives the
  ratio to it;
* (``rung_slope.py`` times the trainer, fit and these references at two run lengths and
  splits each into a per-step and a once-per-run cost);
* ``gyre.loop, steps_per_call="auto"``: the ``gyre.loop`` variant letting gyre choose how many
  steps to fuse per call (skipped, with "auto: not supported yet", by a gyre that refuses it).

``--steps-per-call K`` passes ``steps_per_call=K`` to the variants that take it (``gyre.loop``,
``train_loop``, ``write_to``, the trainer and fit). Every variant but the trainer and fit
calls the same ``jax.jit(step, donate_argnums=0)``, which returns ``(gyre.logs().add_loss(...)
.add_metric(...), state)`` (the hand-written loop drops the logs), on the same list of numpy
batches, generated once from a fixed seed outside the timed region. The progress bars write
to a null sink. Every variant is run once, untimed, before the rounds (the steps, the rings,
the fused calls, orbax's first save compiled or made).

The dispatch-wait stand-in
--------------------------
``--dispatch-wait-us W`` is a CPU stand-in for a GPU whose per-step loop is host-bound: on a
virtualised GPU one jit call costs 170-290 us of host time, most of it outside the GIL, and
the loop's own Python then runs with cold caches. ``--dispatch-wait-on call`` (the default)
puts the wait where a GPU pays it: every ``jax.jit`` function made in the process sleeps W
microseconds (outside the GIL) before each call (``slow_jit.py``, installed before gyre is
imported), so the hand loop's step, gyre's ring step, a fused call of K steps and gyre's own
per-block calls (the history's transfers) each pay one wait per call. ``--dispatch-wait-on
data`` puts it on each batch pull instead (``SlowBatches``, ``len()`` kept), for every variant
alike: one wait per step whatever the loop does, so it cannot show what fusing saves.

Timing and report
-----------------
Timing noise on a small machine is several percent, so the variants run interleaved for
``--rounds`` rounds (the order rotates each round), each run from a fresh copy of the initial
state (the step donates its state). The report is a markdown table of the median steps/s of
each variant, the median over rounds of its ratio to the hand-written run of the same round,
the ratio of medians and of the best runs, and PASS/FAIL against the target (``--target``;
by default 0.97 with a dispatch wait, else 0.95: the acceptance of issue 24). A second table
gives the CPU time per step of the thread that runs the loop (``time.thread_time``), much less
disturbed by other processes than wall time; its excess over the hand-written loop is the
per-step host overhead (the trainer's and fit's include their per-call start and end). The
script always exits 0: it is a report, not a test.

``--fused-table`` instead compares, on the same model, the hand-written per-step loop with
``gyre.loop`` (bar and history) at ``steps_per_call`` 1, 10 and 100 and ``"auto"``: each
one's ratio to the per-step hand loop, and auto's ratio to the best fixed K (the one with the
highest median); PASS/FAIL of auto against ``--auto-target`` times the hand loop, and against
0.95 of the best fixed K. On a CPU the host-bound case that fusing addresses is the tiny model
without a wait (``--hidden 8``: a step is mostly its call's fixed cost); ``--hidden 256`` is
compute-bound (auto must not lose). ``"auto"`` measures its first two blocks (up to 512 steps)
before it fuses, so give it a few thousand steps. The report says which ``loop.plan`` each
``gyre.loop`` variant took in how many runs (``"blocks"``, ``"fused"`` with the K auto chose, or
``"steps"`` and why): auto decides in each run, from a measurement.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/loop_overhead.py                  # 2000 steps x 15 rounds
    .venv/bin/python benchmarks/loop_overhead.py --hidden 8 --dispatch-wait-us 200 --steps 1000
    .venv/bin/python benchmarks/loop_overhead.py --hidden 32
    .venv/bin/python benchmarks/loop_overhead.py --fused-table --hidden 8 --auto-target 3 --steps 4000
    .venv/bin/python benchmarks/loop_overhead.py --fused-table --hidden 256 --auto-target 0.97 --steps 4000
    .venv/bin/python benchmarks/loop_overhead.py --profile        # cProfile of gyre.loop
    .venv/bin/python benchmarks/loop_overhead.py --hidden 32 --variant gyre.loop --variant gyre.fit

``--profile`` runs the ``gyre.loop`` variant under :mod:`cProfile` (after the warm-up) and
prints the 25 functions with the most own time, with their time per training step, to show
where gyre's per-step Python overhead goes (``--profile-variant`` picks another variant, e.g.
``hand-written`` for the baseline cost of dispatching the jitted step). Profiling inflates the
cost of small Python calls, so read those numbers as relative, not absolute.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402
import slow_jit  # noqa: E402

slow_jit.install_from_argv()  # before gyre is imported: its compiled functions wait too

import gyre  # noqa: E402

Batch = tuple[np.ndarray, np.ndarray]
State = Any
Step = Callable[[State, Batch], tuple[gyre.Logs, State]]
Runner = Callable[[State], State]

TARGET = 0.95  # without a dispatch wait (DESIGN.md "Performance rules"; issue 24 at --hidden 32)
TARGET_WAIT = 0.97  # with a dispatch wait (issue 24, the GPU stand-in)
BEST_K_TARGET = 0.95  # steps_per_call="auto" against the best fixed K (issue 24, on a GPU)
BATCH_SIZE = 64
LAYERS = (64, 256, 256, 10)
LEARNING_RATE = 1e-3
HAND = "hand-written"
HAND_SAVE = "hand-written + orbax at the end"
HAND_KEEP = "hand-written keeping its outputs"
HAND_TRAINER = "hand-written over the trainer's step + orbax at the end"
LOOP = "gyre.loop"
TRAIN_LOOP = "gyre.train_loop"
OUTER_LOOP = "jaxloop.OuterLoop"
OUTER_LOOP_STEPS = 100  # steps per inner train loop of the OuterLoop variant
WRITE_TO = "gyre.loop + write_to(TensorBoardWriter)"
TRAINER = "TrainerModule.train_model"
FIT = "gyre.fit"
AUTO = 'gyre.loop, steps_per_call="auto"'
VARIANTS = (HAND, LOOP, TRAIN_LOOP, OUTER_LOOP, WRITE_TO, TRAINER, FIT, HAND_SAVE, HAND_KEEP, HAND_TRAINER, AUTO)
FIXED_K = (1, 10, 100)  # the fixed steps_per_call of --fused-table
REFERENCES = (HAND, HAND_SAVE, HAND_KEEP, HAND_TRAINER)  # rows without a target
#: the hand-written loop doing the same work as a variant (a checkpoint at the end; the outputs
#: jaxloop's contract returns; the trainer's own compiled step, which also computes accuracy and
#: keeps its epoch and window sums): that variant's row also gives the ratio to it
LIKE_FOR_LIKE = {TRAINER: HAND_TRAINER, FIT: HAND_SAVE, OUTER_LOOP: HAND_KEEP}


class NullSink(io.TextIOBase):
    """A text stream that discards everything (not a terminal), for the progress bars."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class SlowBatches:
    """The batches, each pull first waiting ``wait_us`` microseconds outside the GIL
    (``time.sleep``): the dispatch-wait stand-in (see the module docs). Re-iterable, with the
    batches' ``len()``.

    Example:
        >>> data = SlowBatches([1, 2, 3], wait_us=10)
        >>> len(data), list(data), list(data)
        (3, [1, 2, 3], [1, 2, 3])
    """

    def __init__(self, batches: Sequence[Any], wait_us: float) -> None:
        self.batches = batches
        self.wait = wait_us / 1e6

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        wait = self.wait
        for batch in self.batches:
            time.sleep(wait)
            yield batch


def slow_data(batches: Sequence[Batch], wait_us: float) -> Sequence[Batch] | SlowBatches:
    """``batches`` behind a :class:`SlowBatches` wait, or as they are when ``wait_us`` is 0.

    Example:
        >>> slow_data([1], 0), len(slow_data([1], 5.0))
        ([1], 1)
    """
    return SlowBatches(batches, wait_us) if wait_us else batches


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


def fresh_copy(state: State) -> State:
    """A device copy of ``state`` (the step donates its input, so each run needs its own)."""
    copied = jax.tree_util.tree_map(jnp.copy, state)
    return jax.block_until_ready(copied)


# -- the variants ----------------------------------------------------------------------------


def loop_runner(step: Step, data: Iterable[Batch], steps: int, steps_per_call: int | str = 1) -> Runner:
    """``gyre.loop`` with the step and a progress bar (to a null sink) on every step, the
    history kept (the default), ``steps_per_call`` as given. The runner's ``plans`` list gets
    each run's ``loop.plan`` (which path gyre took, and why), read once at its end."""

    def with_loop(state: State) -> State:
        bar = gyre.keras_bar(total=steps, file=NullSink())
        state, _, _ = gyre.loop(state, data, {gyre.every(1): [step, bar]}, stop=steps, steps_per_call=steps_per_call,
                                on_end=seen)
        return jax.block_until_ready(state)

    def seen(loop: Any) -> None:
        with_loop.plans.append(str(getattr(loop, "plan", "(no loop.plan)")))  # type: ignore[attr-defined]

    with_loop.plans = []  # type: ignore[attr-defined]
    return with_loop


def hand_runner(step: Step, data: Iterable[Batch]) -> Runner:
    """The hand-written loop: one call of ``step`` per batch, the logs dropped."""

    def hand_written(state: State) -> State:
        for batch in data:
            _, state = step(state, batch)
        return jax.block_until_ready(state)

    return hand_written


def make_runners(
    step: Step, data: Iterable[Batch], steps: int, logdir: str, *, steps_per_call: int = 1
) -> dict[str, Runner]:
    """One function per variant of the hand-written loop and gyre's loops (the trainer and
    fit: :func:`rung_runners`): takes a fresh state, trains one step per batch of ``data``
    (exactly ``steps`` of them), returns the final state once computed. The TensorBoard
    variant and the orbax save write under ``logdir``, a fresh folder each run."""
    runs = iter(range(1 << 30))
    hand_written = hand_runner(step, data)

    def with_train_loop(state: State) -> State:
        bar = gyre.keras_bar(total=steps, file=NullSink())
        state, _, _ = gyre.train_loop(state, data, {gyre.on_train_step: [step]}, callbacks=[bar], stop=steps,
                                      steps_per_call=steps_per_call)
        return jax.block_until_ready(state)

    def jaxloop_step(state: State, batch: Batch, per_loop_step_number: int, **kwargs: Any) -> tuple[State, Any]:
        logs, state = step(state, batch)
        return state, logs

    def with_outer_loop(state: State) -> State:
        outer = gyre.jaxloop.OuterLoop(train_loop=gyre.jaxloop.TrainLoop(jaxloop_step))
        state, _ = outer(state, train_dataset=iter(data), train_total_steps=steps,
                         train_loop_steps=min(OUTER_LOOP_STEPS, steps), log_train_total_steps=False)
        return jax.block_until_ready(state)

    def with_write_to(state: State) -> State:
        bar = gyre.keras_bar(total=steps, file=NullSink())
        writer = gyre.TensorBoardWriter(os.path.join(logdir, f"tb{next(runs)}"))
        tasks = {gyre.every(1): [step, bar], **gyre.write_to(writer)}
        state, _, _ = gyre.loop(state, data, tasks, stop=steps, steps_per_call=steps_per_call)
        writer.close()
        return jax.block_until_ready(state)

    def hand_written_keep(state: State) -> State:
        for i, batch in enumerate(data):
            if i % OUTER_LOOP_STEPS == 0:
                outputs: dict[str, list[Any]] = collections.defaultdict(list)
            logs, state = step(state, batch)
            for key, value in logs.items():
                outputs[key].append(value)
        return jax.block_until_ready(state)

    def hand_written_save(state: State) -> State:
        params, opt_state = hand_written(state)
        orbax_save(os.path.join(logdir, f"orbax{next(runs)}"), steps, params, opt_state)
        return params, opt_state

    return {HAND: hand_written, LOOP: loop_runner(step, data, steps, steps_per_call), TRAIN_LOOP: with_train_loop,
            OUTER_LOOP: with_outer_loop, WRITE_TO: with_write_to, HAND_SAVE: hand_written_save,
            HAND_KEEP: hand_written_keep, AUTO: loop_runner(step, data, steps, "auto")}


def orbax_save(directory: str, step: int, params: Any, opt_state: Any) -> None:
    """What the hand-written loops save at their end: orbax's ``StandardSave`` of the
    parameters and optimizer state, waited for."""
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=1))
    manager.save(step, args=ocp.args.StandardSave({"params": params, "opt_state": opt_state}))
    manager.wait_until_finished()
    manager.close()


def make_rungs(batches: Sequence[Batch], hidden: int, seed: int, logdir: str, steps_per_call: int) -> tuple[Any, Any]:
    """The trainer of ``trainer_overhead.py`` (its state built from the first batch) and the
    initial ``TrainState`` of ``fit_overhead.py``'s model, both with hidden layers ``hidden``
    wide. Made once: the trainer keeps its compiled steps between runs."""
    import fit_overhead
    import trainer_overhead

    trainer_overhead.HIDDEN = fit_overhead.HIDDEN = hidden
    trainer = trainer_overhead.make_trainer(trainer_overhead.make_model(seed), trainer_overhead.LOG_EVERY,
                                            os.path.join(logdir, "trainer"), steps_per_call=steps_per_call)
    trainer.init_model(batches[0])
    tx = optax.adam(LEARNING_RATE)
    state = gyre.TrainState.create(apply_fn=fit_overhead.model.apply, params=fit_overhead.init_params(seed),
                                   tx=tx, rng=seed)
    return trainer, jax.block_until_ready(state)


def rung_runners(trainer: Any, fit_state: Any, data: Iterable[Batch], logdir: str, steps_per_call: int) -> dict[str, Runner]:
    """The ``TrainerModule.train_model`` and ``gyre.fit`` variants: one epoch of ``data``
    from a fresh copy of the runner's ``initial`` state, each run in a fresh folder."""
    import fit_overhead
    import trainer_overhead

    runs = iter(range(1 << 30))

    def trainer_run(state: Any) -> Any:
        trainer.state = state
        trainer.log_dir = Path(logdir) / f"trainer{next(runs)}"
        trainer.train_model(data, num_epochs=1)
        return jax.block_until_ready(trainer.state)

    def fit_run(state: Any) -> Any:
        state, _ = gyre.fit(state, data, loss_fn=fit_overhead.loss_fn, num_epochs=1, log_dir=logdir,
                            log_name=f"fit{next(runs)}", progress=False, steps_per_call=steps_per_call)
        return jax.block_until_ready(state)

    def trainer_step_by_hand(state: Any) -> Any:
        """The trainer's own compiled step (made by its first ``train_model``: the warm-up) in
        a Python loop, then the hand-written loops' orbax save: what the trainer's step costs
        without the trainer's loop around it."""
        step = trainer_overhead.train_step_of(trainer)
        for batch in data:
            _, state = step(state, batch)
        orbax_save(os.path.join(logdir, f"orbax-trainer{next(runs)}"), 0, state.params, state.opt_state)
        return jax.block_until_ready(state)

    trainer_run.initial = trainer_step_by_hand.initial = trainer.state  # type: ignore[attr-defined]
    fit_run.initial = fit_state  # type: ignore[attr-defined]
    return {TRAINER: trainer_run, FIT: fit_run, HAND_TRAINER: trainer_step_by_hand}


def fused_runners(step: Step, data: Iterable[Batch], steps: int) -> dict[str, Runner]:
    """``--fused-table``: the hand-written per-step loop, ``gyre.loop`` at each fixed
    ``steps_per_call`` of :data:`FIXED_K`, and at ``"auto"``."""
    runners = {HAND: hand_runner(step, data)}
    for k in FIXED_K:
        runners[f"gyre.loop, steps_per_call={k}"] = loop_runner(step, data, steps, k)
    runners[AUTO] = loop_runner(step, data, steps, "auto")
    return runners


def warm_up(runners: dict[str, Runner], initial: State) -> dict[str, Runner]:
    """Runs every variant once, untimed (compiling what it compiles); drops the auto variant,
    saying so, when the installed gyre refuses ``steps_per_call="auto"``."""
    for name, run in list(runners.items()):
        try:
            run(fresh_copy(getattr(run, "initial", initial)))
        except (TypeError, ValueError) as err:
            if name != AUTO:
                raise
            print(f"auto: not supported yet ({type(err).__name__}: {str(err).splitlines()[0]})")
            del runners[name]
            continue
        if getattr(run, "plans", None):
            print(f"{name}: {run.plans.pop()}")  # type: ignore[attr-defined]
    return runners


def plans_taken(runners: dict[str, Runner]) -> list[str]:
    """Lines saying which ``loop.plan`` each ``gyre.loop`` variant took in how many timed runs
    (``"auto"`` decides in each run, from a measurement).

    Example:
        >>> def run(state): ...
        >>> run.plans = ["Plan(path='fused')", "Plan(path='blocks')", "Plan(path='fused')"]
        >>> plans_taken({"auto": run})
        ["auto: Plan(path='fused') x2, Plan(path='blocks') x1"]
    """
    lines = []
    for name, run in runners.items():
        plans = getattr(run, "plans", None)
        if plans:
            counts = Counter(plans).most_common()
            lines.append(f"{name}: " + ", ".join(f"{plan} x{n}" for plan, n in counts))
    return lines


def time_run(run: Runner, initial: State, steps: int) -> tuple[float, float, float]:
    """One run from a fresh copy of ``initial`` (or of the runner's own ``initial``): steps
    per second of wall time, and CPU microseconds per step spent by the thread that runs the
    loop and by the whole process (XLA's compute threads included)."""
    state = fresh_copy(getattr(run, "initial", initial))
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


def paired(values: Sequence[float], reference: Sequence[float]) -> float:
    """The median of the per-round ratios ``values[i] / reference[i]`` (each round runs every
    variant back to back, so a slow patch of the machine slows all of them: the ratio within a
    round cancels it, the ratio of medians does not).

    Example:
        >>> paired([90.0, 100.0, 120.0], [100.0, 100.0, 100.0])
        1.0
    """
    return statistics.median(v / r for v, r in zip(values, reference, strict=True))


def report(rates: Samples, cpu: Samples, steps: int, rounds: int, target: float) -> str:
    """The markdown tables and the PASS/FAIL lines (see the module docs): every variant but
    the references against ``target`` times the hand-written loop; the trainer, fit and
    OuterLoop also against the hand-written loop doing the same work (:data:`LIKE_FOR_LIKE`)."""
    hand, hand_best = statistics.median(rates[HAND]), max(rates[HAND])
    lines = [
        f"{steps} steps x {rounds} rounds, interleaved",
        "",
        "| variant | steps/s (median) | ratio (median of rounds) | ratio of medians | ratio (best) "
        "| ratio to the like-for-like hand loop | target | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    failed = []
    for name in rates:
        ratio = paired(rates[name], rates[HAND])
        like = LIKE_FOR_LIKE.get(name)
        saved = f"{paired(rates[name], rates[like]):.3f} ({like})" if like in rates else ""
        verdict = "" if name in REFERENCES else ("PASS" if ratio >= target else "FAIL")
        if verdict == "FAIL":
            failed.append(name)
        lines.append(
            f"| {name} | {statistics.median(rates[name]):,.0f} | {ratio:.3f} | {statistics.median(rates[name]) / hand:.3f} "
            f"| {max(rates[name]) / hand_best:.3f} | {saved} | {'' if name in REFERENCES else f'>= {target:.2f}'} "
            f"| {verdict} |"
        )
    lines += ["", f"target: ratio (median of rounds) >= {target:.2f} of {HAND} for every gyre variant -> "
              + (f"FAIL ({', '.join(failed)})" if failed else "PASS")]
    return "\n".join(lines + noise_warning(rates[HAND], HAND) + cpu_table(cpu))


def fused_report(rates: Samples, cpu: Samples, steps: int, rounds: int, auto_target: float) -> str:
    """``--fused-table``'s tables and PASS/FAIL lines: each variant against the per-step hand
    loop and against the best fixed ``steps_per_call`` (the highest median steps/s)."""
    fixed = [name for name in rates if name not in (HAND, AUTO)]
    best = max(fixed, key=lambda name: statistics.median(rates[name]))
    lines = [
        f"{steps} steps x {rounds} rounds, interleaved; best fixed K: {best}",
        "",
        f"| variant | steps/s (median) | ratio to {HAND} per step (median of rounds) "
        "| ratio to the best fixed K (median of rounds) |",
        "|---|---:|---:|---:|",
    ]
    for name in rates:
        lines.append(f"| {name} | {statistics.median(rates[name]):,.0f} | {paired(rates[name], rates[HAND]):.3f} "
                     f"| {paired(rates[name], rates[best]):.3f} |")
    lines.append("")
    if AUTO not in rates:
        lines.append("auto: not supported yet")
    else:
        vs_hand, vs_best = paired(rates[AUTO], rates[HAND]), paired(rates[AUTO], rates[best])
        lines += [
            f"target: auto >= {auto_target:g}x the per-step {HAND} loop -> "
            f"{'PASS' if vs_hand >= auto_target else 'FAIL'} ({vs_hand:.3f}x)",
            f"target (on a GPU): auto >= {BEST_K_TARGET:.2f} of the best fixed K -> "
            f"{'PASS' if vs_best >= BEST_K_TARGET else 'FAIL'} ({vs_best:.3f})",
        ]
    return "\n".join(lines + noise_warning(rates[HAND], HAND) + cpu_table(cpu))


def noise_warning(rates: Sequence[float], name: str) -> list[str]:
    """A warning line when the runs of ``name`` differ by more than 10%.

    Example:
        >>> noise_warning([100.0, 105.0], "hand"), len(noise_warning([100.0, 150.0], "hand"))
        ([], 1)
    """
    spread = max(rates) / min(rates) - 1
    if spread <= 0.10:
        return []
    return [f"warning: the {name} runs differ by {spread:.0%} (max/min): the machine is noisy, read the "
            "ratios with care (or raise --rounds)"]


def cpu_table(cpu: Samples) -> list[str]:
    """The loop thread's CPU per step of each variant, and its excess over the hand-written
    loop (gyre's per-step host overhead; disturbed much less than wall time by other work)."""
    hand = statistics.median(cpu[HAND])
    lines = ["", "| variant | loop-thread CPU us/step (median) | extra vs hand-written (us/step) |", "|---|---:|---:|"]
    for name, samples in cpu.items():
        median = statistics.median(samples)
        lines.append(f"| {name} | {median:.1f} | {median - hand:+.1f} |")
    return lines


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
    parser.add_argument("--hidden", type=int, default=256,
                        help="width of the two hidden layers (default 256; 32 gives a tiny model "
                        "whose step is short, so gyre's per-step host overhead shows)")
    parser.add_argument("--dispatch-wait-us", type=float, default=0.0,
                        help="wait this many microseconds outside the GIL before each jax.jit call "
                        "(or batch pull: --dispatch-wait-on), in every variant: a CPU stand-in for a "
                        "GPU whose dispatch is slow and host-bound (200 resembles the virtualised "
                        "H200; default 0: off)")
    parser.add_argument("--dispatch-wait-on", choices=("call", "data"), default="call",
                        help="where the wait is paid: before every jax.jit call (default, as a GPU "
                        "dispatch; installed before gyre is imported) or before every batch pull")
    parser.add_argument("--steps-per-call", type=int, default=1,
                        help="steps_per_call of the variants that take it (default 1)")
    parser.add_argument("--target", type=float, default=None,
                        help=f"the ratio each gyre variant must reach (default {TARGET_WAIT} with a "
                        f"dispatch wait, else {TARGET})")
    parser.add_argument("--fused-table", action="store_true",
                        help='instead, compare steps_per_call 1, 10, 100 and "auto" with the per-step '
                        "hand-written loop")
    parser.add_argument("--auto-target", type=float, default=0.97,
                        help='--fused-table: the ratio of "auto" to the per-step hand loop it must '
                        "reach (default 0.97, compute-bound; 3 on a host-bound stand-in)")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, run one variant under cProfile and print the "
                        "top 25 functions by own time")
    parser.add_argument("--profile-variant", choices=VARIANTS, default=LOOP,
                        help=f"the variant --profile runs (default {LOOP})")
    parser.add_argument("--profile-top", type=int, default=25,
                        help="functions --profile lists, by own time (default 25)")
    parser.add_argument("--variant", dest="variants", action="append", default=None,
                        help="only this variant (repeat it for several; the hand-written loop always "
                        "runs): fewer compilations, so more rounds in the same time")
    bench_json.add_option(parser)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants or ()) - set(VARIANTS))
    if unknown:
        parser.error(f"--variant: unknown {unknown}; the variants are {list(VARIANTS)}")
    if min(args.steps, args.rounds, args.hidden, args.steps_per_call) < 1:
        parser.error("--steps, --rounds, --hidden and --steps-per-call must be >= 1")
    if args.dispatch_wait_us < 0:
        parser.error("--dispatch-wait-us must be >= 0")
    if args.target is None:
        args.target = TARGET_WAIT if args.dispatch_wait_us else TARGET
    return args


def build_runners(args: argparse.Namespace, step: Step, batches: list[Batch], logdir: str) -> dict[str, Runner]:
    """The variants the arguments ask for, in :data:`VARIANTS` order (or ``--fused-table``'s)."""
    data = slow_data(batches, args.dispatch_wait_us) if args.dispatch_wait_on == "data" else batches
    if args.fused_table:
        return fused_runners(step, data, args.steps)
    k = args.steps_per_call
    runners = make_runners(step, data, args.steps, logdir, steps_per_call=k)
    wanted = {HAND, *args.variants} if args.variants else set(VARIANTS)
    if (not args.profile and wanted & {TRAINER, FIT}) or (args.profile and args.profile_variant in (TRAINER, FIT)):
        trainer, fit_state = make_rungs(batches, args.hidden, args.seed, logdir, k)
        runners.update(rung_runners(trainer, fit_state, data, logdir, k))
    if args.profile:
        return {args.profile_variant: runners[args.profile_variant]}
    return {name: runners[name] for name in VARIANTS if name in wanted}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    global LAYERS
    LAYERS = (64, args.hidden, args.hidden, 10)
    steps = args.steps
    batches = make_batches(steps, args.seed)
    tx = optax.adam(LEARNING_RATE)
    params = init_params(jax.random.PRNGKey(args.seed))
    initial = jax.block_until_ready((params, tx.init(params)))
    step = make_step(tx)

    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}), {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, MLP {LAYERS}, dispatch wait {args.dispatch_wait_us:g} us, "
          f"steps_per_call {args.steps_per_call}")
    jax.block_until_ready(step(fresh_copy(initial), batches[0]))  # compiled once, untimed
    logdir = tempfile.mkdtemp(prefix="gyre-bench-loop-")
    try:
        runners = warm_up(build_runners(args, step, batches, logdir), initial)
        if args.profile:
            for name, run in runners.items():
                state = fresh_copy(getattr(run, "initial", initial))
                gc.collect()
                profile = cProfile.Profile()
                profile.enable()
                run(state)
                profile.disable()
                print(f"variant: {name}")
                print_profile(profile, steps, args.profile_top)
            return 0
        rates, cpu, _ = interleave(runners, initial, steps, args.rounds)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    print("\n".join(["", "the paths the gyre.loop variants took in the timed runs:", *plans_taken(runners)]))
    print()
    if args.fused_table:
        text = fused_report(rates, cpu, steps, args.rounds, args.auto_target)
    else:
        text = report(rates, cpu, steps, args.rounds, args.target)
    print(text)
    rows = [bench_json.row(name, None if name == HAND else paired(rates[name], rates[HAND]), HAND,
                           value=round(statistics.median(rates[name])), unit="steps/s") for name in rates]
    bench_json.write(args.json, benchmark="loop_overhead", steps=steps, rounds=args.rounds, rows=rows, report=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
