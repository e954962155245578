"""The check vocabulary: each check passes good values through (converted) and builds the
expected / received / fix text of a bad one from its fields."""

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core._checks import choice, instance, mapping, path, real, require, scalar, whole


def test_whole_accepts_integral_numbers_of_any_kind():
    assert whole(np.int64(3), "steps", minimum=1) == 3
    assert type(whole(np.int64(3), "steps")) is int
    assert whole(jnp.int32(2), "steps") == 2
    assert whole(None, "limit", none=True) is None
    device = jnp.int32(5)
    assert whole(device, "step", device=True) is device  # left unread for the writer's thread


@pytest.mark.parametrize("value", [True, 2.0, "3", None, -1, jnp.float32(1)])
def test_whole_refuses_what_is_not_a_whole_number_in_range(value):
    with pytest.raises(ValueError, match=r"steps must be a whole number >= 0\n  expected: an int >= 0\n"):
        whole(value, "steps")


def test_whole_message_parts():
    with pytest.raises(ValueError) as info:
        whole(9, "size", minimum=1, maximum=4, unit="batches", fix="pass size=2")
    assert str(info.value).splitlines() == [
        "size must be a whole number of batches >= 1 and <= 4",
        "  expected: an int >= 1 and <= 4",
        "  received: int 9",
        "  fix: pass size=2",
    ]
    with pytest.raises(TypeError, match="expected: e.g. 3"):
        whole("x", "n", expected="e.g. 3", error=TypeError)
    with pytest.raises(ValueError, match=r"^Every's interval must be a positive whole number\n  expected: an int >= 1\n"):
        whole(0, "Every's interval", minimum=1, problem="Every's interval must be a positive whole number")


def test_real_bounds_and_text():
    assert real(3, "lr", above=0) == 3.0
    assert real("1e-3", "lr", text=True) == 1e-3
    assert real(None, "lr", none=True) is None
    for bad in (0, float("inf"), float("nan"), True, "1e-3"):
        with pytest.raises(ValueError, match="lr must be a finite number > 0"):
            real(bad, "lr", above=0)
    with pytest.raises(ValueError, match=r"p must be a finite number >= 0 and <= 1\n  expected: a float >= 0 and <= 1"):
        real(1.5, "p", minimum=0, maximum=1)
    with pytest.raises(ValueError, match=r"every\(time=...\) must be a finite number of seconds > 0"):
        real(-1, "every(time=...)", above=0, unit="seconds")
    with pytest.raises(ValueError, match=r"^interval must be a number of seconds >= 0\n  expected: a float >= 0\n"):
        real(-1, "interval", minimum=0, problem="interval must be a number of seconds >= 0")


def test_choice_names_the_options_and_the_closest():
    assert choice("max", "mode", ("min", "max")) == "max"
    with pytest.raises(ValueError) as info:
        choice("mni", "mode", ("min", "max"))
    assert str(info.value).splitlines()[0] == "mode must be 'min' or 'max'"
    assert str(info.value).endswith("fix: pass one of them. Did you mean 'min'?")
    with pytest.raises(ValueError, match="policy must be one of 'raise', 'skip', 'ignore'"):
        choice(["raise"], "policy", ("raise", "skip", "ignore"))  # unhashable: simply not an option


def test_instance():
    assert instance(None, "name", str, none=True) is None
    with pytest.raises(TypeError, match=r"name must be a string or None\n  expected: a string or None\n  received: int 3"):
        instance(3, "name", str, none=True, kind="a string")
    with pytest.raises(TypeError, match="x must be a str or bytes"):
        instance(3, "x", (str, bytes))
    with pytest.raises(TypeError, match=r"^save_snapshot takes a Snapshot\n  expected: a str\n  received: int 3"):
        instance(3, "snapshot", str, problem="save_snapshot takes a Snapshot")


def test_mapping_checks_string_keys_and_known_keys():
    assert mapping({"a": 1}, "metrics") == {"a": 1}
    with pytest.raises(TypeError, match="metrics must be a mapping with string keys"):
        mapping({1: 2}, "metrics")
    with pytest.raises(TypeError, match="metrics must be a dict of metrics"):
        mapping([("a", 1)], "metrics", kind="a dict of metrics")
    with pytest.raises(ValueError, match=r"unknown key 'acuracy' in metrics. Did you mean 'accuracy'\?"):
        mapping({"acuracy": 1}, "metrics", known=["loss", "accuracy"])


def test_path():
    assert path(pathlib.Path("runs"), "p", expected="a path", fix="pass 'runs'") == "runs"
    for bad in (b"runs", "", None):
        with pytest.raises(TypeError, match=r"a writer needs a folder\n  expected: a path"):
            path(bad, "a writer needs a folder", expected="a path", fix="pass 'runs'")


def test_require_imports_or_names_the_package_and_the_install():
    import json

    assert require("json", "a reader") is json
    with pytest.raises(ImportError) as err:
        require("gyre_no_such_module.sub", "ConfusionMatrixCallback", extra="plot")
    lines = str(err.value).splitlines()
    assert lines[0] == "ConfusionMatrixCallback needs gyre_no_such_module, which is not installed"
    assert lines[1] == "  expected: gyre_no_such_module importable (the extra gyre[plot])"
    assert lines[-1] == "  fix: pip install 'gyre[plot]'"
    with pytest.raises(ImportError, match=r"needs torch-thing, which is not installed[\s\S]*fix: pip install x"):
        require("gyre_no_such_module", "an adapter", package="torch-thing", fix="pip install x")


def test_scalar_passes_one_number_through_unread_and_names_the_shape_of_anything_else():
    device = jnp.float32(2.0)
    assert scalar(device, "count") is device and scalar(3, "count") == 3 and scalar(np.int64(4), "count") == 4
    with pytest.raises(ValueError) as info:
        scalar(jnp.ones((2, 3)), "count", fix="pass count=batch_size")
    assert str(info.value).splitlines() == [
        "count must be one number",
        "  expected: a number or a 0-d array",
        "  received: a count of shape (2, 3)",
        "  fix: pass count=batch_size",
    ]
