"""jaxloop's "Inner loops" snippet (seed 002) with the seed's own orbax ``CheckpointManager``:
``CheckpointAction`` and ``SummaryAction`` on a ``TrainLoop``, driven by an ``OuterLoop``.

``examples/09_jaxloop_outer_loop.py`` ports the seed's whole experiment and gives
``CheckpointAction`` a ``gyre.checkpoint`` (gyre's checked, exact resume). This file keeps the
seed's ``checkpoint.CheckpointManager(..., Checkpointer(PyTreeCheckpointHandler()),
CheckpointManagerOptions(max_to_keep=3))`` as it is: ``CheckpointAction`` saves through it in
jaxloop's format. The changed lines are marked ``# gyre:``: the imports, CLU's writer (it needs
TensorFlow) replaced by ``gyre.TensorBoardWriter``, and the interval (the seed's 100 loops never
come in a run of 10 loops of 10 steps, so nothing would be saved; every 2nd loop here). The model
and step are small ones written here (the seed's CNN and ``MnistStep`` are in 09).

    python examples/migration/jaxloop_orbax_actions.py

Writes ``checkpoints/`` and TensorBoard event files to ``runs/jaxloop_orbax_actions/<timestamp>/``
(``GYRE_EXAMPLE_WORKDIR=folder`` writes there instead).
"""

# ruff: noqa: E402, I001  (the seed's cell keeps its imports where and as it has them)
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import gyre
import gyre.data

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))  # gyre: examples/_digits_common.py
from _digits_common import make_workdir  # gyre: runs/<example>/<timestamp>/


class MLP(nn.Module):  # gyre: a small model for the digits (the seed's CNN: examples/09)

  @nn.compact
  def __call__(self, x):
    return nn.Dense(10)(nn.relu(nn.Dense(64)(x)))


class DigitsStep(gyre.jaxloop.Step):  # gyre: the seed's MnistStep, without its tf.Tensor conversion

  def run(self, state, batch):
    def loss_fn(params):
      logits = state.apply_fn({'params': params}, batch['image'])
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch['label']).mean()
      return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    return state, {'loss': loss, 'accuracy': jnp.mean(jnp.argmax(logits, -1) == batch['label'])}


# %% The seed's snippet
from orbax import checkpoint
from gyre import jaxloop as actions  # gyre: was `from jaxloop import actions`
from etils import epath

work_dir = make_workdir(os.environ.get('GYRE_EXAMPLE_WORKDIR'), 'jaxloop_orbax_actions')  # gyre: was tempfile.mkdtemp()
work_dir = epath.Path(work_dir)

ckpt_manager = checkpoint.CheckpointManager(
    work_dir / 'checkpoints',
    checkpoint.Checkpointer(checkpoint.PyTreeCheckpointHandler()),
    checkpoint.CheckpointManagerOptions(max_to_keep=3),
)
metrics_writer = gyre.TensorBoardWriter(work_dir)  # gyre: was metric_writers.create_default_writer(work_dir, asynchronous=False)

ckpt_action = actions.CheckpointAction(ckpt_manager, interval=2)  # gyre: was interval=100
summary_action = actions.SummaryAction(metrics_writer, interval=2)  # gyre: was interval=100

# %% An outer loop that uses them
(x_train, y_train), _ = gyre.data.digits()
train_ds = ({'image': x, 'label': y} for x, y in gyre.data.batches((x_train, y_train), 32, epochs=None))
train_step = DigitsStep(jax.random.PRNGKey(0), MLP(), optimizer=optax.sgd(0.1, momentum=0.9), train=True)
train_loop = gyre.jaxloop.TrainLoop(train_step, end_actions=[summary_action, ckpt_action])
outer_loop = gyre.jaxloop.OuterLoop(train_loop=train_loop)
state, outputs = outer_loop(
    train_step.initialize_model([1, 64]),
    train_dataset=train_ds,
    train_total_steps=100,
    train_loop_steps=10,
)
ckpt_manager.wait_until_finished()
metrics_writer.close()
print(f'{int(state.step)} steps; orbax checkpoints {list(ckpt_manager.all_steps())} in {work_dir / "checkpoints"}')
