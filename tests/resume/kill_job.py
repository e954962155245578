"""The job the kill tests run in a subprocess: the digits MLP trained with ``train_loop``,
shuffled ``gyre.data.batches``, dropout drawn from the state's per-step key, an evaluation
every epoch, early stopping, and a checkpoint every 5 steps with ``resume="latest"``.

    python kill_job.py RUN_DIR STEPS [KILL_AT]

With ``KILL_AT`` the process kills itself with SIGKILL during that step (no clean-up of any
kind, saves in flight included); without it the run ends and writes ``RUN_DIR/result.npz``
(the final params and optimizer state) and ``RUN_DIR/history.json``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import gyre  # noqa: E402

_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".jax_cache")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)

TX = optax.adam(3e-3)
HIDDEN = 32
DROPOUT = 0.2


def init() -> dict:
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": jax.random.normal(k1, (64, HIDDEN)) * 0.1, "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(k2, (HIDDEN, 10)) * 0.1, "b2": jnp.zeros(10),
    }
    return {"params": params, "opt_state": TX.init(params), "step": jnp.int32(0),
            "rng": jax.random.key_data(jax.random.key(1))}


def forward(params, x, key=None):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    if key is not None:
        keep = jax.random.bernoulli(key, 1.0 - DROPOUT, h.shape)
        h = jnp.where(keep, h / (1.0 - DROPOUT), 0.0)
    return h @ params["w2"] + params["b2"]


def _loss(params, x, y, key=None):
    logits = forward(params, x, key)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss, jnp.mean(jnp.argmax(logits, -1) == y)


@jax.jit
def train_step(state, batch):
    x, y = batch
    key = jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), state["step"])
    (loss, acc), grads = jax.value_and_grad(_loss, has_aux=True)(state["params"], x, y, key)
    updates, opt_state = TX.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    logs = gyre.logs().add_loss("loss", loss).add_metric("accuracy", acc)
    return logs, {**state, "params": params, "opt_state": opt_state, "step": state["step"] + 1}


train_step_donated = jax.jit(train_step.__wrapped__, donate_argnums=0)


@jax.jit
def test_step(state, batch):
    loss, acc = _loss(state["params"], *batch)
    return gyre.logs().add_loss("loss", loss).add_metric("accuracy", acc)


def main(run_dir: str, steps: int, kill_at: int | None) -> None:
    (x, y), (x_test, y_test) = gyre.data.digits()
    data = gyre.data.batches((x, y), 64, seed=3)

    def kill(elapsed):
        if kill_at is not None and elapsed.steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    ckpt = gyre.checkpoint(os.path.join(run_dir, "checkpoints"), keep=3)
    stopper = gyre.early_stopping("loss_test", patience=2, min_delta=0.02)
    tasks = {
        gyre.on_train_step: train_step_donated,
        gyre.on_test_step: test_step,
        gyre.every(5): ckpt,
        gyre.every(1): kill,
    }
    state, history, elapsed = gyre.train_loop(
        init(), data, tasks, callbacks=[stopper],
        test_dataset=lambda: gyre.data.batches((x_test, y_test), 120, shuffle=False, epochs=1),
        stop=steps, resume="latest",
    )
    leaves = {f"leaf{i}": np.asarray(v) for i, v in enumerate(jax.tree_util.tree_leaves(state))}
    np.savez(os.path.join(run_dir, "result.npz"), **leaves)
    with open(os.path.join(run_dir, "history.json"), "w") as f:
        json.dump({"records": history.to_records(), "steps": elapsed.steps,
                   "stop_reason": history.stop_reason}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
