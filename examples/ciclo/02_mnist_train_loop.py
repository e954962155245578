"""ciclo's ``train_loop`` example: named steps (``on_train_step``, ``on_test_step``,
``on_reset_step``) over flax's ``TrainState`` extended with jax_metrics-style metrics kept in
the state, an evaluation every tenth of the run, the best checkpoint by ``accuracy_test``, a
Keras bar; train and test curves plotted.

Adapted from ciclo's examples/flax/02_mnist_train_loop.py (MIT License, Copyright (c) 2022
Cristian Garcia): only the imports and the data loading changed. ``jax_metrics`` (unmaintained,
it does not install on current JAX) is replaced by ``gyre.frameworks``, which has its names
(``jm.Metrics``, ``jm.metrics.Accuracy()``, ``jm.metrics.Mean().from_argument(...)``). The data
are scikit-learn's 8x8 digits through ``gyre.data`` instead of tensorflow_datasets' MNIST,
shaped like MNIST (28x28x1 uint8 images under ``"image"``, labels under ``"label"``).

    python examples/ciclo/02_mnist_train_loop.py

Writes its checkpoints to ``runs/ciclo/02_mnist_train_loop/<unix time>/`` and its plot to
``runs/ciclo/02_mnist_train_loop/history.png`` under the folder it is run from (run it from
the repository root: ``runs/`` is gitignored; ciclo wrote ``logdir/``). Length:
``GYRE_EXAMPLE_STEPS=n`` ends the training data after ``n`` batches; unset, ciclo's 100 steps.
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
from clu.metrics import Accuracy, Average, Collection
from flax import struct
from flax.training import train_state

import gyre
import gyre as ciclo
from gyre import frameworks as jm  # gyre: was `import jax_metrics as jm`

batch_size = 32

# load the digits data set in MNIST's shape: 28x28x1 uint8 images (each 8x8 pixel drawn 3x3,
# a 2-pixel border); training batches reshuffled every epoch, repeated forever
# (GYRE_EXAMPLE_STEPS=n: n batches); the test set in order, the short last batch dropped
(x_train, y_train), (x_test, y_test) = gyre.data.digits()
x_train, x_test = (
    np.pad(np.kron(x.reshape(-1, 8, 8, 1), np.ones((3, 3, 1))) * 255, ((0, 0), (2, 2), (2, 2), (0, 0)))
    .round()
    .astype(np.uint8)
    for x in (x_train, x_test)
)
ds_train = ({"image": x, "label": y} for x, y in gyre.data.batches((x_train, y_train), batch_size))
ds_train = itertools.islice(ds_train, int(os.environ.get("GYRE_EXAMPLE_STEPS", 0)) or None)


def ds_test():
    batches = gyre.data.batches((x_test, y_test), 32, shuffle=False, epochs=1)
    return ({"image": x, "label": y} for x, y in batches)


# Define model
class Linear(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x / 255.0
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=10)(x)
        return x


@struct.dataclass
class Metrics(Collection):
    loss: Average.from_output("loss")
    accuracy: Accuracy

    def update(self, **kwargs) -> "Metrics":
        updates = self.single_from_model_output(**kwargs)
        return self.merge(updates)


class TrainState(train_state.TrainState):
    metrics: jm.Metrics


@jax.jit
def train_step(state: TrainState, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["image"])
        loss = optax.softmax_cross_entropy_with_integer_labels(
            logits=logits, labels=batch["label"]
        ).mean()
        return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    metrics = state.metrics.update(loss=loss, preds=logits, target=batch["label"])
    logs = ciclo.logs()
    logs.add_stateful_metrics(**metrics.compute())
    return logs, state.replace(metrics=metrics)


@jax.jit
def test_step(state: TrainState, batch):
    logits = state.apply_fn({"params": state.params}, batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits=logits, labels=batch["label"]
    ).mean()
    metrics = state.metrics.update(loss=loss, preds=logits, target=batch["label"])
    logs = ciclo.logs()
    logs.add_stateful_metrics(**metrics.compute())
    return logs, state.replace(metrics=metrics)


def reset_step(state: TrainState):
    return state.replace(metrics=state.metrics.reset())


# Initialize state
model = Linear()
variables = model.init(jax.random.PRNGKey(0), jnp.empty((1, 28, 28, 1)))
state = TrainState.create(
    apply_fn=model.apply,
    params=variables["params"],
    tx=optax.adamw(1e-3),
    metrics=jm.Metrics(
        {
            "accuracy": jm.metrics.Accuracy(),
            "loss": jm.metrics.Mean().from_argument("loss"),
        }
    ),
)

# training loop
total_samples = 32 * 100
total_steps = total_samples // batch_size
eval_steps = total_steps // 10
log_steps = total_steps // 50


state, history, _ = ciclo.train_loop(
    state,
    ds_train,  # gyre: was ds_train.as_numpy_iterator()
    {
        ciclo.on_train_step: [train_step],
        ciclo.on_test_step: [test_step],
        ciclo.on_reset_step: [reset_step],
    },
    callbacks=[
        ciclo.checkpoint(
            f"runs/ciclo/{Path(__file__).stem}/{int(time())}",  # gyre: was logdir/
            monitor="accuracy_test",
            mode="max",
            keep=1,
            keep_best=1,  # gyre: ciclo's monitor= kept only the best; gyre keeps the latest `keep` and the best `keep_best`
        ),
        ciclo.keras_bar(total=total_steps),
    ],
    test_dataset=lambda: ds_test(),  # gyre: was ds_test.as_numpy_iterator()
    epoch_duration=eval_steps,
    stop=total_steps,
)

# %%

steps, loss, accuracy = history.collect("steps", "loss", "accuracy")
steps_test, loss_test, accuracy_test = history.collect(
    "steps", "loss_test", "accuracy_test"
)

_, axs = plt.subplots(1, 2)
axs[0].plot(steps, loss, label="train")
axs[0].plot(steps_test, loss_test, label="test")
axs[0].legend()
axs[0].set_title("Loss")
axs[1].plot(steps, accuracy, label="train")
axs[1].plot(steps_test, accuracy_test, label="test")
axs[1].legend()
axs[1].set_title("Accuracy")
plt.savefig(f"runs/ciclo/{Path(__file__).stem}/history.png")  # gyre: was plt.show()
