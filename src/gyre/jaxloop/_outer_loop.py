"""jaxloop's :class:`OuterLoop`: train loops with evaluations, resumed from checkpoints, or continuous evaluation."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import jax

from gyre.callbacks._checkpoint import checkpoint
from gyre.core._checks import instance, whole
from gyre.core._errors import describe, explain, keywords_checked, warn
from gyre.engine._snapshot import has_state
from gyre.jaxloop._action_loop import ActionLoop, EvalLoop
from gyre.jaxloop._actions import (
    DATA_META,
    EVALS_META,
    STOPPERS_META,
    CheckpointAction,
    SummaryAction,
    read_orbax,
    steps_in,
)
from gyre.jaxloop._loop import Loop, _as_iterator, state_step
from gyre.jaxloop._specs import CheckpointSpec, EvalContext, EvalSpec
from gyre.jaxloop._stat_loop import STAT_PREFIX
from gyre.jaxloop._stopping import EarlyStoppingAction, StopTrainingError

STOP_LOOP = f"{STAT_PREFIX}/stop_loop"
STOP_FILE_NAME = "STOPPED"
EVALUATED_FILE_NAME = "jaxloop_evaluated.json"  # the last loop ends whose evaluations completed
Output = dict[str, Any]
_log = logging.getLogger(__name__)

#: The least seconds between looks for a new checkpoint in continuous evaluation (as orbax's iterator).
POLL_SECS = 1.0


def _no_transforms(spec: CheckpointSpec) -> None:
    if spec.transforms is not None:
        raise ValueError(explain(
            "CheckpointSpec's transforms apply to checkpoints in jaxloop's format only",
            expected="transforms=None for gyre's checkpoints (they restore into the given state's structure)",
            received=f"transforms={describe(spec.transforms)} with gyre checkpoints in {spec.directory}",
            fix="drop transforms=, or restore and transform the state yourself with gyre.restore"))


def _stop_flag(outputs: Any) -> bool:
    if not outputs:
        return False
    value = outputs.get(STOP_LOOP, False)
    if isinstance(value, list | tuple):
        return any(bool(v) for v in jax.device_get(list(value)))
    return bool(value)


class OuterLoop:
    r"""Runs training and evaluation loops (jaxloop's ``OuterLoop``).

    It ends early when the data ends, an output sets :data:`STOP_LOOP`, or an action raises
    :class:`~gyre.jaxloop.StopTrainingError` (saves finish, writers close, the ``STOPPED``
    marker is written); SIGTERM ends it after the current step, without the marker.

    Args:
        train_loop: the :class:`~gyre.jaxloop.TrainLoop`, or ``None`` for continuous
            evaluation of the checkpoints in ``checkpoint_spec``.
        eval_loops: the :class:`~gyre.jaxloop.EvalLoop`\ s, one per :class:`EvalSpec`.
        checkpoint_spec: where to resume training from (the latest checkpoint, if any), or
            which checkpoints continuous evaluation reads.

    Example:
        >>> import gyre
        >>> train = gyre.jaxloop.TrainLoop(lambda s, b, n: ({"step": s["step"] + 1}, {"b": b}))
        >>> evals = gyre.jaxloop.EvalLoop(lambda s, b, n: (s, {"at": s["step"]}))
        >>> outer = gyre.jaxloop.OuterLoop(train_loop=train, eval_loops=[evals])
        >>> state, outputs = outer({"step": 0}, train_dataset=iter(range(100)), train_total_steps=6,
        ...     train_loop_steps=2, eval_specs=[gyre.jaxloop.EvalSpec(dataset=[0], eval_loop_interval=2)])
        >>> state["step"], outputs["b"], outputs["eval"]["at"], outputs[gyre.jaxloop.STOP_LOOP]
        (6, [4, 5], [4], False)
    """

    @keywords_checked
    def __init__(
        self,
        train_loop: ActionLoop | Loop | None = None,
        eval_loops: Sequence[EvalLoop | Loop] | None = None,
        checkpoint_spec: CheckpointSpec | None = None,
    ) -> None:
        instance(eval_loops, "eval_loops", (list, tuple), none=True, fix="put the loop in a list: eval_loops=[eval_loop]",
                 problem="OuterLoop's eval_loops must be a list of loops",
                 expected="eval_loops=[EvalLoop(step)], one loop per EvalSpec")
        if train_loop is None and not eval_loops:
            raise ValueError(explain(
                "OuterLoop has nothing to run",
                expected="train_loop=, eval_loops=, or both", received="neither",
                fix="pass OuterLoop(train_loop=TrainLoop(step), eval_loops=[EvalLoop(eval_step)])"))
        if train_loop is None and checkpoint_spec is None:
            raise ValueError(explain(
                "OuterLoop without a train loop evaluates checkpoints, and needs to know where",
                expected="checkpoint_spec=CheckpointSpec(checkpoint_dir) with eval_loops only",
                received="eval_loops without train_loop or checkpoint_spec",
                fix="pass checkpoint_spec=gyre.jaxloop.CheckpointSpec('runs/exp/checkpoints')"))
        for loop in ([train_loop] if train_loop is not None else []) + list(eval_loops or []):
            instance(loop, "loop", Loop, problem="OuterLoop's loops must be gyre.jaxloop loops",
                     expected="TrainLoop(step) and EvalLoop(step) (or other Loop subclasses)",
                     fix="wrap your step: gyre.jaxloop.TrainLoop(step)")
        instance(checkpoint_spec, "checkpoint_spec", CheckpointSpec, none=True, fix="wrap the directory in CheckpointSpec",
                 problem="checkpoint_spec must be a CheckpointSpec", expected="gyre.jaxloop.CheckpointSpec(checkpoint_dir)")
        self._train_loop = train_loop
        self._eval_loops = list(eval_loops or [])
        self._checkpoint_spec = checkpoint_spec
        self._names = [getattr(loop, "name", None) or ("eval" if i == 0 else f"eval_{i}")
                       for i, loop in enumerate(self._eval_loops)]
        self._eval_counts = [0] * len(self._eval_loops)
        self._eval_starts: dict[int, tuple[Any, Any]] = {}  # id(dataset): (dataset, first position)
        self._said_empty: set[int] = set()  # eval iterators already said to be exhausted
        self._noting = False  # whether completed evaluations are noted beside gyre's checkpoints (_record_evaluated)

    @property
    def eval_names(self) -> list[str]:
        """The keys of the eval loops' outputs: each ``name``, else ``"eval"``, ``"eval_1"``..."""
        return list(self._names)

    # -- checks ---------------------------------------------------------------------------------
    def _precheck(self, train_dataset: Any, total: Any, loop_steps: Any, specs: Any) -> tuple[int, int | None, list[EvalSpec]]:
        specs = list(specs or [])
        if len(specs) != len(self._eval_loops):
            raise ValueError(explain(
                "OuterLoop needs one EvalSpec per eval loop",
                expected=f"{len(self._eval_loops)} eval spec(s), one for each eval loop, in order",
                received=f"{len(specs)} eval spec(s)",
                fix="pass eval_specs=[EvalSpec(dataset=...)] with as many specs as eval_loops"))
        for spec in specs:
            instance(spec, "eval_specs", EvalSpec, problem="eval_specs must hold EvalSpecs",
                     expected="gyre.jaxloop.EvalSpec(dataset=...)",
                     fix="wrap each eval dataset in EvalSpec(dataset=...)")
        if self._train_loop is None:
            return 0, None, specs
        if train_dataset is None:
            raise ValueError(explain(
                "OuterLoop with a train loop needs train_dataset=",
                expected="an iterator or iterable of training batches", received="train_dataset=None",
                fix="pass train_dataset=iter(batches)"))
        total = whole(total, "train_total_steps", minimum=1, problem="train_total_steps must be a positive whole number",
                      expected="the step to train to (an int >= 1)", fix="pass train_total_steps=1000")
        loop_steps = whole(loop_steps, "train_loop_steps", minimum=1, none=True, fix="pass train_loop_steps=100",
                           problem="train_loop_steps must be a positive whole number or None",
                           expected="steps per inner train loop (>= 1), or None for one pass of the data")
        return total, loop_steps, specs

    # -- the run ----------------------------------------------------------------------------------
    def __call__(
        self,
        state: Any,
        train_dataset: Iterable[Any] | None = None,
        train_total_steps: int | None = None,
        train_loop_steps: int | None = None,
        eval_specs: Sequence[EvalSpec] | None = None,
        log_train_total_steps: bool = True,
    ) -> tuple[Any, Output | None]:
        """Trains to ``train_total_steps`` with evaluations, or evaluates checkpoints.

        Args:
            state: the initial state (or the structure to restore checkpoints into).
            train_dataset: an iterator (shared by the train loops) or an iterable (with
                ``train_loop_steps=None``, each train loop makes one pass of it).
            train_total_steps: the step to train to, counted from ``state.step``.
            train_loop_steps: steps per train loop (inner loops end at its multiples, also after a
                resume); ``None``: one pass of the data per train loop.
            eval_specs: one :class:`EvalSpec` per eval loop.
            log_train_total_steps: log the target step.

        Returns:
            ``(state, outputs)``: the training state, and the last train loop's outputs with
            :data:`STOP_LOOP` and each eval loop's latest outputs under its name; ``outputs`` is
            ``None`` when no train loop ran. Continuous evaluation returns the last evaluated state
            and the last evaluation's outputs (or ``None``) with ``"checkpoint_steps"``.

        Example:
            >>> import gyre
            >>> outer = gyre.jaxloop.OuterLoop(
            ...     train_loop=gyre.jaxloop.TrainLoop(lambda s, b, n: ({"step": s["step"] + 1}, {})))
            >>> outer({"step": 0}, train_dataset=iter(range(10)), train_total_steps=4)[0]
            {'step': 4}
        """
        total, loop_steps, specs = self._precheck(train_dataset, train_total_steps, train_loop_steps, eval_specs)
        if self._train_loop is None:
            return self._continuous_eval(state, specs)
        try:
            return self._train(state, train_dataset, total, loop_steps, specs, log_train_total_steps)
        finally:
            self._close_actions()

    def _resume(self, state: Any, train_dataset: Any, passes: bool, total: int) -> tuple[Any, bool, bool]:
        """The state to train from; whether it was saved at a train loop's end before that loop's
        evaluations (a checkpoint holding the evaluation counts or the early stoppings' states: they
        follow it), which are run again unless they completed; and whether those that completed stopped."""
        mine = [a for a in self._actions(self._train_loop) if isinstance(a, CheckpointAction)]
        source = train_dataset if has_state(train_dataset) else None
        stoppers = [a.handler for a in self._all_actions() if isinstance(a, EarlyStoppingAction)]
        for action in mine:
            action.data_source, action.stoppers, action.eval_counts = source, stoppers, self._eval_counts
        spec = self._checkpoint_spec
        if spec is None:
            return state, False, False
        same = [a for a in mine if os.path.abspath(a.directory) == spec.directory]
        self._noting = any(a.checkpoint is not None for a in same)  # gyre's checkpoints: they hold the counts
        for action in same:
            action.wait_until_finished()
        ckpt = next((a.checkpoint for a in same if a.checkpoint is not None), None) or checkpoint(spec.directory)
        if ckpt.latest_step() is None:  # none of gyre's: the newest an orbax manager wrote (jaxloop's format)
            steps = steps_in(spec.directory)
            if not steps:
                return state, False, False
            state = read_orbax(self._train_loop.step, state, spec.directory, steps[-1], spec.transforms)
            _log.info("train    | resumed from checkpoint %s of %s (jaxloop's format)", steps[-1], spec.directory)
            return state, False, False
        _no_transforms(spec)
        snapshot = ckpt.load_snapshot("latest", state)  # (after the saves in flight)
        if snapshot is None:
            return state, False, False
        state, meta = snapshot.state, snapshot.meta or {}
        done = self._evaluated(snapshot.step) if EVALS_META in meta else None
        if done is not None:  # the loop end's evaluations ran after the save: what they left, not a replay
            meta = {**meta, EVALS_META: done["evals"], STOPPERS_META: done["stoppers"]}
        counts = meta.get(EVALS_META)
        if counts is not None and len(counts) == len(self._eval_counts):  # EvalContext.eval_count goes on
            self._eval_counts[:] = [int(c) for c in counts]
        saved = meta.get(STOPPERS_META)
        loaded = saved is not None and len(saved) == len(stoppers)
        if loaded:  # (their best values and patience waited)
            for handler, values in zip(stoppers, saved, strict=True):
                handler.load_state_dict(values)
        elif saved is not None:
            warn(f"resuming from checkpoint {snapshot.step}: it holds {len(saved)} early stopping states and the "
                 f"loops have {len(stoppers)} EarlyStoppingAction(s), so they start afresh")
        position = meta.get(DATA_META)
        if position is not None and source is not None:
            source.load_state_dict(position)  # the next batch is the one after the checkpoint
        elif 0 < snapshot.step < total and not passes:  # other batches than the uninterrupted run's
            why = (f"the training data (a {type(train_dataset).__name__}) cannot save its position"
                   if source is None else "the checkpoint holds no data position")
            warn(f"resuming from checkpoint {snapshot.step} of {spec.directory}: {why}, so training continues "
                 "with the data where it is now (a new iterator: its first batch), not with the batch after "
                 "the checkpoint's; pass a source with state_dict()/load_state_dict() (gyre.data.batches, "
                 "gyre.data.arrays(...).train) to continue exactly")
        for action in self._all_actions():  # the loop end's summaries were written: rows after it are again
            if isinstance(action, SummaryAction):
                action._resumed(snapshot.step + 1)
        _log.info("train    | resumed from checkpoint %s of %s", ckpt.saved_step(), spec.directory)
        if done is not None:
            return state, False, bool(done["stop"])
        return state, loaded or counts is not None, False  # (counts: saved by a train loop's CheckpointAction)

    def _train(
        self, state: Any, train_dataset: Any, total: int, loop_steps: int | None, specs: list[EvalSpec], log: bool
    ) -> tuple[Any, Output]:
        train = self._train_loop
        assert train is not None
        self._marker(write=False)
        epochs = loop_steps is None and not isinstance(train_dataset, Iterator)
        state, before_eval, stopped = self._resume(state, train_dataset, epochs, total)  # (passes: each starts afresh)
        step = state_step(state) or 0
        if log:
            _log.info("train    | step: %6d | training until step %6d.", step, total)
        shared = None if epochs else _as_iterator(train_dataset)
        if step and loop_steps and isinstance(train, ActionLoop):
            train.loop_count = step // loop_steps
        num_steps = loop_steps - step % loop_steps if (step and loop_steps) else loop_steps
        outputs: Output = {}
        evals: dict[str, Any] = {}
        ran_any = preempted = False
        stop = stopped
        try:
            if before_eval and loop_steps and step % loop_steps == 0 and step < total:
                # the evaluations the run made after that loop, which its early stoppings' saved states
                # precede: a crash before them resumes to the same decisions (after them: not run again)
                stop = self._evaluate(state, step, total, {}, specs, evals)
                self._record_evaluated(step, stop)
            while step < total and not stop:
                want = total - step if num_steps is None else min(num_steps, total - step)
                data = _as_iterator(train_dataset) if epochs else shared
                ran_any = True
                state, new_outputs = train(state, data, want)
                ran = getattr(train, "_last_steps", want)  # a run() of your own may not count them
                num_steps = loop_steps
                if ran == 0:
                    _log.warning("train    | the training data ended at step %d, before step %d", step, total)
                    break
                step += ran  # counted on the host: reading state.step would wait for the device
                outputs = new_outputs if new_outputs is not None else {}
                if train._preempted:  # SIGTERM: no evaluation, no STOPPED marker
                    _log.warning("train    | preempted at step %d: training stopped; run it again to resume", step)
                    stop = preempted = True
                    break
                stop = _stop_flag(outputs)
                stop = self._evaluate(state, step, total, outputs, specs, evals) or stop
                self._record_evaluated(step, stop)
                if ran < want and not epochs:
                    _log.warning("train    | the training data ended at step %d, before step %d", step, total)
                    break
        except StopTrainingError as err:
            attached = getattr(err, "state", None)
            state = attached if attached is not None else state
            step = state_step(state) or step
            _log.info("train    | stopped at step %s: %s", step, err)
            stop = True
        for action in self._all_actions():
            if isinstance(action, CheckpointAction):
                action.wait_until_finished()
        if not preempted:
            self._marker(write=True)
        if not ran_any and not stop:
            return state, None  # as jaxloop: no train loop ran (the target was reached already)
        return state, {**outputs, **evals, STOP_LOOP: stop}

    def _evaluate(
        self, state: Any, step: int, total: int, train_outputs: Output, specs: list[EvalSpec], evals: dict[str, Any]
    ) -> bool:
        stop = False
        loop_count = getattr(self._train_loop, "loop_count", 0)
        for i, spec in enumerate(specs):
            if spec.eval_loop_interval is not None and loop_count % spec.eval_loop_interval != 0:
                continue
            if not self._due(i, spec, is_continuous_eval=False, step_num=step, loop_count=loop_count,
                             train_total_steps=total, train_outputs=train_outputs):
                continue
            _, eval_outputs = self._run_eval(i, spec, state)
            evals[self._names[i]] = eval_outputs
            stop = stop or _stop_flag(eval_outputs)
        return stop

    def _due(self, i: int, spec: EvalSpec, **context: Any) -> bool:
        """Whether ``spec.should_eval_fn``, if any, lets eval loop ``i`` run, told ``context``."""
        return spec.should_eval_fn is None or bool(spec.should_eval_fn(
            EvalContext(**context, eval_name=self._names[i], eval_count=self._eval_counts[i])))

    def _run_eval(self, i: int, spec: EvalSpec, state: Any) -> tuple[Any, Any]:
        """Runs eval loop ``i`` on ``state``, counting the evaluation (also one stopped by an action)."""
        loop = self._eval_loops[i]
        if spec.dataset_iterator is not None:  # it wins over dataset=, as in jaxloop
            data = spec.dataset_iterator
        elif has_state(spec.dataset) and iter(spec.dataset) is spec.dataset:
            data = self._from_start(spec.dataset)
        else:
            data = iter(spec.dataset)  # type: ignore[arg-type]
        try:
            state, outputs = loop(state, data, spec.num_steps, **spec.kwargs)
        except StopTrainingError:
            self._eval_counts[i] += 1
            raise
        self._eval_counts[i] += 1
        if getattr(loop, "_last_steps", 1) == 0 and id(data) not in self._said_empty:
            self._said_empty.add(id(data))
            _log.warning(
                "eval     | %s read no batch: its data is exhausted (an iterator continues where the "
                "last evaluation stopped; pass a collection, or an endless iterator with num_steps, "
                "to evaluate each time); said once", type(loop).__name__,
            )
        return state, outputs

    def _from_start(self, dataset: Any) -> Any:
        """A resumable iterator put back where this outer loop first evaluated it."""
        kept = self._eval_starts.get(id(dataset))
        if kept is None or kept[0] is not dataset:
            self._eval_starts[id(dataset)] = (dataset, dataset.state_dict())
        else:
            dataset.load_state_dict(kept[1])
        return dataset

    # -- continuous evaluation -------------------------------------------------------------------
    def _continuous_eval(self, state: Any, specs: list[EvalSpec]) -> tuple[Any, Output | None]:
        spec = self._checkpoint_spec
        assert spec is not None
        directory = spec.directory
        stop_fn = spec.iterate_stop_fn or (lambda: os.path.exists(os.path.join(directory, STOP_FILE_NAME)))
        last = -1
        eval_state = state
        outputs: Output | None = None
        evaluated: list[int] = []
        try:
            while True:
                stopping = bool(stop_fn())
                ckpt = checkpoint(directory) if os.path.isdir(directory) else None
                gyre_steps = ckpt.all_steps() if ckpt else []
                steps = gyre_steps or steps_in(directory)  # gyre's, else jaxloop's format
                new = [s for s in steps if s > last]
                if new and gyre_steps:
                    _no_transforms(spec)
                for step in new:
                    restored = ckpt.restore(state, step=step)[0] if gyre_steps else None  # type: ignore[union-attr]
                    for i, (loop, eval_spec) in enumerate(zip(self._eval_loops, specs, strict=True)):
                        if not self._due(i, eval_spec, is_continuous_eval=True, step_num=step, loop_count=0):
                            continue
                        here = restored if restored is not None else read_orbax(
                            loop.step, state, directory, step, spec.transforms)  # jaxloop's format: each loop's step reads it
                        eval_state, outputs = self._run_eval(i, eval_spec, here)
                    evaluated.append(step)
                    last = step
                if ckpt is not None:
                    ckpt.close()  # a new one per look: orbax's step list is cached per manager
                if stopping and not new:
                    break
                if not new:
                    time.sleep(max(float(spec.iterate_interval_secs), POLL_SECS))
        except StopTrainingError as err:
            _log.info("eval     | stopped: %s", err)
        finally:
            self._close_actions()
        if outputs is None:
            return eval_state, None  # as jaxloop: no evaluation ran
        return eval_state, {**outputs, "checkpoint_steps": evaluated}

    # -- the end ------------------------------------------------------------------------------------
    @staticmethod
    def _actions(loop: Any) -> list[Any]:
        if loop is None:
            return []
        step = getattr(loop, "step", None)
        return [
            *getattr(loop, "begin_actions", []), *getattr(loop, "end_actions", []),
            *getattr(step, "begin_actions", []), *getattr(step, "end_actions", []),
        ]

    def _all_actions(self) -> list[Any]:
        seen: dict[int, Any] = {}
        for loop in [self._train_loop, *self._eval_loops]:
            for action in self._actions(loop):
                seen.setdefault(id(action), action)
        return list(seen.values())

    def _close_actions(self) -> None:
        """Pending saves finish and writers close, whatever ended the run."""
        errors: list[BaseException] = []
        for action in self._all_actions():
            if isinstance(action, CheckpointAction | SummaryAction):
                try:
                    action.close()
                except Exception as err:  # noqa: BLE001 - the others still close
                    errors.append(err)
        if errors:
            raise errors[0]

    def _record_evaluated(self, step: int, stop: bool) -> None:
        """Notes in the checkpoint directory that loop end ``step``'s evaluations completed, with the
        counts and early stoppings' states after them and the stop decided, so that a resume from the
        checkpoint saved at ``step`` (before them) does not run them again: their summaries were
        written. The last two loop ends are kept (the newest save may still be in flight)."""
        spec = self._checkpoint_spec
        if spec is None or not self._noting or not self._eval_loops or jax.process_index() != 0:
            return
        stoppers = [a.handler.state_dict() for a in self._all_actions() if isinstance(a, EarlyStoppingAction)]
        kept = [e for e in self._read_evaluated() if e["step"] < step][-1:]
        path = os.path.join(spec.directory, EVALUATED_FILE_NAME)
        os.makedirs(spec.directory, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump([*kept, {"step": step, "evals": list(self._eval_counts), "stoppers": stoppers, "stop": stop}], f)
        os.replace(path + ".tmp", path)

    def _read_evaluated(self) -> list[dict[str, Any]]:
        assert self._checkpoint_spec is not None
        try:
            with open(os.path.join(self._checkpoint_spec.directory, EVALUATED_FILE_NAME)) as f:
                entries = json.load(f)
        except (OSError, ValueError):
            return []
        return [e for e in entries if isinstance(e, dict) and isinstance(e.get("step"), int)] if isinstance(entries, list) else []

    def _evaluated(self, step: int) -> dict[str, Any] | None:
        """What loop end ``step``'s evaluations left, if they completed (:meth:`_record_evaluated`)."""
        return next((e for e in self._read_evaluated() if e["step"] == step), None)

    def _marker(self, *, write: bool) -> None:
        """Writes the ``STOPPED`` marker when training ends, or removes a stale one when it starts."""
        spec = self._checkpoint_spec
        if spec is None or jax.process_index() != 0:
            return
        marker = os.path.join(spec.directory, STOP_FILE_NAME)
        if not write:
            if os.path.exists(marker):
                os.remove(marker)
            return
        os.makedirs(spec.directory, exist_ok=True)
        open(marker, "w").close()
        _log.info("train    | wrote %s", marker)
