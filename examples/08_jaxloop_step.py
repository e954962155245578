"""jaxloop's ``Step``: the seed's ``MnistStep`` and CNN, ported to the digits.

A ``gyre.Step`` subclass writes ``run`` (loss, gradients when ``self.train``, metrics); a
partitioner shards it. The same class makes the train step (with an optimizer) and the eval
step (without). The train step runs inside ``gyre.loop`` through ``as_callback()``; the eval
step is called by hand, jaxloop style: ``state, outputs = eval_step(state, batch)``.

The digits are 8x8 images, so the model is initialised from ``[1, 8, 8, 1]`` (the seed's
MNIST uses ``[1, 28, 28, 1]``), and the learning rate is larger than the seed's 0.005 so a
few dozen steps learn something.

    python examples/08_jaxloop_step.py

Writes no files.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _digits_common import BATCH_SIZE
from jax.sharding import Mesh

import gyre
import gyre.data

Batch = dict[str, Any]
EVAL_BATCH_SIZE = 40  # 360 test images = 9 batches, split evenly over 1, 2, 4, 5 or 8 devices


class CNN(nn.Module):
    """The seed's CNN: two conv + average-pool blocks, then two dense layers."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
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


class DigitsStep(gyre.Step):
    """The seed's ``MnistStep``: cross-entropy, gradients when training, accuracy."""

    def begin(self, state: gyre.TrainState, batch: Batch) -> tuple[gyre.TrainState, Batch]:
        # The seed turns tf.Tensors into numpy here; the digits already are arrays.
        batch = {k: v if isinstance(v, jax.Array | np.ndarray) else np.asarray(v) for k, v in batch.items()}
        return state, batch

    def run(self, state: gyre.TrainState, batch: Batch) -> tuple[gyre.TrainState, dict[str, Any]]:
        images, labels = batch["image"], batch["label"]

        def loss_fn(params: Any) -> tuple[jax.Array, jax.Array]:
            logits = state.apply_fn({"params": params}, images)
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
        return state, {"loss": loss, "accuracy": accuracy}


def as_images(batches: Iterator[tuple[np.ndarray, np.ndarray]]) -> Iterator[Batch]:
    """``(x, y)`` batches of flat digits as the seed's ``{"image", "label"}`` dicts."""
    for x, y in batches:
        yield {"image": x.reshape((-1, 8, 8, 1)), "label": y}


def main(steps: int = 500, workdir: str | None = None) -> float:
    """Trains the CNN for ``steps`` steps on every device (data parallel); returns the test
    accuracy.

    Args:
        steps: training steps.
        workdir: unused (this example writes nothing); kept for a uniform ``main``.
    """
    (x_train, y_train), (x_test, y_test) = gyre.data.digits()

    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    partitioner = gyre.DataParallelPartitioner(mesh=mesh, data_axis="data")

    model = CNN()
    train_step = DigitsStep(
        jax.random.key(0),
        model,
        optimizer=optax.sgd(learning_rate=0.1, momentum=0.9),
        partitioner=partitioner,
        train=True,
    )
    eval_step = DigitsStep(jax.random.key(0), model, partitioner=partitioner, train=False)

    state, history, elapsed = gyre.loop(
        train_step.initialize_model([1, 8, 8, 1]),
        as_images(gyre.data.batches((x_train, y_train), BATCH_SIZE)),
        {
            gyre.every(1): [train_step.as_callback()],
            gyre.every(1): [gyre.keras_bar(total=steps)],
        },
        stop=steps,
    )

    correct, seen = 0.0, 0
    test = gyre.data.batches((x_test, y_test), EVAL_BATCH_SIZE, shuffle=False, epochs=1)
    for batch in as_images(test):
        state, outputs = eval_step(state, batch)
        n = len(batch["label"])
        correct, seen = correct + float(outputs["accuracy"]) * n, seen + n
    accuracy = correct / seen
    losses = history.collect("loss")
    print(f"{elapsed.steps} steps on {jax.device_count()} device(s), loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}, test accuracy {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
