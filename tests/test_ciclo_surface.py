"""ciclo's public surface, under its names, used the way ciclo's README and examples use it:
code written for ciclo runs with ``import gyre as ciclo``.
"""

import datetime
import io
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gyre as ciclo
from gyre import managed

# ciclo 0.1.9's ``ciclo.__all__``: every name a ciclo user can reach from the package.
CICLO_NAMES = [
    "FlaxState", "History", "LoopCallbackBase", "LoopElement", "LoopState", "Logs", "Strategy",
    "always", "at", "callback", "checkpoint", "create_flax_state", "early_stopping", "elapse",
    "every", "after", "get_strategy", "history", "inner_loop", "inject", "keras_bar", "logs",
    "managed", "never", "noop", "on_epoch_end", "on_reset_step", "on_test_batch_begin",
    "on_test_batch_end", "on_test_begin", "on_test_end", "on_test_step", "on_train_batch_begin",
    "on_train_batch_end", "on_train_begin", "on_train_end", "on_train_step", "piecewise",
    "predict_loop", "register_strategy", "test_loop", "tqdm_bar", "train_loop", "wandb_logger",
    "loop", "JIT", "DataParallel", "Eager", "Elapsed", "Period",
]


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in CICLO_NAMES if n != "FlaxState"])
def test_every_ciclo_name_is_at_the_top_level(name):
    assert getattr(ciclo, name) is not None
    assert name in ciclo.__all__


def test_flax_state_is_at_the_top_level():
    assert "FlaxState" in ciclo.__all__
    assert ciclo.FlaxState is ciclo.frameworks.FlaxState


@pytest.mark.parametrize(
    "name", ["inner_loop", "checkpoint", "early_stopping", "keras_bar", "tqdm_bar", "noop", "wandb_logger"]
)
def test_ciclo_callback_paths(name):
    # ciclo users write ciclo.callbacks.inner_loop(...) as often as ciclo.inner_loop(...)
    assert getattr(ciclo.callbacks, name) is getattr(ciclo, name)


# -- callbacks: functions, elements, the protocol ---------------------------------------------


def test_inject_calls_with_the_leading_arguments_a_function_takes():
    class Scaler:
        def apply(self, state, batch, elapsed=None, *, unused=0):
            return state * batch

    assert ciclo.inject(lambda state: state + 1)(1, 10, "elapsed", "loop") == 2
    assert ciclo.inject(Scaler().apply)(3, 4, "elapsed", "loop") == 12


def test_callback_is_called_by_position_and_spreads_under_every_step():
    seen = []

    def record(state, batch, elapsed, loop_state):
        seen.append((batch, elapsed.steps, loop_state.batch))
        return ciclo.logs().add_metric("b", batch), state + batch

    element = ciclo.callback(record)
    table = {**element}
    assert [repr(k) for k in table] == ["every(steps=1)"]
    state, history, _ = ciclo.loop(0, [1, 2, 3], table)
    assert state == 6 and seen == [(1, 0, 1), (2, 1, 2), (3, 2, 3)]
    assert history.collect("b") == [1, 2, 3]


def test_loop_element_and_loop_callback_base_subclasses():
    class Doubler(ciclo.LoopCallbackBase):
        def __loop_callback__(self, loop_state):
            logs = ciclo.logs().add_metric("n", loop_state.elapsed.steps)
            return logs, loop_state.state * 2

    class Count(ciclo.LoopElement):
        calls = 0

        def __call__(self):
            Count.calls += 1

    state, history, _ = ciclo.loop(1, range(3), {**Doubler(), **Count()})
    assert state == 8 and history.collect("n") == [0, 1, 2] and Count.calls == 3


def test_any_object_with_loop_callback_is_called_with_the_loop_state():
    class Stopper:  # the protocol alone, no base class
        def __loop_callback__(self, loop_state):
            if loop_state.elapsed.steps == 2:
                loop_state.stop_iteration = True
            return ciclo.logs(), loop_state.state

    _, _, elapsed = ciclo.loop(None, range(10), {ciclo.every(1): Stopper()})
    assert elapsed.steps == 3  # the step that asked to stop counts


def test_loop_state_has_ciclos_fields():
    seen = {}

    def inspect_state(loop_state):
        seen.update(
            state=loop_state.state, batch=loop_state.batch, steps=loop_state.elapsed.steps,
            logs=dict(loop_state.logs), accumulated=loop_state.accumulated_logs,
            metadata=loop_state.metadata, history=loop_state.history,
            stop_iteration=loop_state.stop_iteration,
        )

    log_a = lambda elapsed: ciclo.logs().add_metric("a", elapsed.steps)  # noqa: E731
    log_b = lambda elapsed: ciclo.logs().add_metric("b", 1) if elapsed.steps == 0 else None  # noqa: E731
    _, history, _ = ciclo.loop("s", ["x", "y"], {ciclo.every(1): [log_b, log_a, inspect_state]}, metadata={"run": 7})
    assert seen["state"] == "s" and seen["batch"] == "y" and seen["steps"] == 1
    assert seen["logs"] == {"metrics": {"a": 1}}
    assert seen["accumulated"]["metrics"] == {"b": 1, "a": 1}  # b from step 0, a from this step
    assert seen["metadata"] == {"run": 7} and seen["history"] is history
    assert seen["stop_iteration"] is False


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: ciclo.keras_bar(total=3, file=io.StringIO()),
        lambda tmp: ciclo.tqdm_bar(total=3, file=io.StringIO()),
        lambda tmp: ciclo.checkpoint(os.path.join(tmp, "ckpt")),
        lambda tmp: ciclo.early_stopping("loss", patience=5),
        lambda tmp: ciclo.noop,
        lambda tmp: ciclo.inner_loop("valid", lambda state: ciclo.loop(state, [1], {})),
        lambda tmp: ciclo.wandb_logger(type("Run", (), {"log": lambda self, data, step: None})()),
    ],
    ids=["keras_bar", "tqdm_bar", "checkpoint", "early_stopping", "noop", "inner_loop", "wandb_logger"],
)
# the table logs a loss and returns no state, on purpose: it tests where the callbacks go
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_ciclo_callbacks_spread_into_a_table_under_every_step(make, tmp_path):
    element = make(str(tmp_path))
    table = {ciclo.every(1): lambda: ciclo.logs().add_loss("loss", 1.0), **element}
    assert [repr(k) for k in table][-1] == "every(steps=1)"
    assert table[list(table)[-1]] == [element]
    _, _, elapsed = ciclo.loop({"w": jnp.zeros(2)}, range(3), table)
    assert elapsed.steps == 3


def test_a_spread_checkpoint_saves_after_every_step(tmp_path):
    ckpt = ciclo.checkpoint(str(tmp_path), keep=10)
    ciclo.loop({"w": jnp.zeros(2)}, range(3), {**ckpt})
    assert sorted(int(d) for d in os.listdir(tmp_path) if d.isdigit()) == [1, 2, 3]


def test_early_stopping_with_ciclos_patience_in_steps():
    values = iter([3.0, 2.0] + [2.5] * 20)
    evaluate = lambda: ciclo.logs().add_loss("loss", next(values))  # noqa: E731
    stopper = ciclo.early_stopping("loss", patience=ciclo.at(steps=4))
    _, _, elapsed = ciclo.loop(None, range(20), {ciclo.every(1): [evaluate, stopper]})
    # best at step 1; ciclo's patience is the clock since then: step 5 is 4 steps later
    assert elapsed.steps == 6 and stopper.best == 2.0 and stopper.stopped_step == 5


def test_keras_bar_takes_a_period_of_steps_as_total():
    out = io.StringIO()
    bar = ciclo.keras_bar(total=ciclo.Period.create(steps=4), file=out)
    ciclo.loop(None, range(4), {ciclo.every(1): lambda: ciclo.logs().add_metric("m", 1.0), **bar})
    assert out.getvalue().splitlines()[-1].startswith("4/4 [")
    with pytest.raises(ValueError, match="a progress bar counts steps"):
        ciclo.keras_bar(total=ciclo.at(samples=100))


# -- the clock ---------------------------------------------------------------------------------


def test_elapsed_and_period_are_made_and_compared_as_in_ciclo():
    period = ciclo.Period.create(steps=3, time=datetime.timedelta(hours=1))
    assert period.time == 3600.0
    clock = ciclo.Elapsed.create()
    assert clock.steps == clock.samples == 0 and clock < period and clock <= period
    for _ in range(3):
        clock = clock.update(16)  # ciclo's one-argument update: dated now
    assert (clock.steps, clock.samples) == (3, 48) and clock.time >= 0.0
    assert clock == period and clock >= period and clock <= period and not clock > period
    clock = clock.update(16)
    assert clock > period and not clock <= period and clock != period
    assert ciclo.Elapsed.create(steps=0, samples=100) >= ciclo.at(samples=64)  # any quantity
    dated = ciclo.Period.create(date=datetime.datetime(2000, 1, 1))
    assert ciclo.Elapsed.create() >= dated
    since = ciclo.Elapsed.create(steps=12, samples=96) - ciclo.Elapsed.create(steps=10, samples=80)
    assert (since.steps, since.samples) == (2, 16)


@pytest.mark.parametrize(
    "batch_size_fn, expected",
    [
        (lambda shapes: min(shape[0] for shape in shapes), [0, 3, 6]),  # ciclo's: leaf shapes
        (lambda batch: len(batch["x"]) * 10, [0, 30, 60]),  # gyre's: the batch
    ],
)
def test_batch_size_fn_receives_the_leaf_shapes_or_the_batch(batch_size_fn, expected):
    data = [{"x": np.zeros((3, 2)), "y": np.zeros((4, 1))}] * 3
    samples = [e.samples for e, _ in ciclo.elapse(data, batch_size_fn=batch_size_fn)]
    assert samples == expected
    _, _, elapsed = ciclo.loop(None, data, {}, batch_size_fn=batch_size_fn)
    assert elapsed.samples == expected[-1] + (expected[1] - expected[0])
    # without batch_size_fn, leaves that disagree on their rows are refused (ciclo took the largest)
    with pytest.raises(ValueError, match="batch_size_fn="):
        ciclo.loop(None, data, {})


def test_after_every_then_and_piecewise_as_ciclo_writes_them():
    fired = {name: [] for name in ("after_every", "then", "shift", "piecewise")}
    table = {
        ciclo.after(2).every(3): lambda elapsed: fired["after_every"].append(elapsed.steps),
        ciclo.after(4).then(ciclo.always()): lambda elapsed: fired["then"].append(elapsed.steps),
        ciclo.after(5) >> ciclo.every(2): lambda elapsed: fired["shift"].append(elapsed.steps),
        ciclo.piecewise(ciclo.never(), {ciclo.at(6): ciclo.every(1)}): lambda elapsed: fired["piecewise"].append(elapsed.steps),
    }
    ciclo.loop(None, range(9), table)
    assert fired == {
        "after_every": [2, 5, 8],
        "then": [4, 5, 6, 7, 8],
        "shift": [5, 7],
        "piecewise": [6, 7, 8],
    }


# -- logs and history --------------------------------------------------------------------------


def test_logs_as_ciclo_builds_them():
    logs = ciclo.logs()
    logs.add_loss("loss", 1.0)
    logs.add_metric("accuracy", 0.5)
    logs.add_stateful_metric("seen", 3)
    logs.add_output("preds", np.ones(2))
    assert logs.losses.loss == 1.0 and logs["metrics"]["accuracy"] == 0.5
    assert logs.stateful_metrics.seen == 3 and logs.outputs.preds.shape == (2,)
    other = ciclo.logs()
    other.updates = {"metrics": {"recall": 0.25}}  # ciclo's setter merges
    assert other.metrics.recall == 0.25


def test_logs_keyword_forms():
    logs = ciclo.logs()
    logs.add_metrics(loss=1.0, accuracy=0.5)
    logs.add_stateful_metrics(**{"seen": 3})
    assert logs.metrics.accuracy == 0.5 and logs.stateful_metrics.seen == 3


def test_logs_helpers_ciclo_has():
    logs = ciclo.logs()
    logs.add_loss("loss", 1.0, add_metric=True)
    logs.add_losses(add_metrics=True, aux=0.5)
    assert logs.metrics.loss == 1.0 and logs.metrics.aux == 0.5
    logs.add_metric("accuracy", 0.75)
    assert logs.entry_value("accuracy") == 0.75 and logs.entry_value("metrics.loss") == 1.0
    assert logs.entry_path("accuracy") == ("metrics", "accuracy")
    assert logs.entry_collection("accuracy") == "metrics"


def test_history_records_read_like_ciclos_dicts():
    def step(elapsed):
        return ciclo.logs().add_metric("a", elapsed.steps).add_loss("loss", 1.0)

    _, history, _ = ciclo.loop(None, range(3), {ciclo.every(1): step})
    record = history[2]
    assert record["metrics"]["a"] == 2 and record["losses"]["loss"] == 1.0
    assert record["elapsed"]["steps"] == 2 and record["elapsed"]["samples"] == 2
    assert "metrics" in record and "elapsed" in record and "outputs" not in record
    assert record.get("outputs", {}) == {}
    assert history.collect("steps", "a") == ([0, 1, 2], [0, 1, 2])


def test_history_from_ciclos_list_of_records():
    records = [
        {"metrics": {"a": 1.0}, "elapsed": {"steps": 10, "samples": 80, "date_start": 0.0}},
        {"metrics": {"a": 2.0}, "stateful_metrics": {"b": 5}, "elapsed": ciclo.Elapsed(steps=11)},
    ]
    history = ciclo.history(records)
    assert len(history) == 2
    assert history.collect("steps", "a") == ([10, 11], [1.0, 2.0])
    assert history[1]["stateful_metrics"]["b"] == 5
    with pytest.raises(TypeError, match="record 0 of the list given to history"):
        ciclo.history([{"metrics": 1.0}])


# -- inner loops and the named loops -------------------------------------------------------------


def _ciclo_style_evaluation(_state):
    # what a ciclo loop function may return: a list of log dicts as the history
    records = [
        {"metrics": {"acc": 0.5, "n": 1.0}, "stateful_metrics": {"seen": 2.0}, "elapsed": {"steps": 0}},
        {"metrics": {"acc": 1.0}, "stateful_metrics": {"seen": 4.0}, "elapsed": {"steps": 1}},
    ]
    return None, records, None


@pytest.mark.parametrize(
    "aggregation, acc, n, seen",
    [
        ("last", 1.0, 1.0, 4.0),  # each entry's own last value
        ("first", 0.5, 1.0, 2.0),
        ("mean", 0.75, 1.0, 3.0),
        ("sum", 1.5, 1.0, 6.0),
        ("min", 0.5, 1.0, 2.0),
        ("max", 1.0, 1.0, 4.0),
        (lambda values: len(values), 2, 1, 2),
        ({"metrics": "sum"}, 1.5, 1.0, 4.0),  # other collections: "last"
    ],
)
def test_inner_loop_reduces_a_ciclo_history(aggregation, acc, n, seen):
    logs, state = ciclo.callbacks.inner_loop("valid", _ciclo_style_evaluation, aggregation=aggregation)("outer")
    assert float(logs["metrics"]["acc_valid"]) == acc and float(logs["metrics"]["n_valid"]) == n
    assert float(logs["stateful_metrics"]["seen_valid"]) == seen
    assert "elapsed" not in logs and state is None  # None: the outer state is unchanged


@pytest.mark.filterwarnings("ignore:train_loop had no train step:gyre.LoopWarning")  # evaluation only, on purpose
def test_train_loop_passes_inner_loop_kwargs_to_the_evaluation():
    def count(state):
        state = {"a": state["a"] + 1}
        return ciclo.logs().add_metric("a", state["a"]), state

    def run(**kwargs):
        return ciclo.train_loop(
            {"a": 0}, range(1), {ciclo.on_test_step: count},
            test_dataset=lambda: range(4), epoch_duration=1, stop=1, **kwargs,
        )[1]

    assert run()[0]["metrics"]["a_test"] == 2.5  # gyre's default: the mean over the test set
    assert run(inner_loop_kwargs={"aggregation": "last"})[0]["metrics"]["a_test"] == 4  # ciclo's
    assert run(inner_loop_kwargs={"aggregation": "sum"})[0]["metrics"]["a_test"] == 10


def test_batch_begin_points_run_before_the_step():
    order = []
    note = lambda name: lambda batch: order.append((name, batch))  # noqa: E731

    def train_step(state, batch):
        order.append(("train_step", batch))
        return state + 1

    state, _, _ = ciclo.train_loop(
        0, ["t0", "t1"],
        {
            ciclo.on_train_step: train_step,
            ciclo.on_train_batch_begin: note("train_begin"),
            ciclo.on_test_step: note("test_step"),
            ciclo.on_test_batch_begin: note("test_begin"),
        },
        test_dataset=lambda: ["v0"], epoch_duration=2, stop=2,
    )
    assert state == 2
    assert order == [
        ("train_begin", "t0"), ("train_step", "t0"), ("train_begin", "t1"), ("train_step", "t1"),
        ("test_begin", "v0"), ("test_step", "v0"),
    ]


def test_test_and_predict_loops():
    out = io.StringIO()
    _, history, elapsed = ciclo.test_loop(
        None, range(3),
        {
            ciclo.on_test_step: lambda batch: ciclo.logs().add_metric("x", batch),
            ciclo.on_test_batch_end: ciclo.keras_bar(total=3, file=out),
        },
    )
    assert history.collect("x") == [0, 1, 2] and elapsed.steps == 3
    assert out.getvalue().splitlines()[-1].startswith("3/3 [")
    _, history, _ = ciclo.predict_loop(
        None, range(2), {ciclo.on_predict_step: lambda batch: ciclo.logs().add_output("y", batch * 2)}
    )
    assert history.collect("y") == [0, 2]


# -- strategies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kind, donates",
    [
        ("eager", ciclo.Eager, None),
        ("jit", ciclo.JIT, True),
        ("jit_donate", ciclo.JIT, True),
        ("data_parallel", ciclo.DataParallel, True),
        ("data_parallel_donate", ciclo.DataParallel, True),
        ("data-parallel", ciclo.DataParallel, True),
    ],
)
def test_ciclos_strategy_names(name, kind, donates):
    strategy = ciclo.get_strategy(name)
    assert isinstance(strategy, kind) and isinstance(strategy, ciclo.Strategy)
    if donates is not None:
        assert strategy.donate is donates


def test_register_strategy_and_lift_batch_size():
    ciclo.register_strategy("test_ciclo_surface_jit", constructor=lambda: ciclo.JIT(donate=False))
    assert ciclo.get_strategy("test_ciclo_surface_jit").donate is False
    assert ciclo.get_strategy("jit").lift_batch_size(32) == 32
    assert ciclo.get_strategy("data_parallel").lift_batch_size(32) == 32 * jax.device_count()


# -- managed -------------------------------------------------------------------------------------


def _linear_loss(state, batch):
    x, y = batch
    loss = jnp.mean((x @ state.params["w"] - y) ** 2)
    return ciclo.logs().add_loss("loss", loss), state


def test_a_managed_train_step_spreads_into_a_table():
    train_step = managed.train_step(_linear_loss)
    state = managed.ManagedState.create(params={"w": jnp.zeros((2, 1))}, tx=optax.sgd(0.1), strategy="jit")
    x = np.ones((4, 2), np.float32)
    data = [(x, 2 * np.ones((4, 1), np.float32))] * 5
    state, history, _ = ciclo.loop(state, data, {**train_step})
    losses = history.collect("loss")
    assert len(losses) == 5 and losses[-1] < losses[0]


def test_managed_state_subclass_adds_fields_without_defaults():
    class State(managed.ManagedState):
        ema: dict

    state = State.create(params={"w": jnp.zeros(2)}, tx=optax.sgd(0.1), ema={"w": jnp.ones(2)})
    assert float(state.ema["w"][0]) == 1.0


def test_ciclo_names_are_the_classes_themselves():
    """One public form per thing: ciclo's lowercase names are the classes (as in ciclo)."""
    pairs = [(ciclo.keras_bar, ciclo.KerasBar), (ciclo.tqdm_bar, ciclo.TqdmBar), (ciclo.checkpoint, ciclo.Checkpoint),
             (ciclo.early_stopping, ciclo.EarlyStopping), (ciclo.inner_loop, ciclo.InnerLoop)]
    assert all(lower is cls for lower, cls in pairs)
    assert isinstance(ciclo.early_stopping("loss", patience=1), ciclo.early_stopping)


def test_checkpoint_names_the_keyword_it_takes(tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_to_keep'") as err:
        ciclo.checkpoint(tmp_path, max_to_keep=3)
    assert "use keep= (gyre's name for max_to_keep)" in str(err.value)
