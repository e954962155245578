"""TrainState (and the states built on it): misspelt attributes, subclasses with fields
without defaults, create's checks."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
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


# -- batch_stats as seed 004 (Jax Fit) passes them ---------------------------------------------


class BNNet(nn.Module):
    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Dense(3)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.5)(x)
        return nn.Dense(2)(nn.relu(x))


def _bn_state(tx=None):
    model = BNNet()
    var = model.init(jax.random.PRNGKey(0), jnp.ones((1, 4)), train=True)
    return gyre.TrainState.create(
        apply_fn=model.apply, params=var["params"], batch_stats=var["batch_stats"], tx=tx or optax.sgd(0.1)
    )


def test_create_takes_batch_stats_into_model_state():
    state = _bn_state()
    assert set(state.model_state) == {"batch_stats"} and state.extras == {}
    assert state.batch_stats is state.model_state["batch_stats"]
    assert state.batch_stats["BatchNorm_0"]["mean"].shape == (3,)
    managed_state = managed.ManagedState.create(params={"w": jnp.ones(2)}, batch_stats={"m": jnp.zeros(2)})
    assert managed_state.model_state["batch_stats"]["m"].shape == (2,) and "batch_stats" not in managed_state.extras
    # model_state= keeps its other collections next to batch_stats=
    both = gyre.TrainState.create(params=(), model_state={"cache": 1}, batch_stats={"m": 2})
    assert both.model_state == {"cache": 1, "batch_stats": {"m": 2}}


def test_create_refuses_batch_stats_twice():
    with pytest.raises(TypeError, match="got batch_stats twice: as batch_stats= and in model_state") as info:
        gyre.TrainState.create(params=(), batch_stats={"m": 1}, model_state={"batch_stats": {"m": 2}})
    assert "fix: drop one of them" in str(info.value)


def test_replace_reaches_collections_and_extras():
    state = gyre.TrainState.create(params={"w": jnp.ones(2)}, batch_stats={"m": jnp.zeros(2)}, ema=1.0)
    new = state.replace(batch_stats={"m": jnp.ones(2)}, ema=2.0, step=state.step + 1)
    assert new.batch_stats["m"].tolist() == [1.0, 1.0] and new.ema == 2.0 and int(new.step) == 1
    assert state.batch_stats["m"].tolist() == [0.0, 0.0] and state.ema == 1.0  # a copy, not a mutation
    assert type(new) is gyre.TrainState and set(new.model_state) == {"batch_stats"} and set(new.extras) == {"ema"}
    # a state without batch statistics gains them; other collections are kept
    plain = gyre.TrainState.create(params=(), model_state={"cache": 1}).replace(batch_stats={"m": 3})
    assert plain.model_state == {"cache": 1, "batch_stats": {"m": 3}}
    # the whole mapping still works, and subclasses get the same replace
    assert state.replace(model_state={"batch_stats": {"m": 5}}).batch_stats == {"m": 5}
    managed_state = managed.ManagedState.create(params=(), batch_stats={"m": 1})
    assert managed_state.replace(batch_stats={"m": 4}).batch_stats == {"m": 4}
    assert Plain.create(params=(), ema=0).replace(ema=1, batch_stats={"m": 1}).batch_stats == {"m": 1}


def test_replace_errors_are_explained():
    state = gyre.TrainState.create(params=(), batch_stats={"m": 1}, ema=1.0)
    with pytest.raises(TypeError, match="TrainState cannot replace 'parms'. Did you mean 'params'"):
        state.replace(parms=1)
    with pytest.raises(TypeError, match="cannot replace 'emma'. Did you mean 'ema'"):
        state.replace(emma=1)
    with pytest.raises(TypeError, match=r"replace got \['batch_stats'\] and model_state= together") as info:
        state.replace(batch_stats={"m": 2}, model_state={"batch_stats": {"m": 3}})
    assert "fix: put them in the mapping: model_state={**state.model_state, ...}" in str(info.value)
    with pytest.raises(TypeError, match=r"replace got \['ema'\] and extras= together"):
        state.replace(ema=2.0, extras={})


def test_a_jitted_seed_004_step_updates_batch_stats_through_replace():
    state = _bn_state()
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 4)) * 3 + 1
    y = jnp.arange(8) % 2

    @jax.jit
    def train_step(state, x, y):
        def loss(params):
            logits, updates = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats}, x, train=True, mutable=["batch_stats"]
            )
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), updates

        grads, updates = jax.grad(loss, has_aux=True)(state.params)
        state = state.apply_gradients(grads=grads)
        return state.replace(batch_stats=updates["batch_stats"])  # seed 004's line

    new = train_step(state, x, y)
    mean, var = new.batch_stats["BatchNorm_0"]["mean"], new.batch_stats["BatchNorm_0"]["var"]
    features = state.params["Dense_0"]["kernel"].T @ x.T + state.params["Dense_0"]["bias"][:, None]
    np.testing.assert_allclose(mean, 0.5 * features.mean(axis=1), rtol=1e-5)  # momentum 0.5 from 0
    np.testing.assert_allclose(var, 0.5 + 0.5 * features.var(axis=1), rtol=1e-5)  # from 1
    assert int(new.step) == 1 and set(new.model_state) == {"batch_stats"}
    # evaluation uses the new running averages
    def evaluate(s):
        return s.apply_fn({"params": s.params, "batch_stats": s.batch_stats}, x, train=False)

    assert not np.allclose(evaluate(new), evaluate(new.replace(batch_stats=state.batch_stats)))


def test_batch_stats_survive_a_checkpoint_round_trip(tmp_path):
    state = _bn_state(optax.adam(1e-3))
    stats = jax.tree_util.tree_map(lambda v: v + 0.25, state.batch_stats)
    state = state.apply_gradients(grads=jax.tree_util.tree_map(jnp.ones_like, state.params), batch_stats=stats)
    with gyre.checkpoint(tmp_path) as ckpt:
        ckpt(gyre.Elapsed(steps=1), state)
    restored, elapsed = gyre.restore(tmp_path, _bn_state(optax.adam(1e-3)))
    assert elapsed.steps == 1 and int(restored.step) == 1 and type(restored) is gyre.TrainState
    assert jax.tree_util.tree_structure(restored.batch_stats) == jax.tree_util.tree_structure(stats)
    for got, want in ((restored.batch_stats, stats), (restored.params, state.params)):
        jax.tree_util.tree_map(np.testing.assert_array_equal, got, want)
    assert restored.apply_fn is not None and restored.batch_stats is restored.model_state["batch_stats"]


def test_a_state_without_parameters_to_train_is_refused():
    import optax

    with pytest.raises(TypeError, match=r"(?s)TrainState.create got params=None.*params=\(\)"):
        gyre.TrainState.create(params=None)
    with pytest.raises(TypeError, match=r"(?s)TrainState.create got params=None"):
        gyre.TrainState.create(params=None, tx=optax.sgd(0.1))
    gyre.TrainState.create(params={}, tx=optax.identity())  # jaxloop's tests build mock states so
    gyre.TrainState.create(params=(), rng=0)  # a state that is not trained: no parameters is fine


def test_params_holding_a_function_such_as_a_whole_equinox_model_are_explained():
    # was: optax's "zeros_like requires ndarray or scalar arguments, got custom_jvp" from tx.init
    import equinox as eqx
    import jax

    model = eqx.nn.MLP(4, 2, width_size=3, depth=1, key=jax.random.key(0))
    with pytest.raises(TypeError, match=r"(?s)ManagedState.create: params holds a leaf that is not an array, "
                       r"at params.activation.*eqx.partition\(model, eqx.is_inexact_array\)"):
        gyre.managed.ManagedState.create(params=model, tx=optax.adam(1e-3))
    params, _ = eqx.partition(model, eqx.is_inexact_array)
    assert gyre.TrainState.create(params=params, tx=optax.adam(1e-3)).step == 0
    assert gyre.TrainState.create(params={"w": 1.0, "on": True}).params["w"] == 1.0  # numbers are leaves
