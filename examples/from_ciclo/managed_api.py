"""ciclo's README, "Managed API": a ``ManagedState``, a train step from ``managed.train_step``
(gradients of the logged losses) used in a plain ``for`` loop, and a ``managed.step`` test step.

The seed's three snippets are parts 1 to 3 below; the seed defines ``test_step`` but never uses
it, so part 4 (not in the seed) runs both steps in ``ciclo.loop``: every 10 steps an evaluation
on the test set (``inner_loop``, averaged), a checkpoint keeping the latest and the 2 best by
``loss_valid``, and early stopping on it.

What changed from the seed: ``import gyre as ciclo`` and ``from gyre import managed``; the data
(scikit-learn's digits as 8x8x1 images, ``_from_ciclo.py``); the seed's ``params`` and ``...`` are
a small flax MLP.

    python examples/from_ciclo/managed_api.py

Writes ``model/`` (checkpoints) to ``runs/from_ciclo/managed_api/<timestamp>/``, or under
``main(workdir=...)``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from _from_ciclo import get_test_dataset, make_workdir, train_dataset

import gyre as ciclo  # ciclo: import ciclo
from gyre import managed  # ciclo: from ciclo import managed

model = nn.Sequential([lambda x: x.reshape((x.shape[0], -1)) / 255.0, nn.Dense(128), nn.relu, nn.Dense(10)])


def compute_loss(params, batch):
    inputs, labels = batch
    logits = model.apply({"params": params}, inputs)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


# 2. the train step: gyre differentiates the sum of the logged losses and applies `tx`
@managed.train_step
def train_step(state, batch):
    loss = compute_loss(state.params, batch)  # compute loss
    logs = ciclo.logs()
    logs.add_loss("loss", loss)  # <<< register loss
    return logs, state


# 3. a step compiled under the strategy, without gradients
@managed.step
def test_step(state, batch):
    loss = compute_loss(state.params, batch)  # compute loss
    logs = ciclo.logs()
    logs.add_metric("loss", loss)
    return logs, state


def main(manual_steps: int = 20, total_steps: int = 100, workdir: str | None = None):
    """Parts 1 to 4; returns ``(state, history, elapsed)`` of part 4's loop.

    Args:
        manual_steps: batches of part 2's ``for`` loop.
        total_steps: steps of part 4's loop (an evaluation every 10).
        workdir: where ``model/`` goes (default: a new run folder).
    """
    logdir = make_workdir(workdir, "managed_api")
    params = model.init(jax.random.key(0), jnp.empty((1, 8, 8, 1)))["params"]

    # 1. the state
    state = managed.ManagedState.create(
        params=params,  # can be any pytree
        tx=optax.adamw(1e-3),  # optax optimizer
        strategy="jit",  # "data-parallel" or "eager"
    )

    # 2. the train step in a plain loop
    for batch in train_dataset(batches=manual_steps):
        logs, state = train_step(state, batch)
        print(f"loss: {logs.losses.loss}")

    # 4. (not in the seed) both steps in a loop, with evaluations, best checkpoints and early stopping
    def evaluate(state):
        return ciclo.loop(state, get_test_dataset(), {ciclo.every(1): [test_step]})

    state, history, elapsed = ciclo.loop(
        state,
        train_dataset(),
        {
            ciclo.every(1): [train_step],
            ciclo.every(10): [
                ciclo.inner_loop("valid", evaluate, aggregation="mean"),
                ciclo.checkpoint(f"{logdir}/model", monitor="loss_valid", mode="min", keep=1, keep_best=2),
                ciclo.early_stopping("loss_valid", patience=3),
            ],
            ciclo.every(1): [ciclo.keras_bar(total=total_steps)],
        },
        stop=total_steps,
    )
    return state, history, elapsed


if __name__ == "__main__":
    main()
