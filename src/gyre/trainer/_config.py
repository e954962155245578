"""``TrainerModuleConfig``: the ``trainer`` keys of :class:`gyre.TrainerModule` beyond every
trainer's (:class:`gyre.config.TrainerConfig`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from gyre.config._schema import TrainerConfig
from gyre.core._errors import describe, explain


class TrainerModuleConfig(TrainerConfig):
    """The keys of :class:`gyre.TrainerModule`'s ``trainer`` section.

    Attributes:
        seed_eval: the seed of the evaluation's random key; ``None``: the training seed's.
        max_steps_per_epoch: at most this many steps make an epoch (the next continues the
            loader); ``None``: the loader's whole pass.
        log_param_stats: log each parameter's min, max, mean and std every step.
        log_grad_stats: the same of each gradient; ``log_intermediates``: of each sown value.
        nan_keys: with ``detect_nans``, the training values whose NaN or Inf stops the run;
            ``None``: all of them.
        tabulate_model: write ``model.txt`` and ``params.txt`` into the run folder.
        augmentation: a registered module changing each training batch, e.g.
            ``{class_name: GaussianNoise, scale: 0.1}``; ``preprocessing``: every batch.

    Example:
        >>> TrainerModuleConfig(nan_keys=["train/loss"], seed_eval=0).nan_keys
        ('loss',)
    """

    seed_eval: int | None = None
    max_steps_per_epoch: Annotated[int, Field(ge=1)] | None = None
    log_param_stats: bool = False
    log_grad_stats: bool = False
    log_intermediates: bool = False
    nan_keys: tuple[str, ...] | None = None
    tabulate_model: bool = False
    augmentation: dict[str, Any] | None = None
    augmentation_seed: int = 44
    preprocessing: dict[str, Any] | None = None

    @field_validator("nan_keys", mode="before")
    @classmethod
    def _nan_keys(cls, value: object) -> object:
        if value is None:
            return None
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(k, str) and k for k in value):
            raise ValueError(explain(
                "trainer.nan_keys must be a list of training value names",
                expected="e.g. ['train/loss'] or ['loss', 'acc'] (null: every value)", received=describe(value),
                fix="nan_keys: [train/loss]"))
        return tuple(k.removeprefix("train/") for k in value)
