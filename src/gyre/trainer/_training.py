"""Parts of ``TrainerModule.train_model``: the named loaders, the deferred optimizer, the best
checkpoint's test, the stored config (the run itself: :mod:`gyre.trainer._hooks`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from gyre.core._errors import describe, explain, warn
from gyre.trainer._logger import PHASE_NAME


def named_loaders(loader: Any, phase: str) -> list[tuple[str, Any]]:
    """``[(mode, loader)]`` of a ``val_loader`` / ``test_loader`` argument: one loader is the
    ``phase``; a dict of several (the kpoeppel jax_trainer fork's ``{"val": v1, "ood": v2}``)
    names its first ``phase`` and the others ``<phase>_<name>`` (``val_ood/acc``); ``None``: none."""
    if loader is None:
        return []
    if not isinstance(loader, Mapping):
        return [(phase, loader)]
    bad = [k for k, v in loader.items() if not isinstance(k, str) or not PHASE_NAME.match(f"{phase}_{k}")
           or hasattr(v, "shape") or not hasattr(v, "__iter__")]
    if not loader or bad:
        raise TypeError(explain(
            f"a dict given as the {phase} loader must map names to loaders",
            expected=f"{{'{phase}': loader, 'ood': other_loader}}: lowercase names (letters, digits, _), each "
            "an iterable of batches (the first is logged as '" + phase + "/...', the others as '"
            + phase + "_<name>/...')",
            received="an empty dict" if not loader else f"entries {bad[:3]!r} ({describe(loader[bad[0]])})",
            fix="pass one loader, or a dict of named loaders; a batch dict goes inside a list: [{'x': ..., 'y': ...}]"))
    return [(phase if i == 0 else f"{phase}_{name}", value) for i, (name, value) in enumerate(loader.items())]


def build_deferred_optimizer(trainer: Any, run_steps: int) -> None:
    """The optimizer whose schedule lasts the run, built now that its length is known."""
    from gyre.trainer._setup import build_optimizer_of

    trainer.optimizer = build_optimizer_of(trainer.optimizer_config, run_steps=run_steps)
    state = trainer.state
    trainer.state = trainer.strategy.place_state(
        state.replace(tx=trainer.optimizer, opt_state=trainer.optimizer.init(state.params)))


def best_test_metrics(trainer: Any, test_loader: Any, epoch: int) -> dict[str, Any]:
    """The test metrics of the best checkpoint by the monitored validation metric (the
    final model when no ModelCheckpoint ranks them, with a warning when one saved none):
    never chosen on the test set."""
    from gyre.trainer._callback import ModelCheckpoint

    final = trainer.state
    checkpoints = [cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)]
    best = next((cb for cb in checkpoints if cb.best_step() is not None), None)
    if best is not None:
        trainer.state = best.restore_best(final)
    elif checkpoints:
        warn(checkpoints[0].none_saved())
    try:
        return trainer.test_model(test_loader, apply_callbacks=True, epoch_idx=epoch)
    finally:
        trainer.state = final


def store_config(trainer: Any, cached: tuple[str, str] | None) -> tuple[str, str]:
    """Writes the resolved config in the run folder (``config.yaml``): the whole config when
    the trainer was built from one, else the trainer's own sections. ``cached``: the last
    ``(key, text)`` written (YAML takes milliseconds per call); returns the new one."""
    import yaml

    from gyre.config import dump_config
    from gyre.config._yaml import warn_changed_settings
    from gyre.trainer._callback import stored_config

    stored = stored_config(trainer)
    key = json.dumps(stored, default=repr)  # (a snapshot: the model's settings may be changed in place)
    if cached is not None and cached[0] == key:
        text = cached[1]
    else:
        text = dump_config(trainer.full_config) if trainer.full_config is not None else yaml.safe_dump(stored, sort_keys=False)
    path = trainer.log_dir / "config.yaml"
    if trainer.config.resume is not None and path.is_file():
        warn_changed_settings(path, yaml.safe_load(text))
    path.write_text(text)
    return key, text


def host_values(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Metrics with scalars as Python floats (one transfer for all), arrays as numpy."""
    host = jax.device_get(dict(metrics))
    return {k: float(v) if jnp.ndim(v) == 0 else v for k, v in host.items()}
