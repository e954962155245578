import datetime

import jax
import pytest

import gyre
from gyre.core._clock import Elapsed, Period, infer_batch_size


def test_update_counts_steps_samples_epochs():
    e = Elapsed()
    for i in range(5):
        e = e.update(10, time=float(i), date=100.0 + i, epoch_steps=2)
    assert (e.steps, e.samples, e.epochs, e.step_in_epoch, e.time, e.date) == (5, 50, 2, 1, 4.0, 104.0)


def test_no_epoch_steps_means_no_epochs():
    e = Elapsed().update(3, time=0.0, date=0.0).update(3, time=0.0, date=0.0)
    assert (e.epochs, e.step_in_epoch) == (0, 2)


def test_period_any_quantity_reached():
    p = gyre.at(steps=10, time=5.0)
    assert not (Elapsed(steps=9, time=4.9) >= p)
    assert Elapsed(steps=10) >= p
    assert Elapsed(steps=0, time=5.0) >= p
    assert Elapsed(steps=3) < p
    assert Elapsed(samples=64) >= gyre.at(samples=64)
    assert Elapsed(epochs=2) >= gyre.at(epochs=2)


def test_period_date_accepts_datetime():
    when = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    p = gyre.at(date=when)
    assert p.date == when.timestamp()
    assert Elapsed(date=when.timestamp() + 1) >= p
    assert not Elapsed(date=when.timestamp() - 1) >= p


@pytest.mark.parametrize("kwargs", [{}, {"steps": -1}, {"steps": 1.5}, {"time": -2.0}, {"steps": True},
                                    {"time": float("nan")}, {"date": float("nan")}])  # a NaN time was never reached
def test_bad_period(kwargs):
    with pytest.raises(ValueError, match="expected"):
        Period(**kwargs)


def test_compare_with_non_period_is_explained():
    with pytest.raises(TypeError, match="gyre.at"):
        Elapsed() >= 3  # noqa: B015


def test_elapsed_is_a_pytree_and_round_trips():
    e = Elapsed(steps=3, samples=96, epochs=1, step_in_epoch=0, time=1.5, date=2.0)
    leaves, tree = jax.tree_util.tree_flatten(e)
    assert leaves == [3, 96, 1, 0, 1.5, 2.0]
    assert jax.tree_util.tree_unflatten(tree, leaves) == e
    assert Elapsed.from_dict(e.to_dict()) == e


def test_since_is_relative():
    e = Elapsed(steps=15, samples=150, epochs=3, step_in_epoch=1, time=9.0).since(
        Elapsed(steps=10, samples=100, epochs=2, time=4.0)
    )
    assert (e.steps, e.samples, e.epochs, e.step_in_epoch, e.time) == (5, 50, 1, 1, 5.0)


def test_replace_unknown_field():
    with pytest.raises(TypeError, match="no counter"):
        Elapsed().replace(step=1)


def test_infer_batch_size():
    import numpy as np

    assert infer_batch_size((np.zeros((16, 3)), np.zeros(16))) == 16
    assert infer_batch_size({"x": np.zeros(())}) == 1
    assert infer_batch_size(None) == 1
    assert infer_batch_size(3.0) == 1


def test_infer_batch_size_refuses_leaves_that_disagree_instead_of_taking_the_largest():
    import numpy as np

    # time-major inputs (T=10, B=4, F) with labels (B,): the largest leading dimension is T
    with pytest.raises(ValueError, match=r"(?s)leading dimension.*\(10, 4, 2\).*\(4,\).*batch_size_fn="):
        infer_batch_size((np.zeros((10, 4, 2)), np.zeros(4)))
    with pytest.raises(ValueError, match="batch_size_fn="):  # a per-batch table beside the examples
        infer_batch_size({"x": np.zeros((4, 3)), "table": np.zeros((10, 1))})
    assert infer_batch_size({"x": np.zeros((4, 3)), "y": np.zeros(4), "t": np.float32(2)}) == 4


def test_infer_batch_size_as_fit_reads_rows_first_leaf_and_zero_without_arrays():
    import numpy as np

    # (moved from fit's deleted batch_rows: fit reads rows with strict=False, default=0)
    rows = lambda batch: infer_batch_size(batch, strict=False, default=0)  # noqa: E731
    assert rows((np.zeros((5, 2)), np.zeros(5))) == 5
    assert rows({"x": np.zeros((3, 2)), "scalar": np.float32(1)}) == 3
    assert rows(()) == 0
    assert rows((np.zeros((10, 4)), np.zeros(4))) == 10  # the first leaf, no error
    assert infer_batch_size(np.zeros((0, 3))) == 0  # a leading dimension of 0 is 0 rows
    with pytest.raises(ValueError, match="no array leaf"):
        infer_batch_size({"a": 1.0}, default=None)


def test_an_elapsed_is_immutable_as_documented_and_copies_keep_the_step_in_progress():
    import copy
    import pickle

    e = Elapsed(steps=3)
    with pytest.raises(AttributeError, match="Elapsed is immutable: its 'steps' cannot be set") as err:
        e.steps = 4
    assert "received: elapsed.steps = int 4" in str(err.value) and "elapsed.replace(steps=...)" in str(err.value)
    with pytest.raises(AttributeError, match="its 'stepz' cannot be set"):
        e.stepz = 4  # a typo is no silent new attribute either
    assert e.steps == 3 and e.replace(steps=4).steps == 4
    running = Elapsed(steps=3).started(8, None)
    for twin in (copy.copy(running), copy.deepcopy(running), pickle.loads(pickle.dumps(running))):
        assert twin.in_progress and twin.completed().samples == 8 and twin.steps == 3
