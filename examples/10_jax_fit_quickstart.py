"""Jax Fit's quick start (seed 004), ported to the digits: a conv + batch norm + dropout model,
an ``lr_schedule``, a loss function, an evaluation step and one call to ``gyre.fit``.

The three keys of the seed are the same: the model, the loss function, the evaluation
function. What differs is gyre's: the dropout key is fresh every step, the evaluation mean is
weighted by batch size, nothing syncs with the host per step, and the run resumes exactly
(``gyre.fit(..., resume="latest")``).

Run it: ``python examples/10_jax_fit_quickstart.py`` (TensorBoard logs and checkpoints under
``runs/10_jax_fit_quickstart/<timestamp>/mnist``).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from _digits_common import make_workdir

import gyre

BATCH_SIZE = 64


# key 1: your model (the seed's, in one compact method; examples/migration/jax_fit_usage.py keeps its setup)
class Model(nn.Module):
    """conv 3x3 (16) -> batch norm -> relu -> dropout 0.5 -> flatten -> dense 10."""

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = nn.Conv(features=16, kernel_size=(3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x)
        x = nn.Dropout(rate=0.5)(x, deterministic=not train)
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(features=10)(x)


# key 2: your loss function
@jax.jit
def loss_fn(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    loss = optax.softmax_cross_entropy(logits, jax.nn.one_hot(labels, 10)).mean()
    return loss, {"loss": loss}


# key 3: your evaluation function
@jax.jit
def eval_step(state: gyre.TrainState, batch: Any) -> jax.Array:
    x, y = batch
    logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats}, x, train=False)
    return jnp.equal(jnp.argmax(logits, -1), y).mean()


def your_dataset(seed: int = 0) -> tuple[Any, list[tuple[Any, Any]]]:
    """The digits as 8x8x1 images: reshuffled training batches, and the test set's batches."""
    (x_train, y_train), (x_test, y_test) = gyre.data.digits(seed=seed)
    x_train, x_test = x_train.reshape(-1, 8, 8, 1), x_test.reshape(-1, 8, 8, 1)
    train_ds = gyre.data.batches((x_train, y_train), BATCH_SIZE, seed=seed)
    test_ds = [(x_test[i : i + BATCH_SIZE], y_test[i : i + BATCH_SIZE]) for i in range(0, len(x_test), BATCH_SIZE)]
    return train_ds, test_ds


def main(epochs: int = 10, workdir: str | None = None, base_lr: float = 1e-2, progress: bool = True) -> float:
    """Trains and returns the last test accuracy."""
    # prepare your dataset
    train_ds, test_ds = your_dataset()
    # lr schedule
    lr_fn = gyre.lr_schedule(
        base_lr=base_lr,
        steps_per_epoch=train_ds.epoch_steps,
        epochs=epochs,
        warmup_epochs=1,
    )
    model = Model()
    # init key and model
    key = jax.random.PRNGKey(0)
    x = jnp.ones((1, 8, 8, 1))  # a digits input
    var = model.init(key, x, train=True)
    state = gyre.TrainState.create(
        apply_fn=model.apply,
        params=var["params"],
        batch_stats=var["batch_stats"],
        tx=optax.inject_hyperparams(optax.adam)(lr_fn),
        rng=0,
    )
    state, history = gyre.fit(
        state, train_ds, test_ds,
        loss_fn=loss_fn,
        eval_step=eval_step,
        eval_freq=1,
        num_epochs=epochs,
        log_name="mnist",
        hparams={"batch_size": BATCH_SIZE, "lr": base_lr},
        log_dir=make_workdir(workdir, "10_jax_fit_quickstart"),
        progress=progress,
    )
    return history.collect("accuracy_test")[-1]


if __name__ == "__main__":
    print(f"test accuracy: {main():.4f}")
