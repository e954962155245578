"""One model, 20 steps, every strategy: the same numbers, one compilation each; the spmd
strategy on a flax model with logical axis annotations; ciclo's strategy names."""

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
from gyre.testing import assert_compiled_once

STEPS = 20
BATCH = 16


def init_params():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {
        "w1": jax.random.normal(k1, (8, 16)) * 0.3,
        "b1": jnp.zeros(16),
        "w2": jax.random.normal(k2, (16, 4)) * 0.3,
        "b2": jnp.zeros(4),
    }


def make_batches(n=STEPS, size=BATCH, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, size, 8)).astype(np.float32)
    y = rng.integers(0, 4, size=(n, size)).astype(np.int32)
    return [(x[i], y[i]) for i in range(n)]


def loss_of(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"][None])
    logits = h @ params["w2"] + params["b2"][None]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_train_step(**options):
    @managed.train_step(**options)
    def train_step(state, batch):
        x, y = batch
        return gyre.logs().add_loss("loss", loss_of(state.params, x, y)), state

    return train_step


def run(strategy, batches, tx=None):
    train_step = make_train_step()
    state = managed.ManagedState.create(params=init_params(), tx=tx or optax.adam(1e-2), strategy=strategy)
    if strategy == "eager":  # nothing compiles
        state, history, _ = gyre.loop(state, batches, {gyre.every(1): [train_step]})
        return state, history.collect("loss")
    with assert_compiled_once(train_step) as train_step:  # one program, no retracing
        state, history, _ = gyre.loop(state, batches, {gyre.every(1): [train_step]})
    return state, history.collect("loss")


@pytest.fixture(scope="module")
def reference():
    state, losses = run("jit", make_batches())
    return jax.device_get(state.params), losses


@pytest.mark.parametrize("strategy", ["eager", "jit", "data_parallel", "fsdp", "spmd"])
def test_every_strategy_gives_the_same_training(strategy, reference):
    ref_params, ref_losses = reference
    state, losses = run(strategy, make_batches())
    assert int(state.step) == STEPS
    np.testing.assert_allclose(losses, ref_losses, atol=1e-5)
    for name, value in jax.device_get(state.params).items():
        np.testing.assert_allclose(value, ref_params[name], atol=1e-5)


def test_shardings_of_data_parallel_and_fsdp():
    n = jax.device_count()
    assert n == 8
    dp = managed.ManagedState.create(params=init_params(), tx=optax.adam(1e-2), strategy="data_parallel")
    assert dp.params["w1"].sharding.is_fully_replicated
    fsdp = managed.ManagedState.create(params=init_params(), tx=optax.adam(1e-2), strategy="fsdp")
    assert fsdp.params["w1"].sharding.spec == jax.sharding.PartitionSpec("data")  # 8 rows over 8 devices
    assert fsdp.params["b2"].sharding.is_fully_replicated  # 4 does not divide by 8
    mu = fsdp.opt_state[0].mu["w1"]  # the optimizer state is split like its parameter
    assert mu.sharding.spec == jax.sharding.PartitionSpec("data")
    batch = gyre.get_strategy("data_parallel").place_batch(make_batches(1)[0])
    assert len(batch[0].sharding.device_set) == n
    # After a step the state keeps its shardings (no resharding, no recompilation).
    step = make_train_step()
    _, after = step(fsdp, make_batches(1)[0])
    assert after.params["w1"].sharding == fsdp.params["w1"].sharding


def test_user_mesh_and_axis_names():
    devices = np.asarray(jax.devices()).reshape(4, 2)
    mesh = jax.sharding.Mesh(devices, ("batch", "model"))
    strategy = gyre.DataParallel(mesh=mesh, data_axis="batch")
    assert strategy.data_size == 4
    state, losses = run(strategy, make_batches(3, size=8))
    assert len(losses) == 3 and int(state.step) == 3
    with pytest.raises(ValueError, match="no axis 'data'") as err:
        gyre.DataParallel(mesh=mesh)
    assert "batch" in str(err.value)


def test_state_is_donated_by_default():
    state = managed.ManagedState.create(params=init_params(), tx=optax.sgd(0.1))
    _, new = make_train_step()(state, make_batches(1)[0])
    assert state.params["w1"].is_deleted() and not new.params["w1"].is_deleted()
    kept = managed.ManagedState.create(params=init_params(), tx=optax.sgd(0.1), strategy=gyre.Jit(donate=False))
    make_train_step()(kept, make_batches(1)[0])
    assert not kept.params["w1"].is_deleted()


def test_with_strategy_moves_the_state():
    state = managed.ManagedState.create(params=init_params(), tx=optax.adam(1e-2))
    moved = state.with_strategy("fsdp")
    assert moved.strategy.name == "fsdp" and moved.params["w1"].sharding.spec == jax.sharding.PartitionSpec("data")
    np.testing.assert_array_equal(jax.device_get(moved.params["w1"]), jax.device_get(state.params["w1"]))


# -- bad input ---------------------------------------------------------------------------------


def test_batch_not_divisible_by_the_device_count():
    state = managed.ManagedState.create(params=init_params(), tx=optax.sgd(0.1), strategy="data_parallel")
    x, y = make_batches(1, size=12)[0]
    with pytest.raises(ValueError, match="cannot be split evenly over 8 devices") as err:
        make_train_step()(state, (x, y))
    assert "(12, 8)" in str(err.value) and "multiple of 8" in str(err.value)


def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown strategy 'fdsp'") as err:
        managed.ManagedState.create(params=init_params(), strategy="fdsp")
    message = str(err.value)
    for name in ("eager", "jit", "data_parallel", "fsdp"):
        assert name in message
    assert "did you mean 'fsdp'" in message.lower()
    with pytest.raises(ValueError, match="unknown strategy"):
        gyre.get_strategy(3)


@pytest.mark.parametrize("strategy", ["jit", "data_parallel", "fsdp", "spmd"])
def test_creating_a_state_never_aliases_the_callers_arrays(strategy):
    # device_put onto a replicated sharding reuses the source buffer on its own device, even
    # with may_alias=False: the donated step then deleted the caller's arrays
    params = init_params()
    state = managed.ManagedState.create(params=params, tx=optax.sgd(0.1), strategy=strategy)
    make_train_step()(state, make_batches(1)[0])  # donates the state's buffers
    assert not any(x.is_deleted() for x in params.values())
    assert state.params["w1"].is_deleted()  # the state itself was donated


def test_python_numbers_in_a_state_become_arrays():
    state = managed.ManagedState.create(params={"w": 0.5}, strategy="data_parallel", scale=2)
    assert isinstance(state.params["w"], jax.Array) and state.params["w"].dtype == jnp.float32
    assert isinstance(state.extras["scale"], jax.Array)


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


# -- ciclo's strategy surface --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, cls, donate",
    [
        ("eager", gyre.Eager, True),
        ("jit", gyre.Jit, True),
        ("jit_donate", gyre.Jit, True),
        ("data_parallel", gyre.DataParallel, True),
        ("data_parallel_donate", gyre.DataParallel, True),
        ("data-parallel", gyre.DataParallel, True),
        ("dp", gyre.DataParallel, True),
        ("fsdp", gyre.FSDP, True),
        ("spmd", gyre.SPMD, True),
    ],
)
def test_every_registered_name_resolves(name, cls, donate):
    strategy = gyre.get_strategy(name)
    assert type(strategy) is cls and strategy.donate is donate


def test_ciclo_spellings_of_the_classes():
    assert gyre.JIT is gyre.Jit
    assert gyre.JIT(donate_args=False) == gyre.Jit(donate=False) != gyre.Jit()
    assert gyre.DataParallel(donate_args=False).donate is False
    with pytest.raises(ValueError, match="donate= and donate_args= disagree"):
        gyre.Jit(donate=True, donate_args=False)
    assert gyre.get_strategy("jit").lift_batch_size(32) == 32
    assert gyre.get_strategy("data_parallel").lift_batch_size(32) == 32 * 8


def test_register_strategy_with_ciclo_signatures():
    assert gyre.register_strategy("test_keep_state", constructor=lambda: gyre.Jit(donate=False)) is None
    assert gyre.get_strategy("test_keep_state") == gyre.Jit(donate=False)

    @gyre.register_strategy("test_half_mesh")
    class Half(gyre.DataParallel):
        def __init__(self):
            super().__init__(mesh=jax.sharding.Mesh(np.asarray(jax.devices()[:4]), ("data",)))

    assert isinstance(Half, type)  # the decorator returns the constructor unchanged
    strategy = gyre.get_strategy("test_half_mesh")
    assert strategy.data_size == 4
    # a registered name works wherever a strategy is taken
    state = managed.ManagedState.create(params=init_params(), tx=optax.sgd(0.1), strategy="test_half_mesh")
    assert state.strategy.data_size == 4
    with pytest.raises(ValueError, match="'test_half_mesh' is already registered") as info:
        gyre.register_strategy("test_half_mesh", constructor=gyre.Jit)
    assert "replace=True" in str(info.value)
    gyre.register_strategy("test_half_mesh", constructor=gyre.Jit, replace=True)
    assert gyre.get_strategy("test_half_mesh").name == "jit"


def test_register_strategy_refuses_bad_input():
    with pytest.raises(ValueError, match="non-empty string"):
        gyre.register_strategy("", constructor=gyre.Jit)
    with pytest.raises(TypeError, match="is not callable"):
        gyre.register_strategy("test_not_callable", constructor=gyre.Jit())
    gyre.register_strategy("test_not_a_strategy", constructor=lambda: "jit")
    with pytest.raises(TypeError, match="did not build a gyre.Strategy") as info:
        gyre.get_strategy("test_not_a_strategy")
    assert "str 'jit'" in str(info.value)


def test_a_misspelt_name_gets_the_closest_one():
    with pytest.raises(ValueError, match="unknown strategy 'jti'") as info:
        gyre.get_strategy("jti")
    message = str(info.value)
    assert "Did you mean 'jit'?" in message
    assert "'data_parallel_donate'" in message and "'spmd'" in message
