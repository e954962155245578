"""ciclo's README, "Framework Support": ``ciclo.create_flax_state`` from a model, an optimizer,
losses and metrics; its ``train_step``/``test_step`` register themselves in ``train_loop``, and
can be called by hand.

The seed's two versions of ``create_flax_state`` are both here: seed 000's metric classes and
a loss function (``create_state_000``), and seed 001's ``jax_metrics`` objects
(``create_state_001``: ``Crossentropy()`` and ``Accuracy()``, which gyre provides as
``gyre.frameworks.losses`` and ``gyre.frameworks.metrics``). Then the seed's ``train_loop`` with
only a progress bar, and the seed's hand loop over ``state.train_step``.

What changed from the seed: ``import gyre as ciclo``; the metrics' and losses' imports; the
data (scikit-learn's digits as 8x8x1 images, ``_from_ciclo.py``, so ``inputs`` is
``(1, 8, 8, 1)``, not MNIST's ``(1, 28, 28, 1)``).

    python examples/from_ciclo/flax_state.py

Writes no files.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import optax
from _from_ciclo import get_test_dataset, train_dataset

import gyre as ciclo  # ciclo: import ciclo
from gyre.frameworks import Accuracy, Mean  # ciclo's README: clu.metrics' Accuracy, Average

# ciclo: from jax_metrics.losses import Crossentropy; from jax_metrics.metrics import Accuracy
from gyre.frameworks.losses import Crossentropy
from gyre.frameworks.metrics import Accuracy as AccuracyMetric

AverageLoss = Mean  # the running mean of the logged "loss" (ciclo's README: Average.from_output("loss"))


def cross_entropy_loss(preds, target):
    return optax.softmax_cross_entropy_with_integer_labels(preds, target)


def make_model():
    return nn.Sequential([
        lambda x: x.reshape((x.shape[0], -1)) / 255.0,
        nn.Dense(128),
        nn.relu,
        nn.Dense(10),
    ])


def create_state_000():
    """Seed 000: metric classes and a loss function."""
    model = make_model()
    state = ciclo.create_flax_state(
        model,
        inputs=jnp.empty((1, 8, 8, 1)),
        tx=optax.adamw(1e-3),
        losses={"loss": cross_entropy_loss},
        metrics={"accuracy": Accuracy, "avg_loss": AverageLoss},
        strategy="jit",  # "data-parallel" or "eager"
    )
    return state


def create_state_001():
    """Seed 001: loss and metric objects (``jax_metrics``' in ciclo)."""
    model = make_model()
    state = ciclo.create_flax_state(
        model,
        inputs=jnp.empty((1, 8, 8, 1)),
        tx=optax.adamw(1e-3),
        losses={"loss": Crossentropy()},  # any Callable[..., jax.Array]
        metrics={"accuracy": AccuracyMetric()},  # supports Callables, metric objects, or clu metrics
        strategy="jit",  # "data-parallel" or "eager"
    )
    return state


def main(version: str = "000", total_steps: int = 100, steps_per_epoch: int = 10, manual_steps: int = 5):
    """Creates the state (``version`` "000" or "001"), runs ``train_loop``, then a hand loop;
    returns ``(state, history, elapsed)`` of the ``train_loop``.

    Args:
        version: which seed's ``create_flax_state``.
        total_steps: the ``train_loop``'s ``stop``.
        steps_per_epoch: an evaluation on the test set after each epoch of this many steps.
        manual_steps: batches of the hand loop.
    """
    state = {"000": create_state_000, "001": create_state_001}[version]()

    state, history, elapsed = ciclo.train_loop(
        state,  # methods are automatically registered
        train_dataset(),
        callbacks=[
            ciclo.keras_bar(total=total_steps),
        ],
        test_dataset=lambda: get_test_dataset(),
        epoch_duration=steps_per_epoch,
        stop=total_steps,
    )

    for batch in train_dataset(batches=manual_steps):
        logs, state = state.train_step(batch)
        print(f"loss: {logs.losses.loss}")
    return state, history, elapsed


if __name__ == "__main__":
    main("000")
    main("001")
