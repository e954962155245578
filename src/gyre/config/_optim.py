"""Optimizers built from the ``optimizer`` config section.

``class_name`` is a registered optimizer or the lowercase name of an optax optimizer (checked
against optax's signature). Each is ``optax.inject_hyperparams`` around
``chain(transforms before, optimizer, transforms after)``, so the current learning rate lives
in the optimizer state (:func:`learning_rate_of`). :class:`OptimizerBuilder` is jax_trainer's
builder over them.
"""

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

from gyre.config._components import (
    at,
    call_section,
    check_keys,
    class_name_of,
    flag,
    here,
    real,
    run_length,
    run_steps,
    to_dict,
    whole,
)
from gyre.config._jax_trainer import as_mapping, from_jax_trainer, is_jax_trainer_section
from gyre.config._registry import OPTIMIZERS
from gyre.config._schedules import ScheduleConfig, build_schedule
from gyre.config._transforms import (
    Transform,
    TransformsConfig,
    WeightDecayTransform,
    build_transform,
    build_transforms,
)
from gyre.core._checks import instance
from gyre.core._errors import ExplainedKeyError, describe, explain, suggest, warn
from gyre.core._lr_schedule import total_steps

_INJECTED = (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)


def assemble_optimizer(
    core: Callable[[Any], optax.GradientTransformation],
    *,
    learning_rate: ScheduleConfig | optax.Schedule,
    transforms: TransformsConfig | list[Transform] = (),
    log_learning_rate: bool = True,
) -> optax.GradientTransformation:
    """``core`` with its learning rate injected and the transforms chained around it; use it to
    register an optimizer.

    Args:
        core: ``learning_rate -> optax optimizer``.
        learning_rate: a number, a schedule section or an ``optax.Schedule``.
        transforms: transform sections (a list, or a mapping of names to sections).
        log_learning_rate: ``False`` passes the schedule to ``core`` as it is (jax_trainer's
            key): :func:`learning_rate_of` then finds nothing.

    Example:
        >>> import jax.numpy as jnp
        >>> tx = assemble_optimizer(optax.sgd, learning_rate=0.5,
        ...                         transforms=[{"class_name": "GradClipValue", "max_delta": 1.0}])
        >>> params = {"w": jnp.zeros(2)}
        >>> tx.update({"w": jnp.array([4.0, 0.5])}, tx.init(params), params)[0]["w"].tolist()
        [-0.5, -0.25]
    """
    if isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool):
        schedule: Any = real("learning_rate", learning_rate, minimum=0.0)
    else:
        schedule = build_schedule(learning_rate, where=here("learning_rate"))
    parts = build_transforms(transforms, where=here("transforms"))
    before = [t for t in parts if t.before_optimizer]
    after = [t for t in parts if not t.before_optimizer]

    def factory(learning_rate: Any) -> optax.GradientTransformation:
        return optax.chain(
            *(t.make(learning_rate) for t in before),
            core(learning_rate),
            *(t.make(learning_rate) for t in after),
        )

    if not flag("log_learning_rate", log_learning_rate):
        return factory(schedule)
    return optax.inject_hyperparams(factory, hyperparam_dtype=jnp.float32)(learning_rate=schedule)


def _beta(key: str, value: object) -> float:
    number = real(key, value, minimum=0.0)
    if number >= 1.0:
        raise ValueError(explain(
            f"{here(key)} must be in [0, 1)",
            expected="e.g. 0.9", received=describe(value), fix=f"write {key}: 0.9"))
    return number


def _weight_decay(value: object) -> tuple[float, Callable[[Any], Any] | None]:
    """The rate and mask of an optimizer's own decoupled weight decay (``before_optimizer: true`` is
    an error)."""
    where = here("weight_decay")
    if isinstance(value, (Mapping, Transform)):
        bare = isinstance(value, Mapping) and "class_name" not in value
        built = build_transform({"class_name": "WeightDecay", **value} if bare else value, where=where)
        coupled = isinstance(value, Mapping) and value.get("before_optimizer") is True
        if not isinstance(built, WeightDecayTransform) or coupled:
            raise ValueError(explain(
                f"{where} must be a WeightDecay section applied inside the optimizer (decoupled)",
                expected="class_name: WeightDecay with before_optimizer: false",
                received=f"{built.name}, before_optimizer: {built.before_optimizer}",
                fix="for other transforms, or weight decay before the optimizer, use the transforms key"))
        return built.value, built.mask
    return real("weight_decay", value, minimum=0.0), None


def _adam(b1: object, b2: object, eps: object, eps_root: object) -> dict[str, float]:
    """Adam's checked ``b1``, ``b2``, ``eps`` and ``eps_root`` (AdamW's and Lamb's too)."""
    return {"b1": _beta("b1", b1), "b2": _beta("b2", b2), "eps": real("eps", eps, minimum=0.0),
            "eps_root": real("eps_root", eps_root, minimum=0.0)}


def AdamW(  # noqa: N802 (config class names)
    *,
    learning_rate: ScheduleConfig,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    weight_decay: float | Mapping[str, Any] = 0.0,
    nesterov: bool = False,
    transforms: TransformsConfig = (),
    log_learning_rate: bool = True,
) -> optax.GradientTransformation:
    """Adam with decoupled weight decay (``optax.adamw``).

    ``weight_decay`` is a rate for every parameter, or a ``WeightDecay`` section (``value`` and
    regex mask; ``class_name`` may be left out).
    """
    decay, mask = _weight_decay(weight_decay)
    adam, nesterov = _adam(b1, b2, eps, eps_root), flag("nesterov", nesterov)
    return assemble_optimizer(
        lambda lr: optax.adamw(lr, **adam, weight_decay=decay, mask=mask, nesterov=nesterov),
        learning_rate=learning_rate, transforms=transforms, log_learning_rate=log_learning_rate)


@OPTIMIZERS.register
def Adam(  # noqa: N802
    *,
    learning_rate: ScheduleConfig,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    nesterov: bool = False,
    transforms: TransformsConfig = (),
    log_learning_rate: bool = True,
) -> optax.GradientTransformation:
    """Adam (``optax.adam``)."""
    adam, nesterov = _adam(b1, b2, eps, eps_root), flag("nesterov", nesterov)
    return assemble_optimizer(lambda lr: optax.adam(lr, **adam, nesterov=nesterov), learning_rate=learning_rate,
                              transforms=transforms, log_learning_rate=log_learning_rate)


def SGD(  # noqa: N802
    *,
    learning_rate: ScheduleConfig,
    momentum: float | None = 0.0,
    nesterov: bool = False,
    transforms: TransformsConfig = (),
    log_learning_rate: bool = True,
) -> optax.GradientTransformation:
    """Stochastic gradient descent (``optax.sgd``); ``momentum`` 0 or ``null`` keeps no momentum state."""
    beta = 0.0 if momentum is None else _beta("momentum", momentum)
    nesterov = flag("nesterov", nesterov)
    if nesterov and beta == 0.0:
        raise ValueError(explain(
            f"{here('nesterov')}: Nesterov momentum needs a momentum",
            expected="momentum > 0 with nesterov: true", received=f"momentum: {momentum!r}",
            fix="set momentum: 0.9, or nesterov: false"))
    return assemble_optimizer(lambda lr: optax.sgd(lr, momentum=beta or None, nesterov=nesterov),
                              learning_rate=learning_rate, transforms=transforms, log_learning_rate=log_learning_rate)


def Lamb(  # noqa: N802
    *,
    learning_rate: ScheduleConfig,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float | Mapping[str, Any] | None = None,
    transforms: TransformsConfig = (),
    log_learning_rate: bool = True,
) -> optax.GradientTransformation:
    """LAMB as the kpoeppel fork builds it: the trust ratio applies only to the parameters the
    weight decay's mask chooses.

    ``weight_decay`` as in :func:`AdamW`; left out, a ``WeightDecay`` of 0 with its default mask
    (paths ending in ``weight`` or ``kernel``); a number decays, and trust-ratios, every parameter.
    """
    decay, mask = _weight_decay({"value": 0.0} if weight_decay is None else weight_decay)
    adam = _adam(b1, b2, eps, eps_root)

    def lamb(lr: Any) -> optax.GradientTransformation:
        trust = optax.scale_by_trust_ratio()
        return optax.chain(
            optax.scale_by_adam(**adam),
            optax.add_decayed_weights(decay, mask),
            trust if mask is None else optax.masked(trust, mask),
            optax.scale_by_learning_rate(lr),
        )

    return assemble_optimizer(
        lamb, learning_rate=learning_rate, transforms=transforms, log_learning_rate=log_learning_rate
    )


def optax_optimizers() -> list[str]:
    """The optax optimizers a config may name in lowercase.

    Example:
        >>> {"adabelief", "lion", "sgd"} <= set(optax_optimizers())
        True
    """
    return [name for name in dir(optax) if optax_optimizer(name) is not None]


def optax_optimizer(name: str) -> Callable[..., optax.GradientTransformation] | None:
    """The optax optimizer a config may name ``name`` (lowercase, with a learning_rate), else None."""
    if not name.isidentifier() or not name.islower() or name.startswith(("_", "scale_by")):
        return None
    function = getattr(optax, name, None)
    if not callable(function) or isinstance(function, type):
        return None
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    return function if "learning_rate" in parameters else None


def unknown_optimizer(name: str, where: str) -> str:
    """The message for an optimizer name neither registered nor optax's (the schema's too)."""
    known, fallback = list(OPTIMIZERS), optax_optimizers()
    return explain(
        f"unknown optimizer {name!r} at {where}.class_name." + suggest(name, known + fallback),
        expected=f"one of the registered optimizers: {', '.join(known)}; or an optax optimizer: {', '.join(fallback)}",
        received=describe(name),
        fix="use one of these names, or register your own with @gyre.config.register_optimizer")


def _build_from_optax(
    name: str, function: Callable[..., Any], section: Mapping[str, Any], where: str
) -> Any:
    kwargs = {k: v for k, v in section.items() if k not in ("class_name", "transforms")}
    check_keys(function, f"optax.{name}", kwargs, where=where)
    rate = kwargs.pop("learning_rate")
    with at(where):
        try:
            function(learning_rate=0.0, **kwargs)
        except (TypeError, ValueError) as error:
            raise TypeError(explain(
                f"optax.{name} rejected the keys at {where}: {error}",
                expected=f"the arguments of optax.{name}{inspect.signature(function)}",
                received=describe(kwargs), fix="fix the values (see optax's documentation)")) from None
        return assemble_optimizer(
            lambda lr: function(learning_rate=lr, **kwargs),
            learning_rate=rate,
            transforms=section.get("transforms", ()),
        )


def build_optimizer(
    section: Mapping[str, Any], *, where: str = "optimizer", run_steps: int | None = None
) -> optax.GradientTransformation:
    """The optimizer an ``optimizer`` section describes (jax_trainer's form is read too).

    Args:
        section: the section, with ``class_name`` and the optimizer's keys.
        where: its dotted path, for error messages.
        run_steps: the run's training steps: a schedule that leaves its length out lasts the run,
            and one of another length warns.

    Returns:
        An ``optax.GradientTransformation`` whose state holds the current learning rate.

    Example:
        >>> import jax.numpy as jnp
        >>> tx = build_optimizer({"class_name": "SGD", "learning_rate": {
        ...     "class_name": "Linear", "init_value": 1.0, "end_value": 0.0, "steps": 4}})
        >>> state = tx.init({"w": jnp.zeros(1)})
        >>> float(learning_rate_of(state))
        1.0
    """
    if run_steps is not None:
        with run_length(whole("run_steps", run_steps, minimum=1)):
            return build_optimizer(section, where=where)
    section = to_dict(section)
    if is_jax_trainer_section(section):
        section = from_jax_trainer(section, where=where)
    also = "; or an optax optimizer in lowercase, e.g. adabelief, lion, rmsprop"
    name = class_name_of(section, where=where, registry=OPTIMIZERS, also=also)
    if name in OPTIMIZERS:
        built = call_section(OPTIMIZERS.get(name), name, section, where=where)
    elif (function := optax_optimizer(name)) is not None:
        built = _build_from_optax(name, function, section, where)
    else:
        raise ExplainedKeyError(unknown_optimizer(name, where))
    instance(built, "the optimizer", optax.GradientTransformation,
             problem=f"the optimizer {name!r} at {where} did not return an optax.GradientTransformation",
             expected="an optax.GradientTransformation (build it with assemble_optimizer)",
             fix="return assemble_optimizer(lambda lr: <optax optimizer>(lr, ...), learning_rate=..., transforms=...)")
    _check_fit(section, where)
    return built


def _check_fit(section: Mapping[str, Any], where: str) -> None:
    """Warns when the learning-rate schedule's length is not the run's (when one is known)."""
    run, rate = run_steps(), section.get("learning_rate")
    if run is None or not isinstance(rate, Mapping):
        return
    total = total_steps(build_schedule(rate, where=f"{where}.learning_rate"))
    if total is None or total == run:
        return
    what = (
        f"the run stops at {100 * run / total:.0f}% of it (a warmup or decay never finishes)"
        if total > run
        else f"it holds its last value for the run's last {run - total} steps"
    )
    warn(explain(
        f"{where}.learning_rate ({rate.get('class_name')}) lasts {total} steps, but the run trains {run}: {what}",
        expected=f"a schedule of {run} steps (epochs x batches per epoch)", received=f"{total} steps",
        fix=f"leave its length out (steps, and decay_steps where it has one: the schedule then lasts the run), "
        f"or write its phases for {run} steps"), UserWarning)


def learning_rate_of(opt_state: Any) -> jax.Array | None:
    """The learning rate injected in an optimizer state (the one the last update used), or ``None``.

    A device scalar, found through chains and ``optax.MultiSteps``.

    Example:
        >>> import jax.numpy as jnp
        >>> tx = optax.MultiSteps(build_optimizer({"class_name": "Adam", "learning_rate": 0.25}), 2)
        >>> float(learning_rate_of(tx.init({"w": jnp.zeros(1)})))
        0.25
    """
    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=lambda node: isinstance(node, _INJECTED))
    for node in nodes:
        if isinstance(node, _INJECTED) and "learning_rate" in node.hyperparams:
            rate = node.hyperparams["learning_rate"]
            return rate if isinstance(rate, jax.Array) else getattr(rate, "value", rate)
    return None


class OptimizerBuilder:
    """jax_trainer's optimizer builder over gyre's: ``OptimizerBuilder(config).build_optimizer(
    num_epochs, num_train_steps_per_epoch)`` returns ``(optimizer, lr_schedule)``. The config
    is a section in jax_trainer's form (a dict or an ``ml_collections.ConfigDict``) or in
    gyre's; a schedule that leaves its length out lasts ``num_epochs * num_train_steps_per_epoch``.

    Example:
        >>> tx, schedule = OptimizerBuilder({"name": "sgd", "lr": 0.1, "scheduler": {
        ...     "name": "cosine_decay"}}).build_optimizer(num_epochs=2, num_train_steps_per_epoch=5)
        >>> round(float(schedule(0)), 6), float(schedule(10))
        (0.1, 0.0)
    """

    def __init__(self, optimizer_config: Any) -> None:
        self.optimizer_config = optimizer_config

    def section(self) -> dict[str, Any]:
        """The optimizer section in gyre's form."""
        section = as_mapping(self.optimizer_config, "optimizer")
        return from_jax_trainer(section) if is_jax_trainer_section(section) else section

    def build_optimizer(self, num_epochs: int = 0, num_train_steps_per_epoch: int = 0) -> tuple[optax.GradientTransformation, optax.Schedule]:
        """The optimizer and its learning-rate schedule (``step -> rate``)."""
        steps = num_epochs * num_train_steps_per_epoch
        run = steps if isinstance(steps, int) and steps > 0 else None
        section = self.section()
        return (
            build_optimizer(section, run_steps=run),
            build_schedule(section.get("learning_rate"), where="optimizer.learning_rate", run_steps=run),
        )

