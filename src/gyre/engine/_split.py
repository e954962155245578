"""A task table split for fused execution: the step to fuse, the tasks before and after it (they
end a chunk where they fire), and display tasks (run once after a chunk that fired them).
"""

from __future__ import annotations

from collections.abc import Sequence

from gyre.core._errors import describe, explain
from gyre.engine._binding import Invoker
from gyre.engine._fuse import is_fusable, step_function
from gyre.engine._tasks import StepPoint, Task, is_chunk_safe


class ChunkPlan:
    """The step to fuse (and its task) and the tasks run before a chunk, after it and once after it."""

    def __init__(self) -> None:
        self.step: Invoker | None = None
        self.step_task: Task | None = None
        self.before: list[Task] = []
        self.after: list[Task] = []
        self.display: list[Task] = []

    def add(self, task: Task, invokers: list[Invoker]) -> None:
        """Sorts a part of a task: display, or cutting before/after the step."""
        if not invokers:
            return
        part = Task(task.key, task.schedule, invokers)
        if all(is_chunk_safe(inv.fn) for inv in invokers):
            self.display.append(part)
        else:
            (self.before if self.step is None else self.after).append(part)


def split_tasks(tasks: Sequence[Task], steps: int) -> ChunkPlan:
    """Finds the step to fuse in a compiled task table (the compiled callback on every step,
    or a :class:`~gyre.engine._tasks.StepPoint`'s) and sorts the other tasks around it."""
    plan = ChunkPlan()
    for task in tasks:
        point = isinstance(task.key, StepPoint)
        if not point and task.schedule is not None:
            plan.add(task, task.invokers)
            continue
        pending: list[Invoker] = []
        for invoker in task.invokers:
            if is_fusable(invoker.fn):
                if plan.step is not None:
                    raise ValueError(explain(
                        f"steps_per_call={steps} fuses one step, and the table has two",
                        expected="one compiled step on every step", received=f"{plan.step.name} and {invoker.name}",
                        fix="combine them into one jitted function, or run with steps_per_call=1"))
                plan.step, plan.step_task = invoker, task
                plan.add(task, pending)
                pending = []
            elif point and not is_chunk_safe(invoker.fn):
                raise TypeError(explain(
                    f"with steps_per_call={steps}, the {task.key!r} callback {invoker.name} must be a compiled step",
                    expected="a jax.jit-wrapped step or a managed step (gyre.FusableStep)",
                    received=describe(step_function(invoker.fn)),
                    fix="wrap it: jax.jit(step, donate_argnums=0); move other callbacks to another "
                    "point (e.g. on_train_batch_end); or use steps_per_call=1"))
            else:
                pending.append(invoker)
        plan.add(task, pending)
    if plan.step is None:
        _no_step(tasks, steps)
    return plan


def _no_step(tasks: Sequence[Task], steps: int) -> None:
    plain = [i for t in tasks if t.schedule is None for i in t.invokers if not is_chunk_safe(i.fn)]
    if plain:
        raise TypeError(explain(
            f"steps_per_call={steps} cannot fuse {', '.join(i.name for i in plain)}: "
            "it is not a compiled step",
            expected="a jax.jit-wrapped step (state, batch) -> (logs, state), or a managed "
            "step with a fuse(steps) method (gyre.FusableStep)",
            received=describe(step_function(plain[0].fn)) + " (a plain Python function)",
            fix="compile it: step = jax.jit(step, donate_argnums=0); or run step by step "
            "with steps_per_call=1"))
    raise ValueError(explain(
        f"steps_per_call={steps} found no step to fuse",
        expected="a compiled step under gyre.every(1) (gyre.loop) or on_train_step / "
        "on_test_step / on_predict_step (named loops)",
        received="no jax.jit function or managed step on every step",
        fix="wrap the step: jax.jit(step, donate_argnums=0); or use steps_per_call=1"))

