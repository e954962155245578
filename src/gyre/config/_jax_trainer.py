"""Reads phlippe/jax_trainer's config sections as gyre's.

Its maths is kept, less three of its mistakes: ``transforms.gradient_clip_norm`` clips, a
``warmup_cosine_decay``'s ``alpha`` sets its end value, and a weight decay after the optimizer
shrinks the weights (it grew them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gyre.config._components import ConfigError, plain, section_mapping, to_dict
from gyre.config._registry import DATASETS
from gyre.core._checks import instance
from gyre.core._errors import describe, explain, suggest

#: The keys of a jax_trainer optimizer section, and of its parts.
KEYS = ("name", "lr", "params", "transforms", "scheduler")
TRANSFORM_KEYS = ("grad_clip_norm", "gradient_clip_norm", "grad_clip_value", "weight_decay")
SCHEDULERS = ("constant", "cosine_decay", "exponential_decay", "warmup_cosine_decay")
_NAMES = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "lamb": "Lamb"}
_PARAMS = {"beta1": "b1", "beta2": "b2"}


def is_jax_trainer_section(section: object) -> bool:
    """Whether an optimizer section is written in jax_trainer's form (``name``, no ``class_name``)."""
    return isinstance(section, Mapping) and "name" in section and "class_name" not in section


def jax_trainer_component(section: dict[str, Any], where: str) -> dict[str, Any]:
    """A trainer or model section in jax_trainer's form (``name``: a dotted path's last part;
    ``hparams``) as gyre's."""
    if "class_name" in section or not isinstance(section.get("name"), str):
        return section
    out = {k: v for k, v in section.items() if k not in ("name", "hparams")}
    hparams = section_mapping(section.get("hparams") or {}, f"{where}.hparams")
    clash = sorted(set(hparams) & set(out))
    if clash:
        raise ConfigError(explain(
            f"{where}.hparams repeats {', '.join(clash)} of {where}",
            expected="each key once: in hparams (jax_trainer's form) or beside class_name (gyre's)",
            received=f"{', '.join(clash)} in both", fix=f"remove {clash[0]} from one of them"))
    return {"class_name": section["name"].rsplit(".", 1)[-1], **hparams, **out}


#: phlippe/jax_trainer's dataset constructors, by the dotted names its configs give
DATASET_CONSTRUCTORS = {
    "jax_trainer.datasets.build_cifar10_datasets": "CIFAR10Dataset",
    "jax_trainer.datasets.build_mnist_datasets": "MNISTDataset",
}
_DATASET_KEYS = {"batch_size": "global_batch_size"}


def jax_trainer_dataset(section: dict[str, Any], where: str = "dataset") -> dict[str, Any]:
    """A dataset section in jax_trainer's form as gyre's; only jax_trainer's own data sets are
    accepted."""
    if "class_name" in section or "constructor" not in section:
        return section
    data = dict(section)
    constructor = data.pop("constructor")
    if constructor not in DATASET_CONSTRUCTORS:
        raise ConfigError(explain(
            f"{where}.constructor names code to import: {constructor}",
            expected=f"class_name: one of the registered data sets {sorted(DATASETS)}, or a jax_trainer "
            f"constructor gyre has: {sorted(DATASET_CONSTRUCTORS)} (a config never imports a dotted path)",
            received=f"constructor: {describe(constructor)}",
            fix="register your data set with @gyre.config.register_dataset and name it: "
            f"{where}: {{class_name: MyDataset, ...}}"))
    return {**{_DATASET_KEYS.get(k, k): v for k, v in data.items()}, "class_name": DATASET_CONSTRUCTORS[constructor]}


def as_mapping(value: Any, where: str) -> dict[str, Any]:
    """A mapping, or an ``ml_collections.ConfigDict`` (anything with ``to_dict``), as plain dicts."""
    return plain(section_mapping(to_dict(value), where))


def _unknown(keys: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in known:
            raise ConfigError(explain(
                f"unknown key {where}.{key} (a jax_trainer optimizer section)." + suggest(key, known),
                expected=f"the keys: {', '.join(known)}", received=f"{key}: {describe(keys[key])}",
                fix=f"remove {key!r} or spell it as one of the keys above"))


def _value(config: object) -> tuple[Any, bool]:
    """A transform's value and ``before_optimizer`` (a number, or ``{value, before_optimizer}``)."""
    if isinstance(config, Mapping):
        return config.get("value"), config.get("before_optimizer", True)
    return config, True


def _transforms(section: Mapping[str, Any], optimizer: str, where: str) -> tuple[list[dict[str, Any]], Any]:
    config = section_mapping(section.get("transforms") or {}, f"{where}.transforms")
    _unknown(config, TRANSFORM_KEYS, f"{where}.transforms")
    out = []
    for key, class_name, bound in (
        ("grad_clip_norm", "GradClipNorm", "max_norm"),
        ("gradient_clip_norm", "GradClipNorm", "max_norm"),
        ("grad_clip_value", "GradClipValue", "max_delta"),
    ):
        if config.get(key) is not None:
            value, before = _value(config[key])
            out.append({"class_name": class_name, bound: value, "before_optimizer": before})
    decay, before = _value(config.get("weight_decay", 0.0))
    if optimizer == "AdamW":
        return out, decay  # AdamW's own (decoupled) decay, on every parameter
    if decay:
        out.append({"class_name": "WeightDecay", "value": decay, "mode": "blacklist", "before_optimizer": before})
    return out, None


def _schedule(lr: Any, config: Mapping[str, Any], where: str) -> Any:
    """The learning-rate section of jax_trainer's ``scheduler`` (``decay_steps`` left out: the run's)."""
    config = dict(config)
    name = config.pop("name", None)
    decay_steps = config.pop("decay_steps", None)
    steps = {} if decay_steps is None else {"steps": decay_steps}
    if name in (None, "constant"):
        _unknown(config, (), f"{where}.scheduler")
        return lr
    if name == "cosine_decay":
        _unknown(config, ("alpha",), f"{where}.scheduler")
        return {"class_name": "CosineSchedule", "init_value": lr, "alpha": config.get("alpha", 0.0), **steps}
    if name == "warmup_cosine_decay":
        _unknown(config, ("warmup_steps", "end_value", "alpha"), f"{where}.scheduler")
        end = {"end_value": config["end_value"]} if "end_value" in config else {}
        factor = {"decay_factor": config["alpha"]} if "alpha" in config else {}
        return {"class_name": "WarmupCosineDecaySchedule", "init_value": 0.0, "peak_value": lr,
                "warmup_steps": config.get("warmup_steps", 0), **steps, **end,
                **({} if end or factor else {"end_value": 0.0}), **factor}
    if name == "exponential_decay":
        known = ("decay_rate", "end_lr", "end_lr_factor", "warmup_steps", "cooldown_steps", "transition_steps", "staircase")
        _unknown(config, known, f"{where}.scheduler")
        warmup, cooldown = config.get("warmup_steps", 0), config.get("cooldown_steps", 0)
        out = {"class_name": "ExponentialSchedule", "init_value": lr, **steps,
               "warmup_steps": warmup, "cooldown_steps": cooldown}
        rate = config.get("decay_rate")
        factor = config.get("end_lr_factor") if config.get("end_lr") is None else config["end_lr"] / lr
        if rate is None and factor is not None and steps and not cooldown and "transition_steps" not in config \
                and not config.get("staircase"):
            rate = factor ** (1.0 / (decay_steps - warmup))  # as jax_trainer: the rate that reaches it at decay_steps
        if rate is not None:  # per transition_steps (1 by default); without a cooldown, jax_trainer's decay
            if not cooldown:  # goes on past decay_steps
                out.pop("steps", None)
            return {**out, "decay_rate": rate, "transition_steps": config.get("transition_steps", 1),
                    "staircase": config.get("staircase", False)}
        for key, target in (("end_lr", "end_value"), ("end_lr_factor", "end_factor")):
            if config.get(key) is not None:
                return {**out, target: config[key]}
        raise ConfigError(explain(
            f"{where}.scheduler (exponential_decay) needs decay_rate, end_lr or end_lr_factor",
            expected="decay_rate: the factor per transition_steps, or end_lr / end_lr_factor: where the decay ends",
            received=describe(dict(config)), fix=f"add end_lr_factor: 0.01 to {where}.scheduler"))
    raise ConfigError(explain(
        f"unknown scheduler {name!r} at {where}.scheduler.name." + suggest(str(name), SCHEDULERS),
        expected=f"one of jax_trainer's schedulers: {', '.join(SCHEDULERS)} (or gyre's form: "
        "learning_rate: {class_name: ..., ...})",
        received=describe(name), fix="use one of these names"))


def from_jax_trainer(section: Any, *, where: str = "optimizer") -> dict[str, Any]:
    """A jax_trainer optimizer section (``name``, ``lr``, ``params``, ``transforms``, ``scheduler``)
    as gyre's.

    ``params`` are the optimizer's keyword arguments (``beta1``/``beta2`` are Adam's ``b1``/``b2``);
    a name other than adam, adamw, sgd and lamb is the optax optimizer of that name.

    Example:
        >>> from_jax_trainer({"name": "adam", "lr": 1e-3, "params": {"beta1": 0.9},
        ...                   "transforms": {"grad_clip_norm": 1.0},
        ...                   "scheduler": {"name": "cosine_decay", "decay_steps": 100}})
        ... # doctest: +NORMALIZE_WHITESPACE
        {'class_name': 'Adam', 'learning_rate': {'class_name': 'CosineSchedule', 'init_value': 0.001,
         'alpha': 0.0, 'steps': 100}, 'b1': 0.9,
         'transforms': [{'class_name': 'GradClipNorm', 'max_norm': 1.0, 'before_optimizer': True}]}
    """
    section = as_mapping(section, where)
    _unknown(section, KEYS, where)
    name = section.get("name")
    instance(name, f"{where}.name", str, kind="an optimizer name", fix=f"write {where}.name: adam", error=ConfigError,
             expected="adam, adamw, sgd, lamb, or an optax optimizer (jax_trainer's form)")
    if "lr" not in section:
        raise ConfigError(explain(
            f"{where} has no lr (a jax_trainer optimizer section needs its learning rate)",
            expected="lr: <the (peak) learning rate>", received=f"keys {sorted(section)}",
            fix=f"add lr: 1e-3 to {where}"))
    class_name = _NAMES.get(name.lower(), name.lower())
    scheduler = section_mapping(section.get("scheduler") or {}, f"{where}.scheduler")
    out: dict[str, Any] = {"class_name": class_name, "learning_rate": _schedule(section["lr"], scheduler, where)}
    params = section_mapping(section.get("params") or {}, f"{where}.params")
    out.update({_PARAMS.get(k, k) if class_name in ("Adam", "AdamW", "Lamb") else k: v for k, v in params.items()})
    transforms, decay = _transforms(section, class_name, where)
    if decay:
        out["weight_decay"] = decay
    if transforms:
        out["transforms"] = transforms
    return out

