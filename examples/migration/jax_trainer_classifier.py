"""jax_trainer's ``ImgClassifierTrainer`` (seed 003), written for gyre, with the seed's
logging, callback and dataset APIs in one program.

- ``SeedClassifierTrainer`` is the seed's ``ImgClassifierTrainer``: ``batch_to_input``, a
  linen loss (``loss_function_linen`` with ``self.model_linen_apply``) and an nnx loss
  (``loss_function``). gyre already registers an ``ImgClassifierTrainer``, so this one has its
  own name. The seed's nnx loss calls ``self.model_apply(params=params, state=state, ...)``
  with names it never defines; in nnx the model is called: ``model(imgs)``.
- Its metrics use the logging API: ``{"value": v, "mode": ..., "log_freq": ..., "log_mode": ...}``
  (``LogMetricMode``, ``LogFreq``, ``LogMode``, or their names as strings).
- ``EpochPrinter`` is a callback of the callback API, registered so that the YAML can name it.
- ``SupervisedDigits`` is a dataset of the dataset API (train, val and test loaders of
  ``SupervisedBatch``, which has ``input``, ``target`` and ``size``), registered too.

The config is ``jax_trainer_classifier.yaml`` beside this file. Registering the classes and
handing over to the command line runs them with every ``gyre`` command::

    python examples/migration/jax_trainer_classifier.py fit examples/migration/jax_trainer_classifier.yaml
    python examples/migration/jax_trainer_classifier.py fit examples/migration/jax_trainer_classifier.yaml \
        model.class_name=SimpleClassifierLinen      # the linen loss (model_mode is read from the class)

Writes its run folder under ``runs/<timestamp>/`` (``--out DIR`` writes under ``DIR``).
"""

from __future__ import annotations

from typing import Any

import jax
import optax
from flax import nnx

import gyre
from gyre.config import register_callback, register_dataset, register_trainer
from gyre.data import SupervisedBatch
from gyre.trainer import Callback, DigitsDataset, LogFreq, LogMetricMode, LogMode, TrainerModule


@register_trainer
class SeedClassifierTrainer(TrainerModule):
    def batch_to_input(self, batch: SupervisedBatch) -> Any:
        return batch.input

    def loss_function_linen(
        self,
        params: Any,
        state: Any,
        batch: SupervisedBatch,
        rng: jax.Array,
        train: bool = True,
    ) -> tuple[Any, tuple[Any, dict]]:
        imgs = batch.input
        labels = batch.target
        logits, mutable_variables = self.model_linen_apply(
            params=params, state=state, input=imgs, rng=rng, train=train
        )
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        acc = (logits.argmax(axis=-1) == labels).mean()
        metrics = {"acc": acc}
        return loss, (mutable_variables, metrics)

    def loss_function(
        self,
        model: nnx.Module,
        batch: SupervisedBatch,
        train: bool = True,
    ) -> tuple[Any, dict]:
        imgs = batch.input
        labels = batch.target
        logits = model(imgs)  # the seed: self.model_apply(params=params, state=state, ...), undefined names
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        loss = losses.mean()
        acc = (logits.argmax(axis=-1) == labels).mean()
        metrics = {
            "acc": acc,  # LogMetricMode.MEAN, LogFreq.ANY, LogMode.ANY: weighted by batch size
            "worst": {"value": losses.max(), "mode": LogMetricMode.MAX, "log_freq": LogFreq.EPOCH},
            "errors": {"value": (logits.argmax(axis=-1) != labels).sum(), "mode": "sum", "log_mode": LogMode.EVAL},
        }
        return loss, metrics


@register_callback
class EpochPrinter(Callback):
    """Prints a line at the callback API's points; the filtered ones every ``every_n_epochs``."""

    def on_training_start(self) -> None:
        print("training starts")

    def on_filtered_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        print(f"epoch {epoch_idx}: train/loss_epoch {float(train_metrics['train/loss_epoch']):.4f}")

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        print(f"epoch {epoch_idx}: val/acc {float(eval_metrics['val/acc']):.4f}")

    def on_test_epoch_end(self, test_metrics: dict[str, Any], epoch_idx: int) -> None:
        print(f"test: test/acc {float(test_metrics['test/acc']):.4f}")

    def on_training_end(self) -> None:
        print("training ends")


@register_dataset
class SupervisedDigits:
    """The digits as ``SupervisedBatch`` loaders: the training one resumable (it keeps the
    position of ``gyre.data.batches``), validation and test fixed."""

    def __init__(self, global_batch_size: int = 128, val_size: int = 200, split_seed: int = 42) -> None:
        digits = DigitsDataset(global_batch_size=global_batch_size, val_size=val_size, split_seed=split_seed,
                               eval_batch_size=global_batch_size)
        self.train_loader = gyre.data.supervised(digits.train_loader)
        self.val_loader = gyre.data.supervised(digits.val_loader)
        self.test_loader = gyre.data.supervised(digits.test_loader)


if __name__ == "__main__":
    import gyre.cli

    raise SystemExit(gyre.cli.main())
