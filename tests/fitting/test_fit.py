"""``gyre.fit``: Jax Fit's one call (seed 004) on gyre's loops, checkpoints and writers."""

import importlib.util
import os
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Tiny(nn.Module):
    """dense -> batch norm -> dropout -> dense: every part fit must handle, in a few flops."""

    @nn.compact
    def __call__(self, x, train=False):
        x = nn.Dense(8)(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.Dropout(0.5)(nn.relu(x), deterministic=not train)
        return nn.Dense(3)(x)


def make_state(tx=None, *, rng=0):
    model = Tiny()
    var = model.init(jax.random.key(0), jnp.ones((1, 4)), train=False)
    return gyre.TrainState.create(
        apply_fn=model.apply, params=var["params"], model_state={"batch_stats": var["batch_stats"]},
        tx=tx or optax.adam(1e-2), rng=rng,
    )


def make_data(n=48, batch=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def ce(logits, labels):
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, {"ce": loss}


def accuracy(state, batch):
    x, y = batch
    logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats}, x, train=False)
    return jnp.mean(jnp.argmax(logits, -1) == y)


def run(tmp_path, state=None, train=None, test=None, **kwargs):
    kwargs = {"loss_fn": ce, "num_epochs": 1, "log_dir": str(tmp_path), "progress": False, **kwargs}
    return gyre.fit(state if state is not None else make_state(), train or make_data(), test, **kwargs)


def test_the_ported_quick_start_reaches_095_on_the_digits(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the example imports _digits_common
    spec = importlib.util.spec_from_file_location("example_10", EXAMPLES / "10_jax_fit_quickstart.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    accuracy = example.main(epochs=5, workdir=str(tmp_path))
    assert accuracy >= 0.95
    assert "110/110 [" in capsys.readouterr().out  # 5 epochs of 22 batches, the bar at its end
    events = os.listdir(tmp_path / "mnist")
    assert any(name.startswith("events.out.tfevents") for name in events)
    assert os.listdir(tmp_path / "mnist" / "checkpoints")


def test_logs_losses_and_the_injected_learning_rate_at_every_step(tmp_path):
    schedule = optax.linear_schedule(0.01, 0.0, 12)
    state, history = run(tmp_path, make_state(optax.inject_hyperparams(optax.adam)(schedule)), num_epochs=2)
    assert int(state.step) == 12
    rates = history.collect("learning_rate")
    assert rates == pytest.approx([float(schedule(i)) for i in range(12)])
    loss, ce_ = history.collect("loss", "ce")
    assert len(loss) == 12 and loss == ce_


def test_loss_fn_gets_the_step_when_it_asks_for_it(tmp_path):
    def loss_fn(logits, labels, step):
        loss, _ = ce(logits, labels)
        return loss, {"step_seen": step.astype(jnp.float32)}

    _, history = run(tmp_path, loss_fn=loss_fn, num_epochs=2)
    assert history.collect("step_seen") == [float(i) for i in range(12)]


def test_batch_stats_change_in_training_and_are_used_at_evaluation(tmp_path):
    state = make_state()
    before = jax.device_get(state.batch_stats)

    def stats_seen(state, batch):  # what the evaluation's model sees
        return {"mean_sum": jnp.sum(state.batch_stats["BatchNorm_0"]["mean"]), "acc": accuracy(state, batch)}

    final, history = run(tmp_path, state, test=make_data(16, 8, seed=1), eval_step=stats_seen, num_epochs=2)
    after = jax.device_get(final.batch_stats)
    assert not np.allclose(before["BatchNorm_0"]["mean"], after["BatchNorm_0"]["mean"])
    seen = history.collect("mean_sum_test")
    assert len(seen) == 2 and seen[0] != seen[1]
    assert seen[-1] == pytest.approx(float(np.sum(after["BatchNorm_0"]["mean"])), rel=1e-6)


class Masks(nn.Module):
    """Logits = dropout(ones): which units a step's dropout kept."""

    @nn.compact
    def __call__(self, x, train=False):
        w = self.param("w", nn.initializers.ones, (16,))
        return nn.Dropout(0.5)(jnp.broadcast_to(w, (x.shape[0], 16)), deterministic=not train)


def test_dropout_masks_differ_between_steps_and_repeat_for_the_same_rng(tmp_path):
    def mask_code(logits, labels):  # the kept units of the first row, as one number
        code = jnp.sum((logits[0] != 0) * 2.0 ** jnp.arange(16))
        return jnp.mean(logits) * 0.0, {"mask": code}

    def masks(rng, name):
        model = Masks()
        params = model.init(jax.random.key(0), jnp.ones((1, 1)))["params"]
        state = gyre.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.0), rng=rng)
        batches = [(np.ones((2, 1), np.float32), np.zeros(2, np.int32))] * 8
        return run(tmp_path / name, state, batches, loss_fn=mask_code)[1].collect("mask")

    first = masks(0, "a")
    assert len(set(first)) == 8  # a fresh key every step (Jax Fit reused one)
    assert masks(0, "b") == first
    assert masks(1, "c") != first


def _resumable_inputs():
    x = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    return gyre.data.batches((x, y), 8, seed=3), [(x[:16], y[:16])]


@pytest.mark.parametrize("steps_per_call", [1, 5])
def test_a_resumed_fit_is_bit_identical_to_an_uninterrupted_one(tmp_path, steps_per_call):
    val = make_data(16, 8, seed=1)  # ranked every 2 epochs, saved for resuming at the others
    kwargs = {"eval_step": accuracy, "steps_per_call": steps_per_call, "val_ds": val, "eval_freq": 2}
    train, test = _resumable_inputs()
    whole, whole_history = run(tmp_path / "whole", make_state(), train, test, num_epochs=4, **kwargs)
    train, test = _resumable_inputs()
    run(tmp_path / "cut", make_state(), train, test, num_epochs=2, **kwargs)
    train, test = _resumable_inputs()  # a new process: fresh objects, positions from the checkpoint
    resumed, history = run(tmp_path / "cut", make_state(), train, test, num_epochs=4, resume="latest", **kwargs)
    assert int(resumed.step) == int(whole.step) == 20
    for a, b in zip(jax.tree.leaves(jax.device_get(whole)), jax.tree.leaves(jax.device_get(resumed)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert history.collect("loss") == whole_history.collect("loss")
    assert history.collect("accuracy_test") == whole_history.collect("accuracy_test")
    assert history.collect("steps", "accuracy_val") == whole_history.collect("steps", "accuracy_val")
    assert len(history.collect("accuracy_val")) == 2  # epochs 2 and 4


@pytest.mark.parametrize("steps_per_call", [3, "auto"])
def test_fused_steps_train_as_step_by_step(tmp_path, steps_per_call):
    one, h1 = run(tmp_path / "one", num_epochs=2)
    fused, h2 = run(tmp_path / "fused", num_epochs=2, steps_per_call=steps_per_call)
    for a, b in zip(jax.tree.leaves(jax.device_get(one)), jax.tree.leaves(jax.device_get(fused)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert h2.collect("loss") == pytest.approx(h1.collect("loss"), rel=1e-5)


def test_evaluation_names_and_batch_weighted_means(tmp_path):
    x = np.zeros((4, 4), np.float32)
    test = [(x[:3], np.array([1, 1, 1], np.int32)), (x[:1], np.array([0], np.int32))]
    label_mean = lambda state, batch: jnp.mean(batch[1].astype(jnp.float32))  # noqa: E731
    _, history = run(tmp_path / "bare", test=test, eval_step=label_mean, val_ds=test, num_epochs=2)
    assert history.collect("accuracy_test") == [0.75, 0.75]  # (3 * 1 + 1 * 0) / 4, not (1 + 0) / 2
    assert history.collect("accuracy_val") == [0.75, 0.75]
    named = lambda state, batch: {"label": jnp.mean(batch[1].astype(jnp.float32)), "n": jnp.float32(len(batch[1]))}  # noqa: E731
    _, history = run(tmp_path / "dict", test=test, eval_step=named, eval_freq=2, num_epochs=3)
    steps, label, n = history.collect("steps", "label_test", "n_test")
    assert (steps, label, n) == ([11, 17], [0.75, 0.75], [2.5, 2.5])  # epochs 2 and 3 (the last)


def test_the_best_model_is_kept_by_the_validation_set_never_the_test_set(tmp_path):
    def score(state, batch):  # -step on the validation batches (x = -1), +step on the test's
        return jnp.mean(batch[0]) * state.step.astype(jnp.float32)

    x, y = np.ones((8, 4), np.float32), np.zeros(8, np.int32)
    _, history = run(tmp_path, test=[(x, y)], val_ds=[(-x, y)], eval_step=score, num_epochs=3, eval_freq=2)
    assert history.collect("steps", "accuracy_val", "accuracy_test") == ([11, 17], [-12.0, -18.0], [12.0, 18.0])
    ckpt = gyre.checkpoint(str(tmp_path / "default" / "checkpoints"), keep=1, keep_best=1, monitor="accuracy_val", mode="max")
    assert (ckpt.best_step(), ckpt.latest_step()) == (12, 18)  # the first evaluation's model, and the last
    state, _ = ckpt.restore(make_state(), step=12)
    assert int(state.step) == 12
    ckpt.close()


def test_a_script_run_again_trains_in_a_new_numbered_folder_and_resume_continues_the_newest(tmp_path):
    run(tmp_path)
    run(tmp_path)  # the same script again: a new run beside the first, not a refusal
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default", "default-1"]
    first = gyre.checkpoint(str(tmp_path / "default" / "checkpoints"), keep=1)
    assert first.all_steps() == [6]  # the first run's checkpoints are untouched
    first.close()
    state, _ = run(tmp_path, num_epochs=2, resume="latest")
    assert int(state.step) == 12 and sorted(p.name for p in tmp_path.iterdir()) == ["default", "default-1"]
    newest = gyre.checkpoint(str(tmp_path / "default-1" / "checkpoints"), keep=1)
    assert newest.latest_step() == 12  # the newest run continued
    newest.close()


def test_resume_into_training_data_of_another_epoch_length_is_refused(tmp_path):
    run(tmp_path, train=make_data(48, 8), num_epochs=1)  # 6 batches per epoch, saved at step 6
    for other in (make_data(40, 8), make_data(48, 4)):  # was: continued silently, epochs misaligned
        with pytest.raises(ValueError, match=r"(?s)a run of 6 batches per epoch, and train_ds now gives (5|12).*fix:"):
            run(tmp_path, train=other, num_epochs=2, resume="latest")
    state, _ = run(tmp_path, train=make_data(48, 8), num_epochs=2, resume="latest")  # the same data continues
    assert int(state.step) == 12


def test_resume_past_num_epochs_says_it_in_fits_words(tmp_path):
    run(tmp_path, num_epochs=2)  # saved at step 12
    with pytest.raises(ValueError, match="past stop") as info:  # the engine's stop=, which fit's user never passed
        run(tmp_path, num_epochs=1, resume="latest")
    assert "num_epochs x batches per epoch = 1 x 6 = 6 steps: pass a larger num_epochs" in "".join(info.value.__notes__)


def test_hparams_are_written_with_the_final_metrics(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(gyre.TensorBoardWriter, "write_hparams", lambda self, p, m=None: written.append((p, m)))
    _, history = run(tmp_path, test=make_data(16), eval_step=accuracy, hparams={"lr": 0.01}, num_epochs=2)
    assert written == [({"lr": 0.01}, {"accuracy_test": history.collect("accuracy_test")[-1]})]


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loss_fn", "match"),
    [
        (lambda logits, y: ce(logits, y)[0], "bare loss where a pair is expected"),
        (lambda logits, y: ce(logits, y)[::-1], r"\(loss_dict, loss\): the pair in reverse order"),
        (lambda logits, y: ce(logits, y)[1], "a loss_dict alone"),
        (lambda logits, y: (logits, {}), "scalar loss"),
    ],
)
def test_a_loss_fn_of_the_wrong_shape_says_what_it_returned(tmp_path, loss_fn, match):
    with pytest.raises(TypeError, match=match):
        run(tmp_path, loss_fn=loss_fn)


def test_a_loss_fn_error_carries_how_fit_called_it(tmp_path):
    def swapped(labels, logits):  # the parameters in the wrong order
        return ce(logits, labels)

    with pytest.raises(Exception) as caught:
        run(tmp_path, loss_fn=swapped)
    notes = "\n".join(caught.value.__notes__)
    assert "raised in loss_fn, which gyre.fit calls as loss_fn(logits, labels)" in notes
    assert "check the order of loss_fn's parameters" in notes and "labels int" in notes


def test_an_eval_step_that_returns_nothing_is_explained(tmp_path):
    def forgot(state, batch):
        jnp.mean(batch[1])

    with pytest.raises(TypeError, match="eval_step returned None") as caught:
        run(tmp_path, test=make_data(16), eval_step=forgot)
    assert "a missing return gives None" in str(caught.value)


def test_an_eval_step_returning_a_non_scalar_is_an_error(tmp_path):
    per_example = lambda state, batch: batch[1]  # noqa: E731
    with pytest.raises(TypeError, match=r"(?s)non-scalar for 'accuracy'.*shape \(8,\)"):
        run(tmp_path, test=make_data(16), eval_step=per_example)
    with pytest.raises(TypeError, match="non-scalar for 'acc'"):
        run(tmp_path / "val", val_ds=make_data(16), eval_step=lambda s, b: {"acc": b[1]})


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_epochs": 0}, ValueError, "num_epochs >= 1"),
        ({"eval_freq": 0}, ValueError, "eval_freq >= 1"),
        ({"num_epochs": 2.0}, ValueError, "whole number num_epochs >= 1"),  # was "needs num_epochs >= 1" of 2.0
        ({"eval_freq": 1.5}, ValueError, "whole number eval_freq >= 1"),
        ({"mode": "best"}, ValueError, "mode must be 'min' or 'max'"),
        ({"test": make_data(8)}, ValueError, "no eval_step"),
        ({"test": iter(make_data(8)), "eval_step": accuracy}, TypeError, "iterator"),
        ({"val_ds": make_data(8), "eval_step": accuracy, "monitor": "acc"}, ValueError, "not a metric of eval_step"),
        ({"test": [], "eval_step": accuracy}, ValueError, "empty test_ds"),  # was a bare StopIteration
        ({"val_ds": [], "eval_step": accuracy}, ValueError, "empty val_ds"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        run(tmp_path, **kwargs)


def test_a_state_donated_to_an_earlier_fit_is_refused_before_training(tmp_path):
    state = make_state()
    run(tmp_path / "first", state)  # donates the state's arrays
    with pytest.raises(ValueError, match=r"(?s)donated to an earlier training.*fix: continue from what fit returned"):
        run(tmp_path / "again", state)  # was XLA's "Buffer has been deleted or donated" from the first step


def test_a_state_without_apply_fn_is_an_error(tmp_path):
    state = gyre.TrainState.create(params={"w": jnp.zeros(2)}, tx=optax.sgd(0.1))
    with pytest.raises(TypeError, match=r"missing: apply_fn"):
        run(tmp_path, state)
    with pytest.raises(TypeError, match=r"missing: a gyre.TrainState"):
        run(tmp_path, {"params": {}})


# -- evaluation without recompiles: a mask-aware eval_step gets the last batch padded ---------


def _thousand(seed=1):
    """1,000 examples in batches of 64: 15 full ones and one of 40."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1000, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=1000).astype(np.int32)
    return x, y, [(x[i : i + 64], y[i : i + 64]) for i in range(0, 1000, 64)]


def _logits(state, x):
    return state.apply_fn({"params": state.params, "batch_stats": state.batch_stats}, x, train=False)


def _exact(state, x, y):
    logits = np.asarray(_logits(state, jnp.asarray(x)), np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    losses = np.log(np.exp(shifted).sum(-1)) - shifted[np.arange(len(y)), y]
    return float(np.mean(logits.argmax(-1) == y)), float(losses.mean())


def test_a_mask_aware_eval_step_compiles_once_and_its_means_are_exact(tmp_path):
    @jax.jit
    def masked(state, batch, mask=None):
        x, y = batch
        logits = _logits(state, x)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        real = jnp.sum(mask)
        return {"acc": jnp.sum((jnp.argmax(logits, -1) == y) * mask) / real, "ce": jnp.sum(losses * mask) / real}

    x, y, test = _thousand()
    assert [len(b[1]) for b in test] == [64] * 15 + [40]
    with gyre.testing.count_compilations() as compiled:
        state, history = run(tmp_path, test=test, eval_step=masked, train=make_data(n=8))
    assert compiled.names.count("jit(masked)") == 1, compiled.names  # the batch of 40 did not compile
    acc, ce = _exact(state, x, y)
    assert abs(history.collect("acc_test")[0] - acc) <= 1e-6
    assert abs(history.collect("ce_test")[0] - ce) <= 1e-6


def test_a_mask_aware_eval_step_gets_a_list_padded_to_its_largest_batch_whichever_comes_first(tmp_path):
    def masked(state, batch, mask=None):
        x, y = batch
        return jnp.sum((jnp.argmax(_logits(state, x), -1) == y) * mask) / jnp.sum(mask)

    x, y, _ = _thousand()
    test = [(x[:40], y[:40]), (x[40:140], y[40:140]), (x[140:240], y[140:240])]  # the short batch first
    with gyre.testing.count_compilations() as compiled:  # was: pad_batch refused 100 rows after the training
        state, history = run(tmp_path, test=test, eval_step=jax.jit(masked), train=make_data(n=8))
    assert compiled.names.count("jit(masked)") == 1, compiled.names
    assert abs(history.collect("accuracy_test")[0] - _exact(state, x[:240], y[:240])[0]) <= 1e-6


def test_an_eval_step_without_mask_gets_exact_means_with_one_more_compilation(tmp_path):
    @jax.jit
    def plain(state, batch):
        x, y = batch
        logits = _logits(state, x)
        return {"acc": jnp.mean(jnp.argmax(logits, -1) == y),
                "ce": optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()}

    x, y, test = _thousand()
    with gyre.testing.count_compilations() as compiled:
        state, history = run(tmp_path, test=test, eval_step=plain, train=make_data(n=8))
    assert compiled.names.count("jit(plain)") == 2  # the batch of 40 is its own shape
    acc, ce = _exact(state, x, y)
    assert abs(history.collect("acc_test")[0] - acc) <= 1e-6
    assert abs(history.collect("ce_test")[0] - ce) <= 1e-6


def test_resume_saves_run_on_a_clock_and_a_second_call_reuses_the_compiled_step(tmp_path):
    from gyre.fitting._fit_steps import make_train_step

    def mse(out, y):
        loss = jnp.mean((out[:, 0] - y) ** 2)
        return loss, {"mse": loss}

    model = nn.Dense(1)
    params = model.init(jax.random.key(0), jnp.ones((1, 2)))["params"]

    def fresh():  # fit donates the state: each call gets its own copy
        return gyre.TrainState.create(apply_fn=lambda v, x, train=False, rngs=None: model.apply(v, x),
                                      params=jax.tree.map(jnp.copy, params), tx=optax.sgd(0.1))

    assert make_train_step(mse, fresh()) is make_train_step(mse, fresh())
    data = [(np.ones((4, 2), np.float32), np.zeros(4, np.float32))] * 3
    gyre.fit(fresh(), data, loss_fn=mse, num_epochs=4, log_dir=str(tmp_path), log_name="clock", progress=False)
    saved = sorted(int(p.name) for p in (tmp_path / "clock" / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [12]  # the end only: no save at every epoch's end
    gyre.fit(fresh(), data, loss_fn=mse, num_epochs=2, log_dir=str(tmp_path), log_name="epochs", progress=False,
             save_every_minutes=0)
    assert (tmp_path / "epochs" / "checkpoints" / "6").is_dir()
    with pytest.raises(ValueError, match="save_every_minutes >= 0"):
        gyre.fit(fresh(), data, loss_fn=mse, num_epochs=1, log_dir=str(tmp_path), log_name="bad", save_every_minutes=-1)


def test_the_whole_arrays_triple_as_test_ds_names_its_parts(tmp_path):
    sources = gyre.data.arrays(make_data_arrays(), 8, validation=8)
    with pytest.raises(TypeError, match=r"(?s)test_ds is the whole result of gyre\.data\.arrays.*sources\.test"):
        gyre.fit(make_state(), sources.train, sources, loss_fn=ce, eval_step=accuracy, num_epochs=1,
                 log_dir=str(tmp_path))
    with pytest.raises(TypeError, match=r"the training data is the whole result"):
        gyre.fit(make_state(), sources, loss_fn=ce, num_epochs=1, log_dir=str(tmp_path))


def make_data_arrays(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int32)


def test_docs_fit_block_runs_as_written(tmp_path, run_readme):
    namespace = run_readme("fit in one call", {"print": lambda *a, **k: None}, page="docs/concepts/fit.md")  # fit writes under ./runs
    history = namespace["history"]
    assert history.collect("accuracy_test")[-1] >= 0.9
    assert len(history.collect("accuracy_val")) == 5
    assert (tmp_path / "runs" / "digits").is_dir()


def _plain_state(model):
    var = model.init(jax.random.key(0), jnp.ones((1, 4)))
    return gyre.TrainState.create(apply_fn=model.apply, params=var["params"], tx=optax.sgd(0.1))


class _NoTrain(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)


class _NormOnly(nn.Module):
    @nn.compact
    def __call__(self, x, train=False):
        return nn.Dense(3)(nn.BatchNorm(use_running_average=not train)(x))


def test_a_model_without_train_is_called_without_it(tmp_path):
    state, history = gyre.fit(_plain_state(_NoTrain()), make_data(n=24), loss_fn=ce, num_epochs=1,
                              log_dir=str(tmp_path), progress=False)
    assert int(state.step) == 3 and len(history.collect("loss")) == 3


def test_eval_step_with_state_and_batch_swapped_is_refused_before_training(tmp_path):
    def eval_step(batch, state):
        return 0.0

    with pytest.raises(TypeError, match=r"(?s)eval_step takes \(batch, state\).*swap the two parameters"):
        gyre.fit(make_state(), make_data(n=2), make_data(n=1), loss_fn=ce, eval_step=eval_step, num_epochs=1,
                 log_dir=str(tmp_path))


def test_model_errors_carry_a_note_on_how_fit_called_the_model(tmp_path):
    # batch norm, but no batch_stats given to TrainState.create: the training step says the fix
    with pytest.raises(Exception, match="collection") as caught:
        gyre.fit(_plain_state(_NormOnly()), make_data(n=2), loss_fn=ce, num_epochs=1, log_dir=str(tmp_path / "a"),
                 progress=False)
    notes = "\n".join(caught.value.__notes__)
    assert "pass batch_stats=variables['batch_stats'] to gyre.TrainState.create" in notes
    assert "gyre.fit's training step" in notes and "train=True" in notes

    def eval_step(state, batch):  # fails inside, on a transposed input
        x, y = batch
        return jnp.mean(jnp.argmax(state.apply_fn({"params": state.params}, x.T), -1) == y)

    with pytest.raises(Exception) as caught:
        gyre.fit(_plain_state(_NoTrain()), make_data(n=2), make_data(n=1), loss_fn=ce, eval_step=eval_step,
                 num_epochs=1, log_dir=str(tmp_path / "b"), progress=False)
    notes = "\n".join(caught.value.__notes__)
    assert "raised in eval_step, which gyre.fit calls as eval_step(state, batch)" in notes and "test_ds" in notes


# -- issue 23: nothing silent ---------------------------------------------------------------


def _nan_at(bad_step):
    def loss_fn(logits, labels, step):
        loss, aux = ce(logits, labels)
        return jnp.where(step == bad_step, jnp.nan, loss), aux

    return loss_fn


def test_a_nan_loss_raises_naming_its_step_and_ignore_trains_through(tmp_path):
    with pytest.raises(gyre.NonFiniteError) as caught:
        run(tmp_path / "a", loss_fn=_nan_at(3))
    assert (caught.value.step, caught.value.name) == (3, "loss")
    state, history = run(tmp_path / "b", loss_fn=_nan_at(3), nan_policy="ignore")  # the old behaviour
    assert int(state.step) == 6 and np.isnan(history.collect("loss")[3])
    with pytest.raises(ValueError, match=r"(?s)nan_policy='skip'.*apply_if_finite"):
        run(tmp_path / "c", nan_policy="skip")
    with pytest.raises(ValueError, match="nan_policy"):
        run(tmp_path / "d", nan_policy="rasie")


@pytest.mark.parametrize("log_name", ["../x", "/abs/x", "a/b", "..", "", "a\\b"])
def test_a_log_name_that_leaves_log_dir_is_refused(tmp_path, log_name):
    with pytest.raises(ValueError, match=r"(?s)log_name.*one folder name inside log_dir"):
        run(tmp_path / "runs", log_name=log_name)
    assert not (tmp_path / "x").exists() and not (tmp_path / "runs").exists()  # refused at the door


def test_hparams_that_are_not_a_mapping_are_refused_before_training(tmp_path, monkeypatch):
    trained = []
    named = importlib.import_module("gyre.engine._named")
    monkeypatch.setattr(named, "train_loop", lambda *a, **k: trained.append(1))
    with pytest.raises(TypeError, match=r"(?s)hparams must map names.*received: list \[1, 2\]"):
        run(tmp_path, hparams=[1, 2])
    assert trained == []


def test_a_misspelt_keyword_names_the_closest():
    with pytest.raises(TypeError, match=r"(?s)unexpected keyword argument 'num_epoch'.*did you mean num_epochs="):
        gyre.fit(make_state(), make_data(), loss_fn=ce, num_epoch=1)


def test_a_batch_the_model_cannot_take_is_explained_naming_the_layer_and_the_shapes(tmp_path):
    wide = [(np.zeros((8, 5), np.float32), np.zeros(8, np.int32))]  # the model was built for 4 features
    with pytest.raises(ValueError) as caught:
        run(tmp_path, train=wide)
    text = str(caught.value)
    assert "Dense_0" in text and "(4, 8)" in text and "[(8, 5), (8,)]" in text and "model.init" in text
    assert type(caught.value.__cause__).__name__ == "ScopeParamShapeError"
    with pytest.raises(ValueError, match=r"(?s)Dense_0.*\(4, 8\).*eval_step, on a batch of test_ds.*\[\(8, 5\), \(8,\)\]"):
        run(tmp_path / "eval", test=wide, eval_step=accuracy)


def test_time_major_batches_are_refused_before_training_and_batch_size_fn_weighs_them(tmp_path):
    model = nn.Dense(3)
    params = model.init(jax.random.key(0), jnp.ones((1, 4)))["params"]
    apply = lambda v, x, train=False, rngs=None: model.apply(v, x.mean(0))  # noqa: E731 (x: (T, B, F))
    state = gyre.TrainState.create(apply_fn=apply, params=params, tx=optax.sgd(0.0))
    rng = np.random.default_rng(0)

    def batch(b):
        return rng.normal(size=(5, b, 4)).astype(np.float32), rng.integers(0, 3, b).astype(np.int32)

    def acc(state, batch):
        return jnp.mean(jnp.argmax(state.apply_fn({"params": state.params}, batch[0]), -1) == batch[1])

    train, test = [batch(4)] * 2, [batch(4), batch(1)]
    with pytest.raises(ValueError, match=r"(?s)leading dimension.*\(5, 4, 4\).*batch_size_fn="):
        run(tmp_path / "a", state, train, test, eval_step=acc)  # the mean was weighted by T = 5
    state, history = run(tmp_path / "b", state, train, test, eval_step=acc, batch_size_fn=lambda batch: len(batch[1]))
    expected = (4 * float(acc(state, test[0])) + float(acc(state, test[1]))) / 5  # sgd(0.0): the same model
    assert history.collect("accuracy_test") == [pytest.approx(expected)]
    assert expected != pytest.approx((float(acc(state, test[0])) + float(acc(state, test[1]))) / 2)  # weights matter


def test_a_model_error_on_the_batch_names_each_leaf_dtype(tmp_path):
    class Tokens(nn.Module):  # an embedding: integer inputs
        @nn.compact
        def __call__(self, x, train=False):
            return nn.Dense(3)(nn.Embed(10, 4)(x).mean(1))

    model = Tokens()
    params = model.init(jax.random.key(0), jnp.zeros((1, 6), jnp.int32))["params"]
    state = gyre.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1))
    floats = [(np.zeros((8, 6), np.float32), np.zeros(8, np.int32))]
    with pytest.raises(ValueError, match="integer") as caught:
        run(tmp_path, state, floats)
    assert "x of shapes and dtypes [(8, 6) float32]" in "\n".join(caught.value.__notes__)
