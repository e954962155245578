"""``ModelCheckpoint``: the best ``save_top_k`` models by a validation metric in
``<run>/checkpoints`` (resume checkpoints live apart, in ``<run>/resume``), each with the
config :meth:`TrainerModule.load_from_checkpoint` rebuilds the trainer from.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from gyre.callbacks._monitor import check_name, monitor_mode, score
from gyre.callbacks._store import Store
from gyre.config._registry import register_callback
from gyre.core._checks import whole
from gyre.core._errors import explain, warn
from gyre.engine._snapshot import Snapshot
from gyre.trainer._utility_callbacks import _CleansUp, read_metric


@register_callback
class ModelCheckpoint(_CleansUp):
    """Keeps the best ``save_top_k`` models by ``monitor`` (a validation metric).

    Args:
        monitor: the logged name ranking the models, logged at every validation.
        mode: ``"min"``, ``"max"``, or ``"auto"``: the mode ``monitor``'s name implies
            (``"max"`` for ``val/acc``, else ``"min"``); a mode against the name is an error.
        save_optimizer_state: also save the optimizer state.

    Example:
        >>> cb = ModelCheckpoint(monitor="val/acc", save_top_k=2)
        >>> cb.monitor, cb.mode, cb.save_top_k, cb.best_step()
        ('val/acc', 'max', 2, None)
    """

    mode_from_monitor = True  # a config's mode against the monitor's name is refused (config/_schema)

    def __init__(
        self,
        monitor: str = "val/loss",
        mode: str = "auto",
        save_top_k: int = 1,
        save_optimizer_state: bool = False,
        every_n_epochs: int = 1,
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        check_name(monitor, "ModelCheckpoint's monitor must name a validation metric", "'val/loss' or 'val/acc'",
                   "monitor: val/acc")
        save_top_k = whole(save_top_k, "ModelCheckpoint's save_top_k", minimum=1,
                           expected="save_top_k: 1 (the best model) or more", fix="save_top_k: 1")
        self.monitor, self.mode, self.save_top_k = monitor, monitor_mode("ModelCheckpoint", monitor, mode), save_top_k
        self.save_optimizer_state = save_optimizer_state
        self.ranked: list[tuple[float, int]] = []  # (value, step), best first
        self._store: Store | None = None

    @property
    def directory(self) -> Path:
        """``<log_dir>/checkpoints``."""
        assert self.trainer is not None
        return Path(self.trainer.log_dir).resolve() / "checkpoints"

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(
                str(self.directory), keep=1, keep_best=self.save_top_k,
                score=lambda metrics: score(self.mode, metrics[self.monitor]),
            )
        return self._store

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        value = read_metric("ModelCheckpoint", eval_metrics, self.monitor, epoch_idx)  # a host read
        if math.isnan(value):
            return
        t = self.trainer
        assert t is not None
        step = int(t.global_step)
        candidates = sorted([*self.ranked, (value, step)], key=lambda vs: -score(self.mode, vs[0]))
        if (value, step) not in candidates[: self.save_top_k]:
            return
        self.ranked = candidates[: self.save_top_k]
        payload = _model_tree(t.state, self.save_optimizer_state)
        meta = {"config": stored_config(t), "epoch": epoch_idx, "monitor": self.monitor, "mode": self.mode,
                "value": value, "input": input_spec(t)}
        self.store.save(
            Snapshot(step=step, state=payload, elapsed=t.elapsed, meta=meta), metrics={self.monitor: value}
        )

    def on_training_start(self) -> None:
        t = self.trainer
        if t is not None and t.config.resume is not None:
            # A run killed after a model save and before its next resume save left newer
            # steps than the one it resumes from: the resumed run saves them again.
            store = self.store
            newer = [s for s in store.on_disk() if s > t.global_step]
            if newer and t.global_step == 0:  # nothing resumed: maybe another run's models
                aside = [store.set_aside(step, ".before-restart") for step in newer]
                warn(f"the run starts over from step 0 (no resume checkpoint), so the best models "
                     f"it had saved, steps {newer}, are moved aside to <step>.before-restart in "
                     f"{store.root} (the last: {aside[-1]}); it saves them again as it reaches them")
            else:
                store.delete_steps(newer)
            store.delete_temporaries()  # a save the kill cut short
            store.reload()

    def _clean_up(self) -> None:
        """Waits for the saves in flight."""
        if self._store is not None:
            self._store.wait()

    def none_saved(self) -> str:
        """Why no model was saved and what the test scores instead (the trainer warns with it)."""
        every = self._bound().config.check_val_every_n_epoch
        why = ("trainer.check_val_every_n_epoch is 0: no validation ran" if not every
               else f"no validation logged a finite {self.monitor}")
        return (f"ModelCheckpoint saved no model ({why}), so the test scores the final model, not the best "
                f"by {self.monitor}; to test the best one, validate: give a validation set and set "
                "trainer.check_val_every_n_epoch: 1")

    def best_step(self) -> int | None:
        """The step of the best model saved, or ``None``."""
        return self.ranked[0][1] if self.ranked else None

    def restore_best(self, state: Any) -> Any:
        """``state`` with the best model's parameters and model state."""
        step = self.best_step()
        assert step is not None
        self.store.wait()
        return read_model(self.store, step, state, self.save_optimizer_state)

    def state_dict(self) -> dict[str, Any]:
        self._clean_up()  # a resume checkpoint names only models already on disk
        return {"ranked": [[v, s] for v, s in self.ranked]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ranked = [(float(v), int(s)) for v, s in state.get("ranked", [])]


def _model_tree(state: Any, optimizer: bool = False) -> dict[str, Any]:
    """What a model checkpoint holds of ``state``: parameters, model state, optimizer state if asked."""
    tree = {"params": state.params, "model_state": state.model_state}
    return {**tree, "opt_state": state.opt_state} if optimizer else tree


def read_model(store: Store, step: int, state: Any, optimizer: bool = False) -> Any:
    """``state`` with the parameters and model state saved at ``step`` in ``store``."""
    saved = store.read(step, _model_tree(state, optimizer)).state
    return state.replace(params=saved["params"], model_state=saved["model_state"])


def stored_config(trainer: Any) -> dict[str, Any]:
    """The config a checkpoint stores: the whole config, else the trainer's known sections."""
    from gyre.config import config_to_dict

    if trainer.full_config is not None:
        return config_to_dict(trainer.full_config)
    return {
        "trainer": trainer.config.model_dump(mode="json"),
        "model": trainer.model_config,
        "optimizer": trainer.optimizer_config,
        "trainer_class": type(trainer).__name__,
    }


def input_spec(trainer: Any) -> dict[str, Any] | None:
    """The shape and dtype of the model's input (a linen model is rebuilt from it)."""
    spec = getattr(trainer, "_input_spec", None)
    return None if spec is None else {"shape": list(spec[0]), "dtype": str(spec[1])}


def _find(path: str | os.PathLike[str]) -> tuple[Path, int | None]:
    """The checkpoints folder and step that ``path`` names."""
    p = Path(path).expanduser().resolve()
    if (p / "checkpoints").is_dir():
        return p / "checkpoints", None
    if p.name.isdigit() and p.parent.is_dir():
        return p.parent, int(p.name)
    if p.is_dir():
        return p, None
    raise FileNotFoundError(explain(
        "load_from_checkpoint found no checkpoint there",
        expected="a run folder (holding checkpoints/), a checkpoints folder, or one step's folder", received=str(p),
        fix="pass the run folder that train_model wrote (trainer.log_dir)"))


def find_checkpoint(cls: type, path: str | os.PathLike[str], *, exmp_batch: Any = None,
                    **given: Any) -> tuple[Any, Store, int, Any]:
    """``(trainer, store, step, example input)`` of the model checkpoint ``path`` names (the best)."""
    folder, step = _find(path)
    store = Store(str(folder), read_only=True)
    if step is None:
        steps = store.steps()
        if not steps:
            raise FileNotFoundError(explain(
                "load_from_checkpoint found no model checkpoint",
                expected="a folder written by ModelCheckpoint", received=f"{folder} holding no step",
                fix="train with a ModelCheckpoint callback, or pass a run folder that has one"))
        mode = "min" if store.read_record(steps[-1]).get("meta", {}).get("mode") == "min" else "max"
        scores = {s: score(mode, store.read_record(s).get("meta", {}).get("value")) for s in steps}
        step = max(scores, key=scores.__getitem__) if max(scores.values()) > -math.inf else max(steps)
    meta = store.read_record(step).get("meta", {})
    trainer = _rebuild(cls, meta.get("config") or {}, given)
    if exmp_batch is None and meta.get("input"):
        import numpy as np

        exmp_batch = (np.zeros(meta["input"]["shape"], meta["input"]["dtype"]),)
    return trainer, store, step, None if exmp_batch is None else trainer.batch_to_input(exmp_batch)


def _rebuild(cls: type, config: dict[str, Any], given: dict[str, Any]) -> Any:
    from gyre.config import TRAINERS, load_config

    if all(k in config for k in ("trainer", "model", "optimizer", "dataset")):
        full = load_config(config)
        name = full.trainer.class_name
        trainer_cls = TRAINERS.get(name, where="trainer.class_name") if name in TRAINERS else cls
        return trainer_cls(full.trainer, full.model, full.optimizer, config=full, **given)
    name = config.get("trainer_class")
    trainer_cls = TRAINERS.get(name) if isinstance(name, str) and name in TRAINERS and cls.__name__ == "TrainerModule" else cls
    missing = [k for k in ("model", "optimizer") if config.get(k) is None and k not in given]
    if missing:
        raise TypeError(explain(
            f"this checkpoint cannot rebuild the trainer's {' and '.join(missing)}",
            expected="a trainer built from config sections (model_config=, optimizer_config= or a YAML "
            "config), whose sections the checkpoint stores",
            received=f"a checkpoint of a trainer given {' and '.join(f'{k}=<object>' for k in missing)} directly",
            fix="pass them again: load_from_checkpoint(path, "
            + ", ".join(f"{k}=..." for k in missing) + ")"))
    return trainer_cls(config.get("trainer"), config.get("model"), config.get("optimizer"), **given)
