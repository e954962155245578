"""Internal helpers of gyre.fitting whose docstring examples were their only test (moved here when
the internal docstrings lost their doctests: doctests are for public names)."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import gyre
from gyre.fitting._fit import eval_entries, final_metrics, run_folder
from gyre.fitting._fit_steps import (
    apply_error_fix,
    leaf_shapes,
    make_train_step,
    model_shape_error,
    model_takes_train,
)


def test_make_train_step_trains_one_step_and_logs_the_total_and_the_named_losses():
    model = nn.Dense(1)
    apply = lambda v, x, train=False, rngs=None: model.apply(v, x)  # noqa: E731
    p = model.init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    s = gyre.TrainState.create(apply_fn=apply, params=p, tx=optax.sgd(0.1))

    def mse(out, y):
        loss = jnp.mean((out[:, 0] - y) ** 2)
        return loss, {"mse": loss}

    logs, s = make_train_step(mse, s)(s, (jnp.ones((4, 2)), jnp.zeros(4)))
    assert (int(s.step), sorted(logs["losses"])) == (1, ["loss", "mse"])


def test_model_takes_train_reads_the_module_or_the_function():
    assert model_takes_train(nn.Dense(2).apply) is False
    assert model_takes_train(lambda v, x, train=False: x) is True


def test_leaf_shapes():
    assert leaf_shapes((np.zeros((4, 3)), np.zeros(4))) == [(4, 3), (4,)]


def test_model_shape_error_explains_flax_scope_param_shape_error():
    class ScopeParamShapeError(Exception): ...

    err = ScopeParamShapeError('For parameter "kernel" in "/Dense_0", the given initializer is '
                               "expected to generate shape (5, 8), but the existing parameter it received has shape (4, 8).")
    assert str(model_shape_error(err, (np.zeros((2, 5)), np.zeros(2)), "a step")).splitlines() == [
        "the model cannot take its input: layer /Dense_0's 'kernel' has shape (4, 8), and the input asks for (5, 8) (in a step)",
        "  expected: batches of the shapes the model was initialised with (its 'kernel' of shape (4, 8))",
        "  received: a batch with leaves of shapes [(2, 5), (2,)]",
        "  fix: initialise the model with a batch of this data (model.init(key, x[:1])), or reshape the batches to the model's input",
    ]
    assert model_shape_error(ValueError("other"), (), "a step") is None


def test_apply_error_fix():
    assert apply_error_fix(KeyError('collection "batch_stats" is empty'))[:36] == "the model has batch norm but the sta"


def test_run_folder_takes_the_next_free_name_and_resume_the_newest(tmp_path):
    root = str(tmp_path)
    assert os.path.basename(run_folder(root, "mnist", None)) == "mnist"
    os.makedirs(os.path.join(root, "mnist", "checkpoints", "10"))
    assert [os.path.basename(run_folder(root, "mnist", r)) for r in (None, "latest")] == ["mnist-1", "mnist"]


def test_eval_entries_names_a_bare_value_accuracy():
    assert (eval_entries(0.5), eval_entries({"acc": 1.0})) == ({"accuracy": 0.5}, {"acc": 1.0})


def test_final_metrics_keeps_the_last_evaluation_entries():
    h = gyre.History()
    h.commit(gyre.Elapsed(steps=0), gyre.Logs().add_metric("accuracy_test", 0.5))
    assert final_metrics(h) == {"accuracy_test": 0.5}
