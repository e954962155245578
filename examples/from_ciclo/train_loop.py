"""ciclo's README, "Predefined Loops": ``ciclo.train_loop`` with named schedules, a regular
schedule, a lazy test set and self-registering callbacks.

The train and test steps go under the named schedules ``on_train_step`` and ``on_test_step``;
``some_callback`` runs every 20 steps; the test set is a function called at each evaluation
(the end of every epoch of ``steps_per_epoch`` steps); the Keras bar registers itself on
``on_train_batch_end`` and the checkpoint on ``on_epoch_end``. The state is a plain pytree
(a dict of the parameters and the optax state), the model a small flax MLP.

What changed from the seed: ``import gyre as ciclo``; the data (scikit-learn's digits as 8x8x1
images, ``_from_ciclo.py``); ``logdir/model`` is under this run's folder.

    python examples/from_ciclo/train_loop.py

Writes ``model/`` (checkpoints) to ``runs/from_ciclo/train_loop/<timestamp>/``, or under
``main(workdir=...)``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from _from_ciclo import get_test_dataset, make_workdir, train_dataset

import gyre as ciclo  # ciclo: import ciclo

model = nn.Sequential([lambda x: x.reshape((x.shape[0], -1)) / 255.0, nn.Dense(128), nn.relu, nn.Dense(10)])
tx = optax.adamw(1e-3)


def create_state():
    params = model.init(jax.random.key(0), jnp.empty((1, 8, 8, 1)))["params"]
    return {"params": params, "opt_state": tx.init(params)}


def loss_and_accuracy(params, batch):
    inputs, labels = batch
    logits = model.apply({"params": params}, inputs)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, jnp.mean(jnp.argmax(logits, axis=-1) == labels)


@jax.jit
def train_step(state, batch):
    (loss, accuracy), grads = jax.value_and_grad(loss_and_accuracy, has_aux=True)(state["params"], batch)
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    state = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}
    logs = ciclo.logs()
    logs.add_metric("accuracy", accuracy)
    logs.add_metric("loss", loss)
    return logs, state


@jax.jit
def test_step(state, batch):
    loss, accuracy = loss_and_accuracy(state["params"], batch)
    logs = ciclo.logs()
    logs.add_metric("accuracy", accuracy)
    logs.add_metric("loss", loss)
    return logs, state


def some_callback(state):
    """Logs the parameters' global norm (the seed leaves ``some_callback`` undefined)."""
    logs = ciclo.logs()
    logs.add_metric("params_norm", optax.global_norm(state["params"]))
    return logs


def main(total_steps: int = 100, steps_per_epoch: int = 10, workdir: str | None = None):
    """Runs the seed's ``train_loop``; returns ``(state, history, elapsed)``.

    Args:
        total_steps: the loop's ``stop`` (the seed leaves it open; 100 here).
        steps_per_epoch: the seed's ``epoch_duration``: an evaluation after each epoch.
        workdir: where ``model/`` goes (default: a new run folder).
    """
    logdir = make_workdir(workdir, "train_loop")
    train_dataset_ = train_dataset(batch_size=32)
    state = create_state()

    state, history, elapsed = ciclo.train_loop(
        state,  # Pytree
        train_dataset_,  # Iterable[Batch]
        {  # Schedule: List[Callback]
            ciclo.on_train_step: [train_step],  # named schedules
            ciclo.on_test_step: [test_step],  # named schedules
            ciclo.every(20): [some_callback],  # regular schedules also supported
        },
        test_dataset=lambda: get_test_dataset(),  # lazy test dataset definition
        epoch_duration=steps_per_epoch,
        callbacks=[
            # callback self-registration
            ciclo.keras_bar(total=total_steps),  # runs on ciclo.on_train_batch_end
            ciclo.checkpoint(f"{logdir}/model"),  # runs on ciclo.on_epoch_end
        ],
        stop=total_steps,
    )
    return state, history, elapsed


if __name__ == "__main__":
    main()
