"""jaxloop's ``Step``: a class whose ``run`` is the maths of one step, compiled and sharded by a
partitioner.

A call runs ``preprocess_batch`` and ``shard_batch`` on the host, then ``begin``, the compiled
``run`` and ``end``; as in jaxloop, only ``run`` is compiled (once, the state donated when the
step trains).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax
from flax.core import FrozenDict

from gyre.core._checks import instance, whole
from gyre.core._errors import as_pair, describe, explain
from gyre.core._logs import Logs
from gyre.core._train_state import TrainState, check_optimizer
from gyre.parallel._partitioners import Partitioner, SingleDevicePartitioner
from gyre.steps._actions import check_actions
from gyre.steps._restore import check_item_name, latest_step, restore_pytree

Batch = Any
Output = dict[str, Any]

_log = logging.getLogger(__name__)


_STEP_ACTION = "StepNumberAction(writer, interval=10)"  # the action an error's fix shows


def count_params(params: Any) -> int:
    """The number of parameters (array elements) in ``params``."""
    return int(sum(np.size(leaf) for leaf in jax.tree_util.tree_leaves(params)))


class Step:
    """One train or eval step in jaxloop's shape: override :meth:`run` (and optionally
    :meth:`preprocess_batch`, :meth:`begin`, :meth:`end`).

    The arguments are jaxloop's, in its order.

    Args:
        base_prng: the base PRNG key (or a pytree of keys); it initialises the model and
            :meth:`prng_key` folds the step number into it.
        model: a flax linen module, or an ``nnx.Module`` class built with ``nnx_model_args`` /
            ``**nnx_model_kwargs`` (bridged to linen).
        optimizer: an optax optimizer; ``None`` for a step that never updates the state.
        partitioner: default :class:`~gyre.SingleDevicePartitioner`; a gyre strategy or its
            name is accepted too.
        train: a training step (``self.train`` in ``run``), which donates its state.
        should_shard_batch: ``False`` leaves sharding to you (:meth:`shard_batch`).
        nnx_model_args: positional arguments of an ``nnx.Module`` class (``rngs`` is the
            bridge's); required for such a class, as in jaxloop.
        begin_actions: jaxloop actions run before the step (``outputs=None``) when the 1-based
            ``per_loop_step_number`` a loop passes is a multiple of their interval.
        end_actions: the same, after the step with its state and outputs.
        chkpt_item_name: the orbax item :meth:`restore_model` reads (jaxloop's ``default``).

    Example:
        >>> import gyre, jax, jax.numpy as jnp, optax, flax.linen as nn
        >>> class Regression(gyre.Step):
        ...     def run(self, state, batch):
        ...         x, y = batch
        ...         def loss_fn(params):
        ...             return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)
        ...         loss, grads = jax.value_and_grad(loss_fn)(state.params)
        ...         return state.apply_gradients(grads=grads), {"loss": loss}
        >>> step = Regression(jax.random.key(0), nn.Dense(1), optimizer=optax.sgd(0.1), train=True)
        >>> state = step.initialize_model((1, 2))
        >>> x = jnp.ones((4, 2)); y = jnp.full((4, 1), 3.0)
        >>> for _ in range(60):
        ...     state, outputs = step(state, (x, y))
        >>> round(float(outputs["loss"]), 4), int(state.step), step.compiled_count()
        (0.0, 60, 1)
    """

    def __init__(
        self,
        base_prng: Any,
        model: Any,
        optimizer: optax.GradientTransformation | None = None,
        partitioner: Partitioner | Any = None,
        train: bool = False,
        should_shard_batch: bool = True,
        nnx_model_args: tuple[Any, ...] | None = None,
        begin_actions: Sequence[Any] | None = None,
        end_actions: Sequence[Any] | None = None,
        chkpt_item_name: str = "default",
        **nnx_model_kwargs: Any,
    ) -> None:
        self._begin_actions = check_actions(begin_actions, "begin_actions", "Step", _STEP_ACTION)
        self._end_actions = check_actions(end_actions, "end_actions", "Step", _STEP_ACTION)
        self._chkpt_item_name = check_item_name(chkpt_item_name)
        self._base_prng = base_prng
        self._model = _as_linen(model, nnx_model_args, nnx_model_kwargs)
        check_optimizer(optimizer, argument="optimizer", none_means="an evaluation step")
        self._optimizer = optimizer
        self._partitioner = _as_partitioner(partitioner)
        self._train = bool(train)
        self._should_shard_batch = should_shard_batch
        self._jit_kwargs: dict[str, Any] = {}
        self._donate = self._train
        self._cached_run: Callable[..., tuple[Any, Any]] | None = None
        self._num_params: int | None = None
        self._num_flops: float | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={type(self._model).__name__}, train={self._train}, "
            f"partitioner={self._partitioner!r})")

    # -- properties ----------------------------------------------------------------------------
    @property
    def train(self) -> bool:
        """Whether this is a training step."""
        return self._train

    @property
    def begin_actions(self) -> list[Any]:
        """The actions run before the step.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> gyre.Step(jax.random.key(0), nn.Dense(1)).begin_actions
            []
        """
        return self._begin_actions

    @property
    def end_actions(self) -> list[Any]:
        """The actions run after the step.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> writer = gyre.jaxloop.StepNumberWriter()
            >>> action = gyre.jaxloop.StepNumberAction(writer, interval=2)
            >>> step = gyre.Step(jax.random.key(0), nn.Dense(1), end_actions=[action])
            >>> step.end_actions == [action]
            True
        """
        return self._end_actions

    @property
    def model(self) -> nn.Module:
        """The (linen) model."""
        return self._model

    @property
    def optimizer(self) -> optax.GradientTransformation | None:
        """The optimizer the state is created with."""
        return self._optimizer

    @property
    def partitioner(self) -> Partitioner:
        """The partitioner (its ``strategy`` does the placing and compiling)."""
        return self._partitioner

    @property
    def num_params(self) -> int | None:
        """The parameter count, once :meth:`compute_num_params` ran."""
        return self._num_params

    @property
    def num_flops(self) -> float | None:
        """The compiled ``run``'s flop count, once :meth:`compute_num_flops` ran."""
        return self._num_flops

    # -- the model -------------------------------------------------------------------------------
    def initialize_model(self, spec: Any, log_num_params: bool = False, **kwargs: Any) -> TrainState:
        """A :class:`~gyre.TrainState` for the model, initialised from a spec of one input batch,
        placed by the partitioner.

        The spec is a shape, a ``(shape, dtype)`` pair, a ``jax.ShapeDtypeStruct``, an array, or a
        pytree of these; its zero batch goes through :meth:`preprocess_batch`. Parameters go to
        ``state.params``, other collections to ``state.model_state``; ``state.rng`` is the base key.

        Args:
            log_num_params: log the parameter count at INFO.
            **kwargs: static keyword arguments of the model's ``__call__`` (``train=False``).

        Raises:
            ValueError: the spec is not a spec, or the model cannot run on it (its error chained).

        Example:
            >>> import gyre, jax, flax.linen as nn, optax
            >>> step = gyre.Step(jax.random.key(0), nn.Dense(3), optimizer=optax.adam(1e-3))
            >>> state = step.initialize_model((1, 5))
            >>> state.params["kernel"].shape, int(state.step)
            ((5, 3), 0)
        """
        batch = self.preprocess_batch(zeroed_batch(spec))
        model, rngs, tx = self._model, self._base_prng, self._optimizer
        rng = _first_key(rngs)

        def init_fn(batch: Any) -> TrainState:
            variables = dict(model.init(rngs, batch, **kwargs))
            params = variables.pop("params", {})
            return TrainState.create(params=params, tx=tx, apply_fn=model.apply, rng=rng, model_state=variables)

        try:
            jax.eval_shape(init_fn, batch)
        except Exception as err:  # the model's own error, about its input, is chained
            raise ValueError(explain(
                f"initialize_model could not run {type(model).__name__} on inputs built from the spec",
                expected=f"a spec of one input batch that {type(model).__name__}.__call__ accepts (a shape with "
                "its batch dimension, e.g. (1, 28, 28, 1), a (shape, dtype) pair, a jax.ShapeDtypeStruct, "
                "or a pytree of them shaped like the model's input)",
                received=f"spec {_short(spec)} -> inputs {_shapes(batch)}; the model raised "
                f"{type(err).__name__}: {_first_line(err)}",
                fix="pass the shape of what the model takes, e.g. step.initialize_model((1, <features>)); "
                "if preprocess_batch reshapes the batch, give the spec of the batch before it")) from err
        state = self._partitioner.shard_init_fn(init_fn)(batch)
        if log_num_params:
            _log.info("Initialized model with %d parameters.", self.compute_num_params(state))
        return state

    def restore_model(
        self,
        state: TrainState,
        checkpoint_dir: str | os.PathLike[str],
        step: int | None = None,
        transforms: Any = None,
    ) -> TrainState:
        """The state read from a jaxloop checkpoint (``<checkpoint_dir>/<step>/<chkpt_item_name>``)
        onto ``state``'s shardings; ``state`` itself when there is none.

        Unlike jaxloop, ``state``'s arrays are not deleted.

        Args:
            step: default: the newest complete one.
            transforms: orbax ``PyTreeRestore`` transforms (default: every ``params`` leaf read).

        Raises:
            ValueError: ``step`` is not a whole number >= 0.
            FileNotFoundError: a given ``step`` is not there, or has no item ``chkpt_item_name``.

        Example:
            >>> import gyre, jax, flax.linen as nn, tempfile
            >>> step = gyre.Step(jax.random.key(0), nn.Dense(3))
            >>> state = step.initialize_model((1, 5))
            >>> step.restore_model(state, tempfile.mkdtemp()) is state  # nothing saved there
            True
        """
        step = whole(step, "restore_model's step", none=True, expected="a saved step, or None for the newest",
                     fix="pass step=None")
        found = latest_step(checkpoint_dir) if step is None else step
        if found is None:
            _log.info("No checkpoint found in %s. Returning the original model state.", checkpoint_dir)
            return state
        _log.info("Restoring model from %s at step %d.", checkpoint_dir, found)
        return restore_pytree(state, checkpoint_dir, found, item=self._chkpt_item_name, transforms=transforms)

    def compute_num_params(self, state: TrainState) -> int:
        """The number of parameters in ``state.params`` (also kept in :attr:`num_params`).

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> step = gyre.Step(jax.random.key(0), nn.Dense(3))
            >>> step.compute_num_params(step.initialize_model((1, 5)))
            18
        """
        self._num_params = count_params(state.params)
        return self._num_params

    def compute_num_flops(self, state: TrainState, batch: Batch) -> float:
        """The flop count of the compiled ``run`` on ``batch`` (XLA's cost analysis).

        Example:
            >>> import gyre, jax, jax.numpy as jnp, flax.linen as nn
            >>> class Forward(gyre.Step):
            ...     def run(self, state, batch):
            ...         return state, {"y": state.apply_fn({"params": state.params}, batch)}
            >>> step = Forward(jax.random.key(0), nn.Dense(3))
            >>> state = step.initialize_model((1, 5))
            >>> step.compute_num_flops(state, jnp.ones((2, 5))) > 0
            True
        """
        batch = self.preprocess_batch(batch)
        batch = self.shard_batch(batch) if self._should_shard_batch else batch
        return self._count_flops(state, batch)

    def _count_flops(self, state: TrainState, batch: Batch, **kwargs: Any) -> float:
        run = self._get_run()
        compiled = getattr(run, "compiled", run)
        if not hasattr(compiled, "lower"):
            return 0.0
        analysis = compiled.lower(state, batch, **kwargs).compile().cost_analysis()
        if isinstance(analysis, list | tuple):
            analysis = analysis[0] if analysis else {}
        self._num_flops = float((analysis or {}).get("flops", 0.0))
        return self._num_flops

    def prng_key(self, step: int | jax.Array) -> Any:
        """The key of step ``step``: ``fold_in(base_prng, step)`` (each key of a pytree); usable
        inside ``run``.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> key = jax.random.PRNGKey(0)
            >>> step = gyre.Step(key, nn.Dense(1))
            >>> bool((step.prng_key(3) == jax.random.fold_in(key, 3)).all())
            True
        """
        return jax.tree_util.tree_map(lambda key: jax.random.fold_in(key, step), self._base_prng)

    # -- the hooks -------------------------------------------------------------------------------
    def preprocess_batch(self, batch: Batch) -> Batch:
        """Prepares a raw batch on the host before sharding (also the zero batch of
        :meth:`initialize_model`); the identity by default.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> gyre.Step(jax.random.key(0), nn.Dense(1)).preprocess_batch({"x": 1})
            {'x': 1}
        """
        return batch

    def shard_batch(self, batch: Batch) -> Batch:
        """The batch placed by the partitioner (split over its data axis).

        Example:
            >>> import gyre, jax, flax.linen as nn, numpy as np
            >>> step = gyre.Step(jax.random.key(0), nn.Dense(1),
            ...                  partitioner=gyre.DataParallelPartitioner())
            >>> step.shard_batch(np.zeros((8 * jax.device_count(), 2))).sharding.spec
            P('data',)
        """
        return self._partitioner.shard_batch(batch)

    def begin(self, state: TrainState, batch: Batch) -> tuple[TrainState, Batch]:
        """Runs before the compiled :meth:`run`, outside ``jit``; the identity by default.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> gyre.Step(jax.random.key(0), nn.Dense(1)).begin("state", "batch")
            ('state', 'batch')
        """
        return state, batch

    def run(self, state: TrainState, batch: Batch) -> tuple[TrainState, Output | None]:
        """The step itself, to override: jittable, returning ``(state, outputs)`` with ``outputs`` a
        dict.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> gyre.Step(jax.random.key(0), nn.Dense(1)).run(None, None)
            Traceback (most recent call last):
            ...
            NotImplementedError: Step.run is not implemented
            ...
        """
        raise NotImplementedError(_not_implemented(type(self)))

    def end(self, state: TrainState, outputs: Output | None) -> tuple[TrainState, Output | None]:
        """Runs after the compiled :meth:`run`, outside ``jit``; the identity by default.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> gyre.Step(jax.random.key(0), nn.Dense(1)).end("state", {"loss": 0.0})
            ('state', {'loss': 0.0})
        """
        return state, outputs

    # -- compiling and calling -----------------------------------------------------------------
    def compile(self, *, donate: bool | None = None, **jit_kwargs: Any) -> None:
        """Sets the options ``run`` is compiled with at the next call.

        Args:
            donate: donate the state to ``run`` (default: when the step trains).
            **jit_kwargs: ``jax.jit`` options; an unknown one raises ``TypeError`` here, as in
                jaxloop.

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> class Same(gyre.Step):
            ...     def run(self, state, batch):
            ...         return state, {}
            >>> step = Same(jax.random.key(0), nn.Dense(1), train=True)
            >>> step.compile(donate=False)
            >>> step.compiled_count()
            0
            >>> step.compile(not_a_jit_option=1)
            Traceback (most recent call last):
            ...
            TypeError: compile() got an unexpected keyword argument 'not_a_jit_option'.
            ...
        """
        donate = self._train if donate is None else bool(donate)
        self._cached_run = self._build_run(donate, dict(jit_kwargs))  # bad options raise here
        self._donate, self._jit_kwargs = donate, dict(jit_kwargs)

    def _build_run(self, donate: bool, jit_kwargs: dict[str, Any]) -> Callable[..., tuple[Any, Any]]:
        if getattr(type(self).run, "__func__", type(self).run) is Step.run:
            raise NotImplementedError(_not_implemented(type(self)))
        partitioner = self._partitioner
        if type(partitioner).partition is not Partitioner.partition:
            # a partitioner written for jaxloop overrides partition(fn, **jit_kwargs): it is
            # the whole of how its steps compile, so it is used as it is
            return partitioner.partition(self.run, **jit_kwargs)
        return partitioner.partition_step(self.run, donate=donate, **jit_kwargs)

    def _get_run(self) -> Callable[..., tuple[Any, Any]]:
        if self._cached_run is None:
            self._cached_run = self._build_run(self._donate, self._jit_kwargs)
        return self._cached_run

    def __call__(
        self,
        state: TrainState,
        batch: Batch,
        per_loop_step_number: int = 0,
        log_num_flops: bool = False,
        **kwargs: Any,
    ) -> tuple[TrainState, Output | None]:
        """Runs the step: ``preprocess_batch``, ``shard_batch``, ``begin``, the compiled ``run``,
        ``end``; returns ``(state, outputs)``.

        Args:
            state: donated when the step trains: use the returned one.
            per_loop_step_number: the 1-based step number a jaxloop loop passes (not to ``run``):
                the actions run when it is a multiple of their interval (never at 0).
            log_num_flops: compute :attr:`num_flops` once and log it at INFO.
            **kwargs: passed to ``run`` as traced arguments.

        Example:
            >>> import gyre, jax, jax.numpy as jnp, flax.linen as nn
            >>> class Count(gyre.Step):
            ...     def run(self, state, batch):
            ...         return state.replace(step=state.step + 1), {"n": batch.shape[0]}
            >>> step = Count(jax.random.key(0), nn.Dense(1))
            >>> state, outputs = step(step.initialize_model((1, 2)), jnp.ones((4, 2)))
            >>> int(state.step), int(outputs["n"])
            (1, 4)
        """
        n = per_loop_step_number
        if n and self._begin_actions:
            _run_actions(self._begin_actions, n, state, None)
        batch = self.preprocess_batch(batch)
        batch = self.shard_batch(batch) if self._should_shard_batch else batch
        begun = self.begin(state, batch)
        if type(begun) is not tuple or len(begun) != 2:  # (a missing return: explained, not "cannot unpack")
            begun = as_pair(begun, f"{type(self).__name__}.begin", "(state, batch)", "state, batch")
        state, batch = begun
        if log_num_flops and self._num_flops is None:
            _log.info("Step flops: %s", self._count_flops(state, batch, **kwargs))
        state, outputs = self._get_run()(state, batch, **kwargs)
        ended = self.end(state, outputs)
        if type(ended) is not tuple or len(ended) != 2:
            ended = as_pair(ended, f"{type(self).__name__}.end")
        state, outputs = ended
        if n and self._end_actions:
            _run_actions(self._end_actions, n, state, outputs)
        return state, outputs

    def as_callback(self, collection: str = "metrics") -> Callable[[Any, Any], tuple[Logs, Any]]:
        """This step as a ``gyre.loop`` callback ``(state, batch) -> (Logs, state)``, outputs logged
        under ``collection``.

        Example:
            >>> import gyre, jax, jax.numpy as jnp, flax.linen as nn
            >>> class Mean(gyre.Step):
            ...     def run(self, state, batch):
            ...         return state, {"mean": batch.mean()}
            >>> step = Mean(jax.random.key(0), nn.Dense(1))
            >>> state, history, _ = gyre.loop(step.initialize_model((1, 2)),
            ...     [jnp.ones((2, 2))] * 3, {gyre.every(1): [step.as_callback()]})
            >>> history.collect("mean")
            [1.0, 1.0, 1.0]
        """

        def step_callback(state: Any, batch: Any) -> tuple[Logs, Any]:
            state, outputs = self(state, batch)
            return to_logs(outputs, collection), state

        step_callback.__name__ = step_callback.__qualname__ = f"{type(self).__name__}.as_callback"
        return step_callback

    def compiled_count(self) -> int:
        """How many times ``run`` was traced (1 after any number of same-shaped calls).

        Example:
            >>> import gyre, jax, flax.linen as nn
            >>> gyre.Step(jax.random.key(0), nn.Dense(1)).compiled_count()
            0
        """
        if self._cached_run is None or not self._partitioner.strategy.compiles:
            return 0
        return int(getattr(self._cached_run, "trace_count", lambda: 0)())


def to_logs(outputs: Mapping[str, Any] | Logs | None, collection: str = "metrics") -> Logs:
    """A step's outputs dict as :class:`~gyre.Logs` (a ``Logs`` is returned as it is).

    Example:
        >>> to_logs({"loss": 0.5})
        Logs(metrics={'loss': 0.5})
    """
    if isinstance(outputs, Logs):
        return outputs
    if outputs is None:
        return Logs()
    return Logs().add_entries(collection, instance(
        outputs, "outputs", Mapping, problem="a Step's run must return (state, outputs) with outputs a dict",
        expected="outputs like {'loss': loss, 'accuracy': accuracy}, or None",
        fix="return state, {'name': value, ...} from run"))


def zeroed_batch(spec: Any) -> Any:
    """A numpy batch of zeros from a spec: shapes (float32), ``(shape, dtype)`` pairs,
    ``jax.ShapeDtypeStruct``\\ s or arrays, in any pytree.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> b = zeroed_batch({"x": (2, 3), "y": ((2,), jnp.int32), "z": jax.ShapeDtypeStruct((1,), jnp.bool_)})
        >>> {k: (v.shape, str(v.dtype)) for k, v in b.items()}
        {'x': ((2, 3), 'float32'), 'y': ((2,), 'int32'), 'z': ((1,), 'bool')}
    """

    def leaf(x: Any) -> Any:
        if _is_shape(x):
            return np.zeros(_shape(x), np.float32)
        if _is_pair(x):
            return np.zeros(_shape(x[0]), np.dtype(x[1]))
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return np.zeros(tuple(x.shape), x.dtype)
        raise ValueError(explain(
            "initialize_model's spec has a leaf that is not a shape",
            expected="shapes like (1, 28, 28, 1), (shape, dtype) pairs, jax.ShapeDtypeStruct or arrays, in any pytree",
            received=f"{describe(x)} in spec {_short(spec)}",
            fix="describe each input as a shape, e.g. initialize_model({'image': (1, 8, 8, 1)})"))

    return jax.tree_util.tree_map(leaf, spec, is_leaf=lambda x: _is_shape(x) or _is_pair(x) or hasattr(x, "shape"))


# -- helpers -----------------------------------------------------------------------------------


def _run_actions(actions: Sequence[Any], n: int, state: Any, outputs: Any) -> None:
    for action in actions:
        if n % action.interval == 0:
            action(state, outputs, per_loop_step_number=n)


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _is_shape(x: Any) -> bool:
    return _is_int(x) or (isinstance(x, tuple | list) and all(_is_int(i) for i in x))


def _shape(x: Any) -> tuple[int, ...]:
    return (int(x),) if _is_int(x) else tuple(int(i) for i in x)


def _is_pair(x: Any) -> bool:
    if not (isinstance(x, tuple | list) and len(x) == 2 and _is_shape(x[0])):
        return False
    if _is_int(x[1]) or isinstance(x[1], tuple | list):
        return False
    try:
        np.dtype(x[1])
    except TypeError:
        return False
    return True


def _shapes(batch: Any) -> str:
    return str(jax.tree_util.tree_map(lambda x: f"{tuple(np.shape(x))} {np.asarray(x).dtype}", batch))


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _first_key(rngs: Any) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(rngs)
    if not leaves:
        raise TypeError(explain(
            "base_prng holds no PRNG key",
            expected="jax.random.key(seed), jax.random.PRNGKey(seed), or a dict of keys",
            received=describe(rngs), fix="pass base_prng=jax.random.key(0)"))
    return leaves[0]


def _not_implemented(cls: type) -> str:
    return explain(
        f"{cls.__name__}.run is not implemented",
        expected="a subclass of gyre.Step that overrides run(self, state, batch) -> (state, outputs)",
        received=f"{cls.__qualname__}, which inherits Step.run",
        fix="define run in your subclass: compute the loss (and gradients with "
        "jax.value_and_grad when self.train), return (state, {'loss': loss, ...})")


def _as_linen(model: Any, args: tuple[Any, ...] | None, kwargs: dict[str, Any]) -> nn.Module:
    if isinstance(model, nn.Module):
        if args is not None or kwargs:
            raise ValueError(explain(
                "nnx_model_args / model keyword arguments are only for an nnx.Module class",
                expected="a linen module alone, or an nnx.Module class with its arguments",
                received=f"{type(model).__name__} with args={args!r}, kwargs={sorted(kwargs)}",
                fix="drop the extra arguments, or build the linen module with them"))
        return model
    from flax import nnx

    if isinstance(model, type) and issubclass(model, nnx.Module):
        if args is None and not kwargs:
            raise ValueError(explain(
                f"an nnx.Module class needs its constructor arguments: {model.__name__} "
                "is built by the bridge, which cannot guess them",
                expected="nnx_model_args=(...) (the positional arguments of "
                f"{model.__name__}.__init__ but rngs), and keywords as **nnx_model_kwargs",
                received=f"model={model.__name__} with nnx_model_args=None",
                fix="pass e.g. nnx_model_args=(in_features, out_features), or "
                "nnx_model_args=() when the class takes only rngs"))
        return nnx.bridge.ToLinen(model, tuple(args or ()), kwargs=FrozenDict(kwargs))
    received = describe(model)
    fix = "pass a flax.linen module instance, e.g. model=MLP()"
    if isinstance(model, nnx.Module):
        fix = (
            f"pass the class and its arguments: model={type(model).__name__}, "
            "nnx_model_args=(...) (the bridge builds it with its own rngs)")
    raise TypeError(explain(
        "Step's model must be a flax linen module or an nnx.Module class",
        expected="nn.Module instance, or an nnx.Module subclass with nnx_model_args=", received=received,
        fix=fix))


def _as_partitioner(partitioner: Any) -> Partitioner:
    if partitioner is None:
        return SingleDevicePartitioner()
    if isinstance(partitioner, Partitioner):
        return partitioner
    with contextlib.suppress(ValueError):
        return Partitioner(partitioner)
    raise TypeError(explain(
        "partitioner= must be a gyre partitioner or strategy",
        expected="gyre.SingleDevicePartitioner(), gyre.DataParallelPartitioner(mesh=..., data_axis=...), "
        "gyre.SPMDPartitioner(mesh=..., rules=...), or a strategy such as gyre.FSDP()",
        received=describe(partitioner), fix="pass one of the above"))
