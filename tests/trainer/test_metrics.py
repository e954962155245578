"""Metric modes accumulated on device: exact values over two epochs for every mode, routing by
LogFreq / LogMode, names, the CONCAT collector and the writers' scalars (issue 12, item 2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gyre
from gyre.trainer._metrics import (
    ConcatCollector,
    MetricAccumulator,
    add_time,
    logged_name,
    metric_names,
    name_metrics,
    scalars_for_writers,
    select_specs,
    time_name,
)
from gyre.trainer._modes import MetricSpec, parse_metrics


def metrics_of(v, n, k):
    """A loss function's metrics dict: ``v`` the step's value, ``n`` the batch size, ``k`` an
    explicit count."""
    return {
        "loss": v,  # MEAN weighted by the batch size
        "acc": {"value": v, "count": k},  # MEAN weighted by an explicit count
        "total": {"value": v, "mode": "sum"},
        "last": {"value": v, "mode": "single"},
        "neg_max": {"value": -jnp.abs(v) - 1.0, "mode": "max"},
        "pos_min": {"value": jnp.abs(v) + 1.0, "mode": "min"},
        "spread": {"value": v, "mode": "std"},
        "const": {"value": v * 0.0 + 0.1, "mode": "std"},
        "rows": {"value": jnp.stack([v, 10.0 * v]), "mode": "concat"},
        "step_only": {"value": v, "log_freq": "step"},
        "epoch_only": {"value": v, "mode": "max", "log_freq": "epoch"},
        "train_only": {"value": v, "mode": "sum", "log_mode": "train"},
        "val_only": {"value": v, "mode": "min", "log_mode": "val"},
        "test_only": {"value": v, "mode": "max", "log_mode": "test"},
        "eval_only": {"value": v, "mode": "sum", "log_mode": "eval"},
        "custom/acc": {"value": v, "mode": "sum"},
    }


SPECS, _ = parse_metrics(metrics_of(jnp.float32(0), 1.0, 1.0), where="the test's loss")
# (value, batch size, explicit count) per step; epoch 2's std is 3 only if epoch 1 was forgotten
EPOCHS = [
    [(1.0, 4.0, 1.0), (4.0, 2.0, 3.0)],
    [(4.0, 1.0, 2.0), (-2.0, 3.0, 0.0), (4.0, 2.0, 1.0), (-2.0, 2.0, 1.0)],
]
WINDOW = 2  # log_steps_every


def _step(acc, window, v, n, k):
    specs, values = parse_metrics(metrics_of(v, n, k), where="the test's loss")
    return acc.update(specs, values, n), window.update(specs, values, n), ConcatCollector.select(specs, values)


def _eval_step(acc, v, n, k):
    specs, values = parse_metrics(metrics_of(v, n, k), where="the test's loss")
    return acc.update(specs, values, n), ConcatCollector.select(specs, values)


@pytest.fixture(scope="module")
def run():
    """Two training epochs (a window of WINDOW steps), each followed by a validation and a
    test over the same steps, through one compiled step per phase kind."""
    example = {k: (jnp.float32(0), None) for k in SPECS}
    epoch_specs = select_specs(SPECS, "train", "epoch")
    window_specs = select_specs(SPECS, "train", "step")
    acc = MetricAccumulator.init(epoch_specs, example)
    window = MetricAccumulator.init(window_specs, example)
    eval_acc = MetricAccumulator.init(SPECS, example)
    out = {"train": [], "windows": [], "val": [], "test": [], "train_window_concat": []}
    collector, window_collector = ConcatCollector(epoch_specs), ConcatCollector(window_specs)
    eval_collector = ConcatCollector(SPECS)
    step_fn, eval_fn = jax.jit(_step), jax.jit(_eval_step)
    with gyre.testing.assert_compiled_once(step_fn) as step, gyre.testing.assert_compiled_once(eval_fn) as evaluate:
        for steps in EPOCHS:
            acc, window = acc.reset(), window.reset()
            collector.reset()
            window_collector.reset()
            with jax.transfer_guard_device_to_host("disallow"):
                for i, (v, n, k) in enumerate(steps, start=1):
                    acc, window, concat = step(acc, window, jnp.float32(v), jnp.float32(n), jnp.float32(k))
                    collector.add(concat)
                    window_collector.add(concat)
                    if i % WINDOW == 0:
                        computed = {**window.compute(), **window_collector.compute()}
                        out["windows"].append(name_metrics(computed, SPECS, "train", "step"))
                        window = window.reset()
                        window_collector.reset()
                epoch = name_metrics({**acc.compute(), **collector.compute()}, SPECS, "train", "epoch")
            out["train"].append(add_time(epoch, "train", 1.25))
            for phase in ("val", "test"):
                eval_acc = eval_acc.reset()
                eval_collector.reset()
                for v, n, k in steps:
                    eval_acc, concat = evaluate(eval_acc, jnp.float32(v), jnp.float32(n), jnp.float32(k))
                    eval_collector.add(concat)
                computed = {**eval_acc.compute(), **eval_collector.compute()}
                out[phase].append(add_time(name_metrics(computed, SPECS, phase), phase, 0.5))
    return jax.device_get(out)


def test_mean_weighted_by_batch_size(run):
    # epoch 1: (1*4 + 4*2) / 6; epoch 2: (4*1 - 2*3 + 4*2 - 2*2) / 8 (unweighted: 2.5 and 1.0)
    assert [e["train/loss_epoch"] for e in run["train"]] == [2.0, 0.25]
    assert [e["val/loss"] for e in run["val"]] == [2.0, 0.25]


def test_mean_weighted_by_an_explicit_count(run):
    # epoch 1: (1*1 + 4*3) / 4; epoch 2: (4*2 + 4*1 - 2*1) / 4, the count-0 step left out
    assert [e["train/acc_epoch"] for e in run["train"]] == [3.25, 2.5]


def test_sum_and_single(run):
    assert [e["train/total_epoch"] for e in run["train"]] == [5.0, 4.0]
    assert [e["train/last_epoch"] for e in run["train"]] == [4.0, -2.0]
    assert [e["test/last"] for e in run["test"]] == [4.0, -2.0]


def test_max_of_negatives_and_min_of_positives_are_never_zero(run):
    # epoch 1: -|v|-1 = (-2, -5), |v|+1 = (2, 5); epoch 2: (-5, -3, -5, -3), (5, 3, 5, 3)
    assert [e["train/neg_max_epoch"] for e in run["train"]] == [-2.0, -3.0]
    assert [e["train/pos_min_epoch"] for e in run["train"]] == [2.0, 3.0]
    assert [e["val/neg_max"] for e in run["val"]] == [-2.0, -3.0]


def test_std_resets_between_epochs_and_is_zero_for_a_constant(run):
    # epoch 1: std(1, 4) = 1.5; epoch 2: std(4, -2, 4, -2) = 3 (with epoch 1 kept: 2.69...)
    assert [e["train/spread_epoch"] for e in run["train"]] == [1.5, 3.0]
    assert [e["test/spread"] for e in run["test"]] == [1.5, 3.0]
    assert [e["train/const_epoch"] for e in run["train"]] == [0.0, 0.0]
    assert [w["train/const_step"] for w in run["windows"]] == [0.0, 0.0, 0.0]


def test_concat_for_callbacks_not_for_writers(run):
    assert [e["train/rows_epoch"].tolist() for e in run["train"]] == [
        [1.0, 10.0, 4.0, 40.0],
        [4.0, 40.0, -2.0, -20.0, 4.0, 40.0, -2.0, -20.0],
    ]
    assert run["val"][0]["val/rows"].tolist() == [1.0, 10.0, 4.0, 40.0]
    for phase in ("train", "val", "test"):
        for epoch in run[phase]:
            scalars = scalars_for_writers(epoch, SPECS)
            assert not any("rows" in name for name in scalars)
            assert set(epoch) - set(scalars) == {n for n in epoch if "rows" in n}


def test_step_window_every_two_steps(run):
    windows = run["windows"]
    assert len(windows) == 3  # one in epoch 1, two in epoch 2
    assert [w["train/loss_step"] for w in windows] == [2.0, (4.0 - 6.0) / 4, (8.0 - 4.0) / 4]
    assert [w["train/step_only_step"] for w in windows] == [2.0, -0.5, 1.0]
    assert [w["train/spread_step"] for w in windows] == [1.5, 3.0, 3.0]
    assert [w["train/rows_step"].tolist() for w in windows] == [
        [1.0, 10.0, 4.0, 40.0], [4.0, 40.0, -2.0, -20.0], [4.0, 40.0, -2.0, -20.0]
    ]


def test_log_freq_and_log_mode_routing(run):
    train, window, val, test = run["train"][1], run["windows"][1], run["val"][1], run["test"][1]
    assert set(window) == {
        "train/loss_step", "train/acc_step", "train/total_step", "train/last_step",
        "train/neg_max_step", "train/pos_min_step", "train/spread_step", "train/const_step",
        "train/rows_step", "train/step_only_step", "train/train_only_step", "custom/acc_step",
    }
    assert set(train) == {n.replace("_step", "_epoch") for n in window} - {
        "train/step_only_epoch"
    } | {"train/epoch_only_epoch", "train/time"}
    common = {"loss", "acc", "total", "last", "neg_max", "pos_min", "spread", "const", "rows",
              "step_only", "epoch_only", "eval_only"}
    assert set(val) == {f"val/{k}" for k in common | {"val_only"}} | {"custom/acc", "val/time"}
    assert set(test) == {f"test/{k}" for k in common | {"test_only"}} | {"custom/acc", "test/time"}
    # a VAL-only and a TEST-only metric really differ: min and max of (4, -2, 4, -2)
    assert (val["val/val_only"], test["test/test_only"]) == (-2.0, 4.0)
    assert (val["val/eval_only"], test["test/eval_only"], train["train/train_only_epoch"]) == (4.0, 4.0, 4.0)
    assert (train["train/time"], val["val/time"], test["test/time"]) == (1.25, 0.5, 0.5)


def test_names():
    assert logged_name("acc", "train", "step") == "train/acc_step"
    assert logged_name("acc", "train", "epoch") == "train/acc_epoch"
    assert logged_name("acc", "val") == "val/acc"
    assert logged_name("acc", "test", "epoch") == "test/acc"
    assert logged_name("val/top5", "val") == "val/top5"
    assert logged_name("extra/acc", "train", "step") == "extra/acc_step"
    assert [time_name(p) for p in ("train", "val", "test")] == ["train/time", "val/time", "test/time"]
    specs = {"a": MetricSpec("a", log_freq="step"), "b": MetricSpec("b", log_freq="epoch"), "c": MetricSpec("c")}
    assert metric_names(specs, "train", "step") == {"a": "train/a_step", "c": "train/c_step"}
    assert metric_names(specs, "train", "epoch") == {"b": "train/b_epoch", "c": "train/c_epoch"}
    assert metric_names(specs, "val") == {"a": "val/a", "b": "val/b", "c": "val/c"}


def test_name_errors():
    with pytest.raises(ValueError, match=r"(?s)unknown phase 'validation'.*expected: phase in"):
        metric_names({}, "validation")
    with pytest.raises(ValueError, match=r"unknown phase 'train' or frequency 'steps'"):
        logged_name("a", "train", "steps")
    with pytest.raises(ValueError, match=r"val metrics are logged once per evaluation, not per step"):
        metric_names({}, "val", "step")
    clash = {"acc": MetricSpec("acc"), "train/acc": MetricSpec("train/acc")}
    with pytest.raises(ValueError, match=r"metric 'train/acc' would be logged as 'train/acc_step', the name of metric 'acc'"):
        metric_names(clash, "train", "step")
    with pytest.raises(ValueError, match=r"metric 'time' would be logged as 'val/time', the name of the epoch's duration"):
        metric_names({"time": MetricSpec("time")}, "val")
    assert metric_names({"time": MetricSpec("time")}, "train", "epoch") == {"time": "train/time_epoch"}
    with pytest.raises(KeyError, match=r"metric 'acc' has no computed value"):
        name_metrics({}, {"acc": MetricSpec("acc")}, "test")


def test_add_time_errors():
    with pytest.raises(TypeError, match=r"val/time must be a host number of seconds"):
        add_time({}, "val", jnp.float32(1.0))
    with pytest.raises(ValueError, match=r"'test/time' is already a metric"):
        add_time({"test/time": 1.0}, "test", 2.0)


def test_scalars_for_writers_keeps_numbers_only():
    specs = {"p": MetricSpec("p", "concat"), "c": MetricSpec("c", "concat"), "s": MetricSpec("s", "sum")}
    metrics = {
        "train/p_step": jnp.ones(3), "train/p_epoch": jnp.ones(3), "val/p": jnp.ones(3),
        "test/c": jnp.ones(()),  # a CONCAT metric is dropped even when its value is 0-d
        "train/s_epoch": jnp.int32(4), "per_class": jnp.ones(2), "train/time": 3.5,
        "np": np.float64(1.0), "flag": True, "note": "text",
    }
    assert list(scalars_for_writers(metrics, specs)) == ["train/s_epoch", "train/time", "np", "flag"]


def test_accumulator_dtypes_shapes_and_reset():
    specs, values = parse_metrics(
        {"hits": {"value": jnp.array([1, 0, 2], jnp.int32), "mode": "sum"},
         "per_class": jnp.array([1.0, 0.0]), "top": {"value": jnp.int32(3), "mode": "max"}},
        where="t",
    )
    acc = MetricAccumulator.init(specs, values)
    before = jax.tree.map(lambda x: (x.shape, x.dtype), acc)
    acc = acc.update(specs, values, 2).update(specs, {**values, "per_class": (jnp.array([0.0, 1.0]), 2)}, 2)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), acc) == before
    result = jax.device_get(acc.compute())
    assert result["hits"].tolist() == [2, 0, 4] and result["hits"].dtype == np.int32
    assert result["per_class"].tolist() == [0.5, 0.5]
    assert result["top"].tolist() == 3 and result["top"].dtype == np.int32
    assert jax.device_get(acc.reset().compute())["hits"].tolist() == [0, 0, 0]
    assert jax.tree.map(lambda x: (x.shape, x.dtype), acc.reset()) == before


def test_an_empty_accumulator_gives_zeros_and_python_numbers_work():
    specs = {"m": MetricSpec("m", "max"), "s": MetricSpec("s", "std")}
    acc = MetricAccumulator.init(specs, {"m": (0.5, None), "s": (0.5, None)})
    assert jax.device_get(acc.compute()) == {"m": 0.0, "s": 0.0}
    acc = acc.update(specs, {"m": (-0.5, None), "s": (2.0, 0)}, 1).update(specs, {"m": (-1.5, 1), "s": (3.0, 5)}, 1)
    assert jax.device_get(acc.compute()) == {"m": -0.5, "s": 0.0}  # count 0: left out; 5: as 1
    assert float(acc.metrics["s"].count) == 1.0


def test_merge_folds_a_window_into_an_epoch():
    specs = {"m": MetricSpec("m"), "s": MetricSpec("s", "std"), "x": MetricSpec("x", "max")}
    steps = [{"m": (v, None), "s": (v, None), "x": (-v, None)} for v in (1.0, 2.0, 6.0)]
    init = MetricAccumulator.init(specs, steps[0])
    whole = init
    for s, n in zip(steps, (1, 2, 3), strict=True):
        whole = whole.update(specs, s, n)
    first = init.update(specs, steps[0], 1)
    second = init.update(specs, steps[1], 2).update(specs, steps[2], 3)
    assert jax.device_get(first.merge(second).compute()) == jax.device_get(whole.compute())
    assert jax.device_get(whole.compute())["m"] == (1 + 4 + 18) / 6
    with pytest.raises(ValueError, match=r"only accumulators of the same metrics merge"):
        first.merge(MetricAccumulator.init({}, {}))


def test_accumulator_errors():
    specs = {"m": MetricSpec("m"), "p": MetricSpec("p", "concat")}
    acc = MetricAccumulator.init(specs, {"m": (1.0, None)})  # CONCAT needs no value here
    assert list(acc.metrics) == ["m"]
    with pytest.raises(KeyError, match=r"metric 'm' has no value"):
        MetricAccumulator.init(specs, {})
    with pytest.raises(KeyError, match=r"metric 'm' has no value"):
        acc.update(specs, {"p": (1.0, None)}, 1)
    with pytest.raises(KeyError, match=r"metric 'm' has no spec"):
        acc.update({}, {"m": (1.0, None)}, 1)
    with pytest.raises(ValueError, match=r"(?s)metric 'm' changed its mode.*received: mode MAX"):
        acc.update({"m": MetricSpec("m", "max")}, {"m": (1.0, None)}, 1)
    with pytest.raises(ValueError, match=r"(?s)metric 'm' changed its shape.*expected: values of shape \(\).*received: a value of shape \(3,\)"):
        acc.update(specs, {"m": (jnp.ones(3), None)}, 1)


def test_concat_collector():
    specs = {"p": MetricSpec("p", "concat"), "m": MetricSpec("m")}
    collector = ConcatCollector(specs)
    assert collector.keys == ("p",)
    assert collector.compute()["p"].shape == (0,)
    collector.add({"p": jnp.float32(1.0), "m": 0.0})  # a scalar is one row
    collector.add_stacked({"p": jnp.array([2.0, 3.0])})  # two fused steps of one scalar
    collector.add({"p": (jnp.array([4.0]), None)})
    assert collector.compute()["p"].tolist() == [1.0, 2.0, 3.0, 4.0]
    collector.reset()
    collector.add_stacked({"p": jnp.arange(6.0).reshape(2, 3)})  # two steps of three rows
    assert collector.compute()["p"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    collector.reset()
    collector.add({"p": jnp.ones((2, 3))})
    collector.add({"p": jnp.ones((1, 4))})
    with pytest.raises(ValueError, match=r"(?s)CONCAT metric 'p' has rows of different shapes.*\(3,\), \(4,\)"):
        collector.compute()
    with pytest.raises(KeyError, match=r"metric 'p' has no value"):
        collector.add({"m": 1.0})


def test_the_carry_is_one_buffer_per_dtype_in_the_specs_order():
    specs, values = parse_metrics(metrics_of(jnp.float32(1.0), 4.0, 2.0), where="t")
    acc = MetricAccumulator.init(specs, values)
    # value and count per metric (Std: count, shift, mean, m2): 3 MEAN, 4 SUM, 1 SINGLE,
    # 3 MAX, 2 MIN -> 26, 2 STD -> 8
    assert [(x.dtype, x.shape) for x in jax.tree.leaves(acc)] == [(np.float32, (34,))]
    assert list(acc.compute()) == [k for k in specs if k != "rows"] == list(acc.metrics)
    specs = {"a": MetricSpec("a", "sum"), "b": MetricSpec("b"), "c": MetricSpec("c", "sum")}
    acc = MetricAccumulator.init(specs, {"a": (1, None), "b": (1.0, None), "c": (jnp.ones(2, jnp.int32), None)})
    assert sorted(acc.buffers) == ["float32", "int32"]
    acc = acc.update(specs, {"a": (2, None), "b": (0.5, None), "c": (jnp.array([3, 4]), None)}, 2)
    assert list(acc.compute()) == ["a", "b", "c"]
    assert jax.device_get(acc.compute()["c"]).tolist() == [3, 4]
    assert jax.device_get({k: m.count for k, m in acc.metrics.items()}) == {"a": 1.0, "b": 2.0, "c": 1.0}


def test_init_inside_jit_from_tracers():
    @jax.jit
    def first_step(x):
        specs, values = parse_metrics({"m": x.mean(), "top": {"value": x.max(), "mode": "max"}}, where="t")
        return MetricAccumulator.init(specs, values).update(specs, values, x.shape[0]).compute()

    assert jax.device_get(first_step(jnp.arange(4.0))) == {"m": 1.5, "top": 3.0}
