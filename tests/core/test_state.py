"""TrainState (and the states built on it): misspelt attributes, subclasses with fields
without defaults, create's checks."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest
from flax import struct

import gyre
from gyre import managed


def _states():
    params = {"w": jnp.ones(2)}
    flax_bn = gyre.create_flax_state(
        nn.Sequential([nn.Dense(2), nn.BatchNorm(use_running_average=True)]), inputs=jnp.zeros((1, 3)), tx=None
    )
    return {
        "TrainState": gyre.TrainState.create(params=params, ema=1.0),
        "ManagedState": managed.ManagedState.create(params=params, ema=1.0),
        "FlaxState": gyre.create_flax_state(nn.Dense(2), inputs=jnp.zeros((1, 3)), tx=None),
        "FlaxState+bn": flax_bn,
    }


@pytest.mark.parametrize("kind", ["TrainState", "ManagedState", "FlaxState", "FlaxState+bn"])
def test_misspelt_attributes_are_explained_errors(kind):
    state = _states()[kind]
    with pytest.raises(AttributeError, match="has no attribute 'parms'. Did you mean 'params'") as info:
        _ = state.parms
    text = str(info.value)
    assert "expected:" in text and "model_state collection" in text and "fix: use 'params'" in text
    assert "opt_state" in text and "rng" in text  # the fields are listed
    with pytest.raises(AttributeError, match="Did you mean 'batch_stats'"):
        _ = state.bacth_stats
    with pytest.raises(AttributeError, match="Did you mean 'apply_gradients'"):
        _ = state.apply_gradient
    assert not hasattr(state, "nothing_like_this")


@pytest.mark.parametrize("kind", ["TrainState", "ManagedState", "FlaxState"])
def test_batch_stats_is_none_without_batch_statistics(kind):
    assert _states()[kind].batch_stats is None  # documented, the one name that answers


def test_batch_stats_and_extras_read_as_attributes():
    states = _states()
    assert "layers_1" in states["FlaxState+bn"].batch_stats
    assert states["TrainState"].ema == 1.0 and states["ManagedState"].ema == 1.0
    with pytest.raises(AttributeError, match="Did you mean 'ema'"):
        _ = states["TrainState"].emma


class Diffusion(struct.PyTreeNode):
    betas: jax.Array


class CicloState(managed.ManagedState):  # ciclo's own test state: fields without defaults
    key: jax.Array
    ema_params: Any
    process: Diffusion
    config: int = struct.field(pytree_node=False)

    @classmethod
    def create(cls, *, params, tx, key, process, config, **kwargs):
        return super().create(
            params=params, tx=tx, ema_params=jax.tree_util.tree_map(jnp.copy, params), key=key,
            process=process, config=config, **kwargs,
        )


class Plain(gyre.TrainState):
    ema: Any
    decay: float = struct.field(pytree_node=False, default=0.9)


def test_subclasses_may_declare_fields_without_defaults():
    params = {"w": jnp.ones(3)}
    state = CicloState.create(
        params=params, tx=optax.adam(1e-3), key=jax.random.key(0), process=Diffusion(jnp.ones(4)), config=1,
        strategy="jit",
    )
    assert state.config == 1 and state.strategy.name == "jit"
    assert state.ema_params["w"].shape == (3,) and "ema_params" not in state.extras

    @managed.train_step
    def train_step(state, batch):
        loss = jnp.sum(state.params["w"] ** 2) + 0 * jnp.sum(state.process.betas)
        return gyre.logs().add_loss("loss", loss), state

    logs, state = train_step(state, None)
    assert int(state.step) == 1 and isinstance(state, CicloState)
    plain = Plain.create(params=params, ema=jnp.zeros(3))
    assert plain.decay == 0.9 and jax.jit(lambda s: s.replace(ema=s.ema + 1))(plain).ema.tolist() == [1.0] * 3


def test_create_names_missing_required_fields():
    with pytest.raises(TypeError, match=r"Plain.create is missing the field\(s\) \['ema'\]") as info:
        Plain.create(params={"w": jnp.ones(1)}, emma=1)
    assert "Plain.create(params=..., ema=...)" in str(info.value)
