"""gyre.fitting._fit_steps: fit's training step (loss pairs checked, compiled once per loss
function, batch statistics and the learning rate carried), and its parts under a strategy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from gyre.engine._epochs import check_split
from gyre.fitting._fit_steps import _loss_pair, make_train_step, plain_jit
from tests.fitting.test_fit import ce, make_state


def batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        (({"ce": 1.0}, jnp.float32(1)), r"\(loss_dict, loss\): the pair in reverse order"),
        ({"ce": 1.0}, "a loss_dict alone, without the loss"),
        (jnp.float32(1), "a bare loss where a pair is expected"),
        ((jnp.ones(3), {"ce": 1.0}), r"must return \(loss, loss_dict\) with a scalar loss"),
    ],
)
def test_a_loss_function_returning_anything_but_a_pair_is_named(out, match):
    with pytest.raises(TypeError, match=match):
        _loss_pair(out)
    loss, logged = _loss_pair((jnp.float32(2), {"ce": 2}))
    assert float(loss) == 2.0 and logged == {"ce": 2}


def test_the_step_is_built_once_per_loss_function_and_carries_batch_stats_and_the_rate():
    state = make_state(optax.inject_hyperparams(optax.sgd)(learning_rate=0.25))
    step = make_train_step(ce, state)
    assert make_train_step(ce, make_state(optax.inject_hyperparams(optax.sgd)(learning_rate=0.25))) is step
    before = jax.tree.map(np.asarray, state.batch_stats)
    logs, state = step(state, batch())
    assert int(state.step) == 1
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(state.batch_stats),
                                                          strict=True))
    assert float(logs["losses"]["loss"]) == float(logs["losses"]["ce"]) > 0
    assert float(logs["metrics"]["learning_rate"]) == 0.25  # read from the injected state, on device


def test_only_the_default_jit_skips_the_strategy_path():
    assert plain_jit(gyre.get_strategy("jit"))
    assert not plain_jit(gyre.get_strategy("data_parallel"))
    assert not plain_jit(gyre.get_strategy("eager"))


def test_a_batch_the_devices_cannot_split_is_found_before_training():
    import functools

    dp = gyre.get_strategy("data_parallel")
    check = functools.partial(check_split, who="fit", name="train_ds", single="strategy='jit'")  # fit's words
    check(dp, [batch(16), batch(8)])  # multiples of 8 pass
    with pytest.raises(ValueError, match=r"(?s)batch of 12 examples.*batch 1 of train_ds.*batch size of 16 or 8"):
        check(dp, [batch(16), batch(12)])
    with pytest.raises(ValueError, match=r"(?s)batch of 4 examples.*batch size of 8 \("):
        check(dp, iter([batch(4)]))
    check(gyre.get_strategy("jit"), [batch(3)])  # one device: anything splits
