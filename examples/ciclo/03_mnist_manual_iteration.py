"""ciclo's manual-iteration example: no task table, a plain Python ``for`` over
``ciclo.elapse(...)`` calling the jitted step, a schedule, a checkpoint, a Keras bar and the
history by hand, stopping at ``ciclo.at(total_steps)``; the history plotted.

Adapted from ciclo's examples/flax/03_mnist_manual_iteration.py (MIT License, Copyright (c)
2022 Cristian Garcia): only the import and the data loading changed. The data are
scikit-learn's 8x8 digits through ``gyre.data`` instead of tensorflow_datasets' MNIST, shaped
like MNIST (28x28x1 uint8 images under ``"image"``, labels under ``"label"``).

    python examples/ciclo/03_mnist_manual_iteration.py

Writes its checkpoint to ``runs/ciclo/03_mnist_manual_iteration/<unix time>/`` and its plot to
``runs/ciclo/03_mnist_manual_iteration/history.png`` under the folder it is run from (run it
from the repository root: ``runs/`` is gitignored; ciclo wrote ``logdir/``). Length:
``GYRE_EXAMPLE_STEPS=n`` ends the data after ``n`` batches; unset, ciclo's 100 steps.
"""

# %%
import itertools
import os
from pathlib import Path
from time import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")  # gyre: write the plot, open no window
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax.training.train_state import TrainState

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
class Linear(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x / 255.0
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=10)(x)
        return x


@jax.jit
def train_step(state: TrainState, batch):
    inputs, labels = batch["image"], batch["label"]

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, inputs)
        loss = optax.softmax_cross_entropy_with_integer_labels(
            logits=logits, labels=labels
        ).mean()
        return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    logs = ciclo.logs()
    logs.add_metrics(
        loss=loss,
        accuracy=jnp.mean(jnp.argmax(logits, -1) == labels),
    )
    return logs, state


# Initialize state
model = Linear()
variables = model.init(jax.random.PRNGKey(0), jnp.empty((1, 28, 28, 1)))
state = TrainState.create(
    apply_fn=model.apply,
    params=variables["params"],
    tx=optax.adamw(1e-3),
)

# training loop
total_samples = 32 * 100
total_steps = total_samples // batch_size

checkpoint_schedule = ciclo.every(steps=1000)
checkpoint = ciclo.checkpoint(
    f"runs/ciclo/{Path(__file__).stem}/{int(time())}",  # gyre: was logdir/
)
keras_bar = ciclo.keras_bar(total=total_steps)
end_period = ciclo.at(total_steps)

history = ciclo.history()
for elapsed, batch in ciclo.elapse(ds_train):  # gyre: was ds_train.as_numpy_iterator()
    logs, state = train_step(state, batch)
    if checkpoint_schedule(elapsed):
        checkpoint(elapsed, state)
    keras_bar(elapsed, logs)
    history.commit(elapsed, logs)

    if elapsed >= end_period:
        break

# plot the training history
steps, loss, accuracy = history.collect("steps", "loss", "accuracy")

fig, axs = plt.subplots(1, 2)
axs[0].plot(steps, loss)
axs[0].set_title("Loss")
axs[1].plot(steps, accuracy)
axs[1].set_title("Accuracy")
plt.savefig(f"runs/ciclo/{Path(__file__).stem}/history.png")  # gyre: was plt.show()

# %%
