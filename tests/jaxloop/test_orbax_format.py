"""Checkpoints in jaxloop's format (what an orbax CheckpointManager writes by itself): a
CheckpointAction saves through the manager, an OuterLoop resumes training from such a
directory, and continuous evaluation reads it (each loop's step restores it)."""

import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import gyre
from gyre import jaxloop
from gyre.jaxloop import STOP_LOOP, EvalSpec
from gyre.jaxloop import _actions as orbax_format


class Regress(gyre.Step):
    """Least squares on a Dense(1): trains when self.train, reports the loss and the step."""

    def run(self, state, batch):
        x, y = batch

        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

        if self.train:
            loss, grads = jax.value_and_grad(loss_fn)(state.params)
            state = state.apply_gradients(grads=grads)
        else:
            loss = loss_fn(state.params)
        return state, {"loss": loss, "at": state.step}


def _steps():
    train = Regress(jax.random.key(0), nn.Dense(1), optax.sgd(0.1), None, True)
    return train, Regress(jax.random.key(0), nn.Dense(1))


def _batches(n):
    x = np.ones((4, 2), np.float32)
    return [(x, np.full((4, 1), 2.0, np.float32))] * n


def _manager(directory, **options):
    return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(**options))


# the test reads the checkpoint back with a bare manager.restore(6), as a jaxloop user may: orbax
# then warns that it reads the shardings from the files
@pytest.mark.filterwarnings("ignore:Sharding info not provided when restoring:UserWarning")
def test_checkpoint_action_saves_through_an_orbax_manager_as_jaxloop_does(tmp_path):
    train_step, _ = _steps()
    manager = _manager(tmp_path / "ckpt", max_to_keep=2)
    action = jaxloop.CheckpointAction(ckpt_manager=manager, interval=1)
    assert action.ckpt_manager is manager and action.checkpoint is None
    assert action.directory == str(tmp_path / "ckpt")
    loop = jaxloop.TrainLoop(train_step, end_actions=[action])
    state = train_step.initialize_model((1, 2))
    for _ in range(3):
        state, _ = loop(state, _batches(2))
    action.wait_until_finished()
    assert orbax_format.steps_in(tmp_path / "ckpt") == [4, 6]  # max_to_keep=2
    assert (tmp_path / "ckpt" / "6" / "default").is_dir()  # jaxloop's item name
    restored = manager.restore(6)
    assert int(restored["step"]) == 6
    assert np.array_equal(restored["params"]["kernel"], state.params["kernel"])
    assert action.save(8, state, {"loss": [jnp.float32(1.0)]}) is True
    action.close()


def test_metrics_reach_a_manager_that_keeps_the_best(tmp_path):
    manager = _manager(tmp_path / "best", max_to_keep=1, best_fn=lambda m: m["loss"], best_mode="min")
    action = jaxloop.CheckpointAction(manager)
    state = {"step": jnp.int32(0), "w": jnp.ones(2)}
    for step, loss in ((1, 0.5), (2, 0.9), (3, 0.7)):
        action.save(step, {**state, "step": jnp.int32(step)}, {"loss": [jnp.float32(loss)], "logits": [jnp.ones(3)]})
    action.close()
    assert orbax_format.steps_in(tmp_path / "best") == [1]  # the best loss, not the latest
    assert orbax_format.host_metrics({"loss": np.float32(0.5), "name": "x"}) == {"loss": 0.5}


def test_outer_loop_resumes_training_from_a_directory_in_jaxloops_format(tmp_path):
    directory = tmp_path / "ckpt"
    train_step, _ = _steps()
    saved = train_step.initialize_model((1, 2)).replace(step=jnp.array(4))
    with _manager(directory) as manager:
        manager.save(4, args=ocp.args.PyTreeSave(jax.device_get(saved)))
    train = jaxloop.TrainLoop(train_step)
    outer = jaxloop.OuterLoop(train_loop=train, checkpoint_spec=jaxloop.CheckpointSpec(directory))
    state, outputs = outer(train_step.initialize_model((1, 2)), train_dataset=iter(_batches(100)),
                           train_total_steps=10, train_loop_steps=3)
    assert int(state.step) == 10 and train.loop_count == 4  # 4 // 3 = 1, then 6, 9, 10
    assert [int(a) for a in outputs["at"]] == [10] and outputs[STOP_LOOP] is False
    # at the target already: no train loop runs, and jaxloop's answer is (state, None)
    with _manager(directory) as manager:
        manager.save(10, args=ocp.args.PyTreeSave(jax.device_get(state)))
    state, outputs = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(train_step),
                                       checkpoint_spec=jaxloop.CheckpointSpec(directory))(
        train_step.initialize_model((1, 2)), train_dataset=iter(_batches(5)), train_total_steps=10)
    assert int(state.step) == 10 and outputs is None


def test_continuous_eval_of_jaxloops_format_asks_should_eval_fn_and_returns_the_last_outputs(tmp_path):
    directory = tmp_path / "ckpt"
    train_step, eval_step = _steps()
    state = train_step.initialize_model((1, 2))
    with _manager(directory) as manager:
        for step in (1, 2, 3):
            manager.save(step, args=ocp.args.PyTreeSave(state.replace(step=jnp.array(step))))
    open(directory / jaxloop.STOP_FILE_NAME, "w").close()
    contexts = []

    def even(ctx):
        contexts.append((ctx.is_continuous_eval, ctx.step_num, ctx.loop_count))
        return ctx.step_num % 2 == 0

    every, evens = jaxloop.EvalLoop(eval_step), jaxloop.EvalLoop(eval_step)
    endless = iter(lambda: _batches(1)[0], None)  # jaxloop's eval stream: endless, read num_steps at a time
    outer = jaxloop.OuterLoop(eval_loops=[every, evens], checkpoint_spec=jaxloop.CheckpointSpec(directory))
    last, outputs = outer(state, eval_specs=[EvalSpec(dataset=_batches(2)), EvalSpec(endless, num_steps=3, should_eval_fn=even)])
    assert every.loop_count == 3 and evens.loop_count == 1
    assert contexts == [(True, 1, 0), (True, 2, 0), (True, 3, 0)]
    assert int(last.step) == 3  # the state the last evaluation ran on
    assert len(outputs["loss"]) == 2 and [int(a) for a in outputs["at"]] == [3, 3]  # the last evaluation's, flat
    assert outputs["checkpoint_steps"] == [1, 2, 3]
    # nothing to evaluate: jaxloop's (state, None)
    empty = tmp_path / "empty"
    empty.mkdir()
    open(empty / jaxloop.STOP_FILE_NAME, "w").close()
    outer = jaxloop.OuterLoop(eval_loops=[every], checkpoint_spec=jaxloop.CheckpointSpec(empty))
    assert outer(state, eval_specs=[EvalSpec(dataset=_batches(1))]) == (state, None)


def test_an_exhausted_iterator_dataset_is_said_once(tmp_path, caplog):
    train_step, eval_step = _steps()
    finite = iter(_batches(2))
    outer = jaxloop.OuterLoop(train_loop=jaxloop.TrainLoop(train_step), eval_loops=[jaxloop.EvalLoop(eval_step)])
    with caplog.at_level(logging.WARNING, logger="gyre.jaxloop._outer_loop"):
        outer(train_step.initialize_model((1, 2)), train_dataset=iter(_batches(100)), train_total_steps=4,
              train_loop_steps=1, eval_specs=[EvalSpec(finite)])
    said = [r.getMessage() for r in caplog.records if "read no batch" in r.getMessage()]
    assert len(said) == 1 and "endless iterator with num_steps" in said[0]


def test_gyre_checkpoints_refuse_transforms(tmp_path):
    directory = str(tmp_path / "ckpt")
    action = jaxloop.CheckpointAction(directory)
    action({"step": jnp.int32(2), "total": jnp.float32(1)}, None)
    action.close()
    spec = jaxloop.CheckpointSpec(directory, transforms={}, iterate_stop_fn=lambda: True)
    outer = jaxloop.OuterLoop(eval_loops=[jaxloop.EvalLoop(lambda s, b, n: (s, {}))], checkpoint_spec=spec)
    with pytest.raises(ValueError, match="transforms apply to checkpoints in jaxloop's format only"):
        outer({"step": jnp.int32(0), "total": jnp.float32(0)}, eval_specs=[EvalSpec(dataset=[0])])


def test_bfloat16_losses_are_averaged_and_reach_best_fn():
    reduced = jaxloop.reduce_outputs({"loss": [jnp.bfloat16(1.0), jnp.bfloat16(2.0)]})
    assert reduced["loss"].shape == () and float(reduced["loss"]) == 1.5
    assert orbax_format.host_metrics({"half": np.asarray(0.5, jnp.bfloat16)}) == {"half": 0.5}


def test_a_folder_path_is_not_an_orbax_manager():
    assert not orbax_format.is_manager("runs/exp")
