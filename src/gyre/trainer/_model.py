"""The trainer's two model modes over the adapters of :mod:`gyre.frameworks`. An nnx module's
non-parameter state (batch statistics, rng counters) lives in ``model_state[NNX_REST]``; a
linen module's other collections in ``model_state``, its step key ``fold_in(rng, step)``.
"""

from __future__ import annotations

from typing import Any

import jax

from gyre.core._errors import describe, explain
from gyre.frameworks._adapters import LinenAdapter, adapt, framework_of, init_linen

NNX_REST = "nnx"  # the key of the nnx model's non-parameter state in TrainState.model_state
_FLAGS = ("train",)  # jax_trainer's name of the training flag


def model_mode_of(model: Any) -> str:
    """``"nnx"`` or ``"linen"`` for a flax module; an error for anything else."""
    mode = framework_of(model)
    if mode in ("nnx", "linen"):
        return mode
    raise TypeError(explain(
        "the trainer's model must be a flax module",
        expected="an nnx.Module instance (model_mode='nnx') or a linen.Module (model_mode='linen')",
        received=describe(model),
        fix="build the model with flax, e.g. nnx.Linear(64, 10, rngs=nnx.Rngs(0)), or register "
        "a model class with @gyre.config.register_model and name it in the config"))


def lazy_init_nnx(module: Any, exmp_input: Any) -> bool:
    """Initialises a module's uninitialised ``nnx.bridge.ToNNX`` layers by one call on
    ``exmp_input``; ``True`` if any."""
    from flax import nnx

    pending = [
        node for _, node in nnx.iter_graph(module)
        if isinstance(node, nnx.bridge.ToNNX) and not any(isinstance(v, nnx.Variable) for v in vars(node).values())
    ]
    if not pending:
        return False
    try:
        nnx.bridge.lazy_init(module, exmp_input)
    except Exception as err:
        raise ValueError(explain(
            f"the model's bridged linen layers could not be initialised from the example input "
            f"({type(err).__name__}: {err})",
            expected="an example input the model can be called on (the input of a batch: model(input))",
            received=describe(exmp_input),
            fix="pass exmp_input=next(iter(train_loader)) (a batch whose input the model takes), or "
            "override batch_to_input(self, batch) to return the model's input")) from err
    return True


class NNXModel:
    """An nnx module split for compiled steps; its states travel as plain dicts."""

    mode = "nnx"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.adapter = adapt(module)[0]
        self._params, self._rest = self._split(module)

    def _split(self, module: Any) -> tuple[Any, Any]:
        """The module's parameters and the rest of its state, left in training mode."""
        from flax import nnx

        module.train()
        return nnx.split(module, nnx.Param, ...)[1:]

    @staticmethod
    def _state(template: Any, pure: Any) -> Any:
        """An nnx ``State`` shaped as ``template`` holding ``pure``'s values."""
        from flax import nnx

        state = jax.tree.map(lambda x: x, template)
        nnx.replace_by_pure_dict(state, pure)
        return state

    def initial(self) -> tuple[Any, Any]:
        """The parameters and the rest of the module's state, as plain dicts."""
        params, rest = self._split(self.module)
        return params.to_pure_dict(), rest.to_pure_dict()

    def merge(self, params: Any, rest: Any, *, train: bool) -> Any:
        """The module, rebuilt from its states, in training or evaluation mode."""
        return self.adapter.merge(self._state(self._params, params), self._state(self._rest, rest), training=train)

    def rest_of(self, module: Any) -> Any:
        """What a merged module holds besides its parameters, as a plain dict."""
        from flax import nnx

        return nnx.split(module, nnx.Param, ...)[2].to_pure_dict()

    def update_module(self, params: Any, rest: Any) -> Any:
        """Writes trained states back into the user's module object and returns it."""
        from flax import nnx

        nnx.update(self.module, self._state(self._params, params), self._state(self._rest, rest))
        return self.module


class LinenModel:
    """A linen module called through :class:`~gyre.frameworks.LinenAdapter`."""

    mode = "linen"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.adapter = LinenAdapter(module, rng_streams=("dropout",), collections=(), flags=_FLAGS)

    def init(self, key: jax.Array, exmp_input: Any) -> tuple[Any, dict[str, Any]]:
        """``(params, other collections)`` from ``module.init`` on an example input."""
        params_key, dropout_key = jax.random.split(key)
        keys = {"params": params_key, "dropout": dropout_key}
        return init_linen(self.module, exmp_input, keys, flags=_FLAGS, compiled=False)

    def apply(
        self, params: Any, model_state: Any, inputs: Any, rng: jax.Array | None, *, train: bool, sow: bool = False
    ) -> tuple[Any, Any]:
        """``(outputs, new mutable collections)``; with ``sow``, ``intermediates`` too."""
        rngs = {} if rng is None else {"dropout": rng}
        out, model_state, reported = self.adapter.apply_collect(params, model_state, inputs, training=train, rngs=rngs)
        if sow and "intermediates" in reported:
            model_state["intermediates"] = reported["intermediates"]
        return out, model_state
