"""gyre.Step (jaxloop's step) and its partitioners, on 8 simulated CPU devices."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.linen import meta

import gyre
from gyre.testing import assert_compiled_once

BATCH = 16
STEPS = 3
_init = nn.initializers.lecun_normal()


class MLP(nn.Module):
    """4 features -> 16 -> 4 logits; kernels annotated with logical axis names."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(16, kernel_init=nn.with_logical_partitioning(_init, ("embed", "mlp")))(x)
        x = nn.relu(x)
        return nn.Dense(4, kernel_init=nn.with_logical_partitioning(_init, ("mlp", "classes")))(x)


class MLPStep(gyre.Step):
    """Cross-entropy train/eval step; records the hooks it runs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def begin(self, state, batch):
        self.calls.append("begin")
        return state, batch

    def run(self, state, batch):
        x, y = batch

        def loss_fn(params):
            logits = state.apply_fn({"params": params}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

        if self.train:
            (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            state = state.apply_gradients(grads=grads)
        else:
            loss, logits = loss_fn(state.params)
        accuracy = jnp.mean(jnp.argmax(logits, axis=-1) == y)
        return state, {"loss": loss, "accuracy": accuracy}

    def end(self, state, outputs):
        self.calls.append("end")
        return state, outputs


def _batches(n=STEPS):
    rng = np.random.default_rng(0)
    return [
        (rng.normal(size=(BATCH, 4)).astype(np.float32), rng.integers(0, 4, BATCH).astype(np.int32))
        for _ in range(n)
    ]


def _train(partitioner):
    step = MLPStep(
        jax.random.key(0), MLP(), optimizer=optax.sgd(0.1, momentum=0.9),
        partitioner=partitioner, train=True,
    )
    state = step.initialize_model((1, 4))
    losses = []
    with assert_compiled_once(step) as run:  # compiled once, no retracing
        for batch in _batches():
            state, outputs = run(state, batch)
            losses.append(outputs["loss"])
    return step, state, losses


def _mesh_2d():
    return jax.sharding.Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))


PARTITIONERS = {
    "data_parallel": lambda: gyre.DataParallelPartitioner(data_axis="data"),
    "spmd": lambda: gyre.SPMDPartitioner(
        mesh=_mesh_2d(), rules=[("mlp", "model"), ("embed", None)], data_axis="data"
    ),
    "fsdp_strategy": lambda: gyre.Partitioner(gyre.FSDP()),
    # a strategy given as the partitioner: the same adapter, built by Step
    "spmd_strategy": lambda: gyre.SPMD(mesh=_mesh_2d(), rules=[("mlp", "model"), ("embed", None)]),
}


@pytest.fixture(scope="module")
def reference():
    step, state, losses = _train(gyre.SingleDevicePartitioner())
    assert step.calls == ["begin", "end"] * STEPS
    assert int(state.step) == STEPS
    return meta.unbox(state.params), [float(x) for x in losses]


@pytest.mark.parametrize("name", list(PARTITIONERS))
def test_partitioners_train_to_the_same_params(name, reference):
    assert jax.device_count() == 8
    step, state, losses = _train(PARTITIONERS[name]())
    params, ref_losses = reference
    np.testing.assert_allclose([float(x) for x in losses], ref_losses, rtol=1e-5, atol=1e-6)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5),
        meta.unbox(state.params), params,
    )
    assert step.calls == ["begin", "end"] * STEPS
    kernel = meta.unbox(state.params)["Dense_0"]["kernel"]
    if name.startswith("spmd"):
        assert isinstance(step.partitioner.strategy, gyre.SPMD)
        assert kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model")
        # the optimizer state inherits the boxes, so it is sharded like the params
        trace = meta.unbox(state.opt_state[0].trace)["Dense_0"]["kernel"]
        assert trace.sharding.spec == kernel.sharding.spec
    elif name == "data_parallel":
        assert kernel.sharding.is_fully_replicated
        assert len(kernel.sharding.device_set) == 8


def test_partitioners_are_adapters_over_their_strategy():
    mesh = _mesh_2d()
    partitioner = gyre.SPMDPartitioner(mesh=mesh, rules=[("mlp", "model")])
    assert partitioner.strategy == gyre.SPMD(mesh=mesh, rules=[("mlp", "model")])
    assert partitioner.rules == (("mlp", "model"),) and partitioner.mesh is mesh
    step = MLPStep(jax.random.key(0), MLP(), partitioner=partitioner)
    state = step.initialize_model((1, 4))
    # the state the partitioner's init built is where the strategy says it goes
    kernel = state.params["Dense_0"]["kernel"]
    assert kernel.value.sharding == partitioner.strategy.state_sharding(state.params)["Dense_0"]["kernel"]
    assert partitioner.sharding.params["Dense_0"]["kernel"] == kernel.value.sharding
    assert gyre.SingleDevicePartitioner().sharding is None
    assert gyre.DataParallelPartitioner().sharding.is_fully_replicated


def test_spmd_partitioner_errors_are_explained():
    with pytest.raises(ValueError, match="axes are Auto") as info:
        gyre.SPMDPartitioner(mesh=jax.make_mesh((4, 2), ("data", "model")))  # Explicit axes
    assert "AxisType.Auto" in str(info.value)
    with pytest.raises(ValueError, match="pairs of"):
        gyre.SPMDPartitioner(rules=["mlp"])
    spmd = gyre.SPMDPartitioner(mesh=_mesh_2d(), rules=[("mlp", "tensor")])
    box = nn.LogicallyPartitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
    with pytest.raises(ValueError, match="names an axis the mesh does not have"):
        spmd.strategy.state_sharding({"w": box})


def test_batches_are_split_over_the_data_axis():
    step = MLPStep(jax.random.key(0), MLP(), partitioner=gyre.DataParallelPartitioner())
    x, y = step.shard_batch(_batches(1)[0])
    assert x.sharding.spec == jax.sharding.PartitionSpec("data")
    assert len(x.addressable_shards) == 8 and x.addressable_shards[0].data.shape == (2, 4)


def test_bad_batch_size_is_reported_by_the_strategy():
    step = MLPStep(jax.random.key(0), MLP(), partitioner=gyre.DataParallelPartitioner())
    with pytest.raises(ValueError, match="cannot be split evenly over 8 devices"):
        step.shard_batch((np.zeros((6, 4), np.float32), np.zeros(6, np.int32)))


def test_prng_key_is_deterministic_and_folds_the_step():
    step = MLPStep(jax.random.PRNGKey(7), MLP())
    assert np.array_equal(step.prng_key(3), step.prng_key(3))
    assert not np.array_equal(step.prng_key(3), step.prng_key(4))
    assert np.array_equal(step.prng_key(3), jax.random.fold_in(jax.random.PRNGKey(7), 3))
    keys = MLPStep({"params": jax.random.PRNGKey(1), "dropout": jax.random.PRNGKey(2)}, MLP())
    assert np.array_equal(keys.prng_key(5)["dropout"], jax.random.fold_in(jax.random.PRNGKey(2), 5))
    # the state's step key is the same stream
    state = step.initialize_model((1, 4))
    assert np.array_equal(state.step_key(), step.prng_key(0))


def test_initialize_model_spec_forms_and_state():
    step = MLPStep(jax.random.key(0), MLP(), optimizer=optax.adam(1e-3), train=True)
    for spec in ([1, 4], jax.ShapeDtypeStruct((2, 4), jnp.float32), np.zeros((3, 4)), ((1, 4), "float32")):
        state = step.initialize_model(spec)
        assert meta.unbox(state.params)["Dense_0"]["kernel"].shape == (4, 16)
    assert isinstance(state, gyre.TrainState) and state.tx is step.optimizer
    assert int(state.step) == 0 and state.opt_state is not None
    assert step.compute_num_params(state) == 4 * 16 + 16 + 16 * 4 + 4 == step.num_params


def test_model_state_collections_go_to_model_state():
    class WithStats(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.BatchNorm(use_running_average=False)(nn.Dense(3)(x))

    state = MLPStep(jax.random.key(0), WithStats()).initialize_model((2, 5))
    assert set(state.model_state) == {"batch_stats"} and state.opt_state is None


class Picture(nn.Module):
    """Expects flat 8x8 images: reshapes them for a convolution."""

    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], 8, 8, 1))
        return nn.Dense(10)(nn.Conv(4, (3, 3))(x).reshape((x.shape[0], -1)))


def test_shape_mismatch_at_initialize_model_is_explained():
    step = MLPStep(jax.random.key(0), Picture())
    with pytest.raises(ValueError) as info:
        step.initialize_model((1, 10))
    message = str(info.value)
    assert "initialize_model could not run Picture" in message
    assert "expected:" in message and "fix:" in message
    assert "(1, 10) float32" in message  # what the model received
    assert "cannot reshape" in message  # the model's own complaint, first line
    assert isinstance(info.value.__cause__, TypeError | ValueError)
    assert step.initialize_model((1, 64)).params["Dense_0"]["kernel"].shape == (256, 10)


def test_bad_spec_and_bad_model_are_explained():
    step = MLPStep(jax.random.key(0), MLP())
    with pytest.raises(ValueError, match="not a shape"):
        step.initialize_model({"x": "one by four"})
    with pytest.raises(TypeError, match="linen module or an nnx.Module class"):
        MLPStep(jax.random.key(0), lambda x: x)
    with pytest.raises(TypeError, match="optax optimizer"):
        MLPStep(jax.random.key(0), MLP(), optimizer="adam")
    with pytest.raises(TypeError, match="partitioner= must be"):
        MLPStep(jax.random.key(0), MLP(), partitioner="sharded-please")


def test_run_not_overridden_is_explained():
    step = gyre.Step(jax.random.key(0), MLP())
    state = step.initialize_model((1, 4))
    with pytest.raises(NotImplementedError, match="Step.run is not implemented") as info:
        step(state, _batches(1)[0])
    assert "override" in str(info.value) and "fix:" in str(info.value)


def test_as_callback_runs_in_gyre_loop_and_eval_step_keeps_the_state():
    train = MLPStep(jax.random.key(0), MLP(), optimizer=optax.adam(1e-2), train=True)
    evaluate = MLPStep(jax.random.key(0), MLP(), train=False)  # no optimizer, as in jaxloop
    state, history, elapsed = gyre.loop(
        train.initialize_model((1, 4)), _batches(4) * 5, {gyre.every(1): [train.as_callback()]}
    )
    assert elapsed.steps == 20 and int(state.step) == 20
    losses = history.collect("loss")
    assert len(losses) == 20 and losses[-1] < losses[0]
    before = jax.tree_util.tree_map(np.asarray, state.params)
    same, outputs = evaluate(state, _batches(1)[0])
    assert set(outputs) == {"loss", "accuracy"}
    # an eval step does not donate: the state passed in is still readable
    jax.tree_util.tree_map(np.testing.assert_array_equal, meta.unbox(state.params), meta.unbox(before))
    assert int(same.step) == 20


def test_compile_sets_jit_options_and_donation():
    step = MLPStep(jax.random.key(0), MLP(), optimizer=optax.sgd(0.1), train=True)
    state = step.initialize_model((1, 4))
    step.compile(donate=False)
    new, _ = step(state, _batches(1)[0])
    assert int(state.step) == 0 and int(new.step) == 1  # not donated: the old state lives
    step.compile()  # back to the default: a train step donates
    newer, _ = step(new, _batches(1)[0])
    assert int(newer.step) == 2
    assert new.step.is_deleted()


def test_nnx_model_class_through_the_bridge():
    from flax import nnx

    class Linear(nnx.Module):
        def __init__(self, din, dout, *, rngs):
            self.linear = nnx.Linear(din, dout, rngs=rngs)

        def __call__(self, x):
            return self.linear(x)

    step = MLPStep(
        jax.random.key(0), Linear, optimizer=optax.sgd(0.1), train=True, nnx_model_args=(4, 4)
    )
    state = step.initialize_model((1, 4))
    state, outputs = step(state, _batches(1)[0])
    assert np.isfinite(float(outputs["loss"])) and int(state.step) == 1
    with pytest.raises(ValueError, match="only for an nnx.Module class"):
        MLPStep(jax.random.key(0), MLP(), nnx_model_args=(1,))
