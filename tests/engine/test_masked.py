"""Evaluation without recompiles in the named loops: a test step that takes ``mask`` gets the
batches padded to one size, compiles once, and the evaluation's means are those over the
real examples (gyre.engine._masked, the ``mask`` name of gyre.engine._binding)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.engine._binding import Masked, StateMethod, bind
from gyre.engine._masked import MaskedBatches
from gyre.engine._named import DEFAULT_TEST_AGGREGATION

X = np.random.default_rng(0).normal(size=(1000, 3)).astype(np.float32)
TEST = [X[i : i + 64] for i in range(0, 1000, 64)]  # 15 batches of 64, one of 40
EXACT = float(np.sum(X.astype(np.float64), axis=1).mean())


def masked_step(state, batch, mask=None):
    per_example = jnp.sum(batch, axis=1) + state
    return gyre.logs().add_metric("v", jnp.sum(per_example * mask) / jnp.sum(mask))


def plain_step(state, batch):
    return gyre.logs().add_metric("v", jnp.mean(jnp.sum(batch, axis=1) + state))


def evaluate(step, data=TEST, **kwargs):
    run = gyre.inner_loop("test", lambda s: gyre.test_loop(s, data, {gyre.on_test_step: step}, **kwargs),
                          aggregation=DEFAULT_TEST_AGGREGATION)
    logs, _ = run(jnp.float32(0))
    return float(logs.metrics.v_test)


def test_train_loop_evaluation_compiles_once_and_its_mean_is_exact():
    def train_step(state, batch):
        return None, state + 0

    with gyre.testing.assert_compiled_once(jax.jit(masked_step)) as step:
        _, history, _ = gyre.train_loop(
            jnp.float32(0), range(4), {gyre.on_train_step: train_step, gyre.on_test_step: step},
            test_dataset=lambda: TEST, epoch_duration=2,
        )
    assert step.calls == 32  # 16 batches, two evaluations: one compilation
    assert history.collect("v_test") == pytest.approx([EXACT, EXACT], abs=1e-6)


def test_the_clock_counts_the_real_rows_and_the_batches_are_padded():
    seen = []
    _, history, elapsed = gyre.test_loop(
        jnp.float32(0), TEST,
        {gyre.on_test_step: jax.jit(masked_step), gyre.on_test_batch_end: lambda batch: seen.append(batch.shape)},
    )
    assert elapsed.samples == 1000 and elapsed.steps == 16
    assert history.batch_sizes() == [64] * 15 + [40]
    assert seen == [(64, 3)] * 16  # callbacks without mask get the padded batch


def test_fused_test_steps_compile_once_and_stay_exact():
    step = jax.jit(masked_step)
    with gyre.testing.count_compilations() as compiled:
        mean = evaluate(step, steps_per_call=4)
    assert [n for n in compiled.names if "masked_step" in n] == ["jit(fused_4_masked_step)"]
    assert mean == pytest.approx(EXACT, abs=1e-6)


def test_a_list_whose_short_batch_comes_first_is_padded_to_its_largest_batch():
    # was: padded to the first batch's 40 rows, then pad_batch's "the batch holds more rows than
    # the size to pad to" at the second batch, a function the test_loop user never called
    def reversed_step(state, batch, mask=None):
        return masked_step(state, batch, mask)

    with gyre.testing.assert_compiled_once(jax.jit(reversed_step)) as step:
        assert evaluate(step, data=TEST[::-1]) == pytest.approx(EXACT, abs=1e-6)


def test_a_step_without_mask_runs_unpadded_with_an_exact_mean():
    seen = []

    def step(state, batch):
        seen.append(batch.shape)
        return plain_step(state, batch)

    assert evaluate(step) == pytest.approx(EXACT, abs=1e-6)
    assert seen[-1] == (40, 3) and len(seen) == 16


def test_batch_size_fn_counts_the_batch_before_padding():
    data = [{"x": X[:4], "y": np.zeros(4)}, {"x": X[4:6], "y": np.zeros(2)}]
    _, _, elapsed = gyre.test_loop(
        jnp.float32(0), data, {gyre.on_test_step: lambda batch, mask: None},
        batch_size_fn=lambda batch: 10 * len(batch["x"]),
    )
    assert elapsed.samples == 60


def test_mixed_test_steps_are_an_error_before_training():
    with pytest.raises(ValueError, match="disagree about mask") as info:
        gyre.train_loop(
            0, range(2), {gyre.on_test_step: [masked_step, plain_step]},
            test_dataset=lambda: TEST, epoch_duration=1,
        )
    assert "add mask=None to plain_step" in str(info.value)
    with pytest.raises(ValueError, match="disagree about mask"):
        gyre.test_loop(0, TEST, {gyre.on_test_step: [plain_step, masked_step]})


def test_a_training_step_that_requires_mask_is_an_error():
    def train_step(state, batch, mask):
        return state

    with pytest.raises(TypeError, match="needs a mask .* batches are not padded") as info:
        gyre.train_loop(0, range(2), {gyre.on_train_step: train_step})
    assert "def step(state, batch, mask=None)" in str(info.value)


def test_a_training_step_with_an_optional_mask_gets_its_default():
    seen = []
    def train_step(state, batch, mask="none"):
        seen.append(mask)
        return state + 1

    assert gyre.train_loop(0, range(2), {gyre.on_train_step: train_step})[0] == 2
    assert seen == ["none", "none"]


def test_binding_mask_by_name_by_position_and_on_state_methods():
    masked = Masked(np.arange(3), np.array([True, True, False]), rows=2)
    by_position = bind(lambda s, b, mask=None: (s, b.tolist(), mask.tolist()))
    assert by_position.takes_mask and by_position.call(1, masked, None, None, None) == (1, [0, 1, 2], [True, True, False])
    keyword_only = bind(lambda batch, *, mask: mask.sum())
    assert keyword_only.call(None, masked, None, None, None) == 2
    assert not bind(lambda state, batch: None).takes_mask

    class State(int):
        def test_step(self, batch, mask=None):
            return int(self) + int(mask.sum())

    assert bind(StateMethod(State.test_step)).call(State(5), masked, None, None, None) == 7


def test_a_mask_before_positional_parameters_is_an_error():
    with pytest.raises(TypeError, match="mask parameter before parameters bound by position"):
        bind(lambda mask, s, b: None)


def test_the_evaluation_reads_nothing_from_the_device(sync_detector):
    """A managed state on 8 devices: the batches and masks are placed ahead, and the real rows
    are counted on the host before; the evaluation never reads a device value."""

    @gyre.managed.step
    def test_step(state, batch, mask=None):
        per_example = jnp.sum(batch, axis=1) + state.params
        return gyre.logs().add_metric("v", jnp.sum(per_example * mask) / jnp.sum(mask)), state

    state = gyre.managed.ManagedState.create(params=jnp.float32(0), strategy="data_parallel")

    def train_step(state, batch):
        return None, state

    _, history, _ = gyre.train_loop(
        state, range(2), {gyre.on_train_step: train_step, gyre.on_test_step: test_step,
                          gyre.on_train_end: sync_detector.end},
        test_dataset=lambda: TEST, epoch_duration=1,
    )
    assert sync_detector.stalls == [], sync_detector.stalls[0]  # (implicit reads raise)
    assert history.collect("v_test") == pytest.approx([EXACT, EXACT], abs=1e-6)
    assert test_step.compiled_count() == 1


def test_masked_batches_is_reiterable_and_keeps_the_epoch_length():
    batches = MaskedBatches(TEST)
    assert batches.epoch_steps == 16
    first = [m.rows for m in batches]
    assert first == [m.rows for m in batches] == [64] * 15 + [40]
