"""Stateful metric objects, as ciclo's managed API merges them into the state."""

import jax
import numpy as np
import optax
import pytest

import gyre
from gyre import managed
from tests.steps._managed_helpers import batch_of, fresh, init_params, mse


def _clu():
    return pytest.importorskip("clu.metrics")


def test_clu_metrics_logged_as_stateful_metrics_are_merged_in_the_state():
    clu = _clu()
    AverageLoss = clu.Average.from_output("loss")

    class State(managed.ManagedState):  # ciclo's example 04: fields without defaults
        accuracy: clu.Accuracy
        loss: AverageLoss

    w = jax.random.normal(jax.random.PRNGKey(0), (5, 4))

    def step_fn(state, batch):
        x, y = batch
        logits = x @ state.params["w"]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        logs = gyre.logs().add_loss("loss", loss)
        logs.add_stateful_metric("accuracy", clu.Accuracy.from_model_output(logits=logits, labels=y))
        logs.add_stateful_metric("loss", AverageLoss.from_model_output(loss=loss))
        return logs, state

    evaluate = managed.step(step_fn)

    @managed.step
    def reset(state):
        return state.replace(accuracy=clu.Accuracy.empty(), loss=AverageLoss.empty())

    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(8, 5)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int32)) for _ in range(3)]
    state = State.create(params={"w": w}, tx=optax.sgd(0.0), accuracy=clu.Accuracy.empty(), loss=AverageLoss.empty())
    evaluate(state, batches[0])  # compile outside the guard
    with jax.transfer_guard_device_to_host("disallow"):
        for batch in batches:
            logs, state = evaluate(state, batch)
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    expected = float(np.mean(np.argmax(x @ np.asarray(w), -1) == y))
    assert float(logs.stateful_metrics.accuracy) == pytest.approx(expected)
    assert int(state.accuracy.count) == 24
    _, state = reset(state)
    assert int(state.accuracy.count) == 0
    # the train step merges them as well, after its update
    train = managed.train_step(step_fn)
    logs, state = train(state, batches[0])
    assert int(state.accuracy.count) == 8 and int(state.step) == 1


def test_gyre_metric_objects_in_extras_and_dict_results():
    from gyre.core.metrics import Mean
    from gyre.frameworks import Accuracy, Metrics

    @managed.step
    def evaluate(state, batch):
        x, y = batch
        logits = x @ state.params["w"][:, :3]
        logs = gyre.logs().add_stateful_metric("mean_x", Mean.from_value(x.mean(), count=x.shape[0]))
        both = Metrics({"acc": Accuracy(), "other": Accuracy()}).update(preds=logits, target=y.argmax(-1))
        return logs.add_stateful_metric("both", both), state

    state = managed.ManagedState.create(params=init_params(), mean_x=Mean.empty(),
                                        both=Metrics({"acc": Accuracy(), "other": Accuracy()}))
    batches = [batch_of(4, seed=i) for i in range(2)]
    for b in batches:
        logs, state = evaluate(state, b)
    all_x = np.concatenate([b[0] for b in batches])
    assert float(logs.stateful_metrics.mean_x) == pytest.approx(all_x.mean(), rel=1e-5)
    assert sorted(logs.stateful_metrics) == ["acc", "mean_x", "other"]  # a dict adds its entries
    assert float(state.both.metrics["acc"].total) == 8.0


def test_accumulated_microbatches_merge_metric_objects():
    from gyre.core.metrics import Mean

    def fn(state, batch):
        x, y = batch
        logs = gyre.logs().add_loss("mse", mse(state.params, x, y))
        return logs.add_stateful_metric("seen", Mean.from_value(x[:, 0].mean(), count=x.shape[0])), state

    batch = batch_of(16)
    whole = managed.train_step(fn)
    micro = managed.train_step(fn, accumulate_steps=4)
    logs_a, a = whole(fresh(seen=Mean.empty()), batch)
    logs_b, b = micro(fresh(seen=Mean.empty()), batch)
    assert float(b.seen.count) == float(a.seen.count) == 16.0
    assert float(logs_b.stateful_metrics.seen) == pytest.approx(float(logs_a.stateful_metrics.seen), abs=1e-6)


def test_a_metric_object_without_an_accumulator_is_explained():
    from gyre.core.metrics import Mean

    orphan = managed.step(lambda s, b: gyre.logs().add_stateful_metric("acc", Mean.from_value(1.0)))
    with pytest.raises(ValueError, match="no 'acc' to accumulate it in") as info:
        orphan(fresh(), 0)
    assert "acc=Mean.empty()" in str(info.value)
    wrong = managed.step(lambda s, b: gyre.logs().add_stateful_metric("acc", Mean.from_value(1.0)))
    with pytest.raises(TypeError, match="state.acc cannot accumulate"):
        from gyre.core.metrics import Sum

        wrong(fresh(acc=Sum.empty()), 0)


def test_a_metric_object_is_anything_with_merge_and_compute():
    # moved from the private module's docstring example
    from gyre.core.metrics import Mean
    from gyre.steps.managed import _is_metric

    assert _is_metric(Mean.empty()) and not _is_metric(1.0)
