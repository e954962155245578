"""The one loop callback a training run hands the engine: it turns the engine's named hooks
into the trainer's (epoch starts and ends, validation, step logs, ``on_training_step``), and
carries the trainer's resumable bookkeeping (its callbacks' ``state_dict``) into every
checkpoint through the engine's ``state_dict`` protocol.
"""

from __future__ import annotations

import time
from typing import Any

import jax

from gyre.core._logs import Logs
from gyre.trainer._callback import overrides_training_step
from gyre.trainer._metrics import metric_names, scalars_for_writers
from gyre.trainer._steps import EPOCH, WINDOW


class TrainingHooks:
    """Named-loop callback of :meth:`TrainerModule.train_model` (see the module docstring).

    Args:
        trainer: the trainer being trained.
        val_loaders: the validation loaders, ``[(mode, loader)]`` (``named_loaders``).
    """

    def __init__(self, trainer: Any, val_loaders: list[tuple[str, Any]]) -> None:
        self.trainer = trainer
        self.val_loaders = val_loaders
        self.step_callbacks = [cb for cb in trainer.callbacks if overrides_training_step(cb)]
        if not self.step_callbacks:  # a call per step costs: the engine skips a hook that is None
            self.on_train_batch_end = None  # type: ignore[assignment]
        self._epoch_start = time.perf_counter()
        self.val_history: dict[int, dict[str, Any]] = {}
        self._config: dict[str, Any] | None = None
        self._named: dict[str, dict[str, str]] = {}

    # -- engine hooks -------------------------------------------------------------------------

    def on_train_begin(self, state: Any, elapsed: Any) -> None:
        t = self.trainer
        t.state, t._elapsed, t._global_step = state, elapsed, elapsed.steps
        for cb in t.callbacks:
            cb.on_training_start()

    def on_epoch_begin(self, state: Any, elapsed: Any) -> None:
        t = self.trainer
        t.state, t._elapsed, t._global_step = state, elapsed, elapsed.steps
        self._epoch_start = time.perf_counter()
        for cb in t.callbacks:
            cb.on_training_epoch_start(elapsed.epochs + 1)

    def on_train_batch_end(self, state: Any, elapsed: Any, logs: Any) -> None:
        t = self.trainer
        t.state, t._elapsed, t._global_step = state, elapsed, elapsed.steps + 1
        if self.step_callbacks:
            values = dict(logs.get("losses", {}) if logs else {})
            values.update(logs.get("metrics", {}) if logs else {})
            values.update(logs.get("stateful_metrics", {}) if logs else {})  # those nan_keys leaves unchecked
            for cb in self.step_callbacks:
                cb.on_training_step(values, elapsed.epochs + 1, t._global_step)

    def log_window(self, state: Any) -> tuple[Logs, Any]:
        """Every ``log_steps_every`` steps: the window's metrics as ``train/<k>_step``."""
        t = self.trainer
        values, fresh = self._roll(state.extras[WINDOW])
        named = {name: values[key] for key, name in self._names("step").items() if key in values}
        logs = self._logs(scalars_for_writers(named, t._specs), "step")
        return logs, state.replace(extras={**state.extras, WINDOW: fresh})

    def _logs(self, values: dict[str, Any], freq: str) -> Logs:
        """``values`` as metrics, the NaN check's business; with ``trainer.nan_keys``, only
        the training values it names are (the others go unchecked, as stateful metrics)."""
        keys = getattr(self.trainer.config, "nan_keys", None)
        if keys is None:
            return Logs().add_metrics(values)
        checked = {name for key, name in self._names(freq).items() if key in keys}
        return (Logs().add_metrics({k: v for k, v in values.items() if k in checked})
                .add_stateful_metrics({k: v for k, v in values.items() if k not in checked}))

    def _roll(self, acc: Any) -> tuple[dict[str, Any], Any]:
        """An accumulator's results and its emptied self, in one compiled call (eagerly,
        each of the few small operations would cost a dispatch)."""
        roll = self.trainer._compiled.get("roll")
        if roll is None:  # kept by the trainer: compiled once, not at every train_model call
            roll = self.trainer._compiled["roll"] = jax.jit(lambda a: (a.compute(), a.reset()))
        return roll(acc)

    def _names(self, freq: str) -> dict[str, str]:
        if freq not in self._named:
            self._named[freq] = metric_names(self.trainer._specs, "train", freq)
        return self._named[freq]

    def on_epoch_end(self, state: Any, elapsed: Any, loop: Any) -> tuple[Logs, Any]:
        t = self.trainer
        t.state, t._elapsed, t._global_step = state, elapsed, elapsed.steps + 1
        epoch = elapsed.epochs + 1  # the clock counts the epoch once its end hooks ran
        seconds = time.perf_counter() - self._epoch_start
        values, fresh = self._roll(state.extras[EPOCH])
        train = {name: values[key] for key, name in self._names("epoch").items() if key in values}
        train["train/time"] = seconds
        for cb in t.callbacks:
            cb.on_training_epoch_end(train, epoch)
        logged = dict(train)
        every = t.config.check_val_every_n_epoch
        evals: dict[str, Any] = {}
        if self.val_loaders and every and epoch % every == 0:
            for cb in t.callbacks:
                cb.on_validation_epoch_start(epoch)
            for mode, loader in self.val_loaders:
                evals[mode] = t.eval_model(loader, mode=mode, epoch_idx=epoch, _state=state)
            val = {k: v for metrics in evals.values() for k, v in metrics.items()}
            self.val_history[epoch] = val
            for cb in t.callbacks:
                cb.on_validation_epoch_end(val, epoch)
            logged.update(val)
        t._write_epoch_files(elapsed.steps, epoch, train, evals)
        logs = self._logs(scalars_for_writers(logged, {**t._specs, **t._builder.eval_specs_cached}), "epoch")
        logs = logs.add_metric("epoch", epoch)  # the epoch beside the global step, for every series
        if t._stop_reason:
            loop.request_stop(t._stop_reason)
        self._epoch_start = time.perf_counter()
        return logs, state.replace(extras={**state.extras, EPOCH: fresh})

    def on_train_end(self, state: Any) -> None:
        self.trainer.state = state
        for cb in self.trainer.callbacks:
            cb.on_training_end()

    # -- resume -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The trainer's callbacks' states, by their position and class."""
        from gyre.trainer._model_checkpoint import stored_config

        if self._config is None:
            self._config = stored_config(self.trainer)
        return {
            "callbacks": [
                {"class": type(cb).__name__, "state": cb.state_dict()} for cb in self.trainer.callbacks
            ],
            "config": self._config,  # every checkpoint carries the resolved config
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("callbacks", [])
        for cb, item in zip(self.trainer.callbacks, saved, strict=False):
            if item.get("class") == type(cb).__name__:
                cb.load_state_dict(item.get("state", {}))
