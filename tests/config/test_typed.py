"""The registered schedule and optimizer classes of the fork's names: one class built from a
typed config or from a section's keys, with the same maths either way."""

import copy

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.config import (
    OPTIMIZERS,
    SCHEDULES,
    SGD,
    AdamW,
    AdamWConfig,
    ConcatSchedule,
    ConcatScheduleConfig,
    ConfigError,
    ConstantSchedule,
    ConstantScheduleConfig,
    CosineScheduleConfig,
    ExponentialScheduleConfig,
    GradClipNormConfig,
    GradientTransformInterface,
    Lamb,
    LambConfig,
    LinearSchedule,
    LinearScheduleConfig,
    OptimizerInterface,
    ScheduleInterface,
    SGDConfig,
    WarmupCosineDecayScheduleConfig,
    WeightDecayConfig,
    build_optimizer,
    build_schedule,
    validate_component,
)

SCHEDULE_CONFIGS = [
    ConstantScheduleConfig(init_value=0.1, steps=10),
    LinearScheduleConfig(init_value=0.1, end_value=0.01, steps=10),
    CosineScheduleConfig(init_value=0.1, steps=10),
    ExponentialScheduleConfig(init_value=0.1, decay_rate=0.5, steps=10),
    WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=3, decay_steps=7),
    ConcatScheduleConfig(schedules={"a": ConstantScheduleConfig(init_value=0.1, steps=4),
                                    "b": LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=6)}),
]


@pytest.mark.parametrize("config", SCHEDULE_CONFIGS, ids=lambda c: c.class_name)
def test_a_schedule_from_its_config_equals_the_one_from_its_yaml_section(config):
    cls = SCHEDULES.get(config.class_name)
    assert SCHEDULES.get(config.class_name.removesuffix("Schedule")) is cls
    typed, from_yaml = cls(config), build_schedule(config.to_dict())
    assert isinstance(typed, cls) and isinstance(from_yaml, cls) and isinstance(typed, ScheduleInterface)
    steps = jnp.arange(14)
    np.testing.assert_array_equal(typed(steps), from_yaml(steps))
    assert typed.total_steps == from_yaml.total_steps == 10
    assert typed.config is config and from_yaml.config is None


def test_the_registry_holds_the_classes():
    assert SCHEDULES.get("LinearSchedule") is LinearSchedule
    assert OPTIMIZERS.get("SGD") is SGD and OPTIMIZERS.get("AdamW") is AdamW and OPTIMIZERS.get("Lamb") is Lamb
    assert "Linear" in repr(LinearSchedule(init_value=1.0, end_value=0.0, steps=2))


def test_a_class_takes_a_config_or_keys_not_both_nor_another_config():
    config = ConstantScheduleConfig(init_value=0.1)
    with pytest.raises(TypeError, match="not both"):
        ConstantSchedule(config, value=0.2)
    with pytest.raises(TypeError, match="ConstantScheduleConfig"):
        ConstantSchedule(LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=2))
    with pytest.raises(ValueError, match="unknown key 'init_vaule'"):
        LinearSchedule(init_vaule=0.1, end_value=0.0, steps=2)
    with pytest.raises(TypeError, match="SGDConfig"):
        SGD(AdamWConfig())


def test_the_schema_checks_a_section_against_the_builders_keys():
    assert validate_component("schedules", {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0},
                              where="optimizer.learning_rate")["init_value"] == 1.0
    with pytest.raises(ConfigError, match="momentun"):
        validate_component("optimizers", {"class_name": "SGD", "learning_rate": 0.1, "momentun": 0.9},
                           where="optimizer")


def _updates(tx, params, grads):
    state = tx.init(params)
    for _ in range(3):
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


PARAMS = {"layer": {"weight": jnp.array([1.0, -2.0]), "bias": jnp.array([0.5, 0.5])}}
GRADS = {"layer": {"weight": jnp.array([0.3, 0.1]), "bias": jnp.array([-0.2, 0.4])}}


@pytest.mark.parametrize(
    "config",
    [
        SGDConfig(learning_rate=LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=3), momentum=0.9,
                  transforms={"clip": GradClipNormConfig(max_norm=0.1)}),
        AdamWConfig(learning_rate=0.01, weight_decay=WeightDecayConfig(value=0.1)),
        LambConfig(learning_rate=0.01, weight_decay=WeightDecayConfig(value=0.1)),
    ],
    ids=lambda c: c.class_name,
)
def test_an_optimizer_from_its_config_equals_the_one_from_its_yaml_section(config):
    cls = OPTIMIZERS.get(config.class_name)
    typed, from_yaml = cls(config), build_optimizer(config.to_dict())
    assert isinstance(typed, OptimizerInterface) and isinstance(typed, optax.GradientTransformation)
    assert isinstance(from_yaml, cls)
    a, b = _updates(typed, PARAMS, GRADS), _updates(from_yaml, PARAMS, GRADS)
    for x, y in zip(jnp.concatenate([a["layer"]["weight"], a["layer"]["bias"]]),
                    jnp.concatenate([b["layer"]["weight"], b["layer"]["bias"]]), strict=True):
        assert float(x) == float(y)


def test_the_forks_attributes():
    rate = LinearScheduleConfig(init_value=0.01, end_value=0.001, steps=100)
    sgd = SGD(SGDConfig(learning_rate=rate, momentum=0.9, nesterov=True))
    assert isinstance(sgd.scheduler, LinearSchedule) and sgd.scheduler.config is rate
    assert float(sgd.scheduler(50)) == pytest.approx(0.0055)
    assert SGD(SGDConfig(learning_rate=0.01)).scheduler == 0.01
    adamw = AdamW(AdamWConfig(weight_decay=WeightDecayConfig(value=0.01, parameter_regex_include="weight")))
    assert adamw.weight_decay == 0.01
    assert adamw.weight_decay_mask(PARAMS) == {"layer": {"weight": True, "bias": False}}
    assert AdamW(learning_rate=0.1, weight_decay=0.2).weight_decay_mask is None  # a rate: every parameter
    assert Lamb(learning_rate=0.1).weight_decay == 0.0  # Lamb's default: a WeightDecay of 0 with its mask
    assert not hasattr(sgd, "weight_decay")


def test_an_optimizer_copies_with_its_attributes():
    tx = SGD(SGDConfig(learning_rate=0.5))
    for twin in (copy.copy(tx), copy.deepcopy(tx)):
        assert isinstance(twin, SGD) and twin.scheduler == 0.5 and twin.config == tx.config
        assert twin.init is tx.init and twin.update is tx.update


def test_a_transform_is_used_as_an_optax_transformation():
    clip = GradClipNormConfig(max_norm=1.0).instantiate(GradientTransformInterface)
    grads = {"w": jnp.array([3.0, 4.0])}
    clipped, _ = clip.update(grads, clip.init(grads))
    np.testing.assert_allclose(clipped["w"], [0.6, 0.8], rtol=1e-6)
    coupled = WeightDecayConfig(value=0.5).instantiate()
    params = {"kernel": jnp.array([2.0]), "bias": jnp.array([2.0])}
    zeros = {"kernel": jnp.zeros(1), "bias": jnp.zeros(1)}
    decayed, _ = coupled.update(zeros, coupled.init(params), params)
    assert (decayed["kernel"].tolist(), decayed["bias"].tolist()) == ([1.0], [0.0])
    decoupled = WeightDecayConfig(value=0.5, before_optimizer=False).instantiate()
    with pytest.raises(ValueError, match="needs the current learning rate"):
        decoupled.init(params)


def test_concat_of_typed_parts_is_one_schedule():
    schedule = ConcatSchedule(SCHEDULE_CONFIGS[-1])
    assert [round(float(schedule(i)), 6) for i in (0, 3, 4, 7, 10, 20)] == [0.1, 0.1, 0.1, 0.05, 0.0, 0.0]


def test_each_interface_has_cfgtype_the_union_of_its_typed_configs():
    import typing

    from gyre.config import _typed_configs as typed

    assert typing.get_args(OptimizerInterface.cfgtype) == (SGDConfig, AdamWConfig, LambConfig)
    assert SGD.cfgtype is SGDConfig and AdamW.cfgtype is AdamWConfig  # a component: its own config
    assert ScheduleInterface.cfgtype == typed.ScheduleConfigs
    assert LinearSchedule.cfgtype is LinearScheduleConfig
    assert GradientTransformInterface.cfgtype == typed.TransformConfigs
    assert GradClipNormConfig in typing.get_args(GradientTransformInterface.cfgtype)
    # each member names a registered component (what its section's class_name looks up)
    from gyre.config import REGISTRIES

    for interface in (OptimizerInterface, ScheduleInterface, GradientTransformInterface):
        for config in typing.get_args(interface.cfgtype):
            assert config.class_name in REGISTRIES[config.registry]


def test_nested_config_fields_are_annotated_with_the_concrete_unions():
    """What a parser that resolves a section by its class_name (compoconf's parse_config)
    reads: the resolved annotations name every concrete config, never only a base class."""
    import typing

    from gyre.config import _typed_configs as typed

    hints = typing.get_type_hints(AdamWConfig)
    assert typing.get_args(hints["learning_rate"]) == (float, *typing.get_args(ScheduleInterface.cfgtype))
    assert hints["transforms"] == dict[str, GradientTransformInterface.cfgtype]
    assert WeightDecayConfig in typing.get_args(hints["weight_decay"])
    assert typing.get_type_hints(ConcatScheduleConfig)["schedules"] == dict[str, typed.ScheduleConfigs]
