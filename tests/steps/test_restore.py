"""Step.restore_model and gyre.steps._restore: checkpoints written by orbax's CheckpointManager
(jaxloop's format) read back into a state, onto the state's shardings."""

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import gyre
from gyre.steps._restore import check_item_name, latest_step, restore_pytree
from tests.steps._helpers import MLP, MLPStep
from tests.steps._helpers import batches as _batches


def _trained(partitioner=None):
    step = MLPStep(jax.random.key(0), MLP(), optax.sgd(0.1), partitioner, True)
    state = step.initialize_model((1, 4))
    for batch in _batches(2):
        state, _ = step(state, batch)
    return step, state


def _save(directory, step_number, state, legacy=True):
    if legacy:  # jaxloop's way: one checkpointer, the item is called "default"
        manager = ocp.CheckpointManager(directory, ocp.PyTreeCheckpointer())
        manager.save(step_number, args=ocp.args.PyTreeSave(state))
    else:
        manager = ocp.CheckpointManager(directory)
        manager.save(step_number, args=ocp.args.Composite(model=ocp.args.PyTreeSave(state)))
    manager.wait_until_finished()
    manager.close()


def test_restore_model_reads_the_newest_step_onto_the_states_shardings(tmp_path):
    step, trained = _trained(gyre.DataParallelPartitioner())
    _save(tmp_path / "ckpt", 2, trained)
    fresh = step.initialize_model((1, 4))
    restored = step.restore_model(fresh, tmp_path / "ckpt")
    assert int(restored.step) == 2
    want = jax.tree_util.tree_leaves(trained.params)
    got = jax.tree_util.tree_leaves(restored.params)
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
    assert all(a.sharding == b.sharding for a, b in zip(jax.tree_util.tree_leaves(fresh.params), got, strict=True))
    assert not fresh.step.is_deleted()  # unlike jaxloop, the given state is left alive


def test_restore_model_reads_a_named_step_and_a_named_item(tmp_path):
    step, trained = _trained()
    _save(tmp_path / "ckpt", 0, step.initialize_model((1, 4)), legacy=False)
    _save(tmp_path / "ckpt", 7, trained, legacy=False)
    named = MLPStep(jax.random.key(0), MLP(), optax.sgd(0.1), chkpt_item_name="model")
    assert int(named.restore_model(trained, tmp_path / "ckpt", step=0).step) == 0  # 0 is a step
    assert int(named.restore_model(trained, tmp_path / "ckpt").step) == 2
    with pytest.raises(FileNotFoundError, match=r"no checkpoint item 'default' at step 7[\s\S]*items \['model'\]"):
        step.restore_model(trained, tmp_path / "ckpt", step=7)


def test_restore_model_without_a_checkpoint_returns_the_state_and_says_so(tmp_path, caplog):
    step, state = _trained()
    with caplog.at_level("INFO", logger="gyre.steps._step"):
        assert step.restore_model(state, tmp_path / "nothing") is state
    assert "No checkpoint found in" in caplog.text
    assert latest_step(tmp_path / "nothing") is None


def test_restore_model_refuses_a_step_that_is_not_a_whole_number(tmp_path):
    step, state = _trained()
    with pytest.raises(ValueError, match="restore_model's step must be a whole number >= 0"):
        step.restore_model(state, tmp_path, step=-1)


def test_an_unfinished_save_is_not_a_step(tmp_path):
    _, state = _trained()
    _save(tmp_path, 1, state)
    (tmp_path / "5.orbax-checkpoint-tmp").mkdir()  # what a crashed save leaves
    assert latest_step(tmp_path) == 1
    assert int(restore_pytree(state, tmp_path, 1).step) == 2


def test_item_names_are_checked_at_construction():
    assert check_item_name("state") == "state"
    for bad in ("", "a/b", "_x", 3):
        with pytest.raises(ValueError, match="chkpt_item_name must name an orbax checkpoint item"):
            MLPStep(jax.random.key(0), MLP(), chkpt_item_name=bad)


def test_a_leaf_the_checkpoint_lacks_keeps_the_states_value_and_is_named(tmp_path, caplog):
    saved = {"params": {"w": np.ones(3, np.float32)}, "batch_stats": {"m": np.ones(2, np.float32)}, "step": np.int32(4)}
    _save(tmp_path, 4, saved)
    state = {"params": {"w": jax.numpy.zeros(3)}, "step": jax.numpy.int32(0), "rng": jax.numpy.full(2, 7.0)}
    with caplog.at_level("WARNING", logger="gyre.steps._restore"):
        restored = restore_pytree(state, tmp_path, 4)
    assert restored["params"]["w"].tolist() == [1.0, 1.0, 1.0] and int(restored["step"]) == 4
    assert isinstance(restored["rng"], jax.Array) and restored["rng"].tolist() == [7.0, 7.0]
    assert "1 leaf(s) of the state are not in the checkpoint" in caplog.text and "['rng']" in caplog.text
