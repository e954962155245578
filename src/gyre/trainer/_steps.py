"""The trainer's compiled training and evaluation steps, built from the user's loss function
(metrics accumulate on the device inside them), and one run of :meth:`TrainerModule.train_model`:
the engine's ``train_loop`` and the loop callback that turns its named hooks into the trainer's,
carrying the trainer callbacks' state into every checkpoint."""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from gyre.callbacks import checkpoint, keras_bar
from gyre.core import after, on_train_step
from gyre.core._clock import infer_batch_size
from gyre.core._errors import describe, explain, warn
from gyre.core._logs import Logs
from gyre.core._schedules import periodic
from gyre.data._padding import accepts_mask
from gyre.engine import train_loop
from gyre.engine._epochs import EpochLength, refuse_unsplit_evaluation
from gyre.engine._masked import MaskedBatches
from gyre.engine._resume import PastStopError
from gyre.engine._ring import arg_shapes
from gyre.loggers import write_to
from gyre.steps._update import train_update
from gyre.steps.managed import check_floating_loss
from gyre.trainer._callback import overrides_training_step, stored_config
from gyre.trainer._metrics import (
    FREQ_MODES,
    PHASE_MODES,
    ConcatCollector,
    MetricAccumulator,
    metric_names,
    parse_metrics,
    scalars_for_writers,
)
from gyre.trainer._model import NNX_REST, prepare, tree_stats

EPOCH = "train_epoch_metrics"  # the epoch's accumulator, in TrainState.extras
WINDOW = "train_window_metrics"  # the accumulator of the steps since the last step log
LOSS_FUNCTION = {"nnx": "loss_function", "linen": "loss_function_linen"}  # the trainer's method, by model mode


def loss_output(out: Any, *, mode: str, name: str) -> tuple[Any, Mapping[str, Any], Any]:
    """``(loss, metrics, mutable variables)`` from what a loss function returned, or an error."""
    loss, metrics, mutable = out, {}, None
    if isinstance(out, tuple) and len(out) == 2:
        loss, aux = out
        if mode == "linen" and isinstance(aux, tuple) and len(aux) == 2:
            mutable, metrics = aux
        else:
            metrics = aux
    if metrics is None:
        metrics = {}
    good_loss = isinstance(loss, (jax.Array, float, int)) and not isinstance(loss, bool) and jnp.ndim(loss) == 0
    if not good_loss or not isinstance(metrics, Mapping):
        shape = "loss, (mutable_variables, metrics)" if mode == "linen" else "loss, metrics"
        raise TypeError(explain(
            f"{name} returned no scalar loss",
            expected=f"a scalar loss, or ({shape}) with metrics a dict of name -> value", received=_described(out),
            fix=f"end {name} with `return loss, {{'acc': acc}}`, loss a 0-d array (e.g. .mean())"))
    if "loss" in metrics:
        raise ValueError(explain(
            f"{name}'s metrics hold a key 'loss'",
            expected="metrics other than the loss (the trainer logs the returned loss as 'loss')",
            received=f"metric keys {sorted(metrics)}",
            fix="rename the metric, or return the loss only as the first value"))
    return loss, dict(metrics), mutable


def _described(out: Any) -> str:
    if isinstance(out, tuple):
        return f"a tuple of {len(out)}: ({', '.join(_described(o) for o in out)})"
    if isinstance(out, jax.Array):
        return f"an array of shape {out.shape}"
    return describe(out)


def batch_size_of(batch: Any, inputs: Any) -> Any:
    """A batch's examples (its ``size`` attribute, else its input's leading axis): MEAN's weight."""
    size = getattr(batch, "size", None)
    if isinstance(size, (int, jax.Array)) and not callable(size):
        return size
    return infer_batch_size(inputs)  # the engine's rule: the leading dimension the arrays share


def nan_checked(logs: Logs, values: Mapping[str, Any], checked: Container[str] | None) -> Logs:
    """``values`` into ``logs`` in order: metrics, or stateful metrics (the NaN check skips them) if not ``checked``."""
    for key, value in values.items():
        logs = logs.add_metric(key, value) if checked is None or key in checked else logs.add_stateful_metric(key, value)
    return logs


class StepBuilder:
    """Builds a :class:`~gyre.TrainerModule`'s compiled functions."""

    def __init__(self, trainer: Any, adapter: Any) -> None:
        self.trainer = trainer
        self.model = adapter
        self.mode = adapter.mode
        self.loss_name = LOSS_FUNCTION[self.mode]
        self.eval_specs_cached: dict[str, Any] = {}
        self._eval: dict[str, Any] = {}  # the compiled evaluation, its reduction, its specs by batch structure

    # -- one forward pass, both modes ---------------------------------------------------------

    def forward(
        self, params: Any, state: Any, batch: Any, rng: jax.Array, *, train: bool, mask: Any = None
    ) -> tuple[Any, dict[str, Any], Any]:
        """``(loss, metrics, new model_state)`` of one batch."""
        t = self.trainer
        kw = {} if mask is None else {"mask": mask}
        if self.mode == "nnx":
            module = self.model.merge(params, state.model_state[NNX_REST], train=train)
            batch = prepare(t, module, params, batch, rng, train=train)
            out = t.loss_function(module, batch, train=train, **kw)
            loss, metrics, _ = loss_output(out, mode="nnx", name=self.loss_name)
            sown = nnx.pop(module, nnx.Intermediate)  # sown values never enter the carried state
            model_state = {**state.model_state, NNX_REST: self.model.rest_of(module)}
        else:
            batch = prepare(t, None, params, batch, rng, train=train)
            out = t.loss_function_linen(params, state, batch, rng, train=train, **kw)
            loss, metrics, mutable = loss_output(out, mode="linen", name=self.loss_name)
            mutable = dict(mutable or {})
            sown = mutable.pop("intermediates", {})
            model_state = dict(state.model_state)
            if train and mutable:
                model_state.update(mutable)
        if train and getattr(t.config, "log_intermediates", False):
            metrics = {**metrics, **tree_stats(sown)}
        return loss, metrics, model_state

    # -- the training step --------------------------------------------------------------------

    def train_step(self) -> Callable[[Any, Any], tuple[Logs, Any]]:
        """``(state, batch) -> (logs, state)``: the logs hold the step's own values, which the
        writers get every step and the NaN check reads (``detect_nans`` only sets its policy)."""
        t = self.trainer

        def objective(inner: Any, batch: Any) -> tuple[Any, tuple[dict[str, Any], Any]]:
            rng = jax.random.fold_in(inner.rng, inner.step)
            loss, metrics, model_state = self.forward(inner.params, inner, batch, rng, train=True)
            check_floating_loss("loss", loss, self.loss_name)  # else JAX's "grad requires real-valued outputs"
            return loss, (metrics, inner.replace(model_state=model_state))

        def step(state: Any, batch: Any) -> tuple[Logs, Any]:
            loss, metrics, grads, new = train_update(objective, state, batch)[:4]
            extra = self.inspected(state.params, grads)
            values = {"loss": loss, **metrics, **extra}
            specs, parsed = parse_metrics(values, where=self.loss_name)
            count = batch_size_of(batch, t.batch_to_input(batch))
            extras = dict(new.extras)
            extras[EPOCH] = extras[EPOCH].update(specs, parsed, count)
            extras[WINDOW] = extras[WINDOW].update(specs, parsed, count)
            new = new.replace(extras=extras)
            checked = getattr(t.config, "nan_keys", None)
            logs = Logs().add_loss("loss", loss) if checked is None or "loss" in checked else Logs().add_stateful_metric("loss", loss)
            # a step logs what training logs per step: not a log_mode 'val'/'test'/'eval' metric, nor
            # a log_freq 'epoch' one (its epoch value is checked for NaN at the epoch's end)
            values = {k: v for k, (v, _) in parsed.items() if k != "loss" and specs[k].mode != "concat"
                      and specs[k].log_mode in PHASE_MODES["train"] and specs[k].log_freq in FREQ_MODES["step"]}
            return nan_checked(logs, values, checked), new

        return step

    def specs(self, state: Any, batch: Any, *, train: bool, mask: Any = None) -> tuple[dict[str, Any], Any]:
        """The metric specs and value shapes of a training or evaluation step (traced, not run)."""
        found: dict[str, Any] = {}

        def probe(state: Any, batch: Any, mask: Any) -> Any:
            rng = state.rng if train else self.eval_rng(state)
            loss, metrics, _ = self.forward(state.params, state, batch, rng, train=train, mask=mask)
            extra = self.inspected(state.params, state.params) if train else {}  # grads are shaped as params
            found["specs"], parsed = parse_metrics({"loss": loss, **metrics, **extra}, where=self.loss_name)
            return parsed

        shapes = jax.eval_shape(probe, state, batch, mask)
        return found["specs"], shapes

    def inspected(self, params: Any, grads: Any) -> dict[str, Any]:
        """The gradient norm and parameter / gradient statistics the config asks to log."""
        config = self.trainer.config
        extra = {"grad_norm": optax.global_norm(grads)} if config.log_grad_norm else {}
        if getattr(config, "log_param_stats", False):
            extra.update(tree_stats(params))
        if getattr(config, "log_grad_stats", False):
            extra.update(tree_stats(grads, ".grad"))
        return extra

    def eval_rng(self, state: Any) -> jax.Array:
        """The evaluation's random key: from ``seed_eval`` when set, else the state's."""
        seed = getattr(self.trainer.config, "seed_eval", None)
        return state.rng if seed is None else jax.random.PRNGKey(seed)

    # -- the evaluation step ------------------------------------------------------------------

    def eval_step(self) -> Callable[..., Any]:
        """``(state, accumulator, batch, mask=None) -> (accumulator, CONCAT values)``."""
        t = self.trainer

        def step(state: Any, acc: Any, batch: Any, mask: Any = None) -> Any:
            loss, metrics, _ = self.forward(state.params, state, batch, self.eval_rng(state), train=False, mask=mask)
            specs, parsed = parse_metrics({"loss": loss, **metrics}, where=self.loss_name)
            count = batch_size_of(batch, t.batch_to_input(batch)) if mask is None else jnp.sum(mask)
            acc = acc.update(specs, parsed, count)
            return acc, ConcatCollector.select(specs, parsed)

        return step

    def evaluate(self, loader: Any, mode: str, state: Any) -> dict[str, Any]:
        """One pass over ``loader``: ``{"<mode>/<key>": device value, "<mode>/time": seconds}``.

        When the loss function takes ``mask``, a batch smaller than the first is padded to its
        size and masked (one compilation; CONCAT values are cut back to the real rows); else it
        runs as it is (one more compilation). Over several devices, a batch that does not split
        over them runs whole, unsplit."""
        start = time.perf_counter()
        strategy = self.trainer.strategy
        single = strategy.mesh is None  # jit takes numpy batches as they are, faster than placing them
        share = 0 if single else strategy.lift_batch_size(1)  # a batch that does not split over the
        # devices (a short last one the loss function does not mask) is evaluated whole, as gyre.fit's
        if "step" not in self._eval:
            self._eval["step"] = self.eval_step() if self.trainer.config.debug else jax.jit(self.eval_step())
            self._eval["compute"] = jax.jit(lambda a: a.compute())
            self._eval["masked"] = accepts_mask(getattr(self.trainer, self.loss_name))  # read once
        run, masked = self._eval["step"], self._eval["masked"]
        acc = collector = None
        for item in MaskedBatches(loader) if masked else loader:  # the engine's padded evaluation
            batch, mask = (item.batch, item.mask) if masked else (item, None)
            if acc is None:
                specs, acc = self._eval_start(state, batch, mask)
                collector = ConcatCollector(specs)
            rows = 0 if single else infer_batch_size(batch, strict=False, default=0)  # (jit: not needed)
            whole = single or rows % share != 0
            if whole and not single:  # several processes: each holds only its rows
                refuse_unsplit_evaluation(
                    rows, share, f"a {mode} batch",
                    expected=", the size every batch is padded to (a list's largest, else the first)" if masked else "",
                    received=" (the size the batches are padded to)" if masked else "",
                    fix=f"make the largest {mode} batch a multiple of {share} rows in each process" if masked else
                    "drop the short last batch, choose an evaluation batch size that splits, or give the loss "
                    "function a mask parameter (batches padded to one size)")
            args = (batch, mask) if whole else strategy.place_batch((batch, mask))
            if mask is None:
                acc, concat = run(state, acc, args[0])
            else:
                acc, concat = run(state, acc, *args)
                real = item.rows  # counted on the host: no device read
                if real < len(mask):
                    concat = {k: v[:real] if jnp.ndim(v) and jnp.shape(v)[0] == len(mask) else v for k, v in concat.items()}
            collector.add(concat)
        if acc is None:
            raise ValueError(explain(
                f"the {mode} loader gave no batch",
                expected="at least one batch", received=f"an empty {type(loader).__name__}",
                fix=f"check the {mode} split (its size and batch size)"))
        values = {**self._eval["compute"](acc), **collector.compute()}
        phase = "test" if mode.startswith("test") else "val"
        names = metric_names(self.eval_specs_cached, phase, "epoch")
        if mode != phase:  # a further named loader (val_ood): its own names
            names = {k: mode + n[len(phase):] if n.startswith(phase + "/") else f"{mode}/{n}" for k, n in names.items()}
        out = {name: values[key] for key, name in names.items() if key in values}
        out[f"{mode}/time"] = time.perf_counter() - start
        return out

    def _eval_start(self, state: Any, batch: Any, mask: Any) -> tuple[Any, Any]:
        """The evaluation's specs and empty accumulator, traced once per batch structure."""
        key = (arg_shapes(batch), mask is None)
        cache = self._eval.setdefault("start", {})
        if key not in cache:
            specs, shapes = self.specs(state, batch, train=False, mask=mask)
            empty = MetricAccumulator.init(specs, shapes)
            if jax.process_count() == 1:  # committed where the step's output lands: no second compile
                empty = jax.device_put(empty, self.trainer.strategy.replicated())
            cache[key] = (specs, empty)
        specs, empty = cache[key]
        self.eval_specs_cached = specs
        return specs, empty


# an accumulator's results and its emptied self in one compiled call (eagerly, each small
# operation would cost a dispatch), compiled once per accumulator structure
_roll = jax.jit(lambda acc: (acc.compute(), acc.reset()))


class TrainingRun:
    """Named-loop callback of one :meth:`TrainerModule.train_model` call."""

    def __init__(self, trainer: Any, val_loaders: list[tuple[str, Any]]) -> None:
        self.trainer, self.val_loaders = trainer, val_loaders
        self.specs, self.builder, self.files = trainer._specs or {}, trainer._builder, trainer._epoch_files
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
        self._stepped = -1  # the step whose on_training_step ran

    def run(self, data: Any, step: Any, epochs: int, epoch_steps: int) -> tuple[Any, Any, Any]:
        """Trains ``epochs`` epochs of ``epoch_steps`` steps: ``(state, history, elapsed)``."""
        t, config = self.trainer, self.trainer.config
        tasks: dict[Any, Any] = {on_train_step: step}
        every = config.logger.log_steps_every
        if every:
            tasks[after(steps=every - 1).every(every)] = self.log_window
        resume_ckpt = checkpoint(str((t.log_dir / "resume").resolve()), keep=1)
        callbacks: list[Any] = [self, write_to(t.writer, every=max(1, min(every or epoch_steps, epoch_steps))),
                                EpochLength(epoch_steps, who="the trainer", data="train_loader",
                                            fix="train in a new log_dir without resume")]
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
                epoch_duration=epoch_steps, steps_per_call=self._steps_per_call(config.steps_per_call),
                resume=config.resume, nan_policy="raise" if config.detect_nans else "ignore",
            )
            status = "stopped" if out[1].stop_reason else "success"
            return out
        except PastStopError as err:  # the engine's words: stop is the trainer's, not the user's
            err.note_epochs("the trainer", epochs, epoch_steps, "pass train_model a larger num_epochs (or a larger "
                            "trainer.train_epochs) to continue the saved run, or train in a new log_dir without resume")
            raise
        finally:
            for cb in t.callbacks:
                cb.finalize(status)
            resume_ckpt.close()

    def _steps_per_call(self, steps: Any) -> Any:
        """``trainer.steps_per_call``; 1, with a warning in the trainer's words, when a callback's
        ``on_training_step`` runs after every step (the engine's would name its own hooks)."""
        if steps in (1, "auto") or not self.step_callbacks:
            return steps
        names = ", ".join(sorted({type(cb).__name__ for cb in self.step_callbacks}))
        warn(f"trainer.steps_per_call={steps} cannot fuse steps, so training runs step by step (the same "
             f"results, one call per step): {names} overrides on_training_step, which runs after every step. "
             "Do that work in on_training_epoch_end (or on_filtered_training_epoch_end) to fuse steps, or "
             "set trainer.steps_per_call: 1")
        return 1

    # -- engine hooks -------------------------------------------------------------------------

    def on_train_begin(self, loop: Any) -> None:
        self.loop = loop
        self.trainer._store_config()  # not before: a refused resume leaves the saved run's config.yaml
        if loop.resumed_step is None:  # a resumed run has its point from the run that started it
            self.trainer.writer.write_scalars(loop.elapsed.steps, {"param/num_model_params": self.trainer.num_model_params()})
        for cb in self.trainer.callbacks:
            cb.on_training_start()

    def on_epoch_begin(self, elapsed: Any) -> None:
        self._epoch_start = time.perf_counter()
        self.before_step = True
        for cb in self.trainer.callbacks:
            cb.on_training_epoch_start(elapsed.epochs + 1)
        self.before_step = False

    def on_train_batch_end(self, elapsed: Any, logs: Any) -> None:
        if elapsed.steps != self._stepped:  # (an epoch's last step: run by on_epoch_end already)
            self._training_step(elapsed, logs)

    def _training_step(self, elapsed: Any, logs: Any) -> None:
        self._stepped = elapsed.steps
        # stateful_metrics: the values nan_keys leaves unchecked
        values = {k: v for c in ("losses", "metrics", "stateful_metrics") for k, v in (logs or {}).get(c, {}).items()}
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
        """``values`` as logs for the NaN check (with ``nan_keys``, only those it names), checked ones first."""
        keys = getattr(self.trainer.config, "nan_keys", None)
        if keys is None:
            return nan_checked(Logs(), values, None)
        checked = {name for key, name in self._names(freq).items() if key in keys}
        return nan_checked(Logs(), dict(sorted(values.items(), key=lambda kv: kv[0] not in checked)), checked)

    def _names(self, freq: str) -> dict[str, str]:
        if freq not in self._named:
            self._named[freq] = metric_names(self.specs, "train", freq)
        return self._named[freq]

    def on_epoch_end(self, state: Any, elapsed: Any, loop: Any) -> tuple[Logs, Any]:
        t = self.trainer
        if self.step_callbacks:  # the epoch's last step, before its end, as jax_trainer (the engine's
            self._training_step(elapsed, loop.logs)  # on_train_batch_end of that step comes after on_epoch_end)
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
        self.files.write("train", epoch, elapsed.steps, scalars_for_writers(train, self.specs))
        for mode, metrics in evals.items():
            self.files.write(mode, epoch, elapsed.steps, scalars_for_writers(metrics, self.builder.eval_specs_cached))
        logs = self._logs(scalars_for_writers(logged, {**self.specs, **self.builder.eval_specs_cached}), "epoch")
        logs = logs.add_metric("epoch", epoch)  # the epoch beside the global step, for every series
        if self.stop_reason:
            loop.request_stop(self.stop_reason)
        self._epoch_start = time.perf_counter()
        return logs, state.replace(extras={**state.extras, EPOCH: fresh})

    def on_train_end(self) -> None:
        for cb in self.trainer.callbacks:
            cb.on_training_end()

    # -- resume -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The trainer's callbacks' states, by their position and class."""
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
