"""jaxloop's "Custom Jaxloop" experiment (seed 002): the CNN, ``MnistStep`` with ``begin`` and
``run``, a summary action and a checkpoint action on the train loop, a summary action on the
eval loop, and an ``OuterLoop`` with an ``EvalSpec``.

Ported with only the imports and the data loading changed (each change is marked ``# gyre:``):
jaxloop's modules are ``gyre.jaxloop``; the data are scikit-learn's 8x8 digits through
``gyre.data`` instead of tensorflow_datasets' MNIST (so the model is initialised from
``[1, 8, 8, 1]``); the orbax ``CheckpointManager`` is ``gyre.checkpoint`` (what
``CheckpointAction`` saves through); CLU's metric writer (it needs TensorFlow) is
``gyre.TensorBoardWriter`` (tensorboardX's event files, no TensorFlow). Two numbers changed for
the small data set: the learning rate (0.1, as in ``08_jaxloop_step.py``, instead of 0.005)
and the length (400 steps instead of 100); with the seed's values the digits reach about 0.45
test accuracy (0.94 after 2,000 steps).

    python examples/09_jaxloop_outer_loop.py

Writes TensorBoard event files and ``checkpoints/`` to ``runs/09_jaxloop_outer_loop/<timestamp>/``
(``GYRE_EXAMPLE_WORKDIR=folder`` writes there instead; ``GYRE_EXAMPLE_STEPS=n`` trains ``n``
steps instead of 400).
"""

# %% Model
from flax import linen as nn


class CNN(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(features=32, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(features=256)(x)
    x = nn.relu(x)
    x = nn.Dense(features=10)(x)
    return x

# %% Datasets
import os
import sys  # gyre: for the examples' shared helpers

import gyre.data  # gyre: the digits data set (was tensorflow / tensorflow_datasets)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gyre: examples/_digits_common.py
from _digits_common import make_workdir  # gyre: runs/<example>/<timestamp>/


def mnist_datasets(batch_size, data_dir):
  # gyre: the digits instead of MNIST: 8x8x1 float images in [0, 1] and int32 labels under
  # "image" and "label"; the training batches reshuffled every epoch and repeated forever, the
  # test batches in order with the short last batch dropped (tfds' drop_remainder=True)
  del data_dir
  (x_train, y_train), (x_test, y_test) = gyre.data.digits()
  train_ds = (
      {'image': x.reshape(-1, 8, 8, 1), 'label': y}
      for x, y in gyre.data.batches((x_train, y_train), batch_size, epochs=None)
  )
  eval_ds = [
      {'image': x.reshape(-1, 8, 8, 1), 'label': y}
      for x, y in gyre.data.batches((x_test, y_test), batch_size, shuffle=False, epochs=1)
      if len(y) == batch_size
  ]
  return train_ds, eval_ds

# %% Steps
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from gyre import jaxloop as step_lib  # gyre: was `from jaxloop import step as step_lib`
from gyre import jaxloop as types  # gyre: was `from jaxloop import types`


class tf:  # gyre: no TensorFlow; nothing here is a tf.Tensor
  Tensor = type('Tensor', (), {})


Batch = types.Batch
Output = types.Output
State = types.TrainState
Step = step_lib.Step

class MnistStep(Step):

  def begin(self, state: State, batch: Batch) -> tuple[State, Batch]:
    if isinstance(batch['image'], tf.Tensor):
      batch['image'] = batch['image'].numpy()
    if isinstance(batch['label'], tf.Tensor):
      batch['label'] = batch['label'].numpy()
    return state, batch

  def run(self, state: State, batch: Batch) -> tuple[State, Optional[Output]]:
    images, labels = batch['image'], batch['label']

    def loss_fn(params):
      logits = state.apply_fn({'params': params}, images)
      one_hot = jax.nn.one_hot(labels, 10)
      loss = jnp.mean(optax.softmax_cross_entropy(logits, one_hot))
      return loss, logits

    if self.train:
      grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
      (loss, logits), grads = grad_fn(state.params)
      state = state.apply_gradients(grads=grads)
    else:
      loss, logits = loss_fn(state.params)

    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == labels)
    return state, {'loss': loss, 'accuracy': accuracy}

# %% Partitioner
from jax import sharding
from jax.experimental import mesh_utils

from gyre import jaxloop as partition  # gyre: was `from jaxloop import partition`

Mesh = sharding.Mesh

num_devices = len(jax.devices())
mesh = Mesh(mesh_utils.create_device_mesh((num_devices,)), ('data',))
partitioner = partition.DataParallelPartitioner(mesh=mesh, data_axis='data')

# %% Inner loops and actions
import gyre  # gyre: was `from orbax import checkpoint`
from gyre import jaxloop as actions  # gyre: was `from jaxloop import actions`


work_dir = make_workdir(os.environ.get('GYRE_EXAMPLE_WORKDIR'), '09_jaxloop_outer_loop')  # gyre: was tempfile.mkdtemp()

ckpt_manager = gyre.checkpoint(os.path.join(work_dir, 'checkpoints'), keep=3)  # gyre: was orbax's CheckpointManager(max_to_keep=3)
metrics_writer = gyre.TensorBoardWriter(work_dir)  # gyre: was metric_writers.create_default_writer(work_dir) (CLU's writers need TensorFlow)

ckpt_action = actions.CheckpointAction(ckpt_manager, interval=100)
summary_action = actions.SummaryAction(metrics_writer, interval=100)

# %% Putting it all together
from gyre import jaxloop as eval_loop_lib  # gyre: was `from jaxloop import eval_loop as eval_loop_lib`
from gyre import jaxloop as outer_loop_lib  # gyre: was `from jaxloop import outer_loop as outer_loop_lib`
from gyre import jaxloop as train_loop_lib  # gyre: was `from jaxloop import train_loop as train_loop_lib`

train_total_steps = int(os.environ.get('GYRE_EXAMPLE_STEPS', 0)) or 400  # gyre: the length knob; the seed's 100 are too few for 1,437 digits

# 1. Define model.
model = CNN()

# 2. Define train and eval datasets.
data_dir = None  # gyre: the digits ship with scikit-learn (was tempfile.mkdtemp())
train_ds, eval_ds = mnist_datasets(
    batch_size=32, data_dir=data_dir
)

# 3. Define training and eval steps.
train_step = MnistStep(
    jax.random.PRNGKey(0),
    model,
    optimizer=optax.sgd(learning_rate=0.1, momentum=0.9),  # gyre: was 0.005 (tuned for 100 steps of MNIST's 60,000 images)
    partitioner=partitioner,
    train=True,
)
eval_step = MnistStep(
    jax.random.PRNGKey(0),
    model,
    partitioner=partitioner,
    train=False,
)

# 4. Define inner loops.
train_loop = train_loop_lib.TrainLoop(
    train_step, end_actions=[summary_action, ckpt_action]
)
eval_loop = eval_loop_lib.EvalLoop(eval_step, end_actions=[summary_action])

# 5. Define and invoke outer loop.
outer_loop = outer_loop_lib.OuterLoop(
    train_loop=train_loop, eval_loops=[eval_loop]
)
state, outputs = outer_loop(
    train_step.initialize_model([1, 8, 8, 1]),  # gyre: the digits are 8x8 (MNIST: 28x28)
    train_dataset=train_ds,  # gyre: was train_ds.as_numpy_iterator()
    train_total_steps=train_total_steps,  # gyre: was 100
    train_loop_steps=10,
    eval_specs=[
        outer_loop_lib.EvalSpec(
            dataset=eval_ds, num_steps=100  # gyre: was tfds.as_numpy(eval_ds)
        )
    ],
)

# gyre: the last evaluation's accuracy (gyre's OuterLoop keeps the eval outputs under "eval")
test_accuracy = float(types.reduce_outputs(outputs['eval'])['accuracy'])
print(f'{int(state.step)} steps, test accuracy {test_accuracy:.4f}, written to {work_dir}')
