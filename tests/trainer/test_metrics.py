"""Metric modes accumulated on device, end to end: exact values over two epochs for every mode,
routing by LogFreq / LogMode and the writers' scalars (issue 12, item 2). The accumulator, the
CONCAT collector and the names have their own files: test_accumulator.py, test_concat.py,
test_metric_names.py."""

import jax
import jax.numpy as jnp
import pytest

import gyre
from gyre.trainer._metrics import (
    ConcatCollector,
    MetricAccumulator,
    metric_names,
    parse_metrics,
    scalars_for_writers,
)


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


def named(computed, phase, freq="epoch"):
    """The computed values by logged name, as the trainer names them."""
    return {name: computed[key] for key, name in metric_names(SPECS, phase, freq).items()}


@pytest.fixture(scope="module")
def run():
    """Two training epochs (a window of WINDOW steps), each followed by a validation and a
    test over the same steps, through one compiled step per phase kind."""
    example = {k: (jnp.float32(0), None) for k in SPECS}
    epoch_specs = {key: SPECS[key] for key in metric_names(SPECS, "train", "epoch")}
    window_specs = {key: SPECS[key] for key in metric_names(SPECS, "train", "step")}
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
                        out["windows"].append(named(computed, "train", "step"))
                        window = window.reset()
                        window_collector.reset()
                epoch = named({**acc.compute(), **collector.compute()}, "train", "epoch")
            out["train"].append({**epoch, "train/time": 1.25})
            for phase in ("val", "test"):
                eval_acc = eval_acc.reset()
                eval_collector.reset()
                for v, n, k in steps:
                    eval_acc, concat = evaluate(eval_acc, jnp.float32(v), jnp.float32(n), jnp.float32(k))
                    eval_collector.add(concat)
                computed = {**eval_acc.compute(), **eval_collector.compute()}
                out[phase].append({**named(computed, phase), f"{phase}/time": 0.5})
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
