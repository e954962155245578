"""Looking inside the model while it trains: parameter, gradient and sown-value statistics,
the model's summary files and its parameter count."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen, nnx

import gyre
from gyre.trainer._model import count_params, tree_stats
from tests.trainer.helpers import trainer


class Sowing(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(64, 8, rngs=rngs)
        self.out = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.hidden(x))
        self.sow(nnx.Intermediate, "features", h)
        return self.out(h)


class SowingLinen(linen.Module):
    @linen.compact
    def __call__(self, x):
        h = linen.relu(linen.Dense(8)(x))
        self.sow("intermediates", "features", h)
        return linen.Dense(10)(h)


def _data():
    (x, y), _ = gyre.data.digits()
    return [(x[i:i + 64], y[i:i + 64]) for i in range(0, 256, 64)]


@pytest.mark.parametrize("mode", ["nnx", "linen"])
def test_stats_of_parameters_gradients_and_sown_values_are_training_metrics(tmp_path, mode):
    model = Sowing(nnx.Rngs(0)) if mode == "nnx" else SowingLinen()
    t = trainer(tmp_path, model=model, model_mode=mode, train_epochs=1, log_param_stats=True,
                log_grad_stats=True, log_intermediates=True, tabulate_model=True)
    data = _data()
    t.train_model(data, val_loader=data)
    saved = json.loads((tmp_path / "metrics" / "train_epoch_0001.json").read_text())
    prefix = "hidden" if mode == "nnx" else "Dense_0"
    for name in (f"{prefix}.kernel_std", f"{prefix}.bias_mean", f"{prefix}.kernel.grad_max"):
        assert f"train/{name}_epoch" in saved, sorted(saved)
    sown = [k for k in saved if k.startswith("train/features")]
    assert sown and all(np.isfinite(saved[k]) for k in sown)
    assert saved[f"train/{prefix}.kernel.grad_std_epoch"] > 0
    # the model's summary files, and the parameter count (64*8+8 + 8*10+10 = 610)
    assert "total: 610 parameters" in (tmp_path / "params.txt").read_text()
    table = (tmp_path / "model.txt").read_text()
    assert ("hidden   Linear  520" in table) if mode == "nnx" else ("Dense_0" in table)
    assert t.num_model_params() == 610 == count_params(t.state.params)


def test_tree_stats_names_each_tensor_and_skips_non_numbers():
    stats = tree_stats({"a": {"w": jnp.arange(4.0)}, "b": jnp.float32(3.0), "tag": "x"}, ".grad")
    assert sorted(stats) == ["a.w.grad_max", "a.w.grad_mean", "a.w.grad_min", "a.w.grad_std", "b.grad_val"]
    assert float(stats["a.w.grad_max"]) == 3.0 and float(stats["b.grad_val"]) == 3.0


def test_the_parameter_count_is_logged_when_training_starts(tmp_path):
    t = trainer(tmp_path, train_epochs=1)
    seen = {}
    t.writer.write_scalars = lambda step, values: seen.update(values)
    data = _data()
    t.train_model(data)
    assert seen["param/num_model_params"] == t.num_model_params() == 64 * 16 + 16 + 16 * 10 + 10


def test_a_resumed_run_logs_no_second_parameter_count(tmp_path):
    # was: train_model wrote it at global_step 0, before the loop restored the checkpoint, so
    # each resume added a point at step 0, which TensorBoard's purge (from the resumed step) kept
    counts = []
    for resume in (None, "latest", "latest"):  # a finished run, resumed twice
        t = trainer(tmp_path, train_epochs=1, resume=resume, resume_every_minutes=0)
        write = t.writer.write_scalars
        t.writer.write_scalars = lambda step, values, write=write: (
            counts.append(step) if "param/num_model_params" in values else None, write(step, values))
        t.train_model(_data())
    assert counts == [0]


def test_a_linen_model_has_no_parameter_count_before_it_is_built(tmp_path):
    t = trainer(tmp_path, model=SowingLinen(), model_mode="linen")
    with pytest.raises(RuntimeError, match="num_model_params needs a trained or initialised model"):
        t.num_model_params()
