"""``gyre.fit(..., strategy=...)``: the state replicated and the batches split over the 8
simulated devices (tests/conftest.py) give what one device gives."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre
from tests.fitting.test_fit import Tiny, accuracy, ce

DEVICES = 8


def make_state(seed=0):
    # sgd, not adam: Tiny's first bias feeds a batch norm, so its gradient is rounding noise,
    # which adam would scale up to the learning rate (differently on 1 and on 8 devices)
    model = Tiny()
    var = model.init(jax.random.key(seed), jnp.ones((1, 4)), train=False)
    return gyre.TrainState.create(apply_fn=model.apply, params=var["params"], batch_stats=var["batch_stats"],
                                  tx=optax.sgd(0.1), rng=seed)


def data(n, batch, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def masked_metrics(state, batch, mask=None):
    x, y = batch
    logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats}, x, train=False)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    real = jnp.sum(mask)
    return {"acc": jnp.sum((jnp.argmax(logits, -1) == y) * mask) / real, "ce": jnp.sum(losses * mask) / real}


def fit(tmp_path, name, strategy, **kwargs):
    kwargs = {"loss_fn": ce, "num_epochs": 2, "log_dir": str(tmp_path), "log_name": name, "progress": False, **kwargs}
    return gyre.fit(make_state(), data(48, 16), strategy=strategy, **kwargs)


def assert_close(a, b):
    for x, y in zip(jax.tree.leaves(jax.device_get(a)), jax.tree.leaves(jax.device_get(b)), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("steps_per_call", [1, 3])
def test_data_parallel_trains_and_evaluates_as_one_device(tmp_path, steps_per_call):
    assert jax.device_count() == DEVICES
    # evaluation, mask-aware: 43 examples in batches of 12 (a last one of 7) padded to 16 rows
    # (the next multiple of 8), 25 in batches of 14 and 11 padded to 16
    kwargs = {"test_ds": data(43, 12, seed=1), "val_ds": data(25, 14, seed=2), "steps_per_call": steps_per_call}
    one, h1 = fit(tmp_path, "one", "jit", eval_step=jax.jit(masked_metrics), **kwargs)
    with gyre.testing.count_compilations() as compiled:
        dp, h8 = fit(tmp_path, "dp", "data_parallel", eval_step=jax.jit(masked_metrics), **kwargs)
    assert compiled.names.count("jit(masked_metrics)") == 1, compiled.names  # every batch: 16 rows, split
    leaves = jax.tree.leaves(dp)
    assert all(len(x.sharding.device_set) == DEVICES and x.sharding.is_fully_replicated for x in leaves)
    assert_close(one, dp)  # params, optimizer state, batch stats (over the whole batch), step
    assert int(dp.step) == 6
    for name in ("loss", "acc_test", "ce_test", "acc_val", "ce_val"):
        np.testing.assert_allclose(h8.collect(name), h1.collect(name), rtol=1e-5, atol=1e-5, err_msg=name)


def test_an_unpadded_eval_step_gets_the_same_means_under_data_parallel(tmp_path):
    seen = []

    def recording(state, batch):
        seen.append(batch[0])
        return accuracy(state, batch)

    test = data(30, 16, seed=1)  # 16 splits over 8 devices, the last 14 does not: run whole
    one, h1 = fit(tmp_path, "one", "jit", test_ds=test, eval_step=accuracy, num_epochs=1)
    dp, h8 = fit(tmp_path, "dp", gyre.DataParallel(), test_ds=test, eval_step=recording, num_epochs=1)
    np.testing.assert_allclose(h8.collect("accuracy_test"), h1.collect("accuracy_test"), atol=1e-6)
    assert_close(one, dp)
    split, whole = [x for x in seen if not isinstance(x, jax.core.Tracer)]
    assert split.sharding.spec == jax.sharding.PartitionSpec("data") and len(split.sharding.device_set) == DEVICES
    assert isinstance(whole, np.ndarray) and whole.shape == (14, 4)


def test_an_unpadded_batch_that_does_not_split_is_refused_with_several_processes(tmp_path, monkeypatch):
    """With several processes each holds its rows of a batch: a short one run whole gave each
    process the mean of its own rows only, weighed by them (2 processes logged 0.184 and 0.237
    where one process of the same data gives 0.211); it is refused before training."""
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_count", lambda: 2)  # 8 devices: 4 of each process
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda x: np.stack([x, x]))  # the same state
    test = data(14, 8, seed=1)  # a last batch of 6 rows: not a multiple of this process's 4
    with pytest.raises(ValueError, match="cannot be split over this process's 4 devices") as err:
        fit(tmp_path, "dp", "data_parallel", test_ds=test, eval_step=accuracy, num_epochs=1)
    assert "a batch of 6 rows" in str(err.value) and "mask=" in str(err.value)
    assert not (tmp_path / "dp").exists()  # nothing trained


def test_a_resumed_data_parallel_fit_is_bit_identical(tmp_path):
    x = np.random.default_rng(0).normal(size=(48, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def run(name, epochs, **kwargs):
        train = gyre.data.batches((x, y), 16, seed=3)  # a new process: fresh objects
        return gyre.fit(make_state(), train, loss_fn=ce, num_epochs=epochs, log_dir=str(tmp_path), log_name=name,
                        progress=False, strategy="data_parallel", save_every_minutes=0, **kwargs)

    whole, wh = run("whole", 4)
    run("cut", 2)
    resumed, rh = run("cut", 4, resume="latest")
    assert int(resumed.step) == int(whole.step) == 12
    for a, b in zip(jax.tree.leaves(jax.device_get(whole)), jax.tree.leaves(jax.device_get(resumed)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert rh.collect("loss") == wh.collect("loss")
    assert resumed.params["Dense_0"]["kernel"].sharding.is_fully_replicated


def test_the_caller_state_is_not_donated_under_a_strategy(tmp_path):
    state = make_state()
    gyre.fit(state, data(16, 16), loss_fn=ce, num_epochs=1, log_dir=str(tmp_path), progress=False, strategy="dp")
    assert not any(x.is_deleted() for x in jax.tree.leaves(state))  # fit trained a placed copy


def test_the_data_parallel_step_reads_nothing_from_the_device(sync_detector):
    from gyre.fitting._fit_steps import make_train_step

    dp = gyre.get_strategy("data_parallel")
    state = dp.place_state(make_state())
    step = make_train_step(ce, state, dp)
    assert make_train_step(ce, state, dp) is step  # one step per loss function and strategy
    for x, y in data(48, 16):
        logs, state = step(state, (x, y))
    logs, state = step.fuse(2)(state, tuple(np.stack(v) for v in zip(*data(32, 16), strict=True)))
    assert sync_detector.explicit == 0 and int(jax.device_get(state.step)) == 5


# -- errors ------------------------------------------------------------------------------------


def test_a_batch_the_devices_cannot_split_names_both_numbers_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"(?s)batch of 12 examples cannot be split over the 8 devices.*"
                       r"batch 0 of train_ds.*batch size of 16 or 8"):
        gyre.fit(make_state(), data(24, 12), loss_fn=ce, num_epochs=1, log_dir=str(tmp_path), strategy="data_parallel")
    # a list's smaller last batch is found before training too
    with pytest.raises(ValueError, match=r"(?s)batch of 4 examples.*batch 2 of train_ds.*batch size of 8"):
        gyre.fit(make_state(), data(36, 16), loss_fn=ce, num_epochs=1, log_dir=str(tmp_path), strategy="data_parallel")
    assert not (tmp_path / "default").exists()  # nothing ran


def test_an_unknown_strategy_name_suggests_the_closest(tmp_path):
    with pytest.raises(ValueError, match=r"(?s)unknown strategy 'data_paralel'.*Did you mean 'data_parallel'"):
        gyre.fit(make_state(), data(16, 16), loss_fn=ce, num_epochs=1, log_dir=str(tmp_path), strategy="data_paralel")
