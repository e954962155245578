"""The fit rung: Jax Fit's one call, ``fit(state, train_ds, num_epochs, loss_fn, ...)``, on gyre's
engine, checkpoints and writers (see :mod:`gyre.fitting._fit`)."""

from gyre.fitting._fit import fit as fit

__all__ = ["fit"]
