"""Jax Fit's "Usage" section (seed 004) as one program: the model, the loss function, the
evaluation function, the data, ``lr_schedule``, a ``TrainState`` with chained optax
transformations, and the ``fit`` call with its hyperparameters.

The seed's code is kept as it is; the changed lines are marked ``# gyre:``: the import (the
seed copies ``fit.py`` into the project: ``from fit import *``), the data (scikit-learn's 8x8
digits as ``(N, 8, 8, 1)`` images instead of MNIST from TensorFlow Datasets or torchvision), the
length (the seed's 10 epochs; ``GYRE_EXAMPLE_EPOCHS`` changes it) and where the logs go.

    python examples/migration/jax_fit_usage.py

Writes TensorBoard logs and checkpoints to ``runs/jax_fit_usage/<timestamp>/mnist``
(``GYRE_EXAMPLE_WORKDIR=folder`` writes there instead).
"""

import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import gyre
from gyre import TrainState, fit, lr_schedule  # gyre: was `from fit import *`

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))  # gyre: examples/_digits_common.py
from _digits_common import make_workdir  # gyre: runs/<example>/<timestamp>/  # noqa: E402


# %% Model
class Model(nn.Module):
    def setup(self):
        self.conv1 = nn.Conv(features=16, kernel_size=(3, 3))
        self.dense1 = nn.Dense(features=10)

    # train=False for evaluation mode
    # if you use dropout or batch normalization
    # I bet you will use it
    @nn.compact
    def __call__(self, x, train=False):
        # simple conv + bn + relu + fully connected layer
        x = self.conv1(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x)
        # dropout layer
        x = nn.Dropout(rate=0.5)(x, deterministic=not train)
        # flatten
        x = x.reshape((x.shape[0], -1))
        x = self.dense1(x)
        return x


# %% Loss function
@jax.jit
def loss_fn(logits, labels):
    loss = optax.softmax_cross_entropy(
        logits,
        jax.nn.one_hot(labels, 10)
    ).mean()
    # put the losses you want to log to tensorboard
    loss_dict = {'loss': loss}
    return loss, loss_dict


# %% Evaluation function
@jax.jit
def eval_step(state: TrainState, batch):
    x, y = batch
    logits = state.apply_fn({
        'params': state.params,
        'batch_stats': state.batch_stats,
        }, x, train=False)
    acc = jnp.equal(jnp.argmax(logits, -1), y).mean()
    return acc


# %% Data preparation
# gyre: was tfds.load("mnist", split="train", as_supervised=True) or torchvision's MNIST through a
# torch DataLoader; the digits ship with scikit-learn (gyre.data.mnist(path) reads MNIST files you
# have; gyre.data.from_tf(ds) and gyre.data.from_torch(loader) turn those loaders' batches into numpy)
(x_train, y_train), (x_test, y_test) = gyre.data.digits()  # gyre
train_ds, _, test_ds = gyre.data.arrays(  # gyre: 32 a batch, reshuffled every epoch; the test set in order
    ((x_train.reshape(-1, 8, 8, 1), y_train), (x_test.reshape(-1, 8, 8, 1), y_test)), 32)

# %% Learning rate schedule
lr_fn = lr_schedule(base_lr=1e-3,
    steps_per_epoch=len(train_ds),
    epochs=100,
    warmup_epochs=5,
)

model = Model()
key = jax.random.PRNGKey(0)
x = jnp.ones((1, 8, 8, 1))  # gyre: a digits input (MNIST: (1, 28, 28, 1))
var = model.init(key, x, train=True)

state = TrainState.create(
    apply_fn=model.apply,
    params=var['params'],
    batch_stats=var['batch_stats'],
    # chainable update transformations
    tx=optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adam(lr_fn)),
)

# %% Fit
num_epochs = int(os.environ.get('GYRE_EXAMPLE_EPOCHS', 0)) or 10  # gyre: the length knob
state, history = fit(state, train_ds, test_ds,  # gyre: fit returns the state and the history
    loss_fn=loss_fn,
    eval_step=eval_step,
    # evaluate the model every N epochs (default 1)
    eval_freq=1,
    num_epochs=num_epochs,  # gyre: was 10
    # log name for tensorboard
    log_name='mnist',
    # hyperparameters for the training process
    # such as batch size, learning rate, etc.
    # it's optional for you
    hparams={
        'batch_size': 32,
        'lr': 1e-3,
    },
    log_dir=make_workdir(os.environ.get('GYRE_EXAMPLE_WORKDIR'), 'jax_fit_usage'),  # gyre: where the run goes
)
print(f"test accuracy after {num_epochs} epochs: {history.collect('accuracy_test')[-1]:.4f}")
