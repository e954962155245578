"""gyre.testing: counting compilations and asserting a step compiles once, for a jax.jit
function, a managed step (in a loop and by hand) and a gyre.Step."""

import threading

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from gyre.testing import assert_compiled_once, count_compilations


def _mse_step():
    @managed.train_step
    def fit(state, batch):
        x, y = batch
        return gyre.logs().add_loss("mse", jnp.mean((x @ state.params - y) ** 2)), state

    return fit


def _batch(n=8):
    return np.ones((n, 2), np.float32), np.ones(n, np.float32)


# -- count_compilations ----------------------------------------------------------------------


def test_count_compilations_counts_new_programs_only():
    f = jax.jit(lambda x: x * 2 + 1)
    small, large = jnp.ones(3), jnp.ones(6)
    with count_compilations() as compiled:
        f(small)
        f(small)
        f(large)
    assert compiled.count == 2 and all("<lambda>" in name for name in compiled.names)
    assert [c.call for c in compiled.compilations] == [None, None]
    with count_compilations() as again:
        f(small)
        f(large)
    assert again.count == 0 and again.report() == "no compilation"


def test_count_compilations_ignores_other_threads():
    f = jax.jit(lambda x: x - 1)
    with count_compilations() as compiled:
        worker = threading.Thread(target=lambda: f(jnp.ones(7)))
        worker.start()
        worker.join()
    assert compiled.count == 0
    seven, matrix = jnp.ones(7), jnp.ones((7, 2))
    with count_compilations() as compiled:
        f(seven).block_until_ready()  # compiled in the other thread already
        f(matrix)
    assert compiled.count == 1


def test_a_counter_is_used_once_at_a_time():
    counter = count_compilations()
    with counter, pytest.raises(RuntimeError, match="already counting"):
        counter.__enter__()


# -- assert_compiled_once: the three kinds of step -------------------------------------------


def test_a_jit_function_compiled_once_passes():
    with assert_compiled_once(jax.jit(lambda x, y: x @ y)) as matmul:
        for _ in range(3):
            matmul(jnp.ones((2, 3)), jnp.ones((3, 4)))
    assert matmul.calls == 3 and matmul.count == 1
    matmul.check()  # after the block too: still one


def test_a_recompiling_jit_function_fails_saying_what_changed():
    f = jax.jit(lambda x, scale: x.sum() * scale)
    with pytest.raises(AssertionError) as info:
        with assert_compiled_once(f) as g:
            g(jnp.ones((4, 2)), 2.0)
            g(jnp.ones((4, 2)), 3.0)  # a new Python float value: traced, no recompile
            g(jnp.ones((5, 2)), 2.0)  # new shape
            g(jnp.ones((4, 2), jnp.int32), 2.0)  # new dtype
    message = str(info.value)
    assert "compiled 3 times in 4 calls, expected once" in message
    assert "call 2: compiled" in message and "call 3: compiled" in message
    assert "args[0]: float32[4, 2] -> float32[5, 2]" in message
    assert "args[0]: float32[4, 2] -> int32[4, 2]" in message
    assert "call 1" not in message
    assert "fix:" in message and "short last batch" in message


def test_a_managed_step_in_a_loop_compiles_once_and_a_short_batch_is_reported():
    state = managed.ManagedState.create(params=jnp.zeros(2), tx=optax.sgd(0.1), strategy="data_parallel")
    with assert_compiled_once(_mse_step()) as fit:
        state, history, _ = gyre.loop(state, [_batch()] * 4, {gyre.every(1): fit})
    assert len(history.collect("mse")) == 4 and fit.count == 1
    assert callable(fit.fuse)  # the managed step's own attributes are reachable
    with pytest.raises(AssertionError) as info:
        with assert_compiled_once(_mse_step()) as fit:
            gyre.loop(state, [_batch(), _batch(), _batch(16)], {gyre.every(1): fit})
    assert "compiled 2 times in 3 calls" in str(info.value)
    assert "args[1][0]: float32[8, 2] -> float32[16, 2]" in str(info.value)


def test_the_managed_steps_of_create_flax_state_by_hand():
    state = gyre.create_flax_state(
        nn.Dense(1), inputs=jnp.zeros((1, 2)), tx=optax.sgd(0.1),
        losses={"mse": lambda p, y: (p[:, 0] - y) ** 2},
    )
    with assert_compiled_once(type(state).train_step) as train_step:
        for _ in range(3):
            logs, state = train_step(state, _batch())
    assert int(state.step) == 3 and train_step.count == 1


class _Regression(gyre.Step):
    def run(self, state, batch):
        x, y = batch

        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x)[:, 0] - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), {"loss": loss}


def test_a_gyre_step_compiles_once_and_a_recompile_is_reported():
    def make():
        return _Regression(jax.random.key(0), nn.Dense(1), optimizer=optax.sgd(0.1), train=True)

    step = make()
    state = step.initialize_model((1, 2))
    with assert_compiled_once(step) as run:
        for _ in range(3):
            state, outputs = run(state, _batch())
    assert run.count == 1 and int(state.step) == 3
    with pytest.raises(AssertionError) as info:
        with assert_compiled_once(make()) as run:
            state, _ = run(state, _batch())
            state, _ = run(state, _batch(4))
    assert "compiled 2 times in 2 calls" in str(info.value)
    assert "args[1][0]: float32[8, 2] (numpy) -> float32[4, 2] (numpy)" in str(info.value)


def test_a_new_placement_of_the_same_shapes_is_reported():
    f = jax.jit(lambda x: x.sum())
    x = _batch()[0]
    one, split = jax.device_put(x, jax.devices()[0]), gyre.DataParallel().place_batch(x)
    with pytest.raises(AssertionError) as info:
        with assert_compiled_once(f) as g:
            g(one)
            g(split)
    message = str(info.value)
    assert f"args[0]: placed on {jax.devices()[0]} -> P('data',) on mesh {{'data': 8}}" in message


# -- assert_compiled_once: misuse ---------------------------------------------------------------


def test_no_compilation_during_the_calls_is_explained():
    f = jax.jit(lambda x: x + 2)
    f(jnp.ones(2))
    with pytest.raises(AssertionError, match="was not compiled during its 2 call") as info:
        with assert_compiled_once(f) as g:
            g(jnp.ones(2))
            g(jnp.ones(2))
    assert "count_compilations" in str(info.value)


def test_a_checker_that_is_never_called_is_explained():
    def train_step(state, batch):
        return None, state

    with pytest.raises(AssertionError, match="never called through the checker") as info:
        with assert_compiled_once(train_step):
            pass
    assert "assert_compiled_once(train_step) as train_step:" in str(info.value)


def test_calling_the_checker_outside_its_block_is_explained():
    check = assert_compiled_once(jax.jit(lambda x: x))
    with pytest.raises(RuntimeError, match="outside its with-block"):
        check(jnp.ones(1))


def test_a_non_callable_is_refused():
    with pytest.raises(TypeError, match="needs the function to check") as info:
        assert_compiled_once("train_step")
    assert "str 'train_step'" in str(info.value)


def test_an_error_in_the_block_is_not_hidden():
    with pytest.raises(KeyError, match="boom"):
        with assert_compiled_once(jax.jit(lambda x: x)) as f:
            f(jnp.ones(1))
            f(jnp.ones(2))  # would fail the check, but the block's own error comes first
            raise KeyError("boom")


def test_the_checker_keeps_the_signature_for_loop_binding():
    import inspect

    def step(state, batch):
        return None, state

    assert list(inspect.signature(assert_compiled_once(step)).parameters) == ["state", "batch"]
