"""TrainerModuleConfig: the trainer's own keys, checked with explained errors."""

import pytest

import gyre
from gyre.config import ConfigError
from gyre.trainer import ImgClassifierConfig, TrainerModuleConfig


def test_the_forks_options_are_trainer_keys():
    c = TrainerModuleConfig(seed_eval=0, max_steps_per_epoch=10, log_param_stats=True, log_grad_stats=True,
                            log_intermediates=True, nan_keys=["train/loss", "acc"], tabulate_model=True)
    assert (c.seed_eval, c.max_steps_per_epoch, c.nan_keys) == (0, 10, ("loss", "acc"))
    assert gyre.TrainerModule.config_class is TrainerModuleConfig
    assert issubclass(ImgClassifierConfig, TrainerModuleConfig)
    assert TrainerModuleConfig().nan_keys is None and TrainerModuleConfig().seed_eval is None


@pytest.mark.parametrize("options, match", [
    ({"nan_keys": "train/loss"}, r"(?s)nan_keys must be a list of training value names.*nan_keys: \[train/loss\]"),
    ({"nan_keys": [""]}, r"nan_keys must be a list"),
    ({"max_steps_per_epoch": 0}, r"max_steps_per_epoch"),
])
def test_bad_options_are_explained(options, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        TrainerModuleConfig(**options)
