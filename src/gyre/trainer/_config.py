"""``TrainerModuleConfig``: the ``trainer`` keys of :class:`gyre.TrainerModule` beyond those
every trainer has (:class:`gyre.config.TrainerConfig`): the kpoeppel jax_trainer fork's
inspection and evaluation options, and phlippe/jax_trainer's ``tabulate_model``. It is the
trainer's ``config_class``, so a config's ``trainer`` section is checked against it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from gyre.config._schema import TrainerConfig
from gyre.core._errors import describe, explain


class TrainerModuleConfig(TrainerConfig):
    """The keys of :class:`gyre.TrainerModule`'s ``trainer`` section.

    Attributes:
        seed_eval: the seed of the evaluation's random key (a linen model's ``rng`` in
            validation and testing); ``None``: the training seed's key.
        max_steps_per_epoch: at most this many training steps make an epoch (the loader is
            not restarted: the next epoch continues where this one stopped); ``None``: the
            loader's whole pass.
        log_param_stats: log each parameter's min, max, mean and std every step.
        log_grad_stats: the same of each gradient (``<path>.grad_<stat>``).
        log_intermediates: the same of each value the model sows (``nnx.Intermediate``,
            linen's ``intermediates`` collection).
        nan_keys: with ``detect_nans``, the training values whose NaN or Inf stops the run
            (``"loss"`` or ``"train/loss"``, ``"acc"``...); ``None``: all of them.
        tabulate_model: write the model's summary (``model.txt``) and its parameters
            (``params.txt``) into the run folder when the model is built.
        augmentation: a registered module wrapping the model whose ``augment`` changes each
            training batch inside the step (:mod:`gyre.trainer._augment`), e.g.
            ``{class_name: GaussianNoise, scale: 0.1}``; ``None``: none.
        augmentation_seed: the seed of an nnx augmentation's ``augmentation`` stream.
        preprocessing: a registered module whose ``preprocess`` changes every batch (training
            and evaluation) inside the step; ``None``: none.

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
