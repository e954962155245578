"""The spmd strategy (gyre.parallel._strategies) on a flax model with logical axis annotations."""

import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.linen import meta
from jax.sharding import PartitionSpec as P

import gyre
from gyre import managed
from tests.parallel.test_strategies import make_batches

# -- the spmd strategy: flax logical partitioning ------------------------------------------------

_init = nn.initializers.lecun_normal()
RULES = [("batch", "data"), ("mlp", "model"), ("embed", None), ("classes", None)]


class Tagged(nn.Module):
    """8 -> 16 -> 4 with every kernel and the hidden bias named by logical axes, and the
    hidden activations constrained."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(
            16,
            kernel_init=nn.with_logical_partitioning(_init, ("embed", "mlp")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)),
        )(x)
        x = nn.with_logical_constraint(jnp.tanh(x), ("batch", "mlp"))
        return nn.Dense(4, kernel_init=nn.with_logical_partitioning(_init, ("mlp", "classes")))(x)


def mesh_2d():
    return jax.sharding.Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))


def tagged_params():
    return Tagged().init(jax.random.PRNGKey(0), jnp.zeros((1, 8)))["params"]


def tagged_step(**options):
    @managed.train_step(**options)
    def train_step(state, batch):
        x, y = batch
        logits = state.apply_fn({"params": state.params}, x)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return gyre.logs().add_loss("loss", loss), state

    return train_step


def train_tagged(strategy, tx=None, steps=5, steps_per_call=1, **options):
    state = managed.ManagedState.create(
        params=tagged_params(), tx=tx or optax.adam(1e-2), strategy=strategy, apply_fn=Tagged().apply
    )
    state, history, _ = gyre.loop(
        state, make_batches(steps), {gyre.every(1): tagged_step(**options)}, steps_per_call=steps_per_call
    )
    return state, history.collect("loss")


def assert_same_training(got, expected):
    (state, losses), (ref_state, ref_losses) = got, expected
    np.testing.assert_allclose(losses, ref_losses, atol=1e-5, rtol=0)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0),
        meta.unbox(state.params), meta.unbox(ref_state.params),
    )


@pytest.fixture(scope="module")
def tagged_reference():
    return train_tagged("jit")


def test_spmd_trains_a_logically_partitioned_model_as_jit_does(tagged_reference):
    state, losses = train_tagged(gyre.SPMD(mesh=mesh_2d(), rules=RULES))
    assert_same_training((state, losses), tagged_reference)
    assert int(state.step) == 5 and len(losses) == 5
    # the parameters and their optimizer state are sharded as the rules say, and stay so
    params = state.params
    assert isinstance(params["Dense_0"]["kernel"], nn.LogicallyPartitioned)  # boxes kept
    specs = {
        ("Dense_0", "kernel"): P(None, "model"),
        ("Dense_0", "bias"): P("model"),
        ("Dense_1", "kernel"): P("model", None),
        ("Dense_1", "bias"): P(),
    }
    mu = state.opt_state[0].mu
    for (layer, name), spec in specs.items():
        for tree in (params, mu):
            array = meta.unbox(tree[layer][name])
            expected = jax.sharding.NamedSharding(mesh_2d(), spec)
            assert array.sharding.is_equivalent_to(expected, array.ndim), (layer, name, array.sharding)
    shard = meta.unbox(params["Dense_0"]["kernel"]).addressable_shards[0]
    assert shard.data.shape == (8, 8)  # 16 columns over the 2 devices of 'model'


def test_spmd_traces_the_step_under_the_rules_and_the_mesh():
    strategy = gyre.SPMD(mesh=mesh_2d(), rules=RULES)
    state = managed.ManagedState.create(params=tagged_params(), strategy=strategy, apply_fn=Tagged().apply)

    def forward(state, batch):
        return gyre.logs().add_output("y", state.apply_fn({"params": state.params}, batch)), state

    lowered = strategy.compile(forward, donate=False).lower(state, strategy.place_batch(make_batches(1)[0][0]))
    # the model's nn.with_logical_constraint(("batch", "mlp")) became a constraint on the mesh
    assert '[{"data"}, {"model"}]' in lowered.as_text()


def test_spmd_by_name_takes_flax_rules_and_works_through_create_flax_state(tagged_reference):
    with nn.logical_axis_rules([("mlp", "data")]):
        strategy = gyre.get_strategy("spmd")
    assert strategy.rules == (("mlp", "data"),) and strategy.mesh.shape == {"data": 8}

    def flax_state(strategy):
        return gyre.create_flax_state(
            Tagged(), inputs=jnp.zeros((1, 8)), tx=optax.adam(1e-2), rng=0,
            losses={"loss": optax.softmax_cross_entropy_with_integer_labels}, strategy=strategy,
        )

    with nn.logical_axis_rules([("mlp", "data")]):
        state = flax_state("spmd")
    reference = flax_state("jit")
    losses, ref_losses = [], []
    for batch in make_batches(4):
        logs, state = state.train_step(batch)
        ref_logs, reference = reference.train_step(batch)
        losses.append(logs.losses.loss)
        ref_losses.append(ref_logs.losses.loss)
    assert_same_training((state, losses), (reference, ref_losses))
    kernel = meta.unbox(state.params["Dense_0"]["kernel"])
    assert kernel.sharding.spec == P(None, "data") and len(kernel.addressable_shards[0].data.T) == 2


@pytest.mark.parametrize(
    "tx, options",
    [
        (optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, mask=lambda p: jax.tree_util.tree_map(lambda x: x.ndim > 1, p))), {}),
        (optax.adam(1e-2), {"accumulate_steps": 2, "clip_grad_norm": 1.0}),
    ],
    ids=["optax_chain_with_mask", "accumulate_and_clip"],
)
def test_boxed_params_work_with_optax_and_the_managed_options(tx, options):
    assert_same_training(
        train_tagged(gyre.SPMD(mesh=mesh_2d(), rules=RULES), tx=tx, steps=3, **options),
        train_tagged("jit", tx=tx, steps=3, **options),
    )


def test_spmd_fused_steps_match_step_by_step():
    strategy = gyre.SPMD(mesh=mesh_2d(), rules=RULES)
    fused = train_tagged(strategy, steps=4, steps_per_call=2)
    assert_same_training(fused, train_tagged(strategy, steps=4))
    kernel = meta.unbox(fused[0].params["Dense_0"]["kernel"])
    assert kernel.sharding.spec == P(None, "model")


def test_spmd_errors_are_explained():
    with pytest.raises(ValueError, match="axes are Auto") as info:
        gyre.SPMD(mesh=jax.make_mesh((4, 2), ("data", "model")))  # Explicit axes by default
    assert "AxisType.Auto" in str(info.value)
    with pytest.raises(ValueError, match="pairs of"):
        gyre.SPMD(rules=["mlp"])
    box = nn.LogicallyPartitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
    with pytest.raises(ValueError, match="names an axis the mesh does not have") as info:
        gyre.SPMD(mesh=mesh_2d(), rules=[("mlp", "tensor")]).state_sharding({"w": box})
    assert "['w']" in str(info.value) and "'data', 'model'" in str(info.value)
    odd = nn.LogicallyPartitioned(jnp.zeros((4, 6)), ("embed", "mlp"))
    with pytest.raises(ValueError, match="cannot be split over mesh axis 'data'") as info:
        gyre.SPMD(rules=[("mlp", "data")]).state_sharding({"w": odd})
    assert "dimension 1" in str(info.value) and "(4, 6)" in str(info.value)


def test_spmd_without_rules_says_the_annotations_are_unused():
    strategy = gyre.SPMD()
    with pytest.warns(UserWarning, match="no rules, so the 3 logically partitioned parameters") as record:
        state = managed.ManagedState.create(params=tagged_params(), strategy=strategy)
    assert "nn.logical_axis_rules" in str(record[0].message)
    assert meta.unbox(state.params["Dense_0"]["kernel"]).sharding.is_fully_replicated
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strategy.place_state(state)  # said once per strategy
        gyre.SPMD(rules=[("mlp", "data")]).place_state(state)  # rules: nothing to say
