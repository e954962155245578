"""Gradient transforms built from config sections: regex-masked weight decay, clipping by norm and
by value.

A leaf's path is its pytree keys joined by ``/`` (``params/Dense_0/kernel``, ``layers/0/kernel``;
an nnx ``Variable``'s ``value`` is dropped). Regexes are searched anywhere in the path
(``re.search``): anchor them with ``^``/``$``.
"""

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import jax
import optax

from gyre.config._components import call_section, class_name_of, flag, here, real, who
from gyre.config._registry import TRANSFORMS, ConfigTyped
from gyre.core._checks import choice, instance
from gyre.core._errors import describe, explain

#: What a config may write for ``transforms``: a list of sections, or names -> sections.
TransformsConfig = Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]]

DEFAULT_DECAY_REGEX = "((.*weight$)|(.*kernel$))"


@dataclasses.dataclass(frozen=True)
class Transform(metaclass=ConfigTyped):
    """A gradient transform from a config section, and its place in the optimizer chain.

    Args:
        name: the class_name it was built from (for messages).
        before_optimizer: applied to the gradients (True) or to the optimizer's updates (False).
        factory: ``learning_rate -> optax.GradientTransformation`` (the current rate, or None).

    Example:
        >>> import jax.numpy as jnp
        >>> t = GradClipValue(max_delta=1.0)
        >>> t.before_optimizer, t.make().update({"w": jnp.array([-3.0, 0.5])}, None)[0]["w"].tolist()
        (True, [-1.0, 0.5])
    """

    #: The base of the typed configs that build a transform (``cfgtype``: their union);
    #: set by :mod:`gyre.config._typed_configs`, which defines them.
    config_class: ClassVar[type | None] = None
    name: str
    before_optimizer: bool
    factory: Callable[[Any], optax.GradientTransformation]

    def make(self, learning_rate: Any = None) -> optax.GradientTransformation:
        """The ``optax.GradientTransformation``, for the given current learning rate."""
        return self.factory(learning_rate)

    def init(self, params: Any) -> Any:
        """``make().init(params)``, for the kpoeppel fork's ``GradientTransformInterface``."""
        return self.make().init(params)

    def update(self, updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        """``make().update(updates, state, params)`` (see :meth:`init`)."""
        return self.make().update(updates, state, params)


@dataclasses.dataclass(frozen=True)
class WeightDecayTransform(Transform):
    """A weight-decay :class:`Transform` that also exposes ``value`` and ``mask`` (for AdamW and
    Lamb).

    Example:
        >>> wd = WeightDecay(value=0.1)
        >>> wd.value, wd.mask({"Dense_0": {"bias": 0.0, "kernel": 0.0}})
        (0.1, {'Dense_0': {'bias': False, 'kernel': True}})
    """

    value: float
    mask: Callable[[Any], Any]


def parameter_path(path: Sequence[Any]) -> str:
    """The ``/``-joined name of a pytree path.

    Example:
        >>> leaves = jax.tree_util.tree_flatten_with_path({"Dense_0": {"kernel": 1}, "h": [2]})[0]
        >>> [parameter_path(p) for p, _ in leaves]
        ['Dense_0/kernel', 'h/0']
    """
    keys = tuple(path)
    if keys and isinstance(keys[-1], jax.tree_util.GetAttrKey) and keys[-1].name == "value":
        keys = keys[:-1]
    return jax.tree_util.keystr(keys, simple=True, separator="/")


def _regex(key: str, pattern: object) -> re.Pattern[str] | None:
    instance(pattern, here(key), str, kind="a regex string", expected="a str", fix=f'write {key}: "kernel$"')
    try:
        return re.compile(pattern) if pattern else None
    except re.error as error:
        raise ValueError(explain(
            f"{here(key)} is not a valid regular expression: {error}",
            expected="a Python regex searched in each parameter path, e.g. '(kernel|weight)$'",
            received=repr(pattern),
            fix="fix the regex (quote it in YAML; escape literal brackets and dots)")) from None


@TRANSFORMS.register
def WeightDecay(  # noqa: N802 (config class names)
    *,
    value: float,
    mode: Literal["whitelist", "blacklist"] = "whitelist",
    parameter_regex_include: str = DEFAULT_DECAY_REGEX,
    parameter_regex_exclude: str = "",
    before_optimizer: bool | None = None,
) -> WeightDecayTransform:
    """Weight decay on the parameters chosen by regexes on their path (an empty regex matches
    nothing).

    ``whitelist`` decays paths matching ``parameter_regex_include`` (default: ending in
    ``weight`` or ``kernel``) and not ``parameter_regex_exclude``; ``blacklist`` decays all but
    ``parameter_regex_exclude``. In ``transforms`` it is coupled (L2, ``value * param`` added to
    the gradient) by default, decoupled (``-learning_rate * value * param`` added to the update)
    with ``before_optimizer: false``; as AdamW's or Lamb's ``weight_decay`` it is theirs.
    """
    rate = real("value", value, minimum=0.0)
    before = True if before_optimizer is None else flag("before_optimizer", before_optimizer)
    choice(mode, here("mode"), ("whitelist", "blacklist"), fix="write mode: whitelist.",
           expected="whitelist (decay what include matches) or blacklist (decay all but what exclude matches)")
    include = _regex("parameter_regex_include", parameter_regex_include)
    exclude = _regex("parameter_regex_exclude", parameter_regex_exclude)
    if mode == "blacklist" and parameter_regex_include != DEFAULT_DECAY_REGEX:
        raise ValueError(explain(
            f"{who('WeightDecay')}: parameter_regex_include is not used in blacklist mode",
            expected="blacklist: decay every parameter except those matching parameter_regex_exclude",
            received=f"parameter_regex_include: {parameter_regex_include!r}",
            fix="move the regex to parameter_regex_exclude, or use mode: whitelist"))

    def decays(path: str) -> bool:
        if exclude is not None and exclude.search(path):
            return False
        return mode == "blacklist" or (include is not None and include.search(path) is not None)

    def mask(params: Any) -> Any:
        return jax.tree_util.tree_map_with_path(
            lambda path, _: decays(parameter_path(path)), params
        )

    def factory(learning_rate: Any) -> optax.GradientTransformation:
        if before:
            return optax.add_decayed_weights(rate, mask)
        if learning_rate is None or callable(learning_rate):
            raise ValueError(explain(
                "a WeightDecay after the optimizer is decoupled: it needs the current learning rate",
                expected="make(learning_rate=<the rate as a number or scalar array>)", received=describe(learning_rate),
                fix="build it through build_optimizer / assemble_optimizer with log_learning_rate: true (they pass "
                "the rate), or apply it before the optimizer (before_optimizer: true)"))
        return optax.masked(_decoupled_decay(rate, learning_rate), mask)

    return WeightDecayTransform("WeightDecay", before, factory, value=rate, mask=mask)


def _decoupled_decay(rate: float, learning_rate: Any) -> optax.GradientTransformation:
    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise ValueError(optax.NO_PARAMS_MSG)
        scale = -learning_rate * rate
        return jax.tree_util.tree_map(
            lambda u, p: u + (scale * p).astype(u.dtype), updates, params
        ), state

    return optax.GradientTransformation(optax.init_empty_state, update)


@TRANSFORMS.register
def GradClipNorm(*, max_norm: float, before_optimizer: bool = True) -> Transform:  # noqa: N802
    """Scales the update down when its global L2 norm exceeds ``max_norm``.
    """
    bound, before = real("max_norm", max_norm, above=0.0), flag("before_optimizer", before_optimizer)
    return Transform("GradClipNorm", before, lambda _: optax.clip_by_global_norm(bound))


@TRANSFORMS.register
def GradClipValue(*, max_delta: float, before_optimizer: bool = True) -> Transform:  # noqa: N802
    """Clips every element of the update to ``[-max_delta, max_delta]`` (``optax.clip``).
    """
    bound, before = real("max_delta", max_delta, above=0.0), flag("before_optimizer", before_optimizer)
    return Transform("GradClipValue", before, lambda _: optax.clip(bound))


def build_transform(section: object, *, where: str = "optimizer.transforms[0]") -> Transform:
    """The :class:`Transform` a section describes; a ``Transform`` is returned as it is.

    Example:
        >>> build_transform({"class_name": "GradClipNorm", "max_norm": 1.0}).before_optimizer
        True
    """
    if isinstance(section, Transform):
        return section
    name = class_name_of(section, where=where, registry=TRANSFORMS)
    target = TRANSFORMS.get(name, where=f"{where}.class_name")
    built = call_section(target, name, section, where=where)  # type: ignore[arg-type]
    return instance(
        built, "the transform", Transform, problem=f"the transform {name!r} at {where} did not return a gyre.config.Transform",
        expected="Transform(name, before_optimizer, factory) from the registered function",
        fix=f"return Transform({name!r}, before_optimizer, lambda learning_rate: <optax transformation>)")


def build_transforms(value: object, *, where: str = "optimizer.transforms") -> list[Transform]:
    """The transforms of a list of sections, or a mapping of labels to sections, in order; ``None``:
    none.

    Example:
        >>> ts = build_transforms({"clip": {"class_name": "GradClipValue", "max_delta": 1.0},
        ...                        "decay": {"class_name": "WeightDecay", "value": 0.1}})
        >>> [(t.name, t.before_optimizer) for t in ts]
        [('GradClipValue', True), ('WeightDecay', True)]
    """
    if value is None:
        return []
    if isinstance(value, Mapping):
        if "class_name" in value:
            raise TypeError(explain(
                f"{where} must be a list of transform sections (or a mapping of names to sections)",
                expected="[{class_name: GradClipNorm, max_norm: 1.0}, ...]",
                received=f"one section: {describe(dict(value))}", fix="write the section as the only item of a list"))
        return [build_transform(s, where=f"{where}.{k}") for k, s in value.items()]
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [build_transform(s, where=f"{where}[{i}]") for i, s in enumerate(value)]
    raise TypeError(explain(
        f"{where} must be a list of transform sections",
        expected=f"a list of mappings with class_name one of: {', '.join(TRANSFORMS)}",
        received=describe(value), fix="write transforms: [{class_name: GradClipNorm, max_norm: 1.0}]"))

