"""Registries: names to components, extended by decorators, unknown names listing the known."""

import pytest

from gyre.config import REGISTRIES, Registry


def test_register_by_name_or_decorator_and_look_up():
    r = Registry("models")

    @r.register
    class Tiny:
        pass

    @r.register("Named")
    def build():
        return Tiny()

    assert r.get("Tiny") is Tiny and isinstance(r.get("Named")(), Tiny)
    assert "Tiny" in r and list(r) == ["Named", "Tiny"] and len(r) == 2
    with pytest.raises(KeyError, match=r"unknown models name 'Tnyi' at model\.class_name\. Did you mean 'Tiny'\?"
                                       r"(.|\n)*registered models: Named, Tiny"):
        r.get("Tnyi", where="model.class_name")


def test_a_taken_name_and_things_that_cannot_be_registered():
    r = Registry("callbacks")

    @r.register("Same")
    class First:
        pass

    class Other:
        pass

    with pytest.raises(ValueError, match=r"'Same' is already registered(.|\n)*replace=True"):
        r.register("Same")(Other)
    r.register("Same", replace=True)(Other)
    assert r.get("Same") is Other
    with pytest.raises(TypeError, match="only classes and functions can be registered"):
        r.register("x")(3)
    with pytest.raises(TypeError, match="needs a name"):
        r.register(lambda: None)


def test_every_kind_has_its_registry_filled_by_gyre():
    assert sorted(REGISTRIES) == sorted(
        ["trainers", "models", "callbacks", "optimizers", "schedules", "transforms", "datasets", "loggers"]
    )
    import gyre.trainer  # noqa: F401 (registers the trainer's parts)

    assert {"TrainerModule", "ImgClassifierTrainer"} <= set(REGISTRIES["trainers"])
    assert {"ModelCheckpoint", "EarlyStopping", "LearningRateMonitor"} <= set(REGISTRIES["callbacks"])
    assert {"SimpleClassifier", "SimpleCNN"} <= set(REGISTRIES["models"]) and "DigitsDataset" in REGISTRIES["datasets"]


def test_config_typed_gives_the_union_of_the_configs_that_name_a_component():
    import dataclasses
    import typing

    from gyre.config._registry import ConfigTyped

    @dataclasses.dataclass
    class PartConfig:
        class_name: typing.ClassVar[str | None] = None

    @dataclasses.dataclass
    class WheelConfig(PartConfig):
        class_name: typing.ClassVar[str] = "Wheel"

    @dataclasses.dataclass
    class SpokedWheelConfig(WheelConfig):  # a subclass's subclass counts too
        class_name: typing.ClassVar[str] = "SpokedWheel"

    class Part(metaclass=ConfigTyped):
        config_class = PartConfig

    class Wheel(Part):
        config_class = WheelConfig

    assert typing.get_args(Part.cfgtype) == (WheelConfig, SpokedWheelConfig)
    assert typing.get_origin(Part.cfgtype) is typing.Union
    assert typing.get_args(Wheel.cfgtype) == (WheelConfig, SpokedWheelConfig)

    class Lone(metaclass=ConfigTyped):
        config_class = SpokedWheelConfig

    assert Lone.cfgtype is SpokedWheelConfig  # one config: the class itself, as compoconf gives it


def test_config_typed_without_configs_is_an_explained_error():
    from gyre.config._registry import ConfigTyped

    class Bare(metaclass=ConfigTyped):
        pass

    class UnnamedConfig:  # neither it nor a subclass names a component
        class_name = None

    class UnnamedDerivedConfig(UnnamedConfig):
        pass

    class Abstract(metaclass=ConfigTyped):
        config_class = UnnamedConfig

    for cls in (Bare, Abstract):
        with pytest.raises(TypeError) as error:
            _ = cls.cfgtype
        message = str(error.value)
        assert f"{cls.__name__} has no typed config" in message
        assert "expected" in message.lower() and "fix" in message.lower()
