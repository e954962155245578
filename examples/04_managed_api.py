"""The managed API: write the maths of a step; gyre differentiates, compiles and places it.

A ``ManagedState`` carries the strategy (``"jit"`` here; ``"data_parallel"`` or ``"fsdp"``
shard the same code over every device). ``managed.train_step`` differentiates the sum of
the losses the step logs; ``managed.step`` compiles without gradients. The running
accuracy is a metric object kept in the state and emptied before each evaluation.

    python examples/04_managed_api.py

Writes its checkpoints to ``runs/04_managed_api/<timestamp>/checkpoints/`` (``runs/`` is
gitignored; ``make clean`` removes it), or under ``main(workdir=...)``.
"""

import os
from typing import Any

import jax
import optax
from _digits_common import BATCH_SIZE, make_workdir, model
from flax import struct

import gyre
import gyre.data
from gyre import managed
from gyre.frameworks import Accuracy, Mean


class State(managed.ManagedState):
    # (no `from __future__ import annotations` here: dataclass fields of a module loaded
    # from a file path need real annotations)
    accuracy: Accuracy = struct.field(default_factory=Accuracy)
    loss: Mean = struct.field(default_factory=lambda: Mean("loss"))


def loss_fn(state: State, batch: Any) -> tuple[gyre.Logs, State]:
    x, y = batch
    logits = state.apply_fn({"params": state.params}, x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    accuracy = state.accuracy.update(preds=logits, labels=y)
    mean_loss = state.loss.update(preds=logits, loss=loss)
    logs = gyre.logs().add_loss("loss", loss)
    logs.add_stateful_metric("accuracy", accuracy.compute())
    logs.add_stateful_metric("avg_loss", mean_loss.compute())
    return logs, state.replace(accuracy=accuracy, loss=mean_loss)


train_step = managed.train_step(loss_fn)
eval_step = managed.step(loss_fn)


def reset_metrics(state: State) -> State:
    return state.replace(accuracy=Accuracy(), loss=Mean("loss"))


def main(steps: int = 1000, workdir: str | None = None) -> float:
    """Trains the MLP for ``steps`` steps; returns the test accuracy of the last evaluation.

    Args:
        steps: training steps (the test set is evaluated every tenth of them, at most
            every 10 steps).
        workdir: where ``checkpoints/`` goes (default: a new ``runs/<example>/<timestamp>/``).
    """
    workdir = make_workdir(workdir, "04_managed_api")
    (x_train, y_train), (x_test, y_test) = gyre.data.digits()
    state = State.create(
        apply_fn=model.apply,
        params=model.init(jax.random.key(0), x_train[:1])["params"],
        tx=optax.adamw(1e-3),
        strategy="jit",
    )
    eval_every = max(steps // 10, 10)  # 10 evaluations (fewer in short runs)

    def evaluation_time(elapsed: gyre.Elapsed) -> bool:  # a schedule: after every tenth
        return (elapsed.steps + 1) % eval_every == 0

    def evaluate(state: State) -> Any:
        return gyre.loop(
            reset_metrics(state),
            gyre.data.batches((x_test, y_test), BATCH_SIZE, shuffle=False, epochs=1, drop_remainder=False),
            {gyre.every(1): [eval_step]},
        )

    checkpoint = gyre.checkpoint(  # the latest checkpoint (to resume) and the best one (to use)
        os.path.join(workdir, "checkpoints"), keep=1, keep_best=1, monitor="accuracy_valid", mode="max"
    )
    state, history, _ = gyre.loop(
        state,
        gyre.data.batches((x_train, y_train), BATCH_SIZE),
        {
            gyre.every(1): [train_step],
            evaluation_time: [
                reset_metrics,  # the train accuracy restarts after each evaluation
                gyre.inner_loop("valid", evaluate, aggregation={"stateful_metrics": "last", "losses": "mean"}),
                checkpoint,
            ],
            gyre.every(1): [gyre.keras_bar(total=steps)],
        },
        stop=steps,
        on_end=checkpoint.on_train_end,
    )
    accuracy = float(history.collect("accuracy_valid")[-1])
    print(f"test accuracy after the last evaluation: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    main()
