"""Small builders the trainer tests share."""

import jax
import numpy as np
import optax
from flax import nnx

from gyre.trainer import ImgClassifierTrainer, SimpleClassifier


def mlp(seed=0, **kw):
    return SimpleClassifier(c_hid=16, num_classes=10, rngs=nnx.Rngs(seed), **kw)


def trainer(tmp_path, model=None, cls=ImgClassifierTrainer, **options):
    options.setdefault("enable_progress_bar", False)
    options.setdefault("train_epochs", 2)
    return cls(model=model if model is not None else mlp(), optimizer=optax.adam(1e-2),
               log_dir=str(tmp_path), **options)


def leaves(tree):
    return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree_util.tree_leaves(tree)]
