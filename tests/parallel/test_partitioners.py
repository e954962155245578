"""jaxloop's partitioners (gyre.parallel._partitioners), thin adapters over the strategies,
on 8 simulated CPU devices."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.linen import meta

import gyre
from gyre.testing import assert_compiled_once
from tests.steps._helpers import MLP, STEPS, MLPStep, batches


def _train(partitioner):
    step = MLPStep(
        jax.random.key(0), MLP(), optimizer=optax.sgd(0.1, momentum=0.9),
        partitioner=partitioner, train=True,
    )
    state = step.initialize_model((1, 4))
    losses = []
    with assert_compiled_once(step) as run:  # compiled once, no retracing
        for batch in batches():
            state, outputs = run(state, batch)
            losses.append(outputs["loss"])
    return step, state, losses


def mesh_2d():
    return jax.sharding.Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))


PARTITIONERS = {
    "data_parallel": lambda: gyre.DataParallelPartitioner(data_axis="data"),
    "spmd": lambda: gyre.SPMDPartitioner(
        mesh=mesh_2d(), rules=[("mlp", "model"), ("embed", None)], data_axis="data"
    ),
    "fsdp_strategy": lambda: gyre.Partitioner(gyre.FSDP()),
    # a strategy given as the partitioner: the same adapter, built by Step
    "spmd_strategy": lambda: gyre.SPMD(mesh=mesh_2d(), rules=[("mlp", "model"), ("embed", None)]),
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
    mesh = mesh_2d()
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
    spmd = gyre.SPMDPartitioner(mesh=mesh_2d(), rules=[("mlp", "tensor")])
    box = nn.LogicallyPartitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
    with pytest.raises(ValueError, match="names an axis the mesh does not have"):
        spmd.strategy.state_sharding({"w": box})


# -- the adapter itself ------------------------------------------------------------------------


def test_partition_turns_jaxloops_state_outputs_order_into_a_compiled_step():
    p = gyre.SingleDevicePartitioner()

    def step(state, batch, scale=1.0):
        return state + batch.sum() * scale, {"n": batch.size}

    run = p.partition_step(step, jnp.zeros(()), donate=False)
    state = jnp.zeros(())
    new, outputs = run(state, jnp.ones(4))
    assert float(new) == 4.0 and int(outputs["n"]) == 4
    assert float(state) == 0.0  # donate=False: the old state lives
    run(new, jnp.ones(4))
    assert run.trace_count() == 1  # compiled once for the same shapes
    assert run.compiled is not None


def test_partition_donates_the_state_by_default():
    run = gyre.SingleDevicePartitioner().partition_step(lambda s, b: (s + b, {}), jnp.zeros(3))
    state = jnp.zeros(3)
    new, _ = run(state, jnp.ones(3))
    assert state.is_deleted() and new.tolist() == [1.0, 1.0, 1.0]


def test_shard_init_fn_on_one_device_and_on_a_mesh():
    single = gyre.SingleDevicePartitioner()
    init = single.shard_init_fn(lambda x: {"w": x * 2})
    assert init(jnp.ones(2))["w"].tolist() == [2.0, 2.0] and single.sharding is None
    fsdp = gyre.Partitioner(gyre.FSDP())
    params = fsdp.shard_init_fn(lambda: {"w": jnp.ones((16, 4))})()
    assert params["w"].sharding == fsdp.sharding["w"]  # the sharding of the last state built
    assert len(params["w"].sharding.device_set) == 8


def test_partitioners_compare_by_type_and_strategy_and_name_their_strategy():
    assert gyre.Partitioner("jit") == gyre.Partitioner(gyre.Jit())
    assert gyre.Partitioner("jit") != gyre.SingleDevicePartitioner()  # another type
    assert hash(gyre.Partitioner("fsdp")) == hash(gyre.Partitioner(gyre.FSDP()))
    assert repr(gyre.SingleDevicePartitioner()).startswith("SingleDevicePartitioner(strategy=")
    assert gyre.SingleDevicePartitioner().data_axis is None
    assert gyre.DataParallelPartitioner(data_axis="batch").data_axis == "batch"


def test_logical_sharding_is_the_former_name_of_spmd():
    from gyre.parallel._partitioners import LogicalSharding

    assert LogicalSharding is gyre.SPMD


def test_partition_compiles_a_function_with_any_return_value_leaving_its_placement_to_xla():
    p = gyre.DataParallelPartitioner()
    batch = p.shard_batch({"x": np.ones((16, 3), np.float32)})
    run = p.partition(lambda state, batch: {"y": batch["x"] * state, "total": batch["x"].sum()})
    state = p.shard_init_fn(lambda: jnp.float32(2.0))()
    out = run(state, batch)
    assert out["y"].sharding.spec == jax.sharding.PartitionSpec("data")  # not gathered
    assert float(out["total"]) == 48.0 and float(out["y"][0, 0]) == 2.0
    assert not state.is_deleted()  # not donated unless asked
    donating = p.partition(lambda state, batch: state + 1, donate=True)
    assert float(donating(state, batch)) == 3.0 and state.is_deleted()


def test_partition_and_partition_step_refuse_an_option_jax_jit_lacks_before_compiling():
    for partitioner in (gyre.SingleDevicePartitioner(), gyre.Partitioner("eager")):
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'keep_unsued'\. Did you mean 'keep_unused'\?[\s\S]*expected: options of jax.jit"):
            partitioner.partition(lambda s, b: s, keep_unsued=True)
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            partitioner.partition_step(lambda s, b: (s, {}), bogus=1)
