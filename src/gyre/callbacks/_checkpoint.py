"""``checkpoint``: save the state and the clock with orbax, keep the latest (or best) ones.

Saves are asynchronous: a call returns once the arrays are copied off the device, and the
files are written on a background thread (orbax writes to ``<step>.orbax-checkpoint-tmp``
and renames it when done, so a half-written checkpoint is never loaded). The next save, a
restore, :meth:`Checkpoint.wait_until_finished` and ``on_train_end`` wait for it.

orbax is imported on first use, so ``import gyre`` stays fast.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

from gyre.callbacks import _monitor
from gyre.core._clock import Elapsed
from gyre.core._errors import as_integer, describe, explain, whole_number
from gyre.core._host import to_python
from gyre.core._logs import Logs
from gyre.loop._tasks import LoopElement

_MODES = ("min", "max")


def _check_directory(directory: Any) -> str:
    if isinstance(directory, bytes) or not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            explain(
                "checkpoint's directory must be a path",
                expected="a str or os.PathLike (pathlib.Path) naming a directory",
                received=describe(directory),
                fix="gyre.checkpoint('runs/exp1/checkpoints')",
            )
        )
    path = os.fspath(directory)
    if not isinstance(path, str) or not path:
        raise ValueError(
            explain(
                "checkpoint's directory must be a non-empty path",
                expected="a directory name such as 'checkpoints'",
                received=describe(directory),
                fix="gyre.checkpoint('runs/exp1/checkpoints')",
            )
        )
    path = os.path.abspath(os.path.expanduser(path))  # orbax requires an absolute path
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(
            explain(
                "checkpoint's directory exists and is not a directory",
                expected="a directory, or a path where one can be created",
                received=f"the file {path!r}",
                fix="choose another path, or remove the file",
            )
        )
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(
            explain(
                "checkpoint's directory cannot be created: a file is in the way",
                expected="a directory, or a path where one can be created",
                received=f"{path!r}, under the file {existing!r}",
                fix="choose another path",
            )
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            explain(
                "checkpoint's directory cannot be written",
                expected="a directory you can write to, or one that can be created",
                received=f"{path!r}" + (f", under {existing!r}" if existing != path else "")
                + ", which is not writable",
                fix="choose a directory you can write to, e.g. under runs/",
            )
        )
    return path


def _check_keep(keep: Any) -> int:
    return whole_number(
        keep,
        minimum=1,
        problem="checkpoint's keep must be a whole number >= 1",
        expected="keep=3 (how many checkpoints to keep on disk)",
        fix="pass keep as a positive int; keep=1 keeps only the latest",
    )


def _check_monitor(monitor: Any, mode: Any) -> None:
    if monitor is not None and (not isinstance(monitor, str) or not monitor):
        raise TypeError(
            explain(
                "checkpoint's monitor must be the name of a logged value, or None",
                expected="a logged name such as 'loss_test' or 'metrics.accuracy_test'",
                received=describe(monitor),
                fix="gyre.checkpoint(directory, monitor='loss_test', mode='min')",
            )
        )
    if mode not in _MODES:
        raise ValueError(
            explain(
                "checkpoint's mode must be 'min' or 'max'",
                expected="'min' when lower is better (losses), 'max' when higher is (accuracy)",
                received=describe(mode),
                fix="mode='min'",
            )
        )


class Checkpoint(LoopElement):
    """The callback :func:`checkpoint` returns (see there). A :class:`~gyre.LoopElement`:
    ciclo's ``{**gyre.checkpoint(directory)}`` saves after every step.

    Attributes:
        directory: the absolute directory holding one sub-directory per saved step.
        keep: how many checkpoints are kept (the latest, or the best when ``monitor``).
        monitor: the logged value ranking checkpoints, or ``None``.
        mode: ``"min"`` or ``"max"``: which values of ``monitor`` are better.

    Example:
        >>> import gyre
        >>> ckpt = gyre.checkpoint("runs/exp1/checkpoints", keep=3)  # nothing written yet
        >>> isinstance(ckpt, gyre.callbacks.Checkpoint), ckpt.keep, ckpt.directory.endswith("checkpoints")
        (True, 3, True)
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int, monitor: str | None, mode: str) -> None:
        self.directory = _check_directory(directory)
        self.keep = _check_keep(keep)
        _check_monitor(monitor, mode)
        self.monitor = monitor
        self.mode = mode
        self._manager_: Any = None

    def __repr__(self) -> str:
        extra = f", monitor={self.monitor!r}, mode={self.mode!r}" if self.monitor else ""
        return f"Checkpoint({self.directory!r}, keep={self.keep}{extra})"

    # -- orbax ---------------------------------------------------------------------------

    @property
    def _manager(self) -> Any:
        if self._manager_ is None:
            import orbax.checkpoint as ocp
            from orbax.checkpoint import checkpoint_managers as cm

            if self.monitor is None:
                policy: Any = cm.LatestN(n=self.keep)
                best_fn = None
            else:
                # best_fn with max_to_keep would delete the newest checkpoint when its value is
                # poor; keep the latest one and the best `keep` ones side by side instead.
                policy = cm.AnyPreservationPolicy(
                    [cm.LatestN(n=1), cm.BestN(get_metric_fn=self._score, reverse=False, n=self.keep)]
                )
                best_fn = self._score  # also makes orbax write the metrics next to each step
            options = ocp.CheckpointManagerOptions(
                preservation_policy=policy,
                best_fn=best_fn,
                best_mode="max",  # _score is "higher is better" in both modes
                enable_async_checkpointing=True,
                create=True,
            )
            self._manager_ = ocp.CheckpointManager(self.directory, options=options)
        return self._manager_

    def _score(self, metrics: Any) -> float:
        """Higher is better; missing or NaN values rank last."""
        value = metrics.get(self.monitor) if isinstance(metrics, Mapping) else None
        if not isinstance(value, (int, float)) or math.isnan(value):
            return -math.inf
        return float(value) if self.mode == "max" else -float(value)

    # -- saving --------------------------------------------------------------------------

    def _monitored(self, logs: Logs | None, clock: Elapsed) -> Any:
        return _monitor.find(
            logs,
            self.monitor,  # type: ignore[arg-type]
            owner="checkpoint",
            step=clock.steps,
            fix="monitor one of the received names (evaluation entries carry the test "
            "suffix, e.g. 'loss_test'), and save where it is logged (the checkpoint "
            "registers itself on on_epoch_end, after evaluation); when calling it by "
            "hand, pass the logs: ckpt(elapsed, state, logs)",
        )

    def __call__(self, elapsed: Elapsed, state: Any, logs: Logs | None = None, loop: Any = None) -> None:
        """Saves ``state`` and the clock (asynchronously); skips a step already saved.

        One numbering, the completed steps: during a step (in a loop, or in a hand loop over
        ``gyre.elapse``) the state already holds the step's update, so it is saved under the
        clock once the step completes (``elapsed.completed()``: step ``k`` saves as ``k + 1``),
        and a run resumed from it starts at the next step index. A clock that is not in
        progress (the one a loop returned) is saved as it is.

        Args:
            elapsed: the clock (``gyre.Elapsed``).
            state: any pytree of arrays.
            logs: the step's logs; needed when ``monitor`` is set.
            loop: the loop (passed by the engine).

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name)
            >>> ckpt(gyre.Elapsed(steps=7), {"w": jnp.ones(2)})
            >>> ckpt.latest_step()
            7
            >>> ckpt.close(); tmp.cleanup()
        """
        if loop is not None:
            clock = loop.completed
        elif isinstance(elapsed, Elapsed):
            clock = elapsed.completed()
        else:
            raise TypeError(
                explain(
                    "a checkpoint called by hand takes the clock first, then the state",
                    expected="ckpt(elapsed, state) with elapsed a gyre.Elapsed",
                    received=f"ckpt({describe(elapsed, 40)}, {describe(state, 40)})",
                    fix="pass the elapsed from gyre.elapse(...) or a loop first: ckpt(elapsed, state)",
                )
            )
        step = int(clock.steps)
        value = self._monitored(logs, clock) if self.monitor is not None else None
        manager = self._manager
        latest = manager.latest_step()
        if latest is not None and step <= latest:
            if step < latest:
                warnings.warn(
                    f"checkpoint: step {step} not saved in {self.directory}: it holds a later "
                    f"step ({latest}); use a new directory for a run that goes back in time",
                    stacklevel=2,
                )
            return None
        metrics = None
        if value is not None:
            number = _monitor.as_number(value, self.monitor, owner="checkpoint", step=clock.steps)  # type: ignore[arg-type]
            metrics = {self.monitor: number}
        import orbax.checkpoint as ocp

        counters = {name: to_python(v) for name, v in clock.to_dict().items()}
        manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), elapsed=ocp.args.JsonSave(counters)
            ),
            metrics=metrics,
        )
        return None

    on_epoch_end = __call__

    def on_train_end(self) -> None:
        """Waits for a save still being written when the loop ends.

        ``on_loop_end``, which the engine calls when any loop holding the checkpoint ends,
        is the same, so a plain ``gyre.loop`` needs no ``on_end=ckpt.on_train_end``.

        Example:
            >>> import os, tempfile, gyre, jax.numpy as jnp
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name)
            >>> ckpt(gyre.Elapsed(steps=1), {"w": jnp.ones(2)})
            >>> ckpt.on_loop_end()  # the save is on disk now
            >>> [name for name in os.listdir(tmp.name) if name.isdigit()]
            ['1']
            >>> ckpt.close(); tmp.cleanup()
        """
        self.wait_until_finished()

    on_loop_end = on_train_end

    # -- reading -------------------------------------------------------------------------

    def latest_step(self) -> int | None:
        """The latest saved step, or ``None`` when there is none.

        Example:
            >>> import tempfile, gyre
            >>> with tempfile.TemporaryDirectory() as tmp, gyre.checkpoint(tmp) as ckpt:
            ...     print(ckpt.latest_step())
            None
        """
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """The saved steps, in increasing order.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> with tempfile.TemporaryDirectory() as tmp, gyre.checkpoint(tmp, keep=2) as ckpt:
            ...     for s in (1, 2, 3):
            ...         ckpt(gyre.Elapsed(steps=s), {"w": jnp.ones(2)})
            ...     print(ckpt.all_steps())
            [2, 3]
        """
        return sorted(self._manager.all_steps())

    def best_step(self) -> int | None:
        """The saved step with the best monitored value, or ``None`` when there is none.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name, monitor="loss", mode="min")
            >>> for s, loss in ((1, 0.5), (2, 0.9)):
            ...     ckpt(gyre.Elapsed(steps=s), {"w": jnp.ones(2)}, gyre.logs().add_loss("loss", loss))
            >>> ckpt.best_step(), ckpt.all_steps()
            (1, [1, 2])
            >>> ckpt.close(); tmp.cleanup()
        """
        if self.monitor is None:
            raise ValueError(
                explain(
                    "best_step() needs a checkpoint that monitors a value",
                    expected="gyre.checkpoint(directory, monitor='loss_test', mode='min')",
                    received=f"{self!r} (no monitor)",
                    fix="pass monitor= to gyre.checkpoint, or use latest_step()",
                )
            )
        return self._manager.best_step()

    def restore(self, target_state: Any, step: int | None = None) -> tuple[Any, Elapsed]:
        """Loads a saved state into the structure of ``target_state``, and its clock.

        Args:
            target_state: a pytree with the structure, shapes and dtypes of the saved state
                (e.g. a freshly initialised state; ``jax.ShapeDtypeStruct`` leaves work too).
                Its arrays' shardings are used for the restored ones.
            step: the step to load; the latest by default.

        Returns:
            ``(state, elapsed)``: pass ``elapsed`` back to the loop to continue the run.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name)
            >>> ckpt(gyre.Elapsed(steps=3), {"w": jnp.full(2, 3.0)})
            >>> state, elapsed = ckpt.restore({"w": jnp.zeros(2)})
            >>> state["w"].tolist(), elapsed.steps
            ([3.0, 3.0], 3)
            >>> ckpt.close(); tmp.cleanup()
        """
        import orbax.checkpoint as ocp

        self.wait_until_finished()
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise FileNotFoundError(
                    explain(
                        f"no checkpoint to restore in {self.directory}",
                        expected="a directory holding at least one saved step",
                        received="an empty directory (or one with only unfinished saves)",
                        fix="check the directory, or start from a fresh state when there is "
                        "nothing to resume: `if ckpt.latest_step() is not None: ...`",
                    )
                )
            step = steps[-1]
        elif as_integer(step) not in steps:
            raise FileNotFoundError(
                explain(
                    f"no checkpoint for step {step!r} in {self.directory}",
                    expected=f"one of the saved steps {steps}",
                    received=describe(step),
                    fix="pass one of the saved steps, or step=None for the latest",
                )
            )
        step = as_integer(step)
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(target_state), elapsed=ocp.args.JsonRestore()
        )
        try:
            restored = self._manager.restore(step, args=args)
        except ValueError as err:
            raise ValueError(
                explain(
                    f"the checkpoint of step {step} in {self.directory} does not fit target_state",
                    expected="a target_state with the structure, shapes and dtypes of the saved state",
                    received=f"orbax says: {err}",
                    fix="build target_state as the saved state was built (same model, optimizer "
                    "and state class), e.g. by running your init function again",
                )
            ) from err
        return restored["state"], Elapsed.from_dict(restored["elapsed"])

    # -- lifetime ------------------------------------------------------------------------

    def wait_until_finished(self) -> None:
        """Blocks until every save started so far is on disk.

        Example:
            >>> import tempfile, gyre
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     gyre.checkpoint(tmp).wait_until_finished()
        """
        if self._manager_ is not None:
            self._manager_.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases orbax's resources; the object can be reused.

        Example:
            >>> import tempfile, gyre
            >>> with tempfile.TemporaryDirectory() as tmp, gyre.checkpoint(tmp) as ckpt:
            ...     pass
        """
        if self._manager_ is not None:
            manager, self._manager_ = self._manager_, None
            manager.wait_until_finished()
            manager.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checkpoint(
    directory: str | os.PathLike[str],
    *,
    keep: int = 1,
    monitor: str | None = None,
    mode: str = "min",
) -> Checkpoint:
    """Saves the state and the clock with orbax, keeping the latest ``keep`` checkpoints.

    Put it in a task table under any schedule, or pass it to a named loop's ``callbacks=``,
    where it registers itself on ``on_epoch_end`` (after the evaluation) and, on
    ``on_train_end``, waits for the last save. It can also be called by hand as
    ``ckpt(elapsed, state)``. Saves are asynchronous; a step that is already saved is skipped.

    Args:
        directory: where to save (one sub-directory per step); made absolute.
        keep: how many checkpoints to keep: the latest ones, or with ``monitor`` the best
            ones (the latest is kept as well, to resume from).
        monitor: a logged name (``"loss_test"``) or ``"collection.name"`` that ranks the
            checkpoints; it must be in the logs whenever the checkpoint runs.
        mode: ``"min"`` (lower is better) or ``"max"``.

    Returns:
        A :class:`Checkpoint`, also able to list and restore what it saved.

    Example:
        >>> import tempfile, gyre, jax.numpy as jnp
        >>> def train_step(state):
        ...     return {"w": state["w"] + 1.0}
        >>> tmp = tempfile.TemporaryDirectory()
        >>> ckpt = gyre.checkpoint(tmp.name, keep=2)
        >>> state, _, elapsed = gyre.loop(
        ...     {"w": jnp.zeros(2)}, range(6), {gyre.every(1): train_step, gyre.every(2): ckpt},
        ...     on_end=ckpt.on_train_end)
        >>> ckpt.all_steps()
        [3, 5]
        >>> state, elapsed = ckpt.restore({"w": jnp.zeros(2)})
        >>> state["w"].tolist(), elapsed.steps
        ([5.0, 5.0], 5)
        >>> ckpt.close(); tmp.cleanup()
    """
    return Checkpoint(directory, keep=keep, monitor=monitor, mode=mode)
