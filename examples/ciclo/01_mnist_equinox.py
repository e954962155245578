"""ciclo's equinox example: the state is an ``eqx.Module`` holding the model, the optimizer
state and (static) the optax transformation; a jitted step updates it with ``eqx.tree_at`` in
a ``ciclo.loop`` task table with a Keras bar spread into it; the history plotted.

Adapted from ciclo's examples/equinox/01_mnist_equinox.py (MIT License, Copyright (c) 2022
Cristian Garcia): only the import and the data loading changed, and the annotation
``jax.random.KeyArray`` became ``jax.Array`` (JAX 0.4.24 removed ``KeyArray``; the annotation
is evaluated when the class is defined). The data are scikit-learn's 8x8 digits through
``gyre.data`` instead of tensorflow_datasets' MNIST, shaped like MNIST (28x28x1 uint8 images
under ``"image"``, labels under ``"label"``), so the model's 784 inputs are ciclo's.

    python examples/ciclo/01_mnist_equinox.py

Writes its plot to ``runs/ciclo/01_mnist_equinox/history.png`` under the folder it is run
from (run it from the repository root: ``runs/`` is gitignored). Length:
``GYRE_EXAMPLE_STEPS=n`` ends the data after ``n`` batches; unset, ciclo's 100 steps.
"""

# %%
import dataclasses
import itertools
import os
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")  # gyre: write the plot, open no window
import matplotlib.pyplot as plt
import numpy as np
import optax

import gyre
import gyre as ciclo

batch_size = 32

# load the digits data set in MNIST's shape: 28x28x1 uint8 images (each 8x8 pixel drawn 3x3,
# a 2-pixel border), reshuffled every epoch, repeated forever (GYRE_EXAMPLE_STEPS=n: n batches)
(x_train, y_train), _ = gyre.data.digits()
x_train = np.kron(x_train.reshape(-1, 8, 8, 1), np.ones((3, 3, 1)))
x_train = np.pad(x_train * 255, ((0, 0), (2, 2), (2, 2), (0, 0))).round().astype(np.uint8)
ds_train = ({"image": x, "label": y} for x, y in gyre.data.batches((x_train, y_train), batch_size))
ds_train = itertools.islice(ds_train, int(os.environ.get("GYRE_EXAMPLE_STEPS", 0)) or None)


# Define model
class LinearClassifier(eqx.Module):
    linear: eqx.nn.Linear

    def __init__(self, *, key: jax.Array):  # gyre: was jax.random.KeyArray
        self.linear = eqx.nn.Linear(784, 10, key=key)

    def __call__(self, x):
        x = x.reshape(-1) / 255.0  # flatten
        x = self.linear(x)
        return x


# Define State
class State(eqx.Module):
    params: LinearClassifier
    opt_state: optax.OptState
    tx: optax.GradientTransformation = eqx.static_field()

    def __init__(self, params: LinearClassifier, tx: optax.GradientTransformation):
        self.params = params
        self.tx = tx
        self.opt_state = tx.init(params)


@jax.jit
def train_step(state: State, batch):
    inputs, labels = batch["image"], batch["label"]

    # update the model's state
    def loss_fn(params: LinearClassifier):
        logits = jax.vmap(params)(inputs)
        loss = optax.softmax_cross_entropy_with_integer_labels(
            logits=logits, labels=labels
        ).mean()
        return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)

    # apply gradients
    updates, opt_state = state.tx.update(grads, state.opt_state, params=state.params)
    params = optax.apply_updates(state.params, updates)
    state = eqx.tree_at(lambda x: x.params, state, params)
    state = eqx.tree_at(lambda x: x.opt_state, state, opt_state)

    # add logs
    logs = ciclo.logs()
    logs.add_metric("loss", loss)
    logs.add_metric("accuracy", jnp.mean(jnp.argmax(logits, -1) == labels))

    return logs, state


# Initialize state
model = LinearClassifier(key=jax.random.PRNGKey(0))
state = State(
    params=model,
    tx=optax.adamw(1e-3),
)

# training loop
total_samples = 32 * 100
total_steps = total_samples // batch_size

state, history, _ = ciclo.loop(
    state,
    ds_train,  # gyre: was ds_train.as_numpy_iterator()
    {
        ciclo.every(1): train_step,
        **ciclo.keras_bar(total=total_steps),
    },
    stop=total_steps,
)

# %%
# plot the training history
steps, loss, accuracy = history.collect("steps", "loss", "accuracy")


fig, axs = plt.subplots(1, 2)
axs[0].plot(steps, loss)
axs[0].set_title("Loss")
axs[1].plot(steps, accuracy)
axs[1].set_title("Accuracy")
Path(f"runs/ciclo/{Path(__file__).stem}").mkdir(parents=True, exist_ok=True)  # gyre
plt.savefig(f"runs/ciclo/{Path(__file__).stem}/history.png")  # gyre: was plt.show()

# %%
