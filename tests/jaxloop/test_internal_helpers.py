"""Internal helpers of gyre.jaxloop whose docstring examples were their only test (moved here when
the internal docstrings lost their doctests: doctests are for public names)."""

from gyre.jaxloop._loop import StepValues, preemption, state_step, takes_mask


def test_takes_mask():
    assert takes_mask(lambda state, batch, n, mask=None, **kwargs: None)
    assert not takes_mask(lambda state, batch, n, **kwargs: None)


def test_state_step_reads_an_attribute_or_a_key():
    assert (state_step({"step": 3}), state_step(0)) == (3, None)


def test_step_values_is_a_list_with_the_steps_examples():
    values = StepValues([0.0, 0.4], [8, 1])
    assert values == [0.0, 0.4] and values.batch_sizes == [8, 1]


def test_preemption_is_false_without_a_signal():
    with preemption() as preempted:
        assert preempted(1) is False
