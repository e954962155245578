"""BaseModelNNX / BaseModelLinen: a subclass registers itself in MODELS with its typed config
(class_name written into the config), cfgtype joins the configs, a model section is checked
against the config's fields and builds Model(Config(**keys)); bad configs are explained."""

import dataclasses
import typing

import jax
import jax.numpy as jnp
import pytest
from flax import linen, nnx

from gyre.config import MODELS, ConfigError, TrainerConfig, validate_component
from gyre.trainer import BaseModelLinen, BaseModelNNX
from gyre.trainer._model import built_from_config
from gyre.trainer._module import build_model


@dataclasses.dataclass
class IfaceNetConfig:
    features: int = 3
    use_bias: bool = True


class IfaceNet(BaseModelNNX):
    config_class = IfaceNetConfig

    def __init__(self, config: IfaceNetConfig, rngs: nnx.Rngs):
        super().__init__(config)
        self.dense = nnx.Linear(2, config.features, use_bias=config.use_bias, rngs=rngs)

    def __call__(self, x, train=True):
        return self.dense(x)


@dataclasses.dataclass
class IfaceLinenConfig:
    features: int = 5


class IfaceLinen(BaseModelLinen):
    config: IfaceLinenConfig

    @linen.compact
    def __call__(self, x, train=True):
        return linen.Dense(self.config.features)(x)


def test_a_subclass_registers_under_its_name_and_names_its_config():
    assert MODELS.get("IfaceNet") is IfaceNet and MODELS.get("IfaceLinen") is IfaceLinen
    assert IfaceNetConfig.class_name == "IfaceNet" and IfaceLinenConfig.class_name == "IfaceLinen"
    assert IfaceNet.config_class is IfaceNetConfig and IfaceLinen.config_class is IfaceLinenConfig
    assert built_from_config(IfaceNet) and built_from_config(IfaceLinen) and not built_from_config(nnx.Linear)


def _members(cfgtype):
    return typing.get_args(cfgtype) or (cfgtype,)


def test_cfgtype_is_the_union_of_the_registered_subclasses_configs():
    assert IfaceNetConfig in _members(BaseModelNNX.cfgtype)
    assert IfaceLinenConfig not in _members(BaseModelNNX.cfgtype)
    assert IfaceLinenConfig in _members(BaseModelLinen.cfgtype)
    assert IfaceNet.cfgtype is IfaceNetConfig


def test_a_section_is_checked_against_the_config_and_builds_the_model_from_it():
    assert validate_component("models", {"class_name": "IfaceNet", "features": 4}, where="model",
                              extra_allowed=("rngs",)) == {"features": 4, "use_bias": True}
    with pytest.raises(ConfigError, match="unknown key model.featurs"):
        validate_component("models", {"class_name": "IfaceNet", "featurs": 4}, where="model")
    model = build_model(TrainerConfig(), {"class_name": "IfaceNet", "features": 4})
    assert isinstance(model, IfaceNet) and model.config == IfaceNetConfig(features=4)
    assert model(jnp.ones((1, 2))).shape == (1, 4)
    linen_model = build_model(TrainerConfig(model_mode="linen"), {"class_name": "IfaceLinen"})
    assert linen_model.config == IfaceLinenConfig()
    params = linen_model.init(jax.random.key(0), jnp.ones((1, 2)))
    assert linen_model.apply(params, jnp.ones((1, 2))).shape == (1, 5)


def test_a_config_that_is_not_a_dataclass_is_explained():
    with pytest.raises(TypeError, match="config must be a dataclass") as err:
        class Bad(BaseModelNNX):  # noqa: F841
            config_class = dict
    assert "expected:" in str(err.value) and "fix:" in str(err.value)
    assert "Bad" not in MODELS


def test_an_intermediate_base_without_config_is_not_registered():
    class Intermediate(BaseModelNNX):
        pass

    assert "Intermediate" not in MODELS


def test_a_subclass_named_as_a_gyre_builtin_takes_the_name_with_a_warning():
    @MODELS.register("IfaceBuiltin")
    class Builtin:
        pass

    Builtin.__module__ = "gyre.trainer._fake"
    MODELS._items["IfaceBuiltin"] = Builtin  # as gyre's own module registered it
    with pytest.warns(UserWarning, match="was gyre's built-in gyre.trainer._fake"):
        @dataclasses.dataclass
        class Cfg:
            n: int = 1

        class IfaceBuiltin(BaseModelNNX):
            config_class = Cfg

    assert MODELS.get("IfaceBuiltin") is IfaceBuiltin and Cfg.class_name == "IfaceBuiltin"

    def another_module():
        class IfaceBuiltin(BaseModelNNX):
            config_class = Cfg

    with pytest.raises(ValueError, match="already registered"):  # a user's class is never replaced
        another_module()
    assert MODELS.get("IfaceBuiltin") is IfaceBuiltin


def test_flax_transforms_of_a_registered_linen_model_register_nothing():
    wrapped = linen.vmap(IfaceLinen, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=0)
    rematted = linen.remat(IfaceLinen)
    assert wrapped.__name__ not in MODELS and rematted.__name__ not in MODELS
    assert IfaceLinenConfig.class_name == "IfaceLinen" and MODELS.get("IfaceLinen") is IfaceLinen
    params = wrapped(IfaceLinenConfig()).init(jax.random.key(0), jnp.ones((2, 1, 2)))
    assert params["params"]["Dense_0"]["kernel"].shape == (2, 2, 5)


def test_a_registered_factory_is_built_from_its_config_keys_and_what_the_trainer_supplies():
    from flax import nnx

    from gyre.trainer._model import build_registered

    layer = build_registered(nnx.Linear, {"in_features": 2, "out_features": 3}, rngs=nnx.Rngs(0))
    assert layer.kernel.shape == (2, 3)
