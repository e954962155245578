"""What the digits examples share: an MLP, its state, its train and test steps, and where
the examples write.

The state is a plain dict ``{"params", "opt_state"}``; a step is
``(state, (x, y)) -> (logs, state)``, compiled once, the train step donating its state.

Examples that write files (checkpoints) write them under ``runs/<example>/<timestamp>/`` in
the repository, a new folder per run: ``runs/`` is gitignored and ``make clean`` removes it.
Nothing goes to the system's temporary directory.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import gyre
from gyre._demo import make_run_dir

BATCH_SIZE = 64
RUNS = Path(__file__).resolve().parent.parent / "runs"  # gitignored
State = dict[str, Any]
Batch = tuple[jax.Array, jax.Array]


class MLP(nn.Module):
    """64 pixels -> 256 -> 256 -> 10 logits, relu between the layers."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(256)(x))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


model = MLP()
tx = optax.adam(1e-3)


def create_state(seed: int = 0) -> State:
    """Initial parameters and optimizer state."""
    params = model.init(jax.random.key(seed), jnp.zeros((1, 64), jnp.float32))["params"]
    return {"params": params, "opt_state": tx.init(params)}


def loss_and_accuracy(params: Any, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = model.apply({"params": params}, x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return loss, jnp.mean(jnp.argmax(logits, axis=-1) == y)


@partial(jax.jit, donate_argnums=0)
def train_step(state: State, batch: Batch) -> tuple[gyre.Logs, State]:
    x, y = batch
    grad_fn = jax.value_and_grad(loss_and_accuracy, has_aux=True)
    (loss, accuracy), grads = grad_fn(state["params"], x, y)
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    logs = gyre.logs().add_loss("loss", loss).add_metric("accuracy", accuracy)
    return logs, {"params": params, "opt_state": opt_state}


@jax.jit
def test_step(state: State, batch: Batch) -> gyre.Logs:
    loss, accuracy = loss_and_accuracy(state["params"], *batch)
    return gyre.logs().add_loss("loss", loss).add_metric("accuracy", accuracy)


def test_accuracy(state: State, test: tuple[Any, Any]) -> float:
    """Accuracy over the whole test set (one batch: the digits test set is small)."""
    return float(test_step(state, test).metrics.accuracy)


def make_workdir(workdir: str | None, name: str) -> str:
    """``workdir``, or when it is None a new ``runs/<name>/<YYYYmmdd-HHMMSS>/`` (a new folder
    per run, so a second run never finds the first one's checkpoints)."""
    return workdir if workdir is not None else str(make_run_dir(RUNS / name))
