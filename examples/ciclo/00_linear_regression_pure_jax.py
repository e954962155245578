"""ciclo's pure-JAX example: linear regression with a dict of two scalars as the state, a
jitted train step every step and a test step every 100 steps in one task table, a Keras bar,
and the fitted line plotted.

Adapted from ciclo's examples/jax/00_linear_regression_pure_jax.py (MIT License, Copyright (c)
2022 Cristian Garcia): only the import and the data loading changed. Its data are synthetic
(no MNIST here), so the data changes are the length knob below and writing the plot instead of
showing it; ``jax.tree_map`` became ``jax.tree.map`` (JAX 0.6 removed the old name).

    python examples/ciclo/00_linear_regression_pure_jax.py

Writes ``runs/ciclo/00_linear_regression_pure_jax/fit.png`` under the folder it is run from
(run it from the repository root: ``runs/`` is gitignored). Length: ``GYRE_EXAMPLE_STEPS=n``
ends the data after ``n`` batches (the test suite's short runs); unset, ciclo's 10,000 steps.
"""

# %%
import itertools
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")  # gyre: write the plot, open no window
import matplotlib.pyplot as plt
import numpy as np

import gyre as ciclo

X = np.linspace(0, 1, 100)
Y = 0.8 * X + 0.1 + np.random.normal(0, 0.1, size=X.shape)


def dataset(batch_size):
    # gyre: GYRE_EXAMPLE_STEPS=n ends the data after n batches (ciclo's repeats forever)
    for _ in itertools.islice(itertools.count(), int(os.environ.get("GYRE_EXAMPLE_STEPS", 0)) or None):
        idx = np.random.choice(len(X), size=batch_size)
        yield X[idx], Y[idx]


state = {"w": 0.0, "b": 0.0}


@jax.jit
def forward(state, x):
    w, b = state["w"], state["b"]
    return w * x + b


def mse(y, y_pred):
    return jnp.mean((y - y_pred) ** 2)


@jax.jit
def train_step(state, batch):
    x, y = batch

    def loss_fn(state):
        y_pred = forward(state, x)
        return mse(y, y_pred)

    grad_fn = jax.value_and_grad(loss_fn)
    loss, grad = grad_fn(state)

    # sdg
    state = jax.tree.map(lambda w, g: w - 0.1 * g, state, grad)

    logs = ciclo.logs()
    logs.add_metric("loss", loss)

    return logs, state


@jax.jit
def test_step(state):
    y_pred = forward(state, X)
    loss = mse(Y, y_pred)

    logs = ciclo.logs()
    logs.add_metric("mse", loss)

    return logs


total_steps = 10_000

state, history, elapsed = ciclo.loop(
    state=state,
    dataset=dataset(batch_size=32),
    tasks={
        ciclo.every(100): [test_step],
        ciclo.every(1): [
            train_step,
            ciclo.keras_bar(total=total_steps),
        ],
    },
    stop=total_steps,
)


y_pred = forward(state, X)

plt.scatter(X, Y, color="blue")
plt.plot(X, y_pred, color="black")
Path("runs/ciclo/00_linear_regression_pure_jax").mkdir(parents=True, exist_ok=True)  # gyre
plt.savefig("runs/ciclo/00_linear_regression_pure_jax/fit.png")  # gyre: was plt.show()
