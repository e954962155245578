"""Ready-made image classification parts, registered under jax_trainer's config names: a
trainer, MLP and CNN models (nnx and linen) and the embedded digits data set."""

from __future__ import annotations

from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen, nnx
from pydantic import Field

from gyre.config._registry import register_dataset, register_model, register_trainer
from gyre.core._checks import whole
from gyre.core._errors import describe, explain
from gyre.trainer._callback import ConfusionMatrixCallback, confusion_matrix
from gyre.trainer._module import TrainerModule
from gyre.trainer._setup import TrainerModuleConfig

#: a count of classes, units or layers (>= 1)
Count = Annotated[int, Field(ge=1)]
#: a dropout rate: a fraction in [0, 1) of the units zeroed while training
Rate = Annotated[float, Field(ge=0.0, lt=1.0)]

ACTIVATIONS = {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "silu": jax.nn.silu, "tanh": jnp.tanh}


def activation(name: str) -> Any:
    """The activation function named ``name`` (relu, gelu, silu, tanh)."""
    if name not in ACTIVATIONS:
        raise ValueError(explain(
            f"unknown activation {name!r}",
            expected=f"one of {sorted(ACTIVATIONS)}", received=describe(name), fix="act_fn: gelu"))
    return ACTIVATIONS[name]


def classification_metrics(
    logits: jax.Array, labels: jax.Array, num_classes: int | None, mask: jax.Array | None = None,
    *, conf_matrix: bool | None = None,
) -> tuple[jax.Array, dict[str, Any]]:
    """Cross-entropy and accuracy, plus a summed confusion matrix when ``conf_matrix`` (default:
    when ``num_classes`` is given); ``mask`` marks the rows counted."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = logits.argmax(-1) == labels
    if mask is None:
        loss, acc = losses.mean(), correct.mean()
    else:
        real = jnp.maximum(jnp.asarray(mask).astype(jnp.int32).sum(), 1).astype(losses.dtype)
        loss = jnp.sum(jnp.where(mask, losses, 0)) / real
        acc = jnp.sum(jnp.where(mask, correct, False)) / real
    metrics: dict[str, Any] = {"acc": acc}
    if conf_matrix or (conf_matrix is None and num_classes):
        counted = labels if mask is None else jnp.where(mask, labels, -1)  # -1: not counted
        matrix = confusion_matrix(counted, logits.argmax(-1), num_classes or logits.shape[-1])
        metrics["conf_matrix"] = {"value": matrix, "mode": "sum", "log_freq": "epoch", "log_mode": "eval"}
    return loss, metrics


@register_trainer
class ImgClassifierTrainer(TrainerModule):
    """Classification of ``(images, labels)`` batches with nnx or linen models: cross-entropy and
    ``acc``.

    Validation and testing add ``conf_matrix`` when ``num_classes`` is set or a
    ``ConfusionMatrixCallback`` draws it.

    Example:
        >>> import gyre, optax, tempfile
        >>> from flax import nnx
        >>> (x, y), (xt, yt) = gyre.data.digits()
        >>> t = ImgClassifierTrainer(model=SimpleClassifier(c_hid=32, num_classes=10, rngs=nnx.Rngs(0)),
        ...     optimizer=optax.adam(1e-2), train_epochs=3, enable_progress_bar=False, log_dir=tempfile.mkdtemp())
        >>> out = t.train_model(gyre.data.batches((x, y), 64), [(xt, yt)])
        >>> out["val"]["val/acc"] > 0.85
        True
    """

    def loss_function(self, model: Any, batch: Any, train: bool = True, mask: Any = None) -> Any:
        x, y = self.batch_to_input(batch), self.batch_to_target(batch)
        return classification_metrics(model(x), y, self._num_classes(), mask, conf_matrix=self._conf_matrix(train))

    def loss_function_linen(
        self, params: Any, state: Any, batch: Any, rng: jax.Array, train: bool = True, mask: Any = None
    ) -> Any:
        x, y = self.batch_to_input(batch), self.batch_to_target(batch)
        logits, mutable = self.model_linen_apply(params, state, x, rng, train=train)
        loss, metrics = classification_metrics(logits, y, self._num_classes(), mask, conf_matrix=self._conf_matrix(train))
        return loss, (mutable, metrics)

    def _num_classes(self) -> int | None:
        return getattr(self.config, "num_classes", None)

    def _conf_matrix(self, train: bool) -> bool:
        """Whether to compute a confusion matrix (evaluation only)."""
        return not train and (bool(self._num_classes())
                              or any(isinstance(cb, ConfusionMatrixCallback) for cb in self.callbacks))


class ImgClassifierConfig(TrainerModuleConfig):
    """The trainer keys of :class:`ImgClassifierTrainer`: every trainer's and ``num_classes``.

    Example:
        >>> ImgClassifierConfig(num_classes=10).num_classes
        10
    """

    num_classes: Count | None = None


ImgClassifierTrainer.config_class = ImgClassifierConfig


class AugmentedImgClassifierTrainerConfig(ImgClassifierConfig):
    """The trainer keys of :class:`AugmentedImgClassifierTrainer` (:class:`ImgClassifierConfig`'s).

    Example:
        >>> AugmentedImgClassifierTrainerConfig.class_name
        'AugmentedImgClassifierTrainer'
    """


@register_trainer
class AugmentedImgClassifierTrainer(ImgClassifierTrainer):
    """The kpoeppel fork's name for :class:`ImgClassifierTrainer` with ``trainer.augmentation``.

    Example:
        >>> issubclass(AugmentedImgClassifierTrainer, ImgClassifierTrainer)
        True
    """

    config_class = AugmentedImgClassifierTrainerConfig


def _flat(x: jax.Array) -> jax.Array:
    return x.reshape(x.shape[0], -1)


@register_model
class SimpleClassifier(nnx.Module):
    """An MLP classifier (nnx) of ``num_layers`` hidden layers of ``c_hid`` units; inputs are
    flattened.

    Without ``input_dim`` the first layer is sized by the first input, which must come eagerly.

    Example:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> SimpleClassifier(c_hid=8, num_classes=3, rngs=nnx.Rngs(0))(jnp.ones((2, 64))).shape
        (2, 3)
        >>> model = SimpleClassifier(c_hid=8, rngs=nnx.Rngs(0))
        >>> model(jnp.ones((2, 4, 4, 3))).shape, model.hidden[0].kernel.shape
        ((2, 10), (48, 8))
    """

    def __init__(
        self, c_hid: Count = 64, num_classes: Count = 10, act_fn: str = "relu", batch_norm: bool = False,
        dropout: Rate = 0.0, num_layers: Count = 1, input_dim: Count | None = None, *, rngs: nnx.Rngs,
    ) -> None:
        self.act = activation(act_fn)
        self.input_dim = input_dim
        first = (nnx.bridge.ToNNX(linen.Dense(c_hid), rngs=rngs) if input_dim is None
                 else nnx.Linear(input_dim, c_hid, rngs=rngs))
        self.hidden = nnx.List([first] + [nnx.Linear(c_hid, c_hid, rngs=rngs) for _ in range(num_layers - 1)])
        self.norms = nnx.List([nnx.BatchNorm(c_hid, rngs=rngs) for _ in range(num_layers)]) if batch_norm else None
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else None
        self.out = nnx.Linear(c_hid, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = _flat(x)
        if self.input_dim is not None and x.shape[-1] != self.input_dim:
            raise ValueError(explain(
                f"SimpleClassifier takes {self.input_dim} input features (input_dim) per example",
                expected=f"inputs of {self.input_dim} values each (flattened), e.g. shape (batch, {self.input_dim})",
                received=f"{x.shape[-1]} values per example",
                fix=f"set input_dim: {x.shape[-1]} in the model section, or leave it out (sized by the input)"))
        first = self.hidden[0]
        if self.input_dim is None and not any(isinstance(v, nnx.Variable) for v in vars(first).values()):
            if isinstance(x, jax.core.Tracer):
                raise ValueError(explain(
                    "SimpleClassifier without input_dim is sized by its first input, which must come eagerly",
                    expected="one call outside jit first (or the trainer, which builds it from its example batch)",
                    received=f"a first call inside a traced function (input shape {x.shape})",
                    fix="call model(x) once before jit, or give input_dim"))
            nnx.bridge.lazy_init(first, x)
        for i, layer in enumerate(self.hidden):
            x = layer(x)
            if self.norms is not None:
                x = self.norms[i](x)
            x = self.act(x)
            if self.dropout is not None:
                x = self.dropout(x)
        return self.out(x)


@register_model
class SimpleCNN(nnx.Module):
    """A small CNN classifier (nnx) for ``(N, H, W, C)`` images; flat inputs are read as
    ``image_size`` squares.

    Example:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> SimpleCNN(c_hid=4, num_classes=10, rngs=nnx.Rngs(0))(jnp.ones((2, 64))).shape
        (2, 10)
    """

    def __init__(
        self, c_hid: Count = 16, num_classes: Count = 10, act_fn: str = "relu", image_size: Count = 8,
        channels: Count = 1, dropout: Rate = 0.0, *, rngs: nnx.Rngs,
    ) -> None:
        self.act = activation(act_fn)
        self.image_size, self.channels = image_size, channels
        self.conv1 = nnx.Conv(channels, c_hid, (3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(c_hid, c_hid, (3, 3), strides=(2, 2), rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else None
        side = -(-image_size // 2)
        self.out = nnx.Linear(side * side * c_hid, num_classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim == 2:
            x = x.reshape(x.shape[0], self.image_size, self.image_size, self.channels)
        x = self.act(self.conv2(self.act(self.conv1(x))))
        x = _flat(x)
        if self.dropout is not None:
            x = self.dropout(x)
        return self.out(x)


@register_model
class SimpleClassifierLinen(linen.Module):
    """:class:`SimpleClassifier` in linen (batch norm statistics in ``batch_stats``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> m = SimpleClassifierLinen(c_hid=8, num_classes=3)
        >>> v = m.init(jax.random.key(0), jnp.ones((2, 64)), train=False)
        >>> m.apply(v, jnp.ones((2, 64)), train=False).shape
        (2, 3)
    """

    c_hid: Count = 64
    num_classes: Count = 10
    act_fn: str = "relu"
    batch_norm: bool = False
    dropout: Rate = 0.0
    num_layers: Count = 1

    @linen.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = _flat(x)
        for _ in range(self.num_layers):
            x = linen.Dense(self.c_hid)(x)
            if self.batch_norm:
                x = linen.BatchNorm(use_running_average=not train)(x)
            x = activation(self.act_fn)(x)
            if self.dropout:
                x = linen.Dropout(self.dropout, deterministic=not train)(x)
        return linen.Dense(self.num_classes)(x)


@register_model
class SimpleCNNLinen(linen.Module):
    """:class:`SimpleCNN` in linen.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> m = SimpleCNNLinen(c_hid=4)
        >>> m.apply(m.init(jax.random.key(0), jnp.ones((2, 64))), jnp.ones((2, 64))).shape
        (2, 10)
    """

    c_hid: Count = 16
    num_classes: Count = 10
    act_fn: str = "relu"
    image_size: Count = 8
    channels: Count = 1
    dropout: Rate = 0.0

    @linen.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        if x.ndim == 2:
            x = x.reshape(x.shape[0], self.image_size, self.image_size, self.channels)
        act = activation(self.act_fn)
        x = act(linen.Conv(self.c_hid, (3, 3))(x))
        x = act(linen.Conv(self.c_hid, (3, 3), strides=(2, 2))(x))
        x = _flat(x)
        if self.dropout:
            x = linen.Dropout(self.dropout, deterministic=not train)(x)
        return linen.Dense(self.num_classes)(x)


@register_dataset
class DigitsDataset:
    """scikit-learn's digits (embedded) as ``train_loader``, ``val_loader`` and ``test_loader``.

    Args:
        val_size: examples held out of the training part, stratified by ``split_seed``.
        eval_batch_size: examples per validation / test batch (default: all in one).
        normalize: pixels in [0, 1] (``False``: the raw 0..16 counts).
        image_shape: images shaped ``(N, 8, 8, 1)`` rather than flat.

    Example:
        >>> d = DigitsDataset(global_batch_size=64, val_size=200)
        >>> d.train_loader.epoch_steps, len(d.val_loader[0][1]), len(d.test_loader[0][1])
        (19, 200, 360)
    """

    def __init__(
        self, global_batch_size: int = 128, val_size: int = 200, split_seed: int = 42,
        eval_batch_size: int | None = None, normalize: bool = True, image_shape: bool = False,
    ) -> None:
        from gyre.data import batches, digits, stratified_split

        (x, y), (xt, yt) = digits()
        if not normalize:
            x, xt = x * 16.0, xt * 16.0
        if image_shape:
            x, xt = x.reshape(-1, 8, 8, 1), xt.reshape(-1, 8, 8, 1)
        val_size = whole(val_size, "val_size", minimum=1, maximum=len(y) - 1, fix="val_size: 200",
                         problem="DigitsDataset's val_size must leave training examples",
                         expected=f"a whole number in 1..{len(y) - 1}")
        train_idx, val_idx = stratified_split(y, test_size=val_size / len(y), seed=split_seed)
        self.global_batch_size = global_batch_size
        self.train_loader = batches((x[train_idx], y[train_idx]), global_batch_size, seed=split_seed)
        self.val_loader = _fixed_batches(x[val_idx], y[val_idx], eval_batch_size)
        self.test_loader = _fixed_batches(xt, yt, eval_batch_size)


def _fixed_batches(x: np.ndarray, y: np.ndarray, size: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    size = size or len(y)
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(y), size)]
