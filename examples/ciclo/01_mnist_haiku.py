"""ciclo's haiku example: a ``hk.transform`` model and a ``simple_pytree`` dataclass state with
static fields for the apply function and the optax transformation, trained by a jitted step in
a ``ciclo.loop`` task table with a checkpoint every tenth of the run and a Keras bar spread
into it; the history plotted.

Adapted from ciclo's examples/haiku/01_mnist_haiku.py (MIT License, Copyright (c) 2022
Cristian Garcia): only the import and the data loading changed. The data are scikit-learn's
8x8 digits through ``gyre.data`` instead of tensorflow_datasets' MNIST, shaped like MNIST
(28x28x1 uint8 images under ``"image"``, labels under ``"label"``).

    python examples/ciclo/01_mnist_haiku.py

Writes its checkpoints to ``runs/ciclo/haiku_mnist_simple/<unix time>/`` (ciclo's name, under
``logdir/`` there) and its plot to ``runs/ciclo/haiku_mnist_simple/history.png``, under the
folder it is run from (run it from the repository root: ``runs/`` is gitignored). Length:
``GYRE_EXAMPLE_STEPS=n`` ends the data after ``n`` batches; unset, ciclo's 100 steps.
"""

# %%
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from time import time
from typing import Any, Callable

import haiku as hk
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")  # gyre: write the plot, open no window
import matplotlib.pyplot as plt
import numpy as np
import optax
from simple_pytree import Pytree, static_field

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
def linear_classifier(x):
    x = x / 255.0
    x = x.reshape((x.shape[0], -1))  # flatten
    x = hk.Linear(10)(x)
    return x


@dataclass
class State(Pytree):
    params: Any
    opt_state: optax.OptState
    tx: optax.GradientTransformation = static_field()
    apply_fn: Callable = static_field()

    @classmethod
    def create(
        cls, *, apply_fn: Callable, params: Any, tx: optax.GradientTransformation
    ):
        return cls(apply_fn=apply_fn, params=params, opt_state=tx.init(params), tx=tx)

    def apply_gradients(self, *, grads: Any):
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)
        return self.replace(params=params, opt_state=opt_state)


@jax.jit
def train_step(state: State, batch):
    inputs, labels = batch["image"], batch["label"]

    # update the model's state
    def loss_fn(params):
        logits = state.apply_fn(params, None, inputs)
        loss = optax.softmax_cross_entropy_with_integer_labels(
            logits=logits, labels=labels
        ).mean()
        return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)

    # add logs
    logs = ciclo.logs()
    logs.add_metric("loss", loss)
    logs.add_metric("accuracy", jnp.mean(jnp.argmax(logits, -1) == labels))

    return logs, state


# Initialize state
model = hk.transform(linear_classifier)
params = model.init(jax.random.PRNGKey(0), jnp.empty((1, 28, 28, 1)))
state = State.create(
    apply_fn=model.apply,
    params=params,
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
        ciclo.every(total_steps // 10): ciclo.checkpoint(
            f"runs/ciclo/haiku_mnist_simple/{int(time())}",  # gyre: was logdir/
        ),
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
plt.savefig("runs/ciclo/haiku_mnist_simple/history.png")  # gyre: was plt.show()

# %%
