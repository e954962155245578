"""``checkpoint``: save a run with orbax (asynchronous, atomic, verified on load), keep the latest
and the best checkpoints, and resume exactly from the newest good one; a directory belongs to one run."""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401  (its exit hook must be registered before ours)
import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from gyre.callbacks import _monitor
from gyre.callbacks._store import (
    RECORD_FILE,
    RECORD_ITEM,
    CheckpointError,
    Files,
    Store,
    Unreadable,
    sync,
)
from gyre.core._checks import instance, path, whole
from gyre.core._clock import Elapsed
from gyre.core._errors import as_integer, describe, explain, flag, keywords_checked, warn
from gyre.core._logs import Logs
from gyre.engine._snapshot import Checkpointer, Snapshot
from gyre.parallel.distributed import is_main_process

_SAVING: set[Checkpoint] = set()  # with a save in flight: kept alive until it is on disk


def _finish_saves_at_exit() -> None:
    """Waits for every checkpoint's background saves at exit, so a script's last save lands on disk."""
    for ckpt in list(_SAVING):
        try:
            ckpt.wait_until_finished()
        except CheckpointError as err:  # the program is ending: say so, do not stop the other waits
            warn(f"checkpoint: a save still in flight when the program ended failed: {err}", UserWarning)


# CPython runs these hooks before it joins threads, in reverse order: so before
# concurrent.futures' own hook refuses new work to its executors (orbax's saves use them).
threading._register_atexit(_finish_saves_at_exit)  # type: ignore[attr-defined]


class Checkpoint(Checkpointer):
    """Saves a run with orbax, keeping the latest ``keep`` checkpoints and the best ``keep_best`` by
    ``monitor``, for an exact resume.

    In a task table it runs under its schedule; in a named loop's ``callbacks=`` on
    ``on_epoch_end``. In a loop it saves ``loop.snapshot()``; by hand, ``ckpt(elapsed, state)``.
    A loop returns only once its saves are on disk. Nothing is unpickled; on several processes
    every process takes part and process 0 writes the JSON.

    Args:
        directory: one sub-directory per step; empty, or holding the checkpoints this run
            resumes from.
        keep: the latest checkpoints kept (>= 1).
        keep_best: the best checkpoints by ``monitor`` kept as well; needs ``monitor``.
        monitor: a logged name (``"loss_test"``) or ``"collection.name"``; it must be in the
            logs whenever the checkpoint runs. Needed for ``keep_best`` and ``resume="best"``.
        mode: ``"min"`` or ``"max"``.
        async_save: ``False``: each save blocks until on disk.
        overwrite: delete another run's checkpoints in ``directory`` at the first save instead
            of refusing.
        checksums: store and verify each array's CRC-32 (one host copy of the state per save).

    Example:
        >>> import tempfile, gyre, jax.numpy as jnp
        >>> def train_step(state):
        ...     return {"w": state["w"] + 1.0}
        >>> tmp = tempfile.TemporaryDirectory()
        >>> ckpt = gyre.checkpoint(tmp.name, keep=2)
        >>> state, _, elapsed = gyre.loop(
        ...     {"w": jnp.zeros(2)}, range(6), {gyre.every(1): train_step, gyre.every(2): ckpt})
        >>> ckpt.all_steps()  # after steps 1, 3, 5 and the loop's end; the latest 2 kept
        [5, 6]
        >>> state, elapsed = ckpt.restore({"w": jnp.zeros(2)})
        >>> state["w"].tolist(), elapsed.steps
        ([6.0, 6.0], 6)
        >>> ckpt.close(); tmp.cleanup()
    """

    @keywords_checked
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int = 3,
        keep_best: int = 0,
        monitor: str | None = None,
        mode: str = "min",
        async_save: bool = True,
        overwrite: bool = False,
        checksums: bool = True,
    ) -> None:
        """Its attributes are its arguments (``directory`` made absolute)."""
        self.directory = check_directory(directory)
        check_monitor(monitor, mode)
        self.keep, self.keep_best = check_keep(keep, keep_best, monitor)
        self.monitor, self.mode = monitor, mode
        self.async_save = flag(async_save, "async_save", "checkpoint")
        self.overwrite = flag(overwrite, "overwrite", "checkpoint")
        self.checksums = flag(checksums, "checksums", "checkpoint")
        self._store = Store(
            self.directory, keep=self.keep, keep_best=self.keep_best,
            score=self._score if monitor is not None else None, async_save=self.async_save)
        self._claimed = False  # the directory is this run's (checked at the first save)
        self._resumed: int | None = None  # the step of this directory the run resumed from
        self._source: Store | None = None  # a checkpoint directory elsewhere it resumed from
        self._by_hand: Snapshot | None = None  # what restore() loaded
        self._unreadable: set[int] = set()  # damaged steps met while loading: set aside later
        self._warned: set[int] = set()
        self._said_fresh = False
        self._saved: set[int] = set()  # the steps this object saved
        self._last: int | None = None

    def __repr__(self) -> str:
        extra = f", keep_best={self.keep_best}" if self.keep_best else ""
        extra += f", monitor={self.monitor!r}, mode={self.mode!r}" if self.monitor else ""
        extra += ", overwrite=True" if self.overwrite else ""
        return f"Checkpoint({self.directory!r}, keep={self.keep}{extra})"

    def _score(self, metrics: Any) -> float:
        """Higher is better; missing or NaN values rank last."""
        return _monitor.score(self.mode, metrics.get(self.monitor) if isinstance(metrics, Mapping) else None)

    # -- the directory belongs to one run ----------------------------------------------------

    def on_loop_start(self) -> None:
        """Claims the directory for this run, as the first save does (call it to fail before training):
        refuses another run's checkpoints (:class:`FileExistsError`) unless resumed from them or
        ``overwrite=True`` (then deletes them); sets damaged steps aside as ``N.corrupt``.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     with gyre.checkpoint(tmp) as first_run:
            ...         first_run(gyre.Elapsed(steps=1), {"w": jnp.ones(2)})
            ...     gyre.checkpoint(tmp).on_loop_start()  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            FileExistsError: checkpoint: ... holds another run's checkpoints...
        """
        if self._claimed:
            return
        store = self._store
        on_disk = store.on_disk()
        damaged = sorted(s for s in on_disk if s in self._unreadable or not store.has_record(s))
        good = [s for s in on_disk if s not in damaged]
        later = good if self._resumed is None else [s for s in good if s > self._resumed]
        if later and not self.overwrite:
            raise FileExistsError(self._refusal(later))
        if is_main_process():
            store.delete_steps(later)
            for step in damaged:
                where = store.set_aside(step)
                if step not in self._warned:
                    warn(f"checkpoint: step {step} of {self.directory} cannot be loaded "
                         f"(unfinished or damaged): moved aside to {where}", UserWarning)
            store.delete_temporaries()
            if self._resumed is None:
                store.files.delete()  # they belong to no checkpoint of this directory
            if self._source is not None:
                store.files.copy_from(self._source.files)
        sync("claim")
        store.reload()
        self._source = None
        self._claimed = True
        if self.monitor is not None and not self.keep_best:
            warn(
                f"checkpoint: monitor={self.monitor!r} with keep_best=0 ranks the checkpoints "
                f"(best_step(), resume='best') but keeps only the latest {self.keep}: the best "
                "one is rotated out like any other. Pass keep_best=1 to keep it as well (ciclo's "
                "checkpoint(monitor=...) kept only the best: keep=1, keep_best=1)",
                UserWarning)

    def _refusal(self, steps: list[int]) -> str:
        if self._resumed is None:
            problem = f"checkpoint: {self.directory} holds another run's checkpoints"
            received = f"the checkpoints of steps {steps}, which this run did not resume from"
            fix = ("resume from them (resume='latest' on the loop, or ckpt.restore(state) "
                   "first), start over with gyre.checkpoint(directory, overwrite=True), which "
                   "deletes them, or use a new directory")
        else:
            problem = (f"checkpoint: {self.directory} holds checkpoints later than step "
                       f"{self._resumed}, which this run resumed from")
            received = f"the checkpoints of steps {steps}"
            fix = ("resume from the newest (resume='latest'), pass overwrite=True to delete "
                   f"the later ones and continue from step {self._resumed}, or use a new directory")
        return explain(
            problem,
            expected="an empty directory, or checkpoints this run resumed from", received=received, fix=fix)

    # -- saving ------------------------------------------------------------------------------

    def __call__(self, elapsed: Elapsed, state: Any, logs: Logs | None = None, loop: Any = None) -> None:
        """Saves the run asynchronously (in a loop, through ``loop.request_save``); skips a step
        already saved.

        The state during step ``k`` already holds its update, so it is saved as step ``k + 1``
        (``elapsed.completed()``). ``logs`` is needed when ``monitor`` is set.

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
            raise TypeError(explain(
                "a checkpoint called by hand takes the clock first, then the state",
                expected="ckpt(elapsed, state) with elapsed a gyre.Elapsed",
                received=f"ckpt({describe(elapsed, 40)}, {describe(state, 40)})",
                fix="pass the elapsed from gyre.elapse(...) or a loop first: ckpt(elapsed, state)"))
        step = int(clock.steps)
        metrics = monitored(self, logs, clock)
        if step in self._saved or step == self._resumed:
            return None
        if callable(getattr(loop, "request_save", None)):
            loop.request_save(self, metrics)  # the engine saves once the step has completed
            return None
        self.save_snapshot(Snapshot(step=step, state=state, elapsed=clock, metrics=metrics))

    on_epoch_end = __call__

    def save_snapshot(self, snapshot: Snapshot, *, wait: bool = False) -> None:
        """Saves ``snapshot`` (files first, then the state, arrays and record), in the background
        unless ``wait``.

        A step already saved or resumed from is skipped; one older than the newest on disk is
        skipped with a warning. Only ``snapshot.metrics[monitor]`` is kept.

        Raises:
            CheckpointError: this save, or the previous one still in flight, failed.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> from gyre.engine._snapshot import Snapshot
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name)
            >>> snap = Snapshot(step=4, state={"w": jnp.ones(2)}, elapsed=gyre.Elapsed(steps=4),
            ...                 meta={"seed": 1}, files={"history/000004.json": b"[]"})
            >>> ckpt.save_snapshot(snap, wait=True)
            >>> ckpt.saved_step(), ckpt.list_files("history")
            (4, ['history/000004.json'])
            >>> ckpt.close(); tmp.cleanup()
        """
        instance(snapshot, "snapshot", Snapshot, problem="save_snapshot takes a gyre Snapshot",
                 expected="Snapshot(step=..., state=..., elapsed=...) (loop.snapshot() gives one)",
                 fix="save a state by hand with ckpt(elapsed, state)")
        step = whole(snapshot.step, "a Snapshot's step", expected="the completed steps (elapsed.steps)",
                     fix="Snapshot(step=elapsed.steps, ...)")
        if step in self._saved or step == self._resumed:
            if wait:
                self.wait_until_finished()
            return
        self.on_loop_start()
        latest = self._store.latest()
        if latest is not None and step <= latest:
            warn(
                f"checkpoint: step {step} not saved in {self.directory}: it holds a later "
                f"step ({latest}); use a new directory for a run that goes back in time",
                UserWarning)
            return
        value = (snapshot.metrics or {}).get(self.monitor) if self.monitor is not None else None
        metrics = None if value is None else {self.monitor: _monitor.as_number(value, self.monitor, owner="checkpoint", step=step)}
        with self._failures():
            self._store.save(snapshot, metrics=metrics, checksums=self.checksums, wait=wait)
        self._saved.add(step)
        if not wait:
            _SAVING.add(self)
        self._last = step

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """Keeps the bookkeeping right when a save fails (the failed step is not saved)."""
        try:
            yield
        except CheckpointError as err:
            self._saved.discard(err.step)  # type: ignore[arg-type]
            mine = list(self._saved) + ([self._resumed] if self._resumed is not None else [])
            self._last = max(mine, default=None)
            raise

    def saved_step(self) -> int | None:
        """The newest step this object saved (or is saving), or resumed from; ``None`` before."""
        return self._last

    def on_train_end(self) -> None:
        """Waits until every save is on disk (raises a failed one); ``on_loop_end`` is the same.

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

    # -- loading -----------------------------------------------------------------------------

    def load_snapshot(self, resume: Any, target_state: Any, *, target_arrays: Any = None) -> Snapshot | None:
        """The snapshot ``resume`` names, restored into the structure of ``target_state``; marks
        this object as resumed.

        Args:
            resume: ``"latest"`` (the newest that loads, damaged or misfitting ones skipped with a
                warning; ``None`` when there is none), ``"best"`` (by ``monitor``), a step, or a
                checkpoint's path (then a run resumed from another directory copies its files here).
            target_state: concrete arrays or ``jax.ShapeDtypeStruct`` leaves, whose shardings the
                arrays get (another device count than at save time works).
            target_arrays: the structure of :attr:`Snapshot.arrays` (default: as saved, on the
                first local device).

        Raises:
            ValueError: no checkpoint fits ``target_state``, or ``"best"`` without a monitor.
            FileNotFoundError: the step or path is not a checkpoint here.
            CheckpointError: the named checkpoint, or every one, is damaged.

        Example:
            >>> import tempfile, warnings, gyre, jax.numpy as jnp
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name)
            >>> with warnings.catch_warnings(record=True) as said:
            ...     warnings.simplefilter("always")
            ...     print(ckpt.load_snapshot("latest", {"w": jnp.zeros(2)}))
            None
            >>> "starting fresh" in str(said[0].message)
            True
            >>> ckpt(gyre.Elapsed(steps=3), {"w": jnp.full(2, 3.0)})
            >>> snap = ckpt.load_snapshot("latest", {"w": jnp.zeros(2)})
            >>> snap.step, snap.state["w"].tolist()
            (3, [3.0, 3.0])
            >>> ckpt.close(); tmp.cleanup()
        """
        kind, value = resolve(resume)
        self.wait_until_finished()
        store, say = self._store, saying(self.directory, self._warned)
        if kind == "path":
            root, value = step_of_path(value)
            if os.path.realpath(root) != os.path.realpath(self.directory):
                source = Store(root, read_only=True)
                snapshot = pick(source, value, target_state, target_arrays, say)[0]  # type: ignore[index]
                self._source = source
                if self._claimed and is_main_process():
                    store.files.copy_from(source.files)
                    self._source = None
                return snapshot
        if kind == "best" and self.monitor is None:
            raise ValueError(explain(
                "resume= 'best' needs a checkpoint that monitors a value",
                expected="gyre.checkpoint(directory, monitor='loss_test', mode='min')",
                received="a checkpoint without monitor=", fix="pass monitor= to gyre.checkpoint, or resume='latest'"))
        found = pick(store, kind if kind in ("latest", "best") else value, target_state, target_arrays, say, self.monitor)
        if found is None:
            if not self._said_fresh:
                self._said_fresh = True
                warn(f"checkpoint: no checkpoint in {self.directory}: starting fresh", UserWarning)
            return None
        snapshot, failures = found
        self._unreadable |= {s for s, e in failures if e.kind == "corrupt"}
        self._resumed = snapshot.step
        if not self._claimed:
            self._last = snapshot.step
        return snapshot

    def continue_from(self, step: int) -> dict[str, Any] | None:
        """Marks this object as resumed from its newest record up to ``step`` (a loop's second
        checkpoint); returns that record's meta or ``None``.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     with gyre.checkpoint(tmp) as best:
            ...         best(gyre.Elapsed(steps=2), {"w": jnp.ones(2)})
            ...     best = gyre.checkpoint(tmp)
            ...     best.continue_from(5) is not None, best.saved_step()
            (True, 2)
        """
        if self._resumed is not None or self._claimed:
            return None
        for saved in reversed(self._store.on_disk()):
            if saved <= step:
                try:
                    record = self._store.read_record(saved)
                except Unreadable:
                    continue
                self._resumed = self._last = saved
                return record.get("meta") or {}
        return None

    def restore(self, target_state: Any, step: int | None = None) -> tuple[Any, Elapsed]:
        """Loads a saved state into the structure of ``target_state``, and its clock; marks this
        object as resumed.

        Args:
            target_state: a pytree with the saved state's structure, shapes and dtypes
                (``jax.ShapeDtypeStruct`` leaves work); its shardings are used.
            step: the step to load (default: the newest that loads).

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
        if step is None:
            self.wait_until_finished()
            if not self._store.on_disk():
                raise nothing_to_restore(self.directory)
        snapshot = self.load_snapshot("latest" if step is None else as_step(step), target_state)
        assert snapshot is not None
        self._by_hand = snapshot
        return snapshot.state, snapshot.elapsed

    def restored(self) -> Snapshot | None:
        """The snapshot :meth:`restore` loaded, or ``None``."""
        return self._by_hand

    # -- files -------------------------------------------------------------------------------

    def _files(self) -> Files:
        return (self._source if self._source is not None else self._store).files

    def read_file(self, name: str) -> bytes | None:
        """A file saved from :attr:`Snapshot.files`, or ``None``."""
        return self._files().read(name)

    def list_files(self, folder: str) -> list[str]:
        """The files saved under ``folder`` from snapshots: relative paths, sorted."""
        return self._files().list(folder)

    # -- reading -----------------------------------------------------------------------------

    def latest_step(self) -> int | None:
        """The latest saved (or being saved) step, or ``None``."""
        return self._store.latest()

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
        return self._store.steps()

    def best_step(self) -> int | None:
        """The saved step with the best monitored value, or ``None``.

        Example:
            >>> import tempfile, gyre, jax.numpy as jnp
            >>> tmp = tempfile.TemporaryDirectory()
            >>> ckpt = gyre.checkpoint(tmp.name, keep=1, keep_best=1, monitor="loss", mode="min")
            >>> for s, loss in ((1, 0.5), (2, 0.9)):
            ...     ckpt(gyre.Elapsed(steps=s), {"w": jnp.ones(2)}, gyre.logs().add_loss("loss", loss))
            >>> ckpt.best_step(), ckpt.all_steps()
            (1, [1, 2])
            >>> ckpt.close(); tmp.cleanup()
        """
        if self.monitor is None:
            raise ValueError(explain(
                "best_step() needs a checkpoint that monitors a value",
                expected="gyre.checkpoint(directory, monitor='loss_test', mode='min')",
                received=f"{self!r} (no monitor)",
                fix="pass monitor= to gyre.checkpoint, or use latest_step()"))
        return self._store.best_step()

    # -- lifetime ----------------------------------------------------------------------------

    def poll(self) -> None:
        """Raises a background save that has failed (:class:`CheckpointError`); never waits."""
        if self._store.finished_pending():
            self.wait_until_finished()

    def wait_until_finished(self) -> None:
        """Blocks until every save started so far is on disk; raises :class:`CheckpointError` for a
        failed one."""
        with self._failures():
            self._store.wait()
        _SAVING.discard(self)

    def close(self) -> None:
        """Waits for pending saves and releases orbax's resources; the object can be reused."""
        with self._failures():
            self._store.close()
        _SAVING.discard(self)

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


checkpoint = Checkpoint  # ciclo's name: one class, two spellings


def monitored(ckpt: Checkpoint, logs: Logs | None, clock: Elapsed) -> dict[str, float] | None:
    """``{monitor: value}`` of ``logs``, what ``ckpt`` ranks a save by (``None`` without a monitor)."""
    return None if ckpt.monitor is None else {ckpt.monitor: _monitor.find(
        logs, ckpt.monitor, owner="checkpoint", step=clock.steps,
        fix="monitor one of the received names (evaluation entries carry the test suffix, e.g. 'loss_test'), "
        "and save where it is logged (the checkpoint registers itself on on_epoch_end, after evaluation); "
        "when calling it by hand, pass the logs: ckpt(elapsed, state, logs)")}


# -- what checkpoint accepts ---------------------------------------------------------------------

def check_directory(directory: Any) -> str:
    path = os.fspath(instance(directory, "directory", (str, os.PathLike), problem="checkpoint's directory must be a path",
                              expected="a str or os.PathLike (pathlib.Path) naming a directory",
                              fix="gyre.checkpoint('runs/exp1/checkpoints')"))
    if not isinstance(path, str) or not path:
        raise ValueError(explain(
            "checkpoint's directory must be a non-empty path",
            expected="a directory name such as 'checkpoints'", received=describe(directory),
            fix="gyre.checkpoint('runs/exp1/checkpoints')"))
    path = os.path.abspath(os.path.expanduser(path))  # orbax requires an absolute path
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(explain(
            "checkpoint's directory exists and is not a directory",
            expected="a directory, or a path where one can be created", received=f"the file {path!r}",
            fix="choose another path, or remove the file"))
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(explain(
            "checkpoint's directory cannot be created: a file is in the way",
            expected="a directory, or a path where one can be created",
            received=f"{path!r}, under the file {existing!r}", fix="choose another path"))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(explain(
            "checkpoint's directory cannot be written",
            expected="a directory you can write to, or one that can be created",
            received=f"{path!r}" + (f", under {existing!r}" if existing != path else "")
            + ", which is not writable",
            fix="choose a directory you can write to, e.g. under runs/"))
    return path


def check_keep(keep: Any, keep_best: Any, monitor: Any) -> tuple[int, int]:
    kept = whole(keep, "checkpoint's keep", minimum=1, expected="keep=3 (how many of the latest checkpoints "
                 "to keep on disk; the newest is what a run resumes from, so at least 1)",
                 fix="pass keep as a positive int; keep=1 keeps only the latest")
    best = whole(keep_best, "checkpoint's keep_best", expected="keep_best=2 (how many of the best checkpoints "
                 "by monitor to keep as well)", fix="pass keep_best as an int >= 0 (0: keep only the latest)")
    if best and monitor is None:
        raise ValueError(explain(
            "checkpoint's keep_best needs a monitored value to rank checkpoints by",
            expected="keep_best=2 together with monitor='loss_test' (and mode=)",
            received=f"keep_best={best} without monitor=", fix="gyre.checkpoint(directory, keep_best=2, "
            "monitor='loss_test', mode='min'), or leave keep_best=0"))
    return kept, best


def check_monitor(monitor: Any, mode: Any) -> None:
    _monitor.check_name(monitor, "checkpoint's monitor must be the name of a logged value, or None",
                        "'loss_test' or 'metrics.accuracy_test'",
                        "gyre.checkpoint(directory, monitor='loss_test', mode='min')", optional=True)
    _monitor.monitor_mode("checkpoint", monitor, mode, strict=False, auto=False)


# -- which checkpoint a run continues from -------------------------------------------------------

Say = Callable[[int, Unreadable, bool], None]


def resolve(resume: Any) -> tuple[str, Any]:
    """``resume`` as ``("latest"|"best", None)``, ``("step", n)`` or ``("path", absolute path)``."""
    if resume in ("latest", "best"):
        return resume, None
    step = as_integer(resume)
    if step is not None and step >= 0:
        return "step", step
    if isinstance(resume, (str, os.PathLike)) and not isinstance(resume, bytes) and os.fspath(resume):
        return "path", os.path.abspath(os.path.expanduser(os.fspath(resume)))
    raise TypeError(explain(
        "resume= names the checkpoint to continue from",
        expected="'latest', 'best', a step number (120), a checkpoint's path "
        "('runs/exp1/checkpoints/120'), or None to start fresh",
        received=describe(resume), fix="resume='latest'"))


def step_of_path(path: str) -> tuple[str, int]:
    """``(root, step)`` of a checkpoint's directory, else a clear ``FileNotFoundError``."""
    name = os.path.basename(path.rstrip(os.sep))
    if name.isdigit() and os.path.isfile(os.path.join(path, RECORD_ITEM, RECORD_FILE)):
        return os.path.dirname(path.rstrip(os.sep)), int(name)
    raise FileNotFoundError(explain(
        "resume= names a path that is not a checkpoint",
        expected="the directory of one saved step, e.g. 'runs/exp1/checkpoints/120' "
        f"(holding {RECORD_ITEM}/{RECORD_FILE})",
        received=repr(path) + ("" if os.path.exists(path) else " (it does not exist)"),
        fix="pass a step directory of a checkpoint directory, or resume='latest'"))


def saying(root: str, warned: set[int]) -> Say:
    """A ``say(step, problem, more)`` that warns once per checkpoint, in one line."""

    def say(step: int, problem: Unreadable, more: bool) -> None:
        if step in warned:
            return
        warned.add(step)
        then = "; trying the previous one" if more else ""
        warn(f"checkpoint {os.path.join(root, str(step))} is not loaded: {problem.reason}{then}", UserWarning)

    return say


def does_not_fit(root: str, failures: Sequence[tuple[int, Unreadable]]) -> ValueError:
    """The error for a target no checkpoint fits (the newest failure first)."""
    received = "; ".join(f"step {s}: {e.reason}" for s, e in failures if e.kind == "fit")
    return ValueError(explain(
        f"the checkpoints in {root} do not fit target_state (they are not damaged: the "
        "state given has another tree)",
        expected="a target_state with the tree, leaves, shapes and dtypes of the saved "
        "state (a dtype is never cast)",
        received=received, fix="build target_state as the run that saved them built it (the same model, "
        "optimizer and state class, e.g. by running its init function again); to train "
        "another model, give it a new directory"))


def pick(
    store: Store, which: str | int, target_state: Any, target_arrays: Any, say: Say, monitor: str | None = None,
    *, history: bool = True,
) -> tuple[Snapshot, list[tuple[int, Unreadable]]] | None:
    """The checkpoint ``which`` names, with the failures met: a step (no fallback), else the first that loads
    of the steps on disk, newest first (``"latest"``) or best first (``"best"``); ``None`` when there is none.
    ``history=False``: for a load that returns no history (its blocks are not checked)."""
    on_disk = store.on_disk()
    if not isinstance(which, str):
        if which not in on_disk:
            raise FileNotFoundError(explain(
                f"no checkpoint for step {which} in {store.root}",
                expected=f"one of the saved steps {on_disk}", received=describe(which),
                fix="pass one of the saved steps, or 'latest' for the newest good one"))
        try:
            return store.read(which, target_state, target_arrays, history=history), []
        except Unreadable as problem:
            if problem.kind == "fit":
                raise does_not_fit(store.root, [(which, problem)]) from None
            raise CheckpointError(explain(
                f"the checkpoint of step {which} in {store.root} cannot be loaded",
                expected="an intact checkpoint", received=problem.reason,
                fix=f"load another step (on disk: {on_disk}), or 'latest', which skips damaged checkpoints"),
                step=which) from None
    if not on_disk:
        return None
    steps = store.ranked() if which == "best" else on_disk[::-1]
    if not steps:
        raise no_best(store.root, monitor)  # type: ignore[arg-type]
    failures: list[tuple[int, Unreadable]] = []
    for i, step in enumerate(steps):
        try:
            return store.read(step, target_state, target_arrays, history=history), failures
        except Unreadable as problem:
            say(step, problem, i + 1 < len(steps))
            failures.append((step, problem))
    if any(e.kind == "fit" for _, e in failures):
        raise does_not_fit(store.root, failures)
    raise CheckpointError(explain(
        f"no checkpoint in {store.root} can be loaded",
        expected="at least one intact checkpoint", received="; ".join(f"step {s}: {e.reason}" for s, e in failures),
        fix="restore the directory from a backup, or start over with a new directory or "
        "gyre.checkpoint(..., overwrite=True)"))


def no_best(root: str, monitor: str) -> FileNotFoundError:
    """The error for ``"best"`` when no checkpoint has a monitored value."""
    return FileNotFoundError(explain(
        f"no checkpoint in {root} has a value of {monitor!r} to rank it by",
        expected=f"checkpoints saved where {monitor!r} was logged",
        received="checkpoints without metrics (saved at the end of a loop, or by another configuration)",
        fix="resume='latest', or pass the step to resume from"))


def as_step(step: Any) -> int:
    return whole(step, "step=", problem="step= must be a saved step number", fix="step=ckpt.latest_step()",
                 expected="an int >= 0 (one of ckpt.all_steps()), or None for the latest", error=TypeError)


def nothing_to_restore(directory: str) -> FileNotFoundError:
    return FileNotFoundError(explain(
        f"no checkpoint to restore in {directory}",
        expected="a directory holding at least one saved step",
        received="an empty directory (or one with only unfinished saves)",
        fix="check the directory, or start from a fresh state when there is nothing to "
        "resume: resume='latest' on the loop does both"))


def restore(directory: str | os.PathLike[str], target: Any, step: int | None = None) -> tuple[Any, Elapsed]:
    """Loads a checkpoint saved by :func:`checkpoint` into the structure of ``target``, writing nothing.

    Args:
        directory: the checkpoint directory, or one step's directory (``.../checkpoints/120``).
        target: concrete arrays or ``jax.ShapeDtypeStruct`` leaves with shardings, which the
            arrays get (any device count); a dtype is never cast.
        step: the step to load (default: the newest that loads, damaged or misfitting ones
            skipped with a warning).

    Returns:
        ``(state, elapsed)``.

    Example:
        >>> import tempfile, gyre, jax.numpy as jnp
        >>> tmp = tempfile.TemporaryDirectory()
        >>> with gyre.checkpoint(tmp.name) as ckpt:
        ...     ckpt(gyre.Elapsed(steps=3), {"w": jnp.full(2, 3.0)})
        >>> state, elapsed = gyre.restore(tmp.name, {"w": jnp.zeros(2)})
        >>> state["w"].tolist(), elapsed.steps
        ([3.0, 3.0], 3)
        >>> tmp.cleanup()
    """
    root = os.path.abspath(os.path.expanduser(path(
        directory, "gyre.restore's directory must be a path", fix="gyre.restore('runs/exp1/checkpoints', target)",
        expected="a str or os.PathLike naming a checkpoint directory")))
    if not os.path.isdir(root):
        raise nothing_to_restore(root)
    if step is None and os.path.basename(root).isdigit():
        with contextlib.suppress(FileNotFoundError):
            root, step = step_of_path(root)
    store = Store(root, read_only=True)
    try:
        found = pick(store, "latest" if step is None else as_step(step), target, None, saying(root, set()),
                     history=False)  # (it returns no history: a step directory copied alone loads)
    finally:
        store.close()
    if found is None:
        raise nothing_to_restore(root)
    return found[0].state, found[0].elapsed
