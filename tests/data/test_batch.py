"""SupervisedBatch and supervised(): jax_trainer's batches, as pytrees, keeping a source's position."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.data import SupervisedBatch, supervised


def test_a_supervised_batch_is_a_pytree_with_a_size_and_slices():
    b = SupervisedBatch(np.ones((6, 3), np.float32), np.arange(6))
    doubled = jax.jit(lambda batch: jax.tree.map(lambda v: v * 2, batch))(b)
    assert isinstance(doubled, SupervisedBatch) and doubled.target.tolist() == [0, 2, 4, 6, 8, 10]
    assert b.size == 6 and b[1:3].size == 2 and b[-1].target.tolist() == [5] and b[0].size == 1
    assert jax.tree_util.tree_leaves(b)[1] is b.target


def test_supervised_keeps_a_resumable_sources_position_and_reiterates_a_list():
    x, y = np.arange(16.0).reshape(8, 2), np.arange(8)
    train = supervised(gyre.data.batches((x, y), 4, seed=0))
    first = next(train)
    saved = train.state_dict()
    second = next(train)
    train.load_state_dict(saved)
    assert jnp.array_equal(next(train).target, second.target) and first.size == 4 and train.epoch_steps == 2
    evals = supervised([(x[:4], y[:4]), (x[4:], y[4:])])
    assert [b.size for b in evals] == [4, 4] == [b.size for b in evals] and len(evals) == 2


def test_what_supervised_cannot_take_is_explained():
    with pytest.raises(TypeError, match=r"(?s)supervised\(\) needs a source of batches.*received: int"):
        supervised(3)
    with pytest.raises(TypeError, match=r"(?s)turns \(inputs, targets\) batches into SupervisedBatch.*received: "):
        next(supervised([np.zeros(3)]))



@pytest.mark.parametrize("kind", ["list", "generator"])
def test_a_wrapped_source_without_a_position_checkpoints_as_the_source_itself(tmp_path, kind):
    # was: the wrappers (supervised; process_share on several processes) always had state_dict, so a
    # loop with a checkpoint called it on the list or generator: AttributeError "'list' object has
    # no attribute 'state_dict'" at the first save
    data = [(np.ones((2, 3), np.float32), np.arange(2))] * 6
    source = supervised(data if kind == "list" else iter(data))
    step = lambda state, batch: (gyre.logs().add_loss("loss", state), state + batch.input.sum())  # noqa: E731
    state, _, _ = gyre.loop(jnp.float32(0), source, {gyre.every(1): step, gyre.every(2): gyre.checkpoint(str(tmp_path))})
    assert float(state) == 36.0


def test_a_wrapped_grain_iterator_resumes_at_its_position(tmp_path):
    # was: AttributeError "'PrefetchDatasetIterator' object has no attribute 'state_dict'" at the first
    # save; its get_state/set_state now pass through, as for the grain iterator itself
    grain = pytest.importorskip("grain")
    x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20)

    def run(stop, resume, seen):
        source = supervised(iter(grain.MapDataset.source(list(range(20))).map(lambda i: (x[i], y[i])).batch(2).to_iter_dataset()))

        def step(state, batch):
            seen.append(int(batch.target[0]))
            return gyre.logs().add_loss("loss", state), state + 1.0

        gyre.loop(jnp.float32(0), source, {gyre.every(1): step, gyre.every(3): gyre.checkpoint(str(tmp_path))},
                  stop=stop, resume=resume)

    first, second = [], []
    run(6, None, first)
    run(10, "latest", second)
    assert first == [0, 2, 4, 6, 8, 10] and second == [12, 14, 16, 18]  # (the position after step 6)
