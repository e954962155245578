"""One run of :meth:`TrainerModule.train_model`: the engine's ``train_loop`` and the loop
callback that turns its named hooks into the trainer's, carrying the trainer callbacks' state
into every checkpoint."""

from __future__ import annotations

import time
from typing import Any

import jax

from gyre.core._logs import Logs
from gyre.core._schedules import periodic
from gyre.trainer._callback import overrides_training_step
from gyre.trainer._metrics import metric_names, scalars_for_writers
from gyre.trainer._steps import EPOCH, WINDOW

# an accumulator's results and its emptied self in one compiled call (eagerly, each small
# operation would cost a dispatch), compiled once per accumulator structure
_roll = jax.jit(lambda acc: (acc.compute(), acc.reset()))


class TrainingRun:
    """Named-loop callback of one :meth:`TrainerModule.train_model` call."""

    def __init__(self, trainer: Any, val_loaders: list[tuple[str, Any]], *, specs: Any, builder: Any,
                 files: Any) -> None:
        self.trainer = trainer
        self.val_loaders = val_loaders
        self.specs, self.builder, self.files = specs, builder, files
        self.step_callbacks = [cb for cb in trainer.callbacks if overrides_training_step(cb)]
        if not self.step_callbacks:  # a call per step costs: the engine skips a hook that is None
            self.on_train_batch_end = None  # type: ignore[assignment]
        self.loop: Any = None  # the engine's LoopState, once the loop started
        self.before_step = False  # in on_epoch_begin: the epoch's first step has not run yet
        self.stop_reason = ""  # the trainer's stop request, applied at the epoch's end
        self._epoch_start = time.perf_counter()
        self.val_history: dict[int, dict[str, Any]] = {}
        self._config: dict[str, Any] | None = None
        self._named: dict[str, dict[str, str]] = {}

    @property
    def global_step(self) -> int:
        """Training steps completed, counting the step in progress once it ran."""
        clock = self.loop.elapsed
        return clock.steps + (clock.in_progress and not self.before_step)

    def run(self, data: Any, step: Any, epochs: int, epoch_steps: int) -> tuple[Any, Any, Any]:
        """Trains ``epochs`` epochs of ``epoch_steps`` steps: ``(state, history, elapsed)``."""
        from gyre.callbacks import checkpoint, keras_bar
        from gyre.core import after, on_train_step
        from gyre.engine import train_loop
        from gyre.loggers import write_to

        t, config = self.trainer, self.trainer.config
        tasks: dict[Any, Any] = {on_train_step: step}
        every = config.logger.log_steps_every
        if every:
            tasks[after(steps=every - 1).every(every)] = self.log_window
        resume_ckpt = checkpoint(str((t.log_dir / "resume").resolve()), keep=1)
        callbacks: list[Any] = [self, write_to(t.writer, every=max(1, min(every or epoch_steps, epoch_steps)))]
        if config.resume_every_minutes:  # on a clock (a save costs tens of ms; small epochs take less): and at the end
            tasks[periodic(60.0 * config.resume_every_minutes)] = resume_ckpt
        else:
            callbacks.insert(1, resume_ckpt)  # at every epoch's end, after the epoch's hooks
        if config.enable_progress_bar:
            callbacks.insert(0, keras_bar(total=epochs * epoch_steps))
        status = "failed"
        try:
            out = train_loop(
                t.state, data, tasks, callbacks=callbacks, stop=epochs * epoch_steps,
                epoch_duration=epoch_steps, steps_per_call=config.steps_per_call,
                resume=config.resume, nan_policy="raise" if config.detect_nans else "ignore",
            )
            status = "stopped" if out[1].stop_reason else "success"
            return out
        finally:
            for cb in t.callbacks:
                cb.finalize(status)
            resume_ckpt.close()

    # -- engine hooks -------------------------------------------------------------------------

    def on_train_begin(self, loop: Any) -> None:
        self.loop = loop
        for cb in self.trainer.callbacks:
            cb.on_training_start()

    def on_epoch_begin(self, elapsed: Any) -> None:
        self._epoch_start = time.perf_counter()
        self.before_step = True
        for cb in self.trainer.callbacks:
            cb.on_training_epoch_start(elapsed.epochs + 1)
        self.before_step = False

    def on_train_batch_end(self, elapsed: Any, logs: Any) -> None:
        values = dict(logs.get("losses", {}) if logs else {})
        values.update(logs.get("metrics", {}) if logs else {})
        values.update(logs.get("stateful_metrics", {}) if logs else {})  # those nan_keys leaves unchecked
        for cb in self.step_callbacks:
            cb.on_training_step(values, elapsed.epochs + 1, elapsed.steps + 1)

    def log_window(self, state: Any) -> tuple[Logs, Any]:
        """Every ``log_steps_every`` steps: the window's metrics as ``train/<k>_step``."""
        values, fresh = _roll(state.extras[WINDOW])
        named = {name: values[key] for key, name in self._names("step").items() if key in values}
        logs = self._logs(scalars_for_writers(named, self.specs), "step")
        return logs, state.replace(extras={**state.extras, WINDOW: fresh})

    log_window._between_steps = True  # type: ignore[attr-defined]  # a block runs it between its steps

    def _logs(self, values: dict[str, Any], freq: str) -> Logs:
        """``values`` as logs for the NaN check (with ``nan_keys``, only those it names)."""
        keys = getattr(self.trainer.config, "nan_keys", None)
        if keys is None:
            return Logs().add_metrics(values)
        checked = {name for key, name in self._names(freq).items() if key in keys}
        return (Logs().add_metrics({k: v for k, v in values.items() if k in checked})
                .add_stateful_metrics({k: v for k, v in values.items() if k not in checked}))

    def _names(self, freq: str) -> dict[str, str]:
        if freq not in self._named:
            self._named[freq] = metric_names(self.specs, "train", freq)
        return self._named[freq]

    def on_epoch_end(self, state: Any, elapsed: Any, loop: Any) -> tuple[Logs, Any]:
        t = self.trainer
        epoch = elapsed.epochs + 1  # the clock counts the epoch once its end hooks ran
        seconds = time.perf_counter() - self._epoch_start
        values, fresh = _roll(state.extras[EPOCH])
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
                evals[mode] = self.builder.evaluate(loader, mode, state)  # the epoch's files are written below
            val = {k: v for metrics in evals.values() for k, v in metrics.items()}
            self.val_history[epoch] = val
            for cb in t.callbacks:
                cb.on_validation_epoch_end(val, epoch)
            logged.update(val)
        self._write_files(elapsed.steps, epoch, train, evals)
        logs = self._logs(scalars_for_writers(logged, {**self.specs, **self.builder.eval_specs_cached}), "epoch")
        logs = logs.add_metric("epoch", epoch)  # the epoch beside the global step, for every series
        if self.stop_reason:
            loop.request_stop(self.stop_reason)
        self._epoch_start = time.perf_counter()
        return logs, state.replace(extras={**state.extras, EPOCH: fresh})

    def _write_files(self, step: int, epoch: int, train: dict[str, Any], evals: dict[str, Any]) -> None:
        """The epoch's files: ``train``, and one per validation loader (``evals``: mode -> metrics)."""
        self.files.write("train", epoch, step, scalars_for_writers(train, self.specs))
        for mode, metrics in evals.items():
            self.files.write(mode, epoch, step, scalars_for_writers(metrics, self.builder.eval_specs_cached))

    def on_train_end(self) -> None:
        for cb in self.trainer.callbacks:
            cb.on_training_end()

    # -- resume -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The trainer's callbacks' states, by their position and class."""
        from gyre.trainer._callback import stored_config

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
