"""CIFAR-10 on ``gyre.fit``: seed 004's model (conv, batch norm, relu, dropout) grown to two
blocks for 32x32x3 images, ``gyre.lr_schedule``, random crops (4 pixels of padding) and
horizontal flips drawn from a seeded stream, a validation split that keeps the best model, and
the test accuracy printed at the end.

    python examples/11_cifar10.py                          # synthetic CIFAR-shaped data: seconds
    python examples/11_cifar10.py --data ~/data/cifar-10-batches-bin --epochs 30
    python examples/11_cifar10.py --strategy data_parallel # the batches split over every device

``--data`` is the folder of the binary version (``cifar-10-binary.tar.gz`` unpacked, read by
``gyre.data.cifar10``); without it, the data are synthetic: 10 classes of coloured stripes
(5 colours x horizontal or vertical), ``(N, 32, 32, 3)`` float32 in [0, 1], int32 labels,
learnt in a few epochs. Writes TensorBoard logs, checkpoints and ``history.csv`` to
``runs/11_cifar10/<timestamp>/cifar10`` (``GYRE_EXAMPLE_WORKDIR=folder`` writes there instead;
``GYRE_EXAMPLE_STEPS=n`` trains for about ``n`` steps, whole epochs).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _digits_common import make_workdir

import gyre

CLASSES = 10
#: ((x_train, y_train), (x_test, y_test)), what gyre.data.cifar10 returns
Split = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
#: the synthetic classes' colours: class c is colour c % 5, stripes horizontal (c < 5) or vertical
PALETTE = np.array([[0.9, 0.2, 0.2], [0.2, 0.8, 0.3], [0.25, 0.35, 0.95], [0.9, 0.85, 0.2], [0.8, 0.3, 0.85]])


class Model(nn.Module):
    """Two blocks of conv 3x3 -> batch norm -> relu -> max pool, dropout, dense 10 (batch
    norm statistics averaged with momentum 0.9: they settle within a short run)."""

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        for features in (16, 32):
            x = nn.Conv(features=features, kernel_size=(3, 3))(x)
            x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            x = nn.relu(x)
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = nn.Dropout(rate=0.3)(x, deterministic=not train)
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(features=CLASSES)(x)


@jax.jit
def loss_fn(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, {"loss": loss}


@jax.jit
def eval_step(state: gyre.TrainState, batch: Any, mask: jax.Array) -> jax.Array:
    """Accuracy over the batch's real rows: fit pads the last, smaller batch and masks it, so
    this compiles once."""
    x, y = batch
    logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats}, x, train=False)
    correct = jnp.argmax(logits, -1) == y
    return jnp.sum(correct * mask) / jnp.sum(mask)


def synthetic_cifar(n_train: int = 5000, n_test: int = 1000, seed: int = 0) -> Split:
    """CIFAR-shaped data, ``((x_train, y_train), (x_test, y_test))`` as ``gyre.data.cifar10``
    returns: each image a class's colour in stripes of 4 pixels at a random phase, with a
    random brightness and noise (a crop or a flip keeps its class)."""
    rng = np.random.default_rng(seed)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = rng.integers(0, CLASSES, n).astype(np.int32)
        lines = ((np.arange(32)[None, :] + rng.integers(0, 8, (n, 1))) // 4) % 2  # (n, 32)
        vertical = (labels >= 5)[:, None, None]
        stripes = np.where(vertical, lines[:, None, :], lines[:, :, None])  # (n, 32, 32)
        colour = PALETTE[labels % 5] * rng.uniform(0.7, 1.0, (n, 1))
        images = colour[:, None, None, :] * (0.4 + 0.6 * stripes[..., None])
        images = images + rng.normal(0.0, 0.08, images.shape)
        return np.clip(images, 0.0, 1.0).astype(np.float32), labels

    return make(n_train), make(n_test)


def datasets(split: Split, batch_size: int, seed: int = 0) -> gyre.data.Sources:
    """Augmented (random crop with padding 4, horizontal flip), reshuffled training batches; a
    seeded tenth of the training set held out for validation; test batches, the last one
    smaller (fit pads and masks it)."""
    return gyre.data.arrays(split, batch_size, validation=0.1, seed=seed, augment=True)


def main(
    epochs: int = 5,
    data: str | None = None,
    workdir: str | None = None,
    batch_size: int = 128,
    base_lr: float = 3e-3,
    n_train: int = 5000,
    strategy: str = "jit",
    progress: bool = True,
) -> float:
    """Trains and returns the final model's test accuracy."""
    split = gyre.data.cifar10(data) if data else synthetic_cifar(n_train=n_train)
    train_ds, val_ds, test_ds = datasets(split, batch_size)
    steps = int(os.environ.get("GYRE_EXAMPLE_STEPS", 0))
    if steps:  # the suite's length knob: about that many steps, in whole epochs
        epochs = max(1, math.ceil(steps / train_ds.epoch_steps))
    lr_fn = gyre.lr_schedule(base_lr=base_lr, steps_per_epoch=train_ds.epoch_steps, epochs=epochs,
                             warmup_epochs=epochs // 10)
    model = Model()
    var = model.init(jax.random.PRNGKey(0), jnp.ones((1, 32, 32, 3)), train=True)
    state = gyre.TrainState.create(
        apply_fn=model.apply,
        params=var["params"],
        batch_stats=var["batch_stats"],
        tx=optax.inject_hyperparams(optax.adam)(lr_fn),
        rng=0,
    )
    workdir = make_workdir(workdir, "11_cifar10")
    state, history = gyre.fit(
        state, train_ds, test_ds,
        val_ds=val_ds,  # the best model is kept by the validation set, never the test set
        loss_fn=loss_fn,
        eval_step=eval_step,
        num_epochs=epochs,
        log_name="cifar10",
        hparams={"batch_size": batch_size, "lr": base_lr, "epochs": epochs, "data": "cifar10" if data else "synthetic"},
        log_dir=workdir,
        progress=progress,
        strategy=strategy,
    )
    history.to_csv(os.path.join(workdir, "cifar10", "history.csv"))
    return history.collect("accuracy_test")[-1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="the folder of CIFAR-10's binary version (default: synthetic data)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--strategy", default="jit", help="jit (one device), data_parallel, ...")
    args = parser.parse_args()
    accuracy = main(epochs=args.epochs, data=args.data, workdir=os.environ.get("GYRE_EXAMPLE_WORKDIR"),
                    batch_size=args.batch_size, base_lr=args.lr, strategy=args.strategy)
    print(f"test accuracy: {accuracy:.4f}")
