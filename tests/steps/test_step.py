"""gyre.Step (jaxloop's step), on 8 simulated CPU devices (its partitioners: tests/parallel/test_partitioners.py)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.linen import meta

import gyre
from tests.steps._helpers import BATCH, MLP, MLPStep
from tests.steps._helpers import batches as _batches


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


def test_a_run_that_does_not_return_a_pair_is_explained():
    class NoReturn(gyre.Step):
        def run(self, state, batch):
            state, {"loss": batch.sum()}  # the return was forgotten

    class Three(gyre.Step):
        def run(self, state, batch):
            return state, {"loss": batch.sum()}, 3

    for cls, received in ((NoReturn, "NoneType None"), (Three, "tuple (")):
        step = cls(jax.random.key(0), nn.Dense(1))
        with pytest.raises(TypeError, match=f"{cls.__name__}.run must return") as info:
            step(step.initialize_model((1, 2)), jnp.ones((4, 2)))
        assert f"received: {received}" in str(info.value)
        assert "a missing return gives None" in str(info.value)


def test_a_begin_or_end_that_does_not_return_a_pair_is_explained():
    # was: "cannot unpack non-iterable NoneType object" from Step.__call__
    class NoBegin(gyre.Step):
        def begin(self, state, batch):
            state, batch  # noqa: B018  (the return was forgotten)

        def run(self, state, batch):
            return state, {"loss": batch.sum()}

    class NoEnd(NoBegin):
        def begin(self, state, batch):
            return state, batch

        def end(self, state, outputs):
            outputs["extra"] = 1.0  # the return was forgotten

    for cls, hook, names in ((NoBegin, "begin", "(state, batch)"), (NoEnd, "end", "(state, outputs)")):
        step = cls(jax.random.key(0), nn.Dense(1))
        with pytest.raises(TypeError, match=f"{cls.__name__}.{hook} must return \\{names[:-1]}\\)") as info:
            step(step.initialize_model((1, 2)), jnp.ones((4, 2)))
        assert "received: NoneType None" in str(info.value) and "a missing return gives None" in str(info.value)


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


def test_step_actions_run_on_the_per_loop_step_number_and_never_by_hand():
    seen = []

    class Record:
        def __init__(self, tag, interval):
            self.tag, self.interval = tag, interval

        def __call__(self, state, outputs, **kwargs):
            seen.append((self.tag, kwargs["per_loop_step_number"], outputs is None))

    step = MLPStep(jax.random.key(0), MLP(), optimizer=optax.sgd(0.1), train=True,
                   begin_actions=[Record("begin", 2)], end_actions=[Record("end", 3)])
    state = step.initialize_model((1, 4))
    batch = _batches(1)[0]
    state, _ = step(state, batch)  # by hand (per_loop_step_number=0): no action runs
    assert seen == []
    for n in range(1, 7):
        state, _ = step(state, batch, n)
    assert seen == [("begin", 2, True), ("end", 3, False), ("begin", 4, True), ("begin", 6, True), ("end", 6, False)]
    with pytest.raises(ValueError, match="Record's interval must be a positive whole number"):
        MLPStep(jax.random.key(0), MLP(), end_actions=[Record("x", 0)])


def test_jaxloops_positional_order_base_prng_model_optimizer_partitioner_train():
    tx, partitioner = optax.sgd(0.1), gyre.DataParallelPartitioner()
    step = MLPStep(jax.random.key(0), MLP(), tx, partitioner, True)
    assert step.optimizer is tx and step.partitioner is partitioner and step.train


def test_an_nnx_class_without_its_arguments_is_refused_with_the_fix():
    from flax import nnx

    class Linear(nnx.Module):
        def __init__(self, din, dout, *, rngs):
            self.linear = nnx.Linear(din, dout, rngs=rngs)

    with pytest.raises(ValueError, match=r"nnx_model_args=None[\s\S]*fix: pass e.g. nnx_model_args="):
        MLPStep(jax.random.key(0), Linear)


def test_compile_refuses_an_option_jax_jit_lacks_at_once_and_keeps_the_old_run():
    step = MLPStep(jax.random.key(0), MLP(), optimizer=optax.sgd(0.1), train=True)
    state = step.initialize_model((1, 4))
    state, _ = step(state, _batches(1)[0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_jit_flag'"):
        step.compile(not_a_jit_flag=True)
    state, _ = step(state, _batches(1)[0])  # the refused options changed nothing
    assert int(state.step) == 2 and step.compiled_count() == 1
    step.compile(keep_unused=True)  # a real jax.jit option: compiled anew at the next call
    state, _ = step(state, _batches(1)[0])
    assert int(state.step) == 3 and step.compiled_count() == 1


def test_log_num_flops_counts_once_at_the_first_call_and_logs_it(caplog):
    step = MLPStep(jax.random.key(0), MLP(), optimizer=optax.sgd(0.1), train=True)
    state = step.initialize_model((1, 4))
    batch = _batches(1)[0]
    expected = 2 * BATCH * (4 * 16 + 16 * 4)  # the two matmuls of the forward pass, at least
    with caplog.at_level("INFO", logger="gyre.steps._step"):
        state, _ = step(state, batch, 1, log_num_flops=True)
    assert step.num_flops >= expected
    assert f"Step flops: {step.num_flops}" in caplog.text
    first = step.num_flops
    state, _ = step(state, batch, 2, log_num_flops=True)  # counted once
    assert step.num_flops == first and caplog.text.count("Step flops") == 1


def test_a_jaxloop_partitioner_that_overrides_partition_compiles_the_run():
    calls = []

    class Logged(gyre.SingleDevicePartitioner):
        def partition(self, fn, **kwargs):
            calls.append(sorted(kwargs))
            return jax.jit(fn, **kwargs)

    step = MLPStep(jax.random.key(0), MLP(), optax.sgd(0.1), Logged(), True)
    state = step.initialize_model((1, 4))
    step.compile(keep_unused=True)
    state, outputs = step(state, _batches(1)[0])
    assert calls == [["keep_unused"]] and int(state.step) == 1 and "loss" in outputs


def test_jaxloops_names_for_the_step_module_are_on_gyre_jaxloop():
    from gyre import jaxloop

    assert jaxloop.Step is gyre.Step and jaxloop.Partitioner is gyre.Partitioner
    assert isinstance(jax.random.PRNGKey(0), jaxloop.PRNGType)
    assert isinstance({"params": jax.random.PRNGKey(0)}, jaxloop.PRNGType.__args__[1].__origin__)
    assert jaxloop._STOP_FILE_NAME == jaxloop.STOP_FILE_NAME == "STOPPED"
