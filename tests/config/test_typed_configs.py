"""The typed config values (the kpoeppel fork's form): fields, defaults, derived defaults,
their section, and the one error type they raise."""

import dataclasses

import pytest

from gyre.config import (
    OPTIMIZERS,
    SCHEDULES,
    TRANSFORMS,
    AdamWConfig,
    BaseOptimizerConfig,
    BaseScheduleConfig,
    ConcatScheduleConfig,
    ConfigError,
    ConstantScheduleConfig,
    CosineScheduleConfig,
    ExponentialScheduleConfig,
    GradClipNormConfig,
    GradClipValueConfig,
    LambConfig,
    LinearScheduleConfig,
    SGDConfig,
    Transform,
    TypedConfigError,
    WarmupCosineDecayScheduleConfig,
    WeightDecayConfig,
    build_optimizer,
    build_schedule,
    build_transform,
)


def test_the_error_is_gyres_explained_config_error_and_the_forks_assertion():
    assert issubclass(TypedConfigError, ConfigError) and issubclass(TypedConfigError, AssertionError)
    assert issubclass(TypedConfigError, ValueError)
    with pytest.raises(TypedConfigError) as caught:
        LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=-1)
    text = str(caught.value)
    assert "steps" in text and "expected" in text.lower() and "fix" in text.lower()


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: BaseScheduleConfig(steps=-1), "steps"),
        (lambda: BaseScheduleConfig(init_value="fast", steps=1), "init_value"),
        (lambda: ConstantScheduleConfig(init_value=0.1, end_value=0.2, steps=10), "end_value"),
        (lambda: CosineScheduleConfig(init_value=0.1, end_value=0.02, decay_factor=0.1, steps=10), "end_value"),
        (lambda: ExponentialScheduleConfig(init_value=0.1, end_value=0.02, decay_rate=0.1, steps=10), "end_value"),
        (lambda: LinearScheduleConfig(init_value=0.1, end_value=0.0), "steps"),
        (lambda: WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=20, decay_steps=0), "decay_steps"),
        (lambda: WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=20, decay_steps=70, steps=100),
         "steps"),
        (lambda: SGDConfig(learning_rate=-1.0), "learning_rate"),
        (lambda: SGDConfig(learning_rate=0.1, momentun=0.9), "Did you mean 'momentum'"),
        (lambda: LinearScheduleConfig(0.1, 0.0, 10), "takes its fields as keywords"),
        (lambda: SGDConfig(learning_rate={"class_name": "Linear"}), "learning_rate must be a number or a schedule"),
        (lambda: SGDConfig(learning_rate=0.1, momentum=1.5), "momentum"),
        (lambda: AdamWConfig(b1=1.0), "b1"),
        (lambda: WeightDecayConfig(value=0.1, mode="greylist"), "mode"),
        (lambda: GradClipNormConfig(max_norm=0.0), "max_norm"),
        (lambda: GradClipValueConfig(before_optimizer="yes"), "before_optimizer"),
    ],
)
def test_each_mistake_is_one_explained_error_naming_its_key(make, key):
    with pytest.raises(TypedConfigError, match=key) as caught:
        make()
    assert "fix" in str(caught.value).lower()


def test_concat_checks_its_parts_lengths_and_ends():
    parts = {"constant": ConstantScheduleConfig(init_value=0.1, steps=50),
             "linear": LinearScheduleConfig(init_value=0.1, end_value=0.01, steps=50)}
    config = ConcatScheduleConfig(init_value=0.1, end_value=0.01, steps=100, schedules=parts)
    assert config.steps == 100 and len(config.schedules) == 2
    assert ConcatScheduleConfig(schedules=parts).steps == 100  # left out: the sum of the parts
    for bad in (dict(steps=90), dict(init_value=0.2), dict(end_value=0.02)):
        with pytest.raises(TypedConfigError, match="steps|jumps"):
            ConcatScheduleConfig(**{"schedules": parts, **bad})
    jump = {**parts, "linear": LinearScheduleConfig(init_value=0.2, end_value=0.01, steps=50)}
    with pytest.raises(TypedConfigError, match="jumps"):
        ConcatScheduleConfig(schedules=jump)
    assert ConcatScheduleConfig(schedules=jump, check_continuity=False).steps == 100


def test_derived_defaults_are_the_forks():
    assert ConstantScheduleConfig(init_value=0.1).end_value == 0.1
    assert CosineScheduleConfig(init_value=0.1, steps=10).end_value == pytest.approx(0.01)
    assert ExponentialScheduleConfig(init_value=0.1, steps=10).end_value == pytest.approx(0.01)
    warm = WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=20, decay_steps=80)
    assert (warm.steps, warm.end_value) == (100, pytest.approx(0.01))
    assert WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=20, steps=100).decay_steps == 80


def test_optimizer_configs_have_the_forks_fields_and_defaults():
    sgd = SGDConfig(learning_rate=0.01)
    assert (sgd.momentum, sgd.nesterov, sgd.transforms, sgd.log_learning_rate) == (None, False, {}, True)
    adamw = AdamWConfig()
    assert (adamw.learning_rate, adamw.b1, adamw.b2, adamw.eps) == (1e-3, 0.9, 0.999, 1e-8)
    assert isinstance(adamw.weight_decay, WeightDecayConfig) and adamw.weight_decay.value == 0.0
    lamb = LambConfig()
    assert (lamb.eps, lamb.eps_root) == (1e-6, 0.0)
    assert isinstance(SGDConfig(learning_rate=1).learning_rate, float)  # an int rate is a float
    clip = GradClipNormConfig()
    assert (clip.max_norm, clip.before_optimizer) == (1e8, True)


def test_configs_are_frozen_values():
    config = LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.steps = 5  # type: ignore[misc]
    assert config == LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=10)
    assert "built" not in repr(config)


@pytest.mark.parametrize(
    "config, registry",
    [
        (ConstantScheduleConfig(init_value=0.1, steps=4), SCHEDULES),
        (CosineScheduleConfig(init_value=0.1, steps=4), SCHEDULES),
        (LinearScheduleConfig(init_value=0.1, end_value=0.0, steps=4), SCHEDULES),
        (ExponentialScheduleConfig(init_value=0.1, steps=4), SCHEDULES),
        (WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=1, decay_steps=3), SCHEDULES),
        (SGDConfig(learning_rate=0.1), OPTIMIZERS),
        (AdamWConfig(), OPTIMIZERS),
        (LambConfig(), OPTIMIZERS),
        (WeightDecayConfig(value=0.1), TRANSFORMS),
        (GradClipNormConfig(), TRANSFORMS),
        (GradClipValueConfig(), TRANSFORMS),
    ],
)
def test_class_name_is_the_registered_name_and_to_dict_the_yaml_section(config, registry):
    assert config.class_name in registry
    section = config.to_dict()
    assert section["class_name"] == config.class_name
    assert set(section) == {"class_name"} | {f.name for f in dataclasses.fields(config) if f.init}


def test_a_schedule_section_and_its_config_give_the_same_values():
    config = WarmupCosineDecayScheduleConfig(peak_value=0.1, warmup_steps=2, decay_steps=6)
    from_yaml = build_schedule(config.to_dict())
    from_value = config.instantiate()
    assert [float(from_yaml(i)) for i in range(10)] == [float(from_value(i)) for i in range(10)]


def test_an_optimizer_config_builds_through_build_optimizer_too():
    config = SGDConfig(learning_rate=LinearScheduleConfig(init_value=1.0, end_value=0.0, steps=4),
                       transforms={"clip": GradClipValueConfig(max_delta=0.5)})
    section = config.to_dict()
    assert section["learning_rate"]["class_name"] == "LinearSchedule"
    assert section["transforms"]["clip"] == {"class_name": "GradClipValue", "before_optimizer": True,
                                             "max_delta": 0.5}
    assert build_optimizer(config) is not None  # a value with to_dict(), as a ConfigDict


def test_instantiate_builds_the_registered_component_and_checks_the_interface():
    clip = GradClipValueConfig(max_delta=0.5).instantiate(Transform)
    assert isinstance(clip, Transform) and clip.name == "GradClipValue"
    assert build_transform(GradClipValueConfig(max_delta=0.5).to_dict()).name == "GradClipValue"
    with pytest.raises(TypeError, match="GradClipValue is not a float"):
        GradClipValueConfig().instantiate(float)
    for base in (BaseScheduleConfig(steps=1), BaseOptimizerConfig()):
        with pytest.raises(TypedConfigError, match="base class"):
            base.instantiate()
