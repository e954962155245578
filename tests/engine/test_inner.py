import jax.numpy as jnp
import pytest

import gyre


def evaluation(values, sizes=None):
    """An inner loop over batches whose metric is `values[i]` (batch size `sizes[i]`)."""
    sizes = sizes or [1] * len(values)
    batches = [jnp.zeros(n) + v for v, n in zip(values, sizes, strict=True)]

    def step(batch):
        v = batch[0]
        return gyre.logs().add_metric("m", v).add_loss("l", v * 2).add_stateful_metric("s", v + 1)

    return lambda state: gyre.loop(state, batches, {gyre.every(1): step})


@pytest.mark.parametrize(
    "aggregation, expected",
    [
        ("last", 4.0),
        ("first", 1.0),
        ("mean", 2.5),
        ("sum", 10.0),
        ("min", 1.0),
        ("max", 4.0),
        (lambda values: values[1] * 10, 30.0),
    ],
)
def test_aggregations(aggregation, expected):
    logs, state = gyre.inner_loop("test", evaluation([1.0, 3.0, 2.0, 4.0]), aggregation=aggregation)(None)
    assert float(logs.metrics.m_test) == pytest.approx(expected)
    assert state is None


def test_mean_is_weighted_by_batch_size():
    logs, _ = gyre.inner_loop("t", evaluation([1.0, 0.0], sizes=[3, 1]), aggregation="mean")(None)
    assert float(logs.metrics.m_t) == pytest.approx(0.75)


def test_per_collection_aggregation_and_default_last():
    logs, _ = gyre.inner_loop("x", evaluation([1.0, 3.0]), aggregation={"metrics": "mean", "losses": "sum"})(None)
    assert float(logs.metrics.m_x) == 2.0
    assert float(logs.losses.l_x) == 8.0
    assert float(logs.stateful_metrics.s_x) == 4.0  # not named: last


def test_no_name_keeps_names_and_output_state():
    fn = lambda state: gyre.loop(state + 1, [0], {gyre.every(1): lambda: gyre.logs().add_metric("m", 5)})  # noqa: E731
    logs, state = gyre.inner_loop(None, fn, output_state=True)(1)
    assert dict(logs.metrics) == {"m": 5} and state == 2


# an evaluation-only outer loop, on purpose
@pytest.mark.filterwarnings("ignore:.*so the loop trains nothing:gyre.LoopWarning")
def test_inner_loop_inside_outer_loop():
    inner = gyre.inner_loop("test", evaluation([1.0, 2.0]), aggregation="mean")
    _, history, _ = gyre.loop(0, range(4), {gyre.every(2): inner})
    assert history.collect("steps", "m_test") == ([0, 2], [1.5, 1.5])


def test_inner_loop_errors():
    with pytest.raises(ValueError, match="unknown aggregation"):
        gyre.inner_loop("t", evaluation([1.0]), aggregation="median")
    with pytest.raises(TypeError, match="state -> "):
        gyre.inner_loop("t", 5)
    with pytest.raises(TypeError, match="must return what a loop returns"):
        gyre.inner_loop("t", lambda state: 3)(None)


def test_values_of_different_shapes_cannot_be_reduced_but_can_be_concatenated():
    # a per-example output whose last batch is shorter: "mean" has no meaning, "concat" does
    batches = [jnp.arange(4.0), jnp.arange(4.0), jnp.arange(2.0)]

    def evaluate(state):
        return gyre.loop(state, batches, {gyre.every(1): lambda batch: gyre.logs().add_metric("v", batch)})

    with pytest.raises(ValueError, match=r"(?s)entry metrics\.v cannot be reduced.*shapes \[\(2,\), \(4,\)\].*'concat'"):
        gyre.inner_loop("t", evaluate, aggregation="mean")(None)
    logs, _ = gyre.inner_loop("t", evaluate, aggregation="concat")(None)
    assert logs.metrics.v_t.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


def _train(state, batch):
    return gyre.logs().add_loss("loss", 1.0).add_metric("loss_test", 5.0), state


def _test(state, batch):
    return gyre.logs().add_loss("loss", 0.5), state


def test_a_training_entry_named_like_an_evaluation_one_is_refused():
    tasks = {gyre.on_train_step: _train, gyre.on_test_step: _test}
    with pytest.raises(ValueError, match=r"inner_loop\('test'\) logs losses.loss_test") as info:
        gyre.train_loop(0, range(4), tasks, test_dataset=lambda: range(2), epoch_duration=2)
    text = str(info.value)
    assert "metrics.loss_test" in text and "test_name='val'" in text and "the two series would mix" in text
    _, history, _ = gyre.train_loop(0, range(4), tasks, test_dataset=lambda: range(2), epoch_duration=2, test_name="val")
    assert history.collect("steps", "loss_val") == ([1, 3], [0.5, 0.5])


@pytest.mark.parametrize("name", ["", None])
def test_a_test_name_that_keeps_the_names_is_refused(name):
    def train(state, batch):
        return gyre.logs().add_loss("loss", 1.0), state

    tasks = {gyre.on_train_step: train, gyre.on_test_step: _test}
    with pytest.raises((ValueError, TypeError), match="test_name|losses.loss") as info:
        gyre.train_loop(0, range(4), tasks, test_dataset=lambda: range(2), epoch_duration=2, test_name=name)
    assert "fix:" in str(info.value)
    with pytest.raises(ValueError, match="inner_loop's name must not be empty"):
        gyre.inner_loop("", evaluation([1.0]))
