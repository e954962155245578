"""Per-step overhead of ``TrainerModule.train_model``, as a ratio against a hand-written JAX loop.

What it measures
----------------
The digits MLP of the trainer rung (:class:`gyre.trainer.SimpleClassifier`, ``c_hid=256,
num_layers=2``: 64 -> 256 -> 256 -> 10, relu, the model of ``loop_overhead.py``; optax adam 1e-3; softmax cross-entropy and accuracy) trained on the
training part of ``gyre.data.digits()`` less a stratified validation split of 200 examples
(``DigitsDataset``'s split: 1,237 training examples, 19 batches of 64 per epoch), for
``--steps`` steps rounded to whole epochs (default 2000 -> 105 epochs, 1,995 steps),
validated on the 200 held-out examples (one batch) after every epoch. Every variant reads its
batches from a fresh ``gyre.data.batches((x, y), 64, seed=0)`` (the same batches, the same
host cost), in one process:

* ``hand-written JAX``: pure JAX, the MLP's own weights (copied from the same
  ``SimpleClassifier``): ``state = train_step(state, next(batches))`` with a
  ``jax.jit(donate_argnums=0)`` step that computes loss and accuracy and adds them to
  running sums kept in the state; after each epoch one jitted validation pass, and one
  ``jax.device_get`` of the epoch's train loss/accuracy and the validation loss/accuracy
  (the host read a real loop makes to print them); ``jax.block_until_ready`` at the end;
* ``hand-written JAX + orbax at the end``: the same, plus orbax's
  ``CheckpointManager.save(epoch, StandardSave({"params", "opt_state"}))`` once the training
  ends, waited for: the trainer saves its resume checkpoint when training ends (and every
  ``resume_every_minutes``, 10 by default, which a 2000-step run never reaches), so this is
  the baseline that does the same work;
* ``TrainerModule.train_model (log every 50)`` (the verdict): ``ImgClassifierTrainer`` with
  ``log_steps_every=50``, ``enable_progress_bar=False``, validation every epoch
  (``check_val_every_n_epoch=1``), no ``ModelCheckpoint`` (the default: none), its default
  writer (TensorBoard, under the run folder), its per-epoch metric JSON files, and its resume
  checkpoint at the end (``<log_dir>/resume``, which it always writes);
* ``TrainerModule.train_model (log_steps_every=0)`` (for information): the same with no step
  logs, which isolates what the ``log_window`` task costs.

Steady state, and what is timed
-------------------------------
Each variant's objects live for the whole benchmark: the hand-written jitted functions, and one
trainer instance per trainer variant, whose compiled steps the trainer caches. The first run of
each variant is an untimed warm-up of 3 epochs (it compiles the training and validation steps,
the step log and orbax's first save). Every timed run is then a whole ``train_model`` call (or
hand-written run) of ``--steps`` steps, from its start to its return: the trainer's
per-call start-up (its loop, hooks, checkpoint manager) and its end (waiting for the last
save, the writer's flush) are timed, as the hand-written runs' manager creation and final wait
are, amortised over the same number of steps. Before each trainer run ``trainer.log_dir``
points to a fresh folder (so its resume checkpoint never finds a previous run's); the
trainer's writer is made once, at the warm-up, and kept (``trainer.writer`` is cached). The
trainer continues from its previous state; the hand-written loops start from a fresh copy of
the initial parameters (the values do not change the cost of a step).

Timing noise on a small machine is several percent, so the variants run interleaved for
``--rounds`` rounds (the order rotates each round); each round's ratio of the trainer's
steps/s to each baseline's cancels a slow patch of the machine, and the report gives the
median of those per-round ratios with their spread (min..max over rounds), the median
steps/s, and the loop thread's CPU time per step (``time.thread_time``, less disturbed by
other processes than wall time). Target: ratio >= 0.95 to the hand-written loop (issue 12).
The script always exits 0: it is a report, not a test.

How to run
----------
From the repository root::

    .venv/bin/python benchmarks/trainer_overhead.py                  # 2000 steps x 5 rounds
    .venv/bin/python benchmarks/trainer_overhead.py --steps 1000 --rounds 9
    .venv/bin/python benchmarks/trainer_overhead.py --profile        # where the trainer's time goes

``--profile`` (after the warm-up) times the hand-written loop (best of 3), then breaks one
trainer run down with perf-counter timers around the trainer's and the engine's per-step and
per-epoch parts (wall and thread-CPU microseconds per training step; on a busy machine wall
time includes waits for the GIL and for other threads, CPU time does not), then the same with
the checkpoint store's writes skipped (a what-if: orbax, checksums and record removed, the
rest of the trainer kept), then the trainer's compiled step and the hand-written one alone in
a bare Python loop (what the train state's pytree costs per call), and last one run under
:mod:`cProfile` (the 25 functions with the most own time; profiling inflates small Python
calls, so read those as relative). ``--profile-variant`` picks the variant (a baseline gets
the cProfile run only). The breakdown reaches into private names of gyre (the parts it
times, ``trainer._compiled``): a part gyre renamed is skipped with a note.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import importlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_json  # noqa: E402
from loop_overhead import fresh_copy, print_profile  # noqa: E402

TARGET = 0.95
BATCH_SIZE = 64
HIDDEN = 256
LAYERS = 2
VAL_SIZE = 200
SPLIT_SEED = 42
LEARNING_RATE = 1e-3
LOG_EVERY = 50
WARMUP_EPOCHS = 3
HAND = "hand-written JAX"
HAND_ORBAX = "hand-written JAX + orbax at the end"
TRAINER = "TrainerModule.train_model (log every 50)"
TRAINER_NO_LOG = "TrainerModule.train_model (log_steps_every=0)"
VARIANTS = (HAND, HAND_ORBAX, TRAINER, TRAINER_NO_LOG)
BASELINES = (HAND, HAND_ORBAX)
TRAINERS = (TRAINER, TRAINER_NO_LOG)

Arrays = tuple[np.ndarray, np.ndarray]
Runner = Callable[[int], None]  # trains that many epochs, returns once all is computed and saved


# -- data and model --------------------------------------------------------------------------


def split_data() -> tuple[Arrays, Arrays]:
    """``(train, val)``: the digits training part less ``VAL_SIZE`` stratified examples for
    validation (the split ``gyre.trainer.DigitsDataset`` makes)."""
    from gyre.data import digits, stratified_split

    (x, y), _ = digits()
    train_idx, val_idx = stratified_split(y, test_size=VAL_SIZE / len(y), seed=SPLIT_SEED)
    return (x[train_idx], y[train_idx]), (x[val_idx], y[val_idx])


def make_model(seed: int) -> Any:
    """The trainer's digits MLP (``SimpleClassifier(c_hid=HIDDEN, num_layers=LAYERS)``, nnx)."""
    from flax import nnx

    from gyre.trainer import SimpleClassifier

    return SimpleClassifier(c_hid=HIDDEN, num_layers=LAYERS, num_classes=10, input_dim=64, rngs=nnx.Rngs(seed))


def weights_of(model: Any) -> list[dict[str, jax.Array]]:
    """The model's dense layers as plain ``{"w", "b"}`` dicts, for the hand-written loop."""
    layers = [*model.hidden, model.out]
    return [{"w": jnp.asarray(layer.kernel[...]), "b": jnp.asarray(layer.bias[...])} for layer in layers]


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """``SimpleClassifier``'s forward pass in plain JAX: relu between dense layers."""
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def hand_functions(tx: optax.GradientTransformation) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The hand-written loop's jitted ``train_step(state, batch) -> state`` (donated; the
    state is ``(params, opt_state, sums)`` with ``sums`` the epoch's summed loss and
    accuracy) and ``evaluate(params, x, y) -> (loss, accuracy)``."""

    def loss_fn(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = mlp(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

    def train_step(state: Any, batch: Arrays) -> Any:
        params, opt_state, sums = state
        x, y = batch
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        accuracy = jnp.mean(jnp.argmax(logits, -1) == y)
        return params, opt_state, sums + jnp.stack([loss, accuracy])

    def evaluate(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, logits = loss_fn(params, x, y)
        return loss, jnp.mean(jnp.argmax(logits, -1) == y)

    return jax.jit(train_step, donate_argnums=0), jax.jit(evaluate)


def make_trainer(model: Any, log_every: int, log_dir: str, **config: Any) -> Any:
    """The ``ImgClassifierTrainer`` of the trainer variants (``config``: more of its settings,
    e.g. ``steps_per_call=10``; ``loop_overhead.py`` uses it too)."""
    from gyre.trainer import ImgClassifierTrainer

    return ImgClassifierTrainer(
        {"logger": {"log_steps_every": log_every, "log_dir": log_dir}},
        model=model, optimizer=optax.adam(LEARNING_RATE), enable_progress_bar=False,
        check_val_every_n_epoch=1, seed=0, **config,
    )


# -- the variants ----------------------------------------------------------------------------


def make_runners(train: Arrays, val: Arrays, seed: int, root: str) -> dict[str, Runner]:
    """One function per variant: trains the given number of epochs on a fresh loader,
    validating after each, and returns once the result is computed and every save is on disk.
    Each trainer variant holds one trainer for all its runs (see the module docstring)."""
    import orbax.checkpoint as ocp

    counter = iter(range(1 << 30))
    tx = optax.adam(LEARNING_RATE)
    params = weights_of(make_model(seed))
    initial = jax.block_until_ready((params, tx.init(params), jnp.zeros(2, jnp.float32)))
    train_step, evaluate = hand_functions(tx)
    xv, yv = val
    host_log: list[Any] = []  # what a hand-written loop would print, kept to the end of a run

    def new_directory() -> str:
        return os.path.join(root, f"run{next(counter)}")

    def loader() -> Iterator[Arrays]:
        return gyre.data.batches(train, BATCH_SIZE, seed=0)

    def hand_written(save: bool) -> Runner:
        def run(epochs: int) -> None:
            state = fresh_copy(initial)
            data = loader()
            epoch_steps = data.epoch_steps
            directory = new_directory()
            manager = ocp.CheckpointManager(
                directory, options=ocp.CheckpointManagerOptions(max_to_keep=1)
            ) if save else None
            host_log.clear()
            for _epoch in range(epochs):
                for _ in range(epoch_steps):
                    state = train_step(state, next(data))
                params, opt_state, sums = state
                val_metrics = evaluate(params, xv, yv)
                host_log.append(jax.device_get((sums / epoch_steps, val_metrics)))  # one host read per epoch
                state = (params, opt_state, jnp.zeros(2, jnp.float32))
            if manager is not None:
                manager.save(epochs, args=ocp.args.StandardSave({"params": state[0], "opt_state": state[1]}))
            jax.block_until_ready(state)
            if manager is not None:
                manager.wait_until_finished()
                manager.close()
            shutil.rmtree(directory, ignore_errors=True)

        return run

    def trainer_run(log_every: int) -> Runner:
        trainer = make_trainer(make_model(seed), log_every, new_directory())

        def run(epochs: int) -> None:
            if trainer.state is not None:
                shutil.rmtree(trainer.log_dir / "resume", ignore_errors=True)
            trainer.log_dir = Path(new_directory())
            trainer.train_model(loader(), [(xv, yv)], num_epochs=epochs)
            jax.block_until_ready(trainer.state)

        run.trainer = trainer  # type: ignore[attr-defined]
        return run

    return {
        HAND: hand_written(False), HAND_ORBAX: hand_written(True),
        TRAINER: trainer_run(LOG_EVERY), TRAINER_NO_LOG: trainer_run(0),
    }


def time_run(run: Runner, epochs: int, steps: int) -> tuple[float, float]:
    """One run: steps per second of wall time, and CPU microseconds per step of the thread
    that runs the loop."""
    gc.collect()
    cpu_start = time.thread_time()
    start = time.perf_counter()
    run(epochs)
    seconds = time.perf_counter() - start
    cpu = time.thread_time() - cpu_start
    return steps / seconds, cpu / steps * 1e6


Samples = dict[str, list[float]]


def interleave(runners: dict[str, Runner], epochs: int, steps: int, rounds: int) -> tuple[Samples, Samples]:
    """Times every runner once per round, in an order that rotates each round, printing each
    round's rates; returns, per variant, the steps/s and loop-thread CPU us/step of each round."""
    names = tuple(runners)
    rates: Samples = {name: [] for name in names}
    cpu: Samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            rate, cpu_per_step = time_run(runners[name], epochs, steps)
            rates[name].append(rate)
            cpu[name].append(cpu_per_step)
        shown = ", ".join(f"{name} {rates[name][-1]:,.0f}" for name in names)
        print(f"round {r + 1}/{rounds}: steps/s {shown}", flush=True)
    return rates, cpu


# -- reporting -------------------------------------------------------------------------------


def paired(values: Sequence[float], reference: Sequence[float]) -> list[float]:
    """The per-round ratios ``values[i] / reference[i]``.

    Example:
        >>> paired([90.0, 100.0], [100.0, 100.0])
        [0.9, 1.0]
    """
    return [v / r for v, r in zip(values, reference, strict=True)]


def ratio_rows(rates: Samples, hand: str) -> list[dict[str, Any]]:
    """Each variant's median of the per-round ratios to ``hand``, and its median steps/s, as
    ``bench_json`` rows (this benchmark's and ``fit_overhead.py``'s)."""
    return [bench_json.row(name, None if name == hand else statistics.median(paired(rates[name], rates[hand])), hand,
                           value=round(statistics.median(rates[name])), unit="steps/s") for name in rates]


def report(rates: Samples, cpu: Samples, steps: int, epochs: int, rounds: int) -> str:
    """The markdown tables and the PASS/FAIL line (see the module docstring)."""
    return overhead_report(rates, cpu, steps, epochs, rounds, subject=TRAINER, hand=HAND, saved=HAND_ORBAX,
                           saved_note="against the baseline that also saves with orbax at the end")


def overhead_report(
    rates: Samples, cpu: Samples, steps: int, epochs: int, rounds: int, *,
    subject: str, hand: str, saved: str, saved_note: str,
) -> str:
    """A rung against hand-written JAX (this benchmark's and ``fit_overhead.py``'s report):
    the steps/s table with the ratios to ``hand`` and to ``saved`` (the hand-written loop that
    also saves at the end, as the rung does), the PASS/FAIL line of ``subject`` against
    ``TARGET``, a noise warning, and the loop-thread CPU table."""
    device = jax.devices()[0]
    lines = [
        f"{steps} steps ({epochs} epochs of {steps // epochs}) x {rounds} rounds, interleaved; "
        f"{os.cpu_count()} CPU(s), jax {jax.__version__} on {device.platform}, Python {platform.python_version()}",
        "",
        f"| variant | steps/s (median) | us/step (median) | ratio to {hand} (median of rounds, min..max) "
        f"| ratio to {saved} (median, min..max) |",
        "|---|---:|---:|---:|---:|",
    ]

    def cell(name: str, base: str) -> str:
        if name == base:
            return "(reference)"
        ratios = paired(rates[name], rates[base])
        return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}..{max(ratios):.3f})"

    for name in rates:
        median = statistics.median(rates[name])
        lines.append(f"| {name} | {median:,.0f} | {1e6 / median:,.1f} | {cell(name, hand)} | {cell(name, saved)} |")
    verdict = statistics.median(paired(rates[subject], rates[hand]))
    matched = statistics.median(paired(rates[subject], rates[saved]))
    lines += [
        "",
        f"target: {subject} / {hand} >= {TARGET:.2f} -> {'PASS' if verdict >= TARGET else 'FAIL'} "
        f"({verdict:.3f}); {saved_note}: {matched:.3f}",
    ]
    spread = max(rates[hand]) / min(rates[hand]) - 1
    if spread > 0.10:
        lines.append(f"warning: the hand-written runs differ by {spread:.0%} (max/min): the machine is noisy, "
                     "read the ratios with care (or raise --rounds)")
    hand_cpu = statistics.median(cpu[hand])
    lines += [
        "",
        "| variant | loop-thread CPU us/step (median, min..max) | extra vs hand-written (us/step) |",
        "|---|---:|---:|",
    ]
    for name in rates:
        median = statistics.median(cpu[name])
        lines.append(f"| {name} | {median:.1f} ({min(cpu[name]):.1f}..{max(cpu[name]):.1f}) | "
                     f"{median - hand_cpu:+.1f} |")
    return "\n".join(lines)


# -- profiling -------------------------------------------------------------------------------

STEP_PART = "    the ring step's call (compiled step + history write)"
# (label, module, attribute path): the parts of a trainer run timed by --profile. Nested parts
# are indented under the part that calls them; a part gyre no longer has is skipped, one not
# called in the run is not printed. The trainer's table runs on the block engine.
ENGINE_PARTS = (
    ("engine: BlockRunner.extend (a block's length)", "gyre.engine._blocks", "BlockRunner.extend"),
    ("engine: BlockRunner.call (a block's steps)", "gyre.engine._blocks", "BlockRunner.call"),
    ("  BlockRunner._ringed", "gyre.engine._blocks", "BlockRunner._ringed"),
    ("    data: Batches.__next__", "gyre.data._arrays", "Batches.__next__"),
    (STEP_PART, "", None),
    ("    Ring.seal (the block's logs)", "gyre.engine._ring", "Ring.seal"),
    ("    BlockRunner._run_between (tasks between steps)", "gyre.engine._blocks", "BlockRunner._run_between"),
    ("engine: History.commit_block", "gyre.core._history", "History.commit_block"),
    ("engine: FiniteCheck.after_block (the NaN check)", "gyre.engine._nan", "FiniteCheck.after_block"),
)
SAVE_PARTS = (
    ("engine: LoopState.run_saves (the checkpoint)", "gyre.engine._loop_state", "LoopState.run_saves"),
    ("  LoopState.snapshot", "gyre.engine._loop_state", "LoopState.snapshot"),
    ("  Store.record (checksums, JSON record)", "gyre.callbacks._store", "Store.record"),
    ("  Store.wait (previous save)", "gyre.callbacks._store", "Store.wait"),
    ("  orbax CheckpointManager.save", "orbax.checkpoint.checkpoint_manager", "CheckpointManager.save"),
)
PARTS = ENGINE_PARTS + (
    ("trainer: TrainingRun.log_window", "gyre.trainer._steps", "TrainingRun.log_window"),
    ("trainer: TrainingRun.on_epoch_begin", "gyre.trainer._steps", "TrainingRun.on_epoch_begin"),
    ("trainer: TrainingRun.on_epoch_end", "gyre.trainer._steps", "TrainingRun.on_epoch_end"),
    ("  evaluate (validation pass)", "gyre.trainer._steps", "StepBuilder.evaluate"),
    ("    MetricAccumulator.compute", "gyre.trainer._metrics", "MetricAccumulator.compute"),
    ("  EpochMetricFiles.write", "gyre.trainer._logger", "EpochMetricFiles.write"),
    ("  scalars_for_writers", "gyre.trainer._steps", "scalars_for_writers"),
    ("writer: WriteTo._send", "gyre.loggers._write_to", "WriteTo._send"),
) + SAVE_PARTS


class Timers:
    """Perf-counter timers patched around functions (restored by :meth:`restore`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # the calling thread's CPU time (no wait for the GIL or a lock)
        self.calls: dict[str, int] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, label: str, owner: Any, name: str) -> None:
        """Replaces ``owner.name`` (a class's method or a module's function) by a timed one."""
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        func = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
        timed = functools.wraps(func)(self.timed(label, func))
        setattr(owner, name, type(original)(timed) if isinstance(original, (staticmethod, classmethod)) else timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def timed(self, label: str, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func`` adding its wall and thread CPU time to ``label``'s (several functions may
        add to one label)."""
        self.seconds.setdefault(label, 0.0), self.cpu.setdefault(label, 0.0), self.calls.setdefault(label, 0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return func(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.cpu[label] += time.thread_time() - cpu
                self.calls[label] += 1

        return timed

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def install_timers(parts: Any = PARTS) -> Timers:
    """Timers around ``parts`` (default :data:`PARTS`), and around the compiled ring step the block engine calls for
    each training step (each one ``_ring._ring_function`` makes; wrapping the trainer's own
    compiled step instead would make it unringable and send the run down the general path)."""
    from gyre.engine import _ring

    timers = Timers()
    real, timed = _ring._ring_function, {}

    def made(*args: Any) -> Any:
        fn, out = real(*args)
        if fn not in timed:
            timed[fn] = timers.timed(STEP_PART, fn)
        return timed[fn], out

    _ring._ring_function = made
    timers._undo.append(lambda: setattr(_ring, "_ring_function", real))
    wrap_parts(timers, parts)
    return timers


def wrap_parts(timers: Timers, parts: Any) -> None:
    """Wraps each ``(label, module, "Class.method")`` of ``parts`` (``None``: left to the
    caller) with ``timers``; a part not found is skipped with a note."""
    for label, module_name, path in parts:
        if path is None:
            continue
        try:
            owner: Any = importlib.import_module(module_name)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            if name not in (owner.__dict__ if isinstance(owner, type) else vars(owner)):
                raise AttributeError(name)
        except (ImportError, AttributeError):
            print(f"(profile: {module_name}.{path} not found, skipped)")
            continue
        timers.wrap(label, owner, name)


def print_breakdown(
    title: str, timers: Timers, seconds: float, steps: int, hand: float, *, parts: Any = None, hand_name: str = HAND
) -> None:
    """The timed parts (``parts``, default :data:`PARTS`) in microseconds per training step
    (``hand``: the hand-written loop's seconds for the same steps)."""
    print(f"\n{title}: {steps} steps, {seconds / steps * 1e6:.1f} us/step (ratio to {hand_name}: "
          f"{hand / seconds:.3f}); {hand_name}: {hand / steps * 1e6:.1f} us/step\n")
    print("| part | calls | wall us/step | CPU us/step | wall us/call |")
    print("|---|---:|---:|---:|---:|")
    for label, _, _ in PARTS if parts is None else parts:
        total, calls = timers.seconds.get(label, 0.0), timers.calls.get(label, 0)
        if calls:
            print(f"| {label} | {calls} | {total / steps * 1e6:.1f} | {timers.cpu[label] / steps * 1e6:.1f} "
                  f"| {total / calls * 1e6:.1f} |")


def timed_trainer_run(run: Runner, epochs: int) -> tuple[Timers, float]:
    """One trainer run with :func:`install_timers`: the timers and the run's seconds."""
    timers = install_timers()
    try:
        gc.collect()
        start = time.perf_counter()
        run(epochs)
        return timers, time.perf_counter() - start
    finally:
        timers.restore()


def without_checkpoint_writes() -> Callable[[], None]:
    """Makes gyre's checkpoint store skip its writes (orbax's save, the checksums and JSON
    record, the history files): the what-if run of ``--profile``. Returns the undo."""
    from gyre.callbacks._store import Store

    original = Store.__dict__["save"]
    Store.save = lambda self, snapshot, **kwargs: None  # type: ignore[method-assign]
    return lambda: setattr(Store, "save", original)


def best_of_5(
    step: Callable[..., Any], state: Any, hand_step: Callable[..., Any], hand_state: Any, batches: list[Arrays]
) -> tuple[Any, Any, float, float]:
    """Times ``step`` (returning ``(logs, state)``) and ``hand_step`` (returning the state),
    each alone in a bare Python loop over ``batches``, alternating, 5 times; returns both final
    states and each one's best seconds."""
    best = hand_best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for batch in batches:
            _, state = step(state, batch)
        jax.block_until_ready(state)
        best = min(best, time.perf_counter() - start)
        start = time.perf_counter()
        for batch in batches:
            hand_state = hand_step(hand_state, batch)
        jax.block_until_ready(hand_state)
        hand_best = min(hand_best, time.perf_counter() - start)
    return state, hand_state, best, hand_best


def train_step_of(trainer: Any) -> Callable[..., Any]:
    """The trainer's compiled training step, ``(state, batch) -> (logs, state)``, once its first
    ``train_model`` made it (a private name of gyre: ``trainer._compiled``)."""
    return next(v for k, v in trainer._compiled.items() if k.startswith("train"))


def dispatch_alone(trainer: Any, hand_step: Callable[..., Any], hand_state: Any, batches: list[Arrays]) -> None:
    """The trainer's compiled step and the hand-written one, each alone in a bare Python
    loop over the same batches (best of 5): what the state's structure costs per call."""
    step = train_step_of(trainer)
    state, hand_state, trainer_best, hand_best = best_of_5(step, trainer.state, hand_step, hand_state, batches)
    trainer.state = state
    n = len(batches)
    flat = []
    for tree in (state, hand_state):
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        start = time.perf_counter()
        for _ in range(1000):
            jax.tree_util.tree_unflatten(treedef, jax.tree_util.tree_flatten(tree)[0])
        flat.append(((time.perf_counter() - start) / 1000 * 1e6, len(leaves)))
    print(f"\nthe compiled steps alone in a Python loop ({n} batches, best of 5): trainer "
          f"{trainer_best / n * 1e6:.1f} us/step, hand-written {hand_best / n * 1e6:.1f} us/step; "
          f"flatten + unflatten of the state: trainer {flat[0][0]:.1f} us ({flat[0][1]} leaves), "
          f"hand-written {flat[1][0]:.1f} us ({flat[1][1]} leaves)")


def profile(runners: dict[str, Runner], variant: str, epochs: int, steps: int, train: Arrays) -> None:
    """``--profile``: perf-counter breakdowns of a trainer run with and without its
    checkpoint writes, the compiled steps alone, and a cProfile run of ``variant``."""
    hand = min(_seconds(runners[HAND], epochs) for _ in range(3))
    run = runners[variant]
    if hasattr(run, "trainer"):
        timers, seconds = timed_trainer_run(run, epochs)
        print_breakdown(f"{variant}, timed parts", timers, seconds, steps, hand)
        undo = without_checkpoint_writes()
        try:
            timers, seconds = timed_trainer_run(run, epochs)
        finally:
            undo()
        print_breakdown(f"{variant} with its checkpoint writes skipped (what-if)", timers, seconds, steps, hand)
        loader = gyre.data.batches(train, BATCH_SIZE, seed=0)
        tx = optax.adam(LEARNING_RATE)
        params = weights_of(make_model(0))
        dispatch_alone(run.trainer, hand_functions(tx)[0],  # type: ignore[attr-defined]
                       (params, tx.init(params), jnp.zeros(2, jnp.float32)), [next(loader) for _ in range(1000)])
    gc.collect()
    prof = cProfile.Profile()
    prof.enable()
    run(epochs)
    prof.disable()
    print(f"\nvariant: {variant}")
    print_profile(prof, steps)


def _seconds(run: Runner, epochs: int) -> float:
    gc.collect()
    start = time.perf_counter()
    run(epochs)
    return time.perf_counter() - start


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000,
                        help="steps per run, rounded to whole epochs of 19 steps (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, break one run down with timers and cProfile")
    parser.add_argument("--profile-variant", choices=VARIANTS, default=TRAINER,
                        help=f"the variant --profile runs (default {TRAINER!r})")
    bench_json.add_option(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark (or the profile) and prints its report."""
    args = parse_args(argv)
    train, val = split_data()
    epoch_steps = len(train[1]) // BATCH_SIZE
    epochs = max(1, round(args.steps / epoch_steps))
    steps = epochs * epoch_steps
    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}), {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; SimpleClassifier(c_hid={HIDDEN}), {len(train[1])} training "
          f"examples, {epoch_steps} steps per epoch, {len(val[1])} for validation")
    root = tempfile.mkdtemp(prefix="gyre-trainer-bench-")
    try:
        runners = make_runners(train, val, args.seed, root)
        for run in runners.values():  # compile every step, the step log, orbax's first save
            run(WARMUP_EPOCHS)
        if args.profile:
            profile(runners, args.profile_variant, epochs, steps, train)
            return 0
        rates, cpu = interleave(runners, epochs, steps, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    text = report(rates, cpu, steps, epochs, args.rounds)
    print(text)
    bench_json.write(args.json, benchmark="trainer_overhead", steps=steps, rounds=args.rounds,
                     rows=ratio_rows(rates, HAND), report=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
