"""jax_trainer's ``OptimizerBuilder``, over :func:`gyre.config.build_optimizer` (sections in
jax_trainer's form are read as :mod:`gyre.config._jax_trainer` rewrites them)."""

from __future__ import annotations

from typing import Any

import optax

from gyre.config._jax_trainer import as_mapping, from_jax_trainer, is_jax_trainer_section
from gyre.config._optim import build_optimizer
from gyre.config._schedules import build_schedule


class OptimizerBuilder:
    """jax_trainer's optimizer builder over gyre's: ``OptimizerBuilder(config).build_optimizer(
    num_epochs, num_train_steps_per_epoch)`` returns ``(optimizer, lr_schedule)``. The config
    is a section in jax_trainer's form (a dict or an ``ml_collections.ConfigDict``) or in
    gyre's; a schedule that leaves its length out lasts ``num_epochs * num_train_steps_per_epoch``.

    Example:
        >>> tx, schedule = OptimizerBuilder({"name": "sgd", "lr": 0.1, "scheduler": {
        ...     "name": "cosine_decay"}}).build_optimizer(num_epochs=2, num_train_steps_per_epoch=5)
        >>> round(float(schedule(0)), 6), float(schedule(10))
        (0.1, 0.0)
    """

    def __init__(self, optimizer_config: Any) -> None:
        self.optimizer_config = optimizer_config

    def section(self) -> dict[str, Any]:
        """The optimizer section in gyre's form."""
        section = as_mapping(self.optimizer_config, "optimizer")
        return from_jax_trainer(section) if is_jax_trainer_section(section) else section

    def build_optimizer(self, num_epochs: int = 0, num_train_steps_per_epoch: int = 0) -> tuple[optax.GradientTransformation, optax.Schedule]:
        """The optimizer and its learning-rate schedule (``step -> rate``)."""
        steps = num_epochs * num_train_steps_per_epoch
        run = steps if isinstance(steps, int) and steps > 0 else None
        section = self.section()
        return (
            build_optimizer(section, run_steps=run),
            build_schedule(section.get("learning_rate"), where="optimizer.learning_rate", run_steps=run),
        )

