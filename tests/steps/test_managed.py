"""The managed API's decorators (train_step, step) and the facade gyre.steps.managed."""

import optax
import pytest

import gyre
from gyre import managed
from tests.steps._managed_helpers import batch_of, fresh, init_params, mse, regression


def test_method_form_and_loops():
    class State(managed.ManagedState):
        @managed.train_step
        def train_step(self, batch):
            x, y = batch
            return gyre.logs().add_loss("mse", mse(self.params, x, y)), self

        @managed.step
        def test_step(self, batch):
            x, y = batch
            return gyre.logs().add_metric("mse", mse(self.params, x, y)), self

    state = State.create(params=init_params(), tx=optax.sgd(0.1))
    logs, state = state.train_step(batch_of(8))
    assert int(state.step) == 1
    batches = [batch_of(8, seed=i) for i in range(6)]
    state, history, _ = gyre.train_loop(state, batches, test_dataset=lambda: batches[:2], epoch_duration=3)
    assert int(state.step) == 7
    losses = history.collect("mse")
    assert len(history.collect("mse_test")) == 2 and losses[-1] < losses[0]


def test_managed_step_does_not_update():
    @managed.step
    def evaluate(state, batch):
        x, y = batch
        return gyre.logs().add_metric("mse", mse(state.params, x, y)), state

    state = fresh()
    logs, after = evaluate(state, batch_of(8))
    assert int(after.step) == 0 and evaluate.compiled_count() == 1


def test_bad_options():
    with pytest.raises(ValueError, match="accumulate_steps"):
        managed.train_step(accumulate_steps=0)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        managed.train_step(clip_grad_norm=-1)
    with pytest.raises(ValueError, match="unknown precision policy 'bf16'"):
        managed.train_step(policy="bf16")
    with pytest.raises(ValueError, match="cannot be split into 4 microbatches"):
        regression(accumulate_steps=4)(fresh(), batch_of(6))
    with pytest.raises(TypeError, match="must return \\(logs, state\\)"):
        managed.train_step(lambda s, b: 3.0)(fresh(), batch_of(4))


def test_the_facade_keeps_every_name_of_the_managed_module():
    from gyre.steps import _update

    for name in ("ManagedState", "ManagedStep", "StepFn", "check_floating_loss", "total_loss", "merge_stateful_metrics"):
        assert name in vars(managed), name
    assert managed.skip_non_finite is _update.skip_non_finite
    assert gyre.managed is gyre.steps.managed is managed
    assert gyre.steps.ManagedState is managed.ManagedState and gyre.steps.ManagedStep is managed.ManagedStep
    assert managed.train_step.__module__ == managed.step.__module__ == "gyre.steps.managed"
