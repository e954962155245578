"""Monitors of the optimizer: :class:`LearningRateMonitor` and :class:`GradientSpikeMonitor`."""

import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.callbacks._monitor import check_name
from gyre.config._registry import register_callback
from gyre.core._checks import instance, real
from gyre.core._errors import ExplainedKeyError, describe, explain, warn
from gyre.core._host import fetch
from gyre.trainer._callback import Callback, _check_state

LR_NAME = "optimizer/lr"
SPIKES_FILE = "grad_spikes.jsonl"


@register_callback
class LearningRateMonitor(Callback):
    """Writes ``trainer.learning_rate()`` as ``optimizer/lr`` at each filtered training epoch's
    start.

    When the trainer cannot tell the rate, nothing is written and a warning says so once.

    Example:
        >>> import io, pathlib, types, gyre, jax.numpy as jnp
        >>> out = io.StringIO()
        >>> trainer = types.SimpleNamespace(
        ...     log_dir=pathlib.Path("."), state=None, writer=gyre.ConsoleWriter(out),
        ...     global_step=0, stop_training=print, learning_rate=lambda: jnp.float32(0.5))
        >>> monitor = LearningRateMonitor()
        >>> monitor.bind(trainer)
        >>> monitor.on_training_epoch_start(1)
        >>> trainer.writer.close()
        >>> out.getvalue()
        'step 0: optimizer/lr=0.5\\n'
    """

    def __init__(self, *, every_n_epochs: int = 1) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self._warned = False

    def on_filtered_training_epoch_start(self, epoch_idx: int) -> None:
        """Writes ``optimizer/lr``."""
        rate = self._bound().learning_rate()
        if rate is None:
            if not self._warned:
                self._warned = True
                warn(
                    "LearningRateMonitor: the trainer cannot tell the learning rate, so none is "
                    "written; build the optimizer with optax.inject_hyperparams or give it a "
                    "schedule to see it"
                )
            return
        self._write("scalars", {LR_NAME: rate})


CHUNK = 1024  # per-step rows kept on the device in buffers of this many steps


def _spike_update(carry: dict[str, jax.Array], value: Any, decay: jax.Array, threshold: jax.Array):
    """One step of the spike monitor on the device; the row goes into ``rows`` if carried."""
    value = jnp.asarray(value).astype(jnp.float32)
    ema, seen = carry["ema"], carry["seen"]
    finite = jnp.isfinite(value)
    started = seen > 0
    spike = jnp.logical_or(~finite, started & (value > threshold * ema))
    moved = jnp.where(started, decay * ema + (1.0 - decay) * value, value)
    new_ema = jnp.where(finite, moved, ema)
    new = {
        "ema": new_ema,
        "seen": seen + finite.astype(jnp.int32),
        "spikes": carry["spikes"] + spike.astype(jnp.int32),
    }
    if "rows" in carry:
        row = jnp.stack([value, new_ema, spike.astype(jnp.float32)])[None]
        new["rows"] = jax.lax.dynamic_update_slice(carry["rows"], row, (carry["pos"], jnp.int32(0)))
        new["pos"] = carry["pos"] + 1
    return new


_UPDATE = jax.jit(_spike_update)


@register_callback
class GradientSpikeMonitor(Callback):
    """Counts steps whose gradient norm exceeds ``threshold`` times the EMA of the norms before it.

    The norm is the step metric ``metric`` (logged with ``log_grad_norm``); a non-finite norm
    is a spike. Each filtered epoch end writes ``grad/spikes`` and ``grad/ema``, and with
    ``log_to_disk`` one JSON line per step to ``log_dir/grad_spikes.jsonl``.

    Example:
        >>> import pathlib, tempfile, types, gyre, jax.numpy as jnp
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> trainer = types.SimpleNamespace(
        ...     log_dir=folder, state=None, writer=gyre.MultiWriter([]), global_step=0,
        ...     stop_training=print, learning_rate=lambda: None)
        >>> monitor = GradientSpikeMonitor(ema_decay=0.5, threshold=3.0)
        >>> monitor.bind(trainer)
        >>> for step, norm in enumerate([1.0, 1.0, 10.0, 1.0], start=1):
        ...     monitor.on_training_step({"grad_norm": jnp.float32(norm)}, 1, step)
        >>> int(monitor.state_dict()["spikes"]), float(monitor.state_dict()["ema"])
        (1, 3.25)
        >>> monitor.on_training_epoch_end({}, 1)
        >>> (folder / "grad_spikes.jsonl").read_text().splitlines()[2]
        '{"step": 3, "epoch": 1, "grad_norm": 10.0, "ema": 5.5, "spike": true}'
        >>> import shutil; shutil.rmtree(folder)
    """

    def __init__(
        self,
        *,
        every_n_epochs: int = 1,
        ema_decay: float = 0.99,
        threshold: float = 3.0,
        log_to_disk: bool = True,
        metric: str = "grad_norm",
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.ema_decay = real(ema_decay, "ema_decay", minimum=0.0, below=1.0, problem="GradientSpikeMonitor: bad ema_decay",
                              expected="a number in [0, 1)", fix="pass ema_decay=0.99")
        self.threshold = real(threshold, "threshold", above=0.0, problem="GradientSpikeMonitor: bad threshold",
                              expected="a number > 0", fix="pass threshold=3.0")
        self.log_to_disk = instance(log_to_disk, "log_to_disk", bool, problem="GradientSpikeMonitor: bad log_to_disk",
                                    expected="True or False", fix="pass log_to_disk=True")
        self.metric = check_name(metric, "GradientSpikeMonitor: bad metric", "'grad_norm'", "pass metric='grad_norm'")
        self._key: str | None = None  # the step metric's key, found at the first step
        self._consts = (jnp.float32(self.ema_decay), jnp.float32(self.threshold))
        self._zero = jnp.zeros((), jnp.int32)
        self._empty_rows = jnp.zeros((CHUNK, 3), jnp.float32)  # never written in place: shared
        self._carry: dict[str, jax.Array] = {"ema": jnp.zeros((), jnp.float32), "seen": self._zero,
                                             "spikes": self._zero}
        self._chunks: list[jax.Array] = []  # full (CHUNK, 3) row buffers not yet written
        self._steps: list[tuple[int, int]] = []  # (global_step, epoch) of each pending row
        self._window_steps = 0  # steps since grad/spikes was last written (a host count)
        self._new_buffer()

    def _new_buffer(self) -> None:
        if self.log_to_disk:
            self._carry = {**self._carry, "rows": self._empty_rows, "pos": self._zero}

    def _find(self, step_metrics: dict[str, Any]) -> str:
        for key in (self.metric, f"train/{self.metric}_step", f"train/{self.metric}"):
            if key in step_metrics:
                if np.shape(step_metrics[key]) != ():  # metadata only: no read
                    raise ValueError(explain(
                        f"GradientSpikeMonitor: the step metric {key!r} is not one number",
                        expected="a scalar gradient norm per step",
                        received=f"{describe(step_metrics[key])} of shape "
                        f"{np.shape(step_metrics[key])}",
                        fix="log the global norm (optax.global_norm(grads)) under "
                        f"{self.metric!r}, or set metric= to the name of a scalar"))
                return key
        raise ExplainedKeyError(explain(
            f"GradientSpikeMonitor needs the step metric {self.metric!r}, which was not logged",
            expected=f"{self.metric!r} in the step metrics (the trainer logs the gradient "
            "norm when log_grad_norm is on)",
            received=f"step metrics {sorted(step_metrics)}",
            fix="set log_grad_norm: true in the trainer's config, or set metric= to the "
            "name of the metric holding the gradient norm"))

    def on_training_step(self, step_metrics: dict[str, Any], epoch_idx: int, global_step: int) -> None:
        """Updates the EMA and the spike count on the device."""
        value = step_metrics.get(self._key) if self._key is not None else None
        if value is None:  # the first step (or a step without the metric): find it, or explain
            self._key = self._find(step_metrics)
            value = step_metrics[self._key]
        self._carry = _UPDATE(self._carry, value, *self._consts)
        self._window_steps += 1
        if self.log_to_disk:
            self._steps.append((int(global_step), int(epoch_idx)))
            if len(self._steps) % CHUNK == 0:  # the buffer is full: keep it, start another
                self._chunks.append(self._carry["rows"])
                self._new_buffer()

    def on_filtered_training_epoch_end(self, train_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Writes ``grad/spikes``, ``grad/ema`` and the per-step lines."""
        self._flush()

    def on_training_end(self) -> None:
        """Writes what the last epochs counted if their end was filtered out."""
        self._flush()

    def _flush(self) -> None:
        if not self._window_steps:
            return
        trainer = self._bound()
        self._write("scalars", {"grad/spikes": self._carry["spikes"], "grad/ema": self._carry["ema"]})
        if self._steps:
            buffers = fetch([*self._chunks, self._carry["rows"]])  # the one host read
            rows = np.concatenate(buffers)[: len(self._steps)].tolist()
            folder = pathlib.Path(trainer.log_dir)
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / SPIKES_FILE, "a", encoding="utf-8") as file:
                for (step, epoch), (value, ema, spike) in zip(self._steps, rows, strict=True):
                    line = {"step": step, "epoch": epoch, self.metric: _finite(value),
                            "ema": _finite(ema), "spike": bool(spike)}
                    file.write(json.dumps(line) + "\n")
        self._chunks, self._steps, self._window_steps = [], [], 0
        self._carry = {**self._carry, "spikes": self._zero}
        self._new_buffer()

    def state_dict(self) -> dict[str, Any]:
        """The EMA, the counts, and the per-step rows not yet written (device arrays).

        Example:
            >>> sorted(GradientSpikeMonitor().state_dict())  # doctest: +NORMALIZE_WHITESPACE
            ['chunks', 'ema', 'pending_epochs', 'pending_steps', 'pos', 'rows', 'seen', 'spikes',
             'window_steps']
        """
        carry = self._carry
        return {
            "ema": carry["ema"],
            "seen": carry["seen"],
            "spikes": carry["spikes"],
            "pos": carry.get("pos", 0),
            "rows": carry.get("rows", []),
            "chunks": list(self._chunks),
            "window_steps": self._window_steps,
            "pending_steps": [step for step, _ in self._steps],
            "pending_epochs": [epoch for _, epoch in self._steps],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned (per-step rows only with ``log_to_disk``).

        Example:
            >>> monitor = GradientSpikeMonitor()
            >>> monitor.load_state_dict(GradientSpikeMonitor().state_dict())
        """
        d = _check_state(self, d, ("ema", "seen", "spikes", "pos", "rows", "chunks", "window_steps",
                                   "pending_steps", "pending_epochs"))
        self._carry = {"ema": jnp.asarray(d["ema"], jnp.float32), "seen": jnp.asarray(d["seen"], jnp.int32),
                       "spikes": jnp.asarray(d["spikes"], jnp.int32)}
        self._window_steps = int(np.asarray(d["window_steps"]))
        saved_rows = not isinstance(d["rows"], list)
        self._chunks, self._steps = [], []
        self._new_buffer()
        if self.log_to_disk and saved_rows:
            self._chunks = [jnp.asarray(c, jnp.float32) for c in d["chunks"]]
            self._carry["rows"] = jnp.asarray(d["rows"], jnp.float32)
            self._carry["pos"] = jnp.asarray(d["pos"], jnp.int32)
            self._steps = [(int(s), int(e)) for s, e in zip(d["pending_steps"], d["pending_epochs"], strict=True)]


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None
