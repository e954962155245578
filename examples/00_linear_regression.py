"""Linear regression in pure JAX, trained by ``gyre.loop``.

The state is a dict of two arrays, the step is plain ``jax.grad`` and SGD; the task table
runs the step every step, an evaluation on the whole data set every 100 steps, and a
progress bar.

    python examples/00_linear_regression.py

Writes no files (``main(workdir=...)`` writes ``history.csv`` into the folder it is given).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gyre
import gyre.data

TRUE_W = np.array([2.0, -1.0, 0.5], np.float32)
TRUE_B = 0.3
LEARNING_RATE = 0.1


def make_data(n: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``y = x @ TRUE_W + TRUE_B + noise`` for ``n`` points ``x`` drawn in [-1, 1]^3."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(n, 3)).astype(np.float32)
    y = (x @ TRUE_W + TRUE_B + rng.normal(0.0, 0.1, size=n)).astype(np.float32)
    return x, y


def mse(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    prediction = x @ params["w"] + params["b"]
    return jnp.mean((prediction - y) ** 2)


@partial(jax.jit, donate_argnums=0)
def train_step(state: dict[str, jax.Array], batch: tuple[jax.Array, jax.Array]) -> Any:
    loss, grads = jax.value_and_grad(mse)(state, *batch)
    state = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, state, grads)
    return gyre.logs().add_loss("mse", loss), state


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Fits the line; returns the mean squared error on the whole data set.

    Args:
        steps: SGD steps.
        workdir: if given, the history is written there as ``history.csv``.
    """
    x, y = make_data()

    @jax.jit
    def evaluate(state: dict[str, jax.Array]) -> gyre.Logs:
        return gyre.logs().add_metric("mse_all", mse(state, x, y))

    state = {"w": jnp.zeros(3, jnp.float32), "b": jnp.zeros((), jnp.float32)}
    state, history, elapsed = gyre.loop(
        state,
        gyre.data.batches((x, y), 32),  # shuffled, repeated forever
        {
            gyre.every(1): [train_step],
            gyre.every(100): [evaluate],
            gyre.every(1): [gyre.keras_bar(total=steps)],
        },
        stop=steps,
    )
    final = float(mse(state, x, y))
    w, b = jax.device_get((state["w"], state["b"]))
    print(f"w = {np.round(w, 3)} (true {TRUE_W}), b = {float(b):.3f} (true {TRUE_B})")
    print(f"mse after {elapsed.steps} steps: {final:.5f}")
    if workdir is not None:
        history.to_csv(os.path.join(workdir, "history.csv"))
    return final


if __name__ == "__main__":
    main()
