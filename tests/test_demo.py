"""The digits demo behind ``gyre fit`` (gyre._demo): a run folder, its result, its checks."""

import csv
import datetime
import json
import warnings

import pytest

import gyre
from gyre import _demo as demo
from gyre.config import load_config
from tests.loggers.readers import tensorboard_values


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return out, demo.fit_digits(epochs=1, out=out, quiet=True)


def test_fit_digits_writes_a_run_folder(one_epoch):
    out, result = one_epoch
    assert result.run_dir.parent == out
    datetime.datetime.strptime(result.run_dir.name, "%Y%m%d-%H%M%S")
    with open(result.run_dir / "history.csv", newline="") as f:
        header = next(csv.reader(f))
    assert {"steps", "loss", "acc", "train/loss_epoch", "val/loss", "val/acc"} <= set(header)
    assert (result.run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (result.run_dir / "checkpoints").iterdir() if p.name.isdigit()] == ["19"]
    assert [p.name for p in (result.run_dir / "resume").iterdir() if p.name.isdigit()] == ["19"]
    test = json.loads((result.run_dir / "metrics" / "test_epoch_0001.json").read_text())
    assert test["test/acc"] == pytest.approx(result.test_accuracy, abs=1e-7)


def test_fit_digits_goes_through_a_config(one_epoch):
    _, result = one_epoch
    stored = load_config(result.run_dir / "config.yaml")  # the resolved config, as gyre fit CONFIG writes it
    expected = load_config(demo.digits_config(epochs=1, quiet=True), [f"trainer.logger.log_dir={result.run_dir}"])
    assert stored == expected
    assert (stored.trainer.class_name, stored.model["class_name"], stored.optimizer["class_name"],
            stored.dataset["class_name"]) == ("ImgClassifierTrainer", "SimpleClassifier", "Adam", "DigitsDataset")


def test_fit_digits_writes_tensorboard_event_files(one_epoch):
    _, result = one_epoch
    values = tensorboard_values(str(result.run_dir / "tensorboard"))
    assert [step for step, _ in values["loss"]] == list(range(19))  # 1237 training digits, 64 a step
    assert [v.simple_value for _, v in values["loss"]] == pytest.approx(result.history.collect("loss"))
    (step, accuracy), = values["val/acc"]
    assert step == 18 and accuracy.simple_value == pytest.approx(result.history.collect("val/acc")[-1])
    (step, accuracy), = values["test/acc"]
    assert step == 18 and accuracy.simple_value == pytest.approx(result.test_accuracy)


def test_fit_digits_result(one_epoch):
    _, result = one_epoch
    assert result.elapsed.steps == 19 and result.elapsed.epochs == 1
    assert result.test_accuracy > 0.8
    assert not result.preempted and result.seconds > 0


def test_fit_digits_checkpoint_restores(one_epoch):
    _, result = one_epoch
    trainer = gyre.TrainerModule.load_from_checkpoint(result.run_dir)  # nothing else needed
    (_, _), (x_test, y_test) = gyre.data.digits()
    accuracy = trainer.test_model([(x_test, y_test)])["test/acc"]
    assert accuracy == pytest.approx(result.test_accuracy, abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"epochs": 0}, "epochs"), ({"batch_size": 2.5}, "batch_size"), ({"learning_rate": -1.0}, "learning_rate")],
)
def test_fit_digits_bad_arguments(kwargs, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        demo.fit_digits(out=tmp_path, quiet=True, **kwargs)
    assert not any(tmp_path.iterdir())  # checked before a run folder is made


def test_make_run_dir_adds_a_suffix(tmp_path):
    when = datetime.datetime(2024, 1, 2, 3, 4, 5)
    names = [demo.make_run_dir(tmp_path / "runs", now=when).name for _ in range(3)]
    assert names == ["20240102-030405", "20240102-030405-1", "20240102-030405-2"]


def test_fit_digits_explains_the_same_mistakes(tmp_path):
    with pytest.raises(demo.DemoArgumentError) as info:
        demo.fit_digits(batch_size=5000, out=tmp_path, quiet=True)
    assert info.value.argument == "batch_size"
    assert str(info.value).splitlines() == [
        "fit_digits: batch_size must be at most 1237, the number of digits training samples, received 5000",
        "  expected: batch_size <= 1237 (every training batch is full; 200 more digits are held out for validation)",
        "  received: batch_size=5000",
        "  fix: pass batch_size=64 (or any value up to 1237)",
    ]
    with pytest.raises(demo.DemoArgumentError, match=r"seed must be a whole number from 0 to"):
        demo.fit_digits(seed=-1, out=tmp_path)
    with pytest.raises(demo.DemoArgumentError, match="learning_rate must be a finite number"):
        demo.fit_digits(learning_rate=float("nan"), out=tmp_path)
    with pytest.raises(demo.DemoArgumentError, match="out must be a folder name"):
        demo.fit_digits(out=3)
    assert not any(tmp_path.iterdir())


def test_fit_digits_accepts_numpy_integers(monkeypatch, tmp_path):
    import numpy as np

    def stop_here():
        raise RuntimeError("checked")

    monkeypatch.setattr(demo, "_require_plotting", stop_here)
    with pytest.raises(RuntimeError, match="checked"):  # got past every argument check
        demo.fit_digits(epochs=np.int64(2), batch_size=np.int32(32), seed=np.int64(1),
                        learning_rate=np.float32(1e-3), out=tmp_path)


def test_the_demo_is_the_digits_mlp_example_config():
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "configs" / "digits_mlp.yaml"
    assert load_config(example) == load_config(demo.digits_config())  # gyre fit == gyre fit digits_mlp.yaml


def test_resuming_takes_the_runs_own_options_and_refuses_other_data_before_writing(tmp_path):
    out = tmp_path / "runs"
    first = demo.fit_digits(epochs=1, batch_size=512, out=out, quiet=True)
    assert demo.stored_options(first.run_dir) == {"epochs": 1, "batch_size": 512, "learning_rate": 3e-3, "seed": 0}
    before = (first.run_dir / "config.yaml").read_bytes()
    with pytest.raises(demo.DemoArgumentError) as err:
        demo.fit_digits(resume=first.run_dir, batch_size=64, quiet=True)
    assert err.value.argument == "batch_size"
    assert "was trained with --batch-size 512" in err.value.summary and "leave --batch-size out" in err.value.summary
    assert f"gyre resume {first.run_dir}" in str(err.value)
    assert (first.run_dir / "config.yaml").read_bytes() == before  # a refused resume rewrites nothing
    with pytest.raises(demo.DemoArgumentError, match="was trained with --seed 0"):
        demo.fit_digits(resume=first.run_dir, seed=1, quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gyre.LoopWarning)  # the run's own options: not a word
        again = demo.fit_digits(resume=first.run_dir, quiet=True)  # nothing is left to train
    assert again.elapsed.steps == first.elapsed.steps == 2 and demo.stored_options(again.run_dir)["batch_size"] == 512
    # a new learning rate is taken, loudly: each changed setting, old -> new
    with pytest.warns(gyre.LoopWarning, match=r"(?s)resuming the run in .* with settings other than its "
                      r"config.yaml's: trainer.train_epochs 1 → 2; optimizer.learning_rate 0.003 → 0.03"):
        more = demo.fit_digits(resume=first.run_dir, epochs=2, learning_rate=0.03, quiet=True)
    assert more.elapsed.steps == 4 and demo.stored_options(more.run_dir)["learning_rate"] == 0.03
