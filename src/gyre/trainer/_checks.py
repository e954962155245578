"""Checks of what a trainer subclass defines, made when the trainer is built, before any tracing."""

from __future__ import annotations

import inspect
from typing import Any

from gyre.core._errors import explain, suggest

#: what the trainer passes to each user method, by position after ``self``
CALLS = {
    "loss_function": ("model", "batch", "train"),
    "loss_function_linen": ("params", "state", "batch", "rng", "train"),
    "batch_to_input": ("batch",),
}


def check_user_methods(trainer: Any, base: type, mode: str) -> None:
    """A ``TypeError`` when the loss function for ``mode`` or ``batch_to_input`` misfits."""
    name = "loss_function" if mode == "nnx" else "loss_function_linen"
    cls = type(trainer)
    if getattr(cls, name, None) is getattr(base, name, None):
        defined = [
            m for k in cls.__mro__ if k is not base and k is not object for m in vars(k)
            if m != name and callable(getattr(cls, m, None)) and not m.startswith("__")
        ]
        hint = suggest(name, defined)
        if hint:
            raise TypeError(
                explain(
                    f"{cls.__name__} defines no {name}.{hint}",
                    expected=f"a method {name}(self, {', '.join(CALLS[name])}=True)",
                    received=f"the methods {sorted(defined)}",
                    fix=f"rename it to {name}",
                )
            )
        return  # the base's own NotImplementedError explains it at the first step
    for method in (name, "batch_to_input"):
        fn = getattr(trainer, method)
        args = CALLS[method]
        # the loss function as the compiled step calls it: train by keyword
        positional, keywords = (args[:-1], {"train": True}) if method == name else (args, {})
        try:
            inspect.signature(fn).bind(*positional, **keywords)
        except TypeError as err:
            raise TypeError(
                explain(
                    f"{cls.__name__}.{method} cannot take the trainer's arguments ({', '.join(args)})",
                    expected=f"def {method}(self, {', '.join(args)}{'=True' if keywords else ''})",
                    received=f"def {method}{inspect.signature(fn)} ({err})",
                    fix=f"give {method} the parameters {', '.join(args)}",
                )
            ) from None
        except ValueError:  # no signature to read (a builtin): trust it
            pass


def check_batch(batch: Any) -> None:
    """Raises a ``TypeError`` when a batch is not a pytree of arrays."""
    import jax
    import numpy as np

    for leaf in jax.tree_util.tree_leaves(batch):
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex, bool)):
            name = type(leaf).__name__
            raise TypeError(
                explain(
                    f"a batch holds a {name}, which JAX cannot put in a compiled step",
                    expected="a pytree of arrays: tuples, lists, dicts, or a class registered as a pytree",
                    received=f"a {name} leaf ({type(leaf).__module__}.{name})",
                    fix=f"register {name} as a pytree (@flax.struct.dataclass, or "
                    f"jax.tree_util.register_dataclass({name}, data_fields=[...], meta_fields=[])), "
                    "or use gyre.data.SupervisedBatch",
                )
            )
