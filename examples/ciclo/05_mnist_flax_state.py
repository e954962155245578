"""ciclo's ``create_flax_state`` example: the state brings its own train, test and reset steps
from a loss and a metric given as jax_metrics-style objects (``Crossentropy()``,
``Accuracy()``); ``train_loop`` runs them with an evaluation of ``test_steps`` batches every
tenth of the run, the best checkpoint by ``accuracy_test`` and a Keras bar; ``avg_loss`` and
``accuracy`` plotted for train and test.

Adapted from ciclo's examples/flax/05_mnist_flax_state.py (MIT License, Copyright (c) 2022
Cristian Garcia): only the imports and the data loading changed. ``jax_metrics``
(unmaintained, it does not install on current JAX) is replaced by ``gyre.frameworks``, which
has its names (``jm.losses.Crossentropy()``, ``jm.metrics.Accuracy()``). The data are
scikit-learn's 8x8 digits through ``gyre.data`` instead of tensorflow_datasets' MNIST, shaped
like MNIST (``(image, label)`` pairs of 28x28x1 uint8 images and labels).

    python examples/ciclo/05_mnist_flax_state.py

Writes its checkpoints to ``runs/ciclo/05_mnist_flax_state/<unix time>/`` and its plot to
``runs/ciclo/05_mnist_flax_state/history.png`` under the folder it is run from (run it from
the repository root: ``runs/`` is gitignored; ciclo wrote ``logdir/``). Length:
``GYRE_EXAMPLE_STEPS=n`` ends the training data after ``n`` batches; unset, ciclo's 100 steps.
"""

# %%
import itertools
import os
from pathlib import Path
from time import time

import flax.linen as nn
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")  # gyre: write the plot, open no window
import matplotlib.pyplot as plt
import numpy as np
import optax

import gyre
import gyre as ciclo
from gyre import frameworks as jm  # gyre: was `import jax_metrics as jm`

batch_size = 32
total_samples = 32 * 100
total_steps = total_samples // batch_size
steps_per_epoch = total_steps // 10
test_steps = 10

# load the digits data set in MNIST's shape: (image, label) pairs of 28x28x1 uint8 images (each
# 8x8 pixel drawn 3x3, a 2-pixel border); training batches reshuffled every epoch, repeated
# forever (GYRE_EXAMPLE_STEPS=n: n batches); the test set in order, the short last batch dropped
(x_train, y_train), (x_test, y_test) = gyre.data.digits()
x_train, x_test = (
    np.pad(np.kron(x.reshape(-1, 8, 8, 1), np.ones((3, 3, 1))) * 255, ((0, 0), (2, 2), (2, 2), (0, 0)))
    .round()
    .astype(np.uint8)
    for x in (x_train, x_test)
)
ds_train = gyre.data.batches((x_train, y_train), batch_size)
ds_train = itertools.islice(ds_train, int(os.environ.get("GYRE_EXAMPLE_STEPS", 0)) or None)


def ds_test():
    return gyre.data.batches((x_test, y_test), 32, shuffle=False, epochs=1)


# Define model
class Linear(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x / 255.0
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=10)(x)
        return x


# Initialize state
model = Linear()
state = ciclo.create_flax_state(
    model,
    inputs=jnp.empty((1, 28, 28, 1)),
    tx=optax.adamw(1e-3),
    losses={"loss": jm.losses.Crossentropy()},
    metrics={"accuracy": jm.metrics.Accuracy()},
    strategy="jit",
)
state, history, _ = ciclo.train_loop(
    state,
    ds_train,  # gyre: was ds_train.as_numpy_iterator()
    callbacks=[
        ciclo.keras_bar(total=total_steps),
        ciclo.checkpoint(
            f"runs/ciclo/{Path(__file__).stem}/{int(time())}",  # gyre: was logdir/
            monitor="accuracy_test",
            mode="max",
            keep=1,
            keep_best=1,  # gyre: ciclo's monitor= kept only the best; gyre keeps the latest `keep` and the best `keep_best`
        ),
    ],
    test_dataset=lambda: ds_test(),  # gyre: was ds_test.as_numpy_iterator()
    epoch_duration=steps_per_epoch,
    test_duration=test_steps,
    stop=total_steps,
)

# %%

steps, avg_loss, accuracy, avg_loss_test, accuracy_test = history.collect(
    "steps", "avg_loss", "accuracy", "avg_loss_test", "accuracy_test"
)

_, axs = plt.subplots(1, 2)
axs[0].plot(steps, avg_loss, label="train")
axs[0].plot(steps, avg_loss_test, label="test")
axs[0].legend()
axs[0].set_title("Avg Loss")
axs[1].plot(steps, accuracy, label="train")
axs[1].plot(steps, accuracy_test, label="test")
axs[1].legend()
axs[1].set_title("Accuracy")
plt.savefig(f"runs/ciclo/{Path(__file__).stem}/history.png")  # gyre: was plt.show()
