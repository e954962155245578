"""module_named_params / count_parameters on nnx modules, and their error for anything else."""

import jax.numpy as jnp
import pytest
from flax import nnx

from gyre.trainer import count_parameters, module_named_params


class Pair(nnx.Module):
    def __init__(self):
        self.weight = nnx.Param(jnp.ones((2, 2)))
        self.bias = nnx.Param(jnp.zeros(2))


class Outer(nnx.Module):
    def __init__(self):
        self.inner = Pair()
        self.layers = nnx.List([Pair()])
        self.scale = nnx.Param(jnp.ones(3))
        self.note = "not a param"


def test_names_direct_then_recursive():
    assert sorted(n for n, _ in module_named_params(Pair())) == ["bias", "weight"]
    names = [n for n, _ in module_named_params(Outer(), recursive=True)]
    assert names == ["inner.bias", "inner.weight", "layers.0.bias", "layers.0.weight", "scale"]
    assert all(isinstance(p, nnx.Param) for _, p in module_named_params(Outer(), recursive=True))


def test_count_parameters_counts_the_whole_graph():
    assert count_parameters(Pair()) == 6
    assert count_parameters(Outer()) == 6 + 6 + 3  # the list's submodule too


@pytest.mark.parametrize("call", [count_parameters, lambda m: list(module_named_params(m))])
def test_a_non_module_is_explained(call):
    with pytest.raises(TypeError, match="takes a flax nnx module"):
        call({"w": jnp.ones(2)})
