"""ciclo's managed API example: one loss function gives the train step
(``managed.train_step``: gradients from the logged losses) and the evaluation step
(``managed.step``), on a ``ManagedState`` subclass carrying CLU metrics as fields; the table
spreads the train step and a Keras bar (``**train_step``, ``**ciclo.keras_bar(...)``) and, after
the first step, every tenth of the run resets the metrics, evaluates in an ``inner_loop``, keeps
the 3 best checkpoints (and the latest) and checks early stopping.

Adapted from ciclo's examples/flax/04_mnist_managed_api.py (MIT License, Copyright (c) 2022
Cristian Garcia): only the imports and the data loading changed. The data are scikit-learn's
8x8 digits through ``gyre.data`` instead of tensorflow_datasets' MNIST, shaped like MNIST
(28x28x1 uint8 images under ``"image"``, labels under ``"label"``).

    python examples/ciclo/04_mnist_managed_api.py

Writes its checkpoints to ``runs/ciclo/04_mnist_managed_api/<unix time>/`` under the folder it
is run from (run it from the repository root: ``runs/`` is gitignored; ciclo wrote
``logdir/``). Length: ``GYRE_EXAMPLE_STEPS=n`` ends the training data after ``n`` batches;
unset, ciclo's 100 steps (3,200 samples).
"""

import itertools
import os
from curses import keyname
from pathlib import Path
from time import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from clu.metrics import Accuracy, Average

import gyre
import gyre as ciclo
from gyre import managed

print(jax.local_devices())

strategy = ciclo.get_strategy("jit")
batch_size = strategy.lift_batch_size(32)

# load the digits data set in MNIST's shape: 28x28x1 uint8 images (each 8x8 pixel drawn 3x3,
# a 2-pixel border); training batches reshuffled every epoch, repeated forever
# (GYRE_EXAMPLE_STEPS=n: n batches); the validation set in order, the short last batch dropped
(x_train, y_train), (x_valid, y_valid) = gyre.data.digits()
x_train, x_valid = (
    np.pad(np.kron(x.reshape(-1, 8, 8, 1), np.ones((3, 3, 1))) * 255, ((0, 0), (2, 2), (2, 2), (0, 0)))
    .round()
    .astype(np.uint8)
    for x in (x_train, x_valid)
)
ds_train = ({"image": x, "label": y} for x, y in gyre.data.batches((x_train, y_train), batch_size))
ds_train = itertools.islice(ds_train, int(os.environ.get("GYRE_EXAMPLE_STEPS", 0)) or None)


def ds_valid():
    batches = gyre.data.batches((x_valid, y_valid), batch_size, shuffle=False, epochs=1)
    return ({"image": x, "label": y} for x, y in batches)


# Define model
class Linear(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x / 255.0
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=10)(x)
        return x


AverageLoss = Average.from_output("loss")


class ManagedState(managed.ManagedState):
    accuracy: Accuracy
    loss: AverageLoss


def loss_fn(state: ManagedState, batch):
    inputs, labels = batch["image"], batch["label"]
    logits = state.apply_fn({"params": state.params}, inputs)
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits=logits, labels=labels
    ).mean()
    logs = ciclo.logs()
    logs.add_loss("loss", loss)
    logs.add_stateful_metric(
        "accuracy", Accuracy.from_model_output(logits=logits, labels=labels)
    )
    logs.add_stateful_metric("loss", AverageLoss.from_model_output(loss=loss))
    return logs, state


train_step = managed.train_step(loss_fn)
eval_step = managed.step(loss_fn)


@managed.step
def reset_metrics(state: ManagedState):
    return state.replace(
        accuracy=Accuracy.empty(),
        loss=AverageLoss.empty(),
    )


# Initialize state
model = Linear()
variables = model.init(jax.random.PRNGKey(0), jnp.empty((1, 28, 28, 1)))
state = ManagedState.create(
    apply_fn=model.apply,
    params=variables["params"],
    tx=optax.adamw(1e-3),
    accuracy=Accuracy.empty(),
    loss=AverageLoss.empty(),
    strategy=strategy,
)

# training loop
total_samples = 32 * 100
total_steps = total_samples // batch_size
eval_steps = total_steps // 10

state, history, *_ = ciclo.loop(
    state,
    ds_train,  # gyre: was ds_train.as_numpy_iterator()
    {
        **train_step,
        ciclo.after(1).every(eval_steps): [
            reset_metrics,
            ciclo.inner_loop(
                "valid",
                lambda state: ciclo.loop(
                    state,
                    ds_valid(),  # gyre: was ds_valid.as_numpy_iterator()
                    {ciclo.every(steps=1): eval_step},
                ),
            ),
            ciclo.checkpoint(
                f"runs/ciclo/{Path(__file__).stem}/{int(time())}",  # gyre: was logdir/
                monitor="accuracy_valid",
                mode="max",
                keep=1,
                keep_best=3,  # gyre: ciclo's monitor= kept only the best; gyre keeps the latest `keep` and the best `keep_best`
            ),
            ciclo.early_stopping(
                monitor="accuracy_valid",
                mode="max",
                patience=eval_steps * 2,
            ),
            reset_metrics,
        ],
        **ciclo.keras_bar(total=total_steps),
    },
    stop=ciclo.at(samples=total_samples),
)
