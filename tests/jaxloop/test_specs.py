"""The outer loop's specs: an EvalSpec needs data and a positive interval; a CheckpointSpec
refuses transforms."""

import pytest

from gyre import jaxloop
from gyre.jaxloop import EvalSpec


def test_bad_specs_are_explained():
    with pytest.raises(ValueError, match="needs one of dataset= and dataset_iterator="):
        EvalSpec()
    with pytest.raises(ValueError, match="eval_loop_interval must be a positive"):
        EvalSpec(dataset=[1], eval_loop_interval=0)
    for one_shot in (iter([1, 2]), (b for b in [1, 2])):
        with pytest.raises(TypeError, match="an iterator can be read only once") as info:
            EvalSpec(dataset=one_shot)
        assert "dataset_iterator=it" in str(info.value) and "dataset=list(batches)" in str(info.value)
    with pytest.raises(ValueError, match="transforms are not supported"):
        jaxloop.CheckpointSpec("x", transforms=object())
