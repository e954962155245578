"""The outer loop's specs: an EvalSpec needs data and a positive interval, and takes jaxloop's
forms (an iterator as dataset, dataset_iterator first); EvalContext has jaxloop's fields."""

import pytest

from gyre import jaxloop
from gyre.jaxloop import EvalSpec


def test_bad_specs_are_explained():
    with pytest.raises(ValueError, match=r"needs dataset= or dataset_iterator=[\s\S]*received: neither"):
        EvalSpec()
    with pytest.raises(ValueError, match="eval_loop_interval must be a positive"):
        EvalSpec(dataset=[1], eval_loop_interval=0)
    with pytest.raises(TypeError, match=r"dataset= must be iterable[\s\S]*received: int 3"):
        EvalSpec(dataset=3)
    # a NaN interval made the continuous evaluation's time.sleep fail with Python's bare "Invalid value NaN"
    for secs in (float("nan"), -1.0, "60"):
        with pytest.raises(ValueError, match=r"(?s)CheckpointSpec's iterate_interval_secs must be a finite number >= 0.*received: "):
            jaxloop.CheckpointSpec("ckpt", iterate_interval_secs=secs)
    # a count of 0 silently dropped examples_per_sec (jaxloop tests the size for truth)
    with pytest.raises(ValueError, match=r"(?s)StatLoop's global_batch_size must be a whole number >= 1.*received: int 0"):
        jaxloop.StatLoop(lambda state, batch: (state, {}), global_batch_size=0)


def test_an_iterator_is_a_dataset_and_dataset_iterator_wins_when_both_are_given():
    endless = iter(lambda: 1, None)
    assert EvalSpec(endless, num_steps=5).dataset is endless  # jaxloop's positional order
    both = EvalSpec(dataset=[1, 2], dataset_iterator=endless)
    assert both.dataset == [1, 2] and both.dataset_iterator is endless
    jaxloop.CheckpointSpec("x", transforms={})  # kept for checkpoints in jaxloop's format


def test_eval_context_has_jaxloops_fields_in_jaxloops_order():
    ctx = jaxloop.EvalContext(True, 40, 0)
    assert (ctx.is_continuous_eval, ctx.step_num, ctx.loop_count) == (True, 40, 0)
    assert ctx.step == 40 and ctx.train_total_steps is None and ctx.eval_count == 0


def test_one_shot_iterators_and_sources_with_a_position_are_told_apart():
    import numpy as np

    import gyre
    from gyre.engine._snapshot import has_state
    from gyre.jaxloop._specs import is_one_shot

    assert (is_one_shot(iter([1, 2])), is_one_shot([1, 2])) == (True, False)
    assert (has_state(gyre.data.batches(np.zeros((4, 1)), 2)), has_state([1])) == (True, False)
