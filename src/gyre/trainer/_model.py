"""The trainer's two model modes, behind one small interface: where the parameters and the
mutable model state live in the train state, and how a loss function sees the model.

* ``nnx``: the module is split once into a graph definition per mode (``model.train()`` and
  ``model.eval()`` differ only in static attributes, so each mode has its own) and two states:
  the parameters (``nnx.Param``, what is differentiated) and the rest (batch statistics, the
  modules' rng counters: dropout draws fresh keys every step and resumes exactly). Inside the
  compiled step the module is merged back, handed to ``loss_function(model, batch, train)``,
  and split again to collect what it changed. The hot path is ``jax.jit`` over these states
  (DESIGN.md: ``nnx.jit`` costs twice the Python per step).
* ``linen``: ``model.init`` gives ``params`` and the other collections (``batch_stats``) kept in
  ``TrainState.model_state``; ``loss_function_linen(params, state, batch, rng, train)`` gets
  the per-step key ``fold_in(state.rng, state.step)``.
"""

from __future__ import annotations

from typing import Any

import jax

from gyre.core._errors import describe, explain

NNX_REST = "nnx"  # the key of the nnx model's non-parameter state in TrainState.model_state


def model_mode_of(model: Any) -> str:
    """``"nnx"`` or ``"linen"`` for a flax module; a clear error for anything else."""
    from flax import linen, nnx

    if isinstance(model, nnx.Module):
        return "nnx"
    if isinstance(model, linen.Module):
        return "linen"
    raise TypeError(
        explain(
            "the trainer's model must be a flax module",
            expected="an nnx.Module instance (model_mode='nnx') or a linen.Module (model_mode='linen')",
            received=describe(model),
            fix="build the model with flax, e.g. nnx.Linear(64, 10, rngs=nnx.Rngs(0)), or register "
            "a model class with @gyre.config.register_model and name it in the config",
        )
    )


def lazy_init_nnx(module: Any, exmp_input: Any) -> bool:
    """Initialises the ``nnx.bridge.ToNNX`` layers of an nnx ``module`` that have no variables
    yet (linen layers bridged into nnx are built on their first input) by one call on
    ``exmp_input``; ``True`` when there were any. A module without such layers is not called.
    """
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
        raise ValueError(
            explain(
                f"the model's bridged linen layers could not be initialised from the example input "
                f"({type(err).__name__}: {err})",
                expected="an example input the model can be called on (the input of a batch: model(input))",
                received=describe(exmp_input),
                fix="pass exmp_input=next(iter(train_loader)) (a batch whose input the model takes), or "
                "override batch_to_input(self, batch) to return the model's input",
            )
        ) from err
    return True


class NNXModel:
    """An nnx module split for compiled steps (see the module docstring). Its states travel
    as plain nested dicts (``State.to_pure_dict``): a train state of dicts flattens about ten
    times faster than one of nnx ``State`` objects, which every step call pays.
    """

    mode = "nnx"

    def __init__(self, module: Any) -> None:
        self.module = module
        self._eval_def = self._split(module, train=False)[0]
        self._train_def, self._params, self._rest = self._split(module, train=True)

    @staticmethod
    def _split(module: Any, *, train: bool) -> tuple[Any, Any, Any]:
        from flax import nnx

        module.train() if train else module.eval()
        return nnx.split(module, nnx.Param, ...)

    @staticmethod
    def _state(template: Any, pure: Any) -> Any:
        """An nnx ``State`` shaped as ``template`` holding ``pure``'s values (fresh
        Variables, made in the current trace)."""
        from flax import nnx

        state = jax.tree.map(lambda x: x, template)
        nnx.replace_by_pure_dict(state, pure)
        return state

    def initial(self) -> tuple[Any, Any]:
        """The parameters and the rest of the module's state, as plain dicts."""
        _, params, rest = self._split(self.module, train=True)
        return params.to_pure_dict(), rest.to_pure_dict()

    def merge(self, params: Any, rest: Any, *, train: bool) -> Any:
        """The module, rebuilt from its states, in training or evaluation mode."""
        from flax import nnx

        # copy: fresh Variables in the current trace (a BatchNorm updating its statistics
        # inside jax.grad must not touch Variables made by the enclosing jit trace)
        graph = self._train_def if train else self._eval_def
        return nnx.merge(graph, self._state(self._params, params), self._state(self._rest, rest), copy=True)

    def rest_of(self, module: Any) -> Any:
        """What a merged module holds besides its parameters (a plain dict), after a call
        changed it."""
        from flax import nnx

        return nnx.split(module, nnx.Param, ...)[2].to_pure_dict()

    def update_module(self, params: Any, rest: Any) -> Any:
        """Writes trained states back into the user's module object (after training), so
        ``trainer.model`` is the trained model; returns it."""
        from flax import nnx

        nnx.update(self.module, self._state(self._params, params), self._state(self._rest, rest))
        return self.module


class LinenModel:
    """A linen module with its initialised variables (see the module docstring)."""

    mode = "linen"

    def __init__(self, module: Any) -> None:
        self.module = module

    def init(self, key: jax.Array, exmp_input: Any) -> tuple[Any, dict[str, Any]]:
        """``(params, other collections)`` from ``module.init`` on an example input; the
        module is called with ``train=True`` when its ``__call__`` takes ``train``."""
        params_key, dropout_key = jax.random.split(key)
        kwargs = {"train": True} if _takes_train(self.module) else {}
        variables = self.module.init({"params": params_key, "dropout": dropout_key}, exmp_input, **kwargs)
        variables = dict(variables)
        params = variables.pop("params", {})
        return params, variables

    def apply(
        self, params: Any, model_state: Any, inputs: Any, rng: jax.Array | None, *, train: bool, sow: bool = False
    ) -> tuple[Any, Any]:
        """``(outputs, new mutable collections)``: in training, the collections of
        ``model_state`` are mutable and dropout draws from ``rng``; with ``sow``, what the
        model sows comes back too, as the collection ``intermediates``."""
        kwargs = {"train": train} if _takes_train(self.module) else {}
        variables = {"params": params, **dict(model_state)}
        rngs = {"dropout": rng} if rng is not None else None
        mutable = [*(model_state if train else ()), *(["intermediates"] if sow else [])]
        if mutable:
            out, mutated = self.module.apply(variables, inputs, rngs=rngs, mutable=mutable, **kwargs)
            return out, dict(mutated) if train else {**dict(model_state), **dict(mutated)}
        return self.module.apply(variables, inputs, rngs=rngs, **kwargs), dict(model_state)


def _takes_train(module: Any) -> bool:
    import inspect

    try:
        return "train" in inspect.signature(type(module).__call__).parameters
    except (TypeError, ValueError):
        return False
