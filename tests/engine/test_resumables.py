"""What a checkpoint carries of a loop's objects (``gyre.engine._snapshot``)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.engine._snapshot import (
    Checkpointer,
    join_arrays,
    split_arrays,
    state_dicts,
    table_objects,
)
from gyre.engine._tasks import compile_tasks


class Stateful:
    def __init__(self, value=0):
        self.value = value

    def __call__(self):
        pass

    def step(self):
        pass

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, d):
        self.value = d["value"]


class Ckpt(Checkpointer):
    def __call__(self):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, d):
        pass


def test_objects_are_named_by_class_and_rank_once_each():
    a, b = Stateful(), Stateful()
    table = compile_tasks({gyre.every(1): [a, b.step, a.step], gyre.every(2): [len, Ckpt()]})
    found = table_objects(table)[0]
    assert list(found) == ["Stateful", "Stateful#2", "Every"]  # every(2) too; every(1) is stateless
    assert found["Stateful"] is a and found["Stateful#2"] is b


def test_checkpoints_are_found_once_and_not_collected():
    ck = Ckpt()
    table = compile_tasks({gyre.every(1): [ck], gyre.every(2): [ck]})
    resumables, checkpoints = table_objects(table)
    assert checkpoints == [ck] and list(resumables) == ["Every"]


def test_arrays_are_set_aside_and_json_values_kept():
    arrays = {}
    tree = {"n": np.int32(3), "x": 1.5, "nan": float("nan"), "w": [jnp.ones(2), None], "ok": True}
    json_side = split_arrays(tree, arrays, "obj")
    assert json_side["n"] == 3 and type(json_side["n"]) is int
    assert list(arrays) == ["a0"]
    back = join_arrays(json_side, arrays)
    assert math.isnan(back["nan"]) and back["w"][1] is None and back["ok"] is True
    np.testing.assert_array_equal(back["w"][0], np.ones(2))


def test_what_is_not_json_is_named_with_its_place():
    with pytest.raises(TypeError, match=r"state_dict value at obj.f cannot be saved(.|\n)*function"):
        split_arrays({"f": print}, {}, "obj")
    with pytest.raises(TypeError, match="a key int 1"):
        split_arrays({1: 2}, {}, "obj")


def test_a_state_dict_that_is_not_a_dict_is_refused():
    class Odd(Stateful):
        def state_dict(self):
            return [1]

    with pytest.raises(TypeError, match=r"Odd.state_dict\(\) must return a dict"):
        state_dicts({"Odd": Odd()}, {})
