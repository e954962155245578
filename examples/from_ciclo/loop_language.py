"""ciclo's README, "Loop Language": a jitted train step and a task table run by ``ciclo.loop``.

The table maps schedules to callbacks: the train step every step, a checkpoint every 10 steps
and a Keras progress bar last (so it shows what the step logged). The seed's ``...`` are
filled in with a small flax model on flax's ``TrainState``.

What changed from the seed: ``import gyre as ciclo``; the data (scikit-learn's digits as 8x8x1
images, ``_from_ciclo.py``); ``logdir/model`` is under this run's folder; and the history is
plotted to ``history.png`` at the end (not in the seed).

    python examples/from_ciclo/loop_language.py

Writes ``model/`` (checkpoints) and ``history.png`` to
``runs/from_ciclo/loop_language/<timestamp>/``, or under ``main(workdir=...)``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from _from_ciclo import make_workdir, train_dataset
from flax.training.train_state import TrainState

import gyre as ciclo  # ciclo: import ciclo


def create_state() -> TrainState:
    model = nn.Sequential([
        lambda x: x.reshape((x.shape[0], -1)) / 255.0,
        nn.Dense(128),
        nn.relu,
        nn.Dense(10),
    ])
    variables = model.init(jax.random.key(0), jnp.empty((1, 8, 8, 1)))
    return TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.adamw(1e-3))


@jax.jit
def train_step(state, batch):
    inputs, labels = batch

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, inputs)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads)
    accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == labels)
    logs = ciclo.logs()
    logs.add_metric("accuracy", accuracy)
    logs.add_metric("loss", loss)
    return logs, state


def main(total_steps: int = 100, workdir: str | None = None, batches: int | None = None):
    """Runs the seed's loop; returns ``(state, history, elapsed)``.

    Args:
        total_steps: the loop's ``stop`` (the seed's 100).
        workdir: where ``model/`` and ``history.png`` go (default: a new run folder).
        batches: end the data after this many batches (default: never).
    """
    logdir = make_workdir(workdir, "loop_language")
    dataset = train_dataset(batch_size=32, batches=batches)

    state = create_state()  # initial state

    state, history, elapsed = ciclo.loop(
        state,  # Pytree
        dataset,  # Iterable[Batch]
        {  # Schedule: List[Callback]
            ciclo.every(1): [train_step],
            ciclo.every(steps=10): [ciclo.checkpoint(f"{logdir}/model")],
            ciclo.every(1): [ciclo.keras_bar(total=total_steps)],
        },
        stop=total_steps,
    )
    history.plot(f"{logdir}/history.png", ["loss", "accuracy"])  # not in the seed
    return state, history, elapsed


if __name__ == "__main__":
    main()
