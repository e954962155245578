"""One process of the multi-host test (run by test_distributed.py, not collected by pytest).

    python _multihost_worker.py OUT_DIR NUM_PROCESSES PROCESS_ID PORT

With NUM_PROCESSES > 1 the process joins the others through ``gyre.distributed.initialize``;
with 1 it runs alone on every local device (the reference). Either way it trains a small MLP
data-parallel for STEPS steps on the same global batches, each process feeding its slice of
every batch, with a progress bar, the history and a checkpoint.

Results go to files only, never through the process's output streams, which JAX's collectives
(gloo) share from several C++ threads: every process writes OUT_DIR/result_<PROCESS_ID>.json
(its losses, what gyre printed through Python's ``sys.stdout``, and where it stopped if it
failed), and process 0 writes the final and restored parameters to OUT_DIR/result.npz. Each
file is written whole and then renamed into place, so a reader never sees half of one.
"""

import contextlib
import io
import json
import os
import sys
import traceback

import jax
import numpy as np
import optax

import gyre
from gyre import managed

STEPS = 20
GLOBAL_BATCH = 16
FEATURES, HIDDEN, CLASSES = 8, 16, 4


def init_params():
    rng = np.random.default_rng(0)
    return {
        "w1": (rng.normal(size=(FEATURES, HIDDEN)) * 0.3).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.normal(size=(HIDDEN, CLASSES)) * 0.3).astype(np.float32),
        "b2": np.zeros(CLASSES, np.float32),
    }


def global_batches():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(STEPS, GLOBAL_BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(STEPS, GLOBAL_BATCH)).astype(np.int32)
    return x, y


@managed.train_step
def train_step(state, batch):
    import jax.numpy as jnp

    x, y = batch
    h = jnp.tanh(x @ state.params["w1"] + state.params["b1"][None])
    logits = h @ state.params["w2"] + state.params["b2"][None]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return gyre.logs().add_loss("loss", loss), state


def write_atomically(path, write):
    temporary = f"{path}.tmp"
    write(temporary)
    os.replace(temporary, path)


def save_json(path, payload):
    def write(name):
        with open(name, "w") as f:
            json.dump(payload, f)

    write_atomically(path, write)


def train(out, processes, index):
    """The run itself; returns what the JSON result reports."""
    cache = os.environ.get("GYRE_TEST_JAX_CACHE")
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    state = managed.ManagedState.create(
        params=init_params(), tx=optax.adam(1e-2), strategy="data_parallel"
    )
    x, y = global_batches()
    share = GLOBAL_BATCH // processes
    rows = slice(index * share, (index + 1) * share)
    local = [(x[i, rows], y[i, rows]) for i in range(STEPS)]
    batches = gyre.prefetch_to_device(local, sharding=state.strategy)
    bar = gyre.keras_bar(total=STEPS)
    ckpt = gyre.checkpoint(os.path.join(out, "ckpt"), keep=1)
    state, history, elapsed = gyre.loop(
        state,
        batches,
        {gyre.every(1): [train_step, bar], gyre.every(10): ckpt},
        stop=STEPS,
        on_end=[bar.on_train_end, ckpt.on_train_end],
    )
    losses = [float(v) for v in history.collect("loss")]
    # every process joins the restore (orbax reads collectively), into the live shardings
    restored, clock = ckpt.restore(state)
    # parameters are replicated global arrays: each process reads its local copy
    params = {k: np.asarray(v.addressable_data(0)) for k, v in state.params.items()}
    if gyre.distributed.is_main_process():
        saved_w1 = np.asarray(restored.params["w1"].addressable_data(0))

        def write(name):
            with open(name, "wb") as f:
                np.savez(f, steps=elapsed.steps, checkpoints=np.asarray(ckpt.all_steps()),
                         restored_steps=clock.steps, restored_w1=saved_w1, **params)

        write_atomically(os.path.join(out, "result.npz"), write)
    return {"steps": int(elapsed.steps), "losses": losses}


def main() -> int:
    out, processes, index, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    result = {"process": index, "processes": processes, "failed_in": None, "error": None}
    printed = io.StringIO()  # gyre's own output (Python's sys.stdout), apart from gloo's
    phase = "initialize"
    try:
        with contextlib.redirect_stdout(printed):
            if processes > 1:
                gyre.distributed.initialize(f"127.0.0.1:{port}", processes, index)
            phase = "train"
            result["process_count"] = gyre.distributed.process_count()
            result["process_index"] = gyre.distributed.process_index()
            result.update(train(out, processes, index))
    except Exception as err:  # reported through the result file
        result["failed_in"] = phase
        result["error"] = "".join(traceback.format_exception(err))[-4000:]
    result["printed"] = printed.getvalue()
    save_json(os.path.join(out, f"result_{index}.json"), result)
    return 0 if result["failed_in"] is None else 3


if __name__ == "__main__":
    sys.exit(main())
