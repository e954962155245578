"""jax_trainer's OptimizerBuilder: (optimizer, schedule) from a section in either form, the
run's length from num_epochs x num_train_steps_per_epoch."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gyre.config import ConfigError, OptimizerBuilder, RunLengthUnknown, learning_rate_of


def test_the_schedule_left_without_decay_steps_lasts_the_run():
    section = {"name": "sgd", "lr": 1.0, "scheduler": {"name": "warmup_cosine_decay", "warmup_steps": 2}}
    tx, schedule = OptimizerBuilder(section).build_optimizer(num_epochs=2, num_train_steps_per_epoch=5)
    assert schedule.total_steps == 10
    np.testing.assert_allclose(np.asarray(schedule(jnp.array([0, 6, 10]))), [0.0, 0.5, 0.0], atol=1e-7)
    state = tx.init({"w": jnp.zeros(1)})
    assert float(learning_rate_of(state)) == 0.0  # the optimizer runs the same schedule
    with pytest.raises(RunLengthUnknown, match=r"needs steps or decay_steps"):
        OptimizerBuilder(section).build_optimizer()  # no run length: jax_trainer's decay_steps 0


def test_gyre_form_and_configdict():
    from ml_collections import ConfigDict

    gyre_form = {"class_name": "SGD", "learning_rate": {"class_name": "Linear", "init_value": 1.0, "end_value": 0.0}}
    tx, schedule = OptimizerBuilder(ConfigDict(gyre_form)).build_optimizer(num_epochs=1, num_train_steps_per_epoch=4)
    assert isinstance(tx, optax.GradientTransformation)
    assert float(schedule(2)) == 0.5
    with pytest.raises(ConfigError, match=r"optimizer must be a mapping"):
        OptimizerBuilder(3).build_optimizer()
