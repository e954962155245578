"""A component section checked against the signature of what its class_name names."""

import pytest

from gyre.config import ConfigError, validate_component
from gyre.config._components import validate_nested


def test_keys_types_defaults_and_trainer_supplied_names():
    kwargs = validate_component("models", {"class_name": "SimpleClassifier", "c_hid": 8}, where="model",
                                extra_allowed=("rngs",))
    assert kwargs["c_hid"] == 8 and kwargs["num_classes"] == 10 and "rngs" not in kwargs and "class_name" not in kwargs
    with pytest.raises(ConfigError, match=r"unknown key model\.c_hidden(.|\n)*Did you mean 'c_hid'"):
        validate_component("models", {"class_name": "SimpleClassifier", "c_hidden": 8}, where="model")
    with pytest.raises(ConfigError, match=r"model\.c_hid(.|\n)*expected: int(.|\n)*received: str '8'"):
        validate_component("models", {"class_name": "SimpleClassifier", "c_hid": "8"}, where="model")
    with pytest.raises(ConfigError, match=r"unknown models name 'SimpleClasifier'(.|\n)*Did you mean 'SimpleClassifier'"):
        validate_component("models", {"class_name": "SimpleClasifier"}, where="model")


def test_a_missing_required_key_and_a_missing_class_name():
    with pytest.raises(ConfigError, match=r"optimizer(.|\n)*learning_rate"):
        validate_component("optimizers", {"class_name": "SGD"}, where="optimizer")
    with pytest.raises(ConfigError, match="class_name"):
        validate_component("models", {"c_hid": 8}, where="model")


def test_nested_sections_are_checked_by_their_own_kind():
    checked = validate_nested("schedules", {"class_name": "Constant", "value": 0.1}, where="optimizer.learning_rate")
    assert checked["value"] == 0.1
    with pytest.raises(ConfigError, match=r"optimizer\.learning_rate\.vaule"):
        validate_nested("schedules", {"class_name": "Constant", "vaule": 0.1}, where="optimizer.learning_rate")
