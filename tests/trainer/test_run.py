"""A whole run from a config (gyre.trainer._run) and the ``gyre`` commands over it: ``gyre fit
CONFIG``, ``gyre resume``, ``gyre test``, ``gyre config``; the example configs."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from gyre import LoopWarning, cli
from gyre.config import ConfigError, dump_config, load_config, register_callback, register_dataset
from gyre.trainer import Callback, _run

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
MLP = str(CONFIGS / "digits_mlp.yaml")
SMALL = ["trainer.train_epochs=2", "model.c_hid=32", "trainer.enable_progress_bar=false"]


def gyre(*argv):
    """Runs the command in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as exit:  # argparse's usage errors
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def printed_metrics(text):
    return {k: float(v) for k, v in (line.split(": ") for line in text.splitlines() if line.startswith("test/"))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One small run of digits_mlp.yaml through ``gyre fit``, an override after an option."""
    out = tmp_path_factory.mktemp("runs")
    code, stdout, stderr = gyre("fit", MLP, *SMALL, "--out", out, "trainer.callbacks.ModelCheckpoint.save_top_k=2")
    assert code == 0, stdout + stderr
    (run_dir,) = out.iterdir()
    return run_dir, stdout


# -- the example configs ------------------------------------------------------------------


def test_the_examples_are_there():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == [
        "digits_cnn.yaml", "digits_cnn_linen.yaml", "digits_mlp.yaml", "jax_trainer_seed.yaml"]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_config_validates_and_builds_its_dataset(path):
    config = _run.resolve_config(path)  # the schema, the registries, and the optimizer built
    assert config.trainer.class_name == "ImgClassifierTrainer"
    dataset = _run.build_dataset(config)
    assert dataset.train_loader.epoch_steps >= 1 and dataset.test_loader
    assert load_config(yaml.safe_load(dump_config(config))) == config  # the resolved config reads back


def test_the_seed_example_keeps_the_seed_and_marks_each_change():
    text = (CONFIGS / "jax_trainer_seed.yaml").read_text()
    config = _run.resolve_config(CONFIGS / "jax_trainer_seed.yaml")
    assert set(config.trainer.callbacks) == {"ModelCheckpoint", "LearningRateMonitor", "JAXProfiler"}
    assert config.optimizer["learning_rate"]["steps"] == 1755 and config.model["batch_norm"] is True
    assert config.trainer.train_epochs * _run.build_dataset(config).train_loader.epoch_steps == 1755
    changed = [line for line in text.splitlines() if "# gyre: was" in line]
    assert len(changed) == 4  # train_epochs, log_dir, save_dir, the dataset's class_name
    assert "CIFAR10Dataset" in text and "data_dir" in text  # the removed keys are named


# -- gyre fit CONFIG ----------------------------------------------------------------------


def test_fit_writes_the_run_folder_and_prints_the_test_metrics(finished):
    run_dir, stdout = finished
    lines = stdout.splitlines()
    assert lines[0] == f"run folder: {run_dir}"
    assert lines[1].startswith("trained 38 steps (2 epochs) in ")  # 1237 training digits, 64 a step
    assert [line.split(":")[0] for line in lines[2:]] == ["test/acc", "test/loss"]
    assert printed_metrics(stdout)["test/acc"] > 0.7  # two epochs of a small MLP
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.yaml", "checkpoints", "resume", "metrics", "tensorboard", "curves.png", "history.csv"} <= names
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = sorted(p.name for p in (run_dir / "metrics").iterdir())
    assert metrics == ["test_epoch_0002.json", "train_epoch_0001.json", "train_epoch_0002.json",
                       "val_epoch_0001.json", "val_epoch_0002.json"]


def test_a_nested_override_works_and_is_stored(finished):
    run_dir, _ = finished
    stored = load_config(run_dir / "config.yaml")
    assert stored.trainer.callbacks["ModelCheckpoint"]["save_top_k"] == 2  # three levels deep
    assert (stored.trainer.train_epochs, stored.model["c_hid"]) == (2, 32)
    assert stored.trainer.logger.log_dir == str(run_dir)  # the resolved run folder
    assert len([p for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()]) == 2  # both epochs kept


def test_gyre_test_reproduces_the_stored_test_metric(finished):
    run_dir, stdout = finished
    stored = json.loads((run_dir / "metrics" / "test_epoch_0002.json").read_text())
    for target in (run_dir, run_dir / "checkpoints"):
        code, out, err = gyre("test", target)
        assert code == 0, err
        again = printed_metrics(out)
        assert set(again) == {"test/acc", "test/loss"}
        for key, value in again.items():
            assert value == pytest.approx(stored[key], abs=1e-6)
            assert value == pytest.approx(printed_metrics(stdout)[key], abs=1e-6)


def test_a_second_fit_into_a_finished_run_folder_is_refused(finished):
    run_dir, _ = finished
    code, out, err = gyre("fit", MLP, *SMALL, f"trainer.logger.log_dir={run_dir}")
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[0] == f"gyre fit: error: trainer.logger.log_dir {str(run_dir)!r} already holds a " \
        "run (resume/, checkpoints/)"
    assert f"continue it with: gyre resume {run_dir}" in err


@register_callback("SigtermAtEpoch")
class SigtermAtEpoch(Callback):
    """Sends this process SIGTERM at the end of training epoch ``epoch`` (a preemption)."""

    def __init__(self, epoch: int = 1) -> None:
        super().__init__()
        self.epoch = epoch

    def on_training_epoch_end(self, train_metrics, epoch_idx):
        if epoch_idx == self.epoch:
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), "no handler: it would kill pytest"
            signal.raise_signal(signal.SIGTERM)


def test_sigterm_exits_75_and_gyre_resume_continues_exactly(tmp_path, finished):
    reference, reference_out = finished
    with pytest.warns(LoopWarning, match=r"preempted \(SIGTERM\) during step 18"):
        code, out, err = gyre("fit", MLP, *SMALL, "trainer.callbacks.ModelCheckpoint.save_top_k=2",
                              "trainer.callbacks.SigtermAtEpoch={epoch: 1}", "--out", tmp_path)
    assert code == cli.EXIT_PREEMPTED == 75, out + err
    (run_dir,) = tmp_path.iterdir()
    assert out.splitlines() == [f"run folder: {run_dir}",
                                f"preempted after 19 steps, saved; continue with: gyre resume {run_dir}"]
    assert [p.name for p in (run_dir / "resume").iterdir() if p.name.isdigit()] == ["19"]

    code, out, err = gyre("resume", run_dir, "--quiet")
    assert code == 0, out + err
    assert out.splitlines()[1].startswith("trained 38 steps (2 epochs) in ")
    assert printed_metrics(out) == printed_metrics(reference_out)  # as if never stopped
    assert load_config(run_dir / "config.yaml").trainer.resume == "latest"
    for name in ("train_epoch_0001.json", "val_epoch_0002.json", "test_epoch_0002.json"):
        resumed, straight = (json.loads((r / "metrics" / name).read_text()) for r in (run_dir, reference))
        assert {k: v for k, v in resumed.items() if not k.endswith("/time")} == \
            {k: v for k, v in straight.items() if not k.endswith("/time")}
    with open(run_dir / "history.csv") as f:
        steps = [int(line.split(",")[0]) for line in f.read().splitlines()[1:]]
    assert steps == list(range(38))  # no step twice, none missing


@register_callback("KillAfterBestModel")
class KillAfterBestModel(Callback):
    """SIGKILLs this process once validation ``epoch``'s best model is on disk in checkpoints/,
    before the epoch's resume checkpoint: the moment that made every gyre resume crash (only in
    the process :func:`_killed_fit` starts: the resumed run reads the same config)."""

    def __init__(self, epoch: int = 1) -> None:
        super().__init__()
        self.epoch = epoch

    def on_validation_epoch_end(self, eval_metrics, epoch_idx):
        if epoch_idx == self.epoch and os.environ.get("GYRE_TEST_KILL") == "1":
            for cb in self.trainer.callbacks:
                cb.on_training_end()  # ModelCheckpoint: waits for its save
            os.kill(os.getpid(), signal.SIGKILL)


def _killed_fit(*argv):
    """``gyre fit`` in its own process, with this module's callbacks registered."""
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_run; " \
        "from gyre import cli; sys.exit(cli.main(sys.argv[1:]))"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "GYRE_TEST_KILL": "1"}
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "-c", code, "fit", *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("minutes", [0, 10])
def test_gyre_resume_after_a_kill_between_the_best_model_and_the_resume_checkpoint(tmp_path, finished, minutes):
    # minutes=0: resume/ holds epoch 1 (or nothing yet) while checkpoints/ holds epoch 2's model;
    # the default 10: no resume checkpoint before the end, so the run starts over
    reference, reference_out = finished
    run_dir = tmp_path / "run"
    done = _killed_fit(MLP, *SMALL, "trainer.callbacks.ModelCheckpoint.save_top_k=2",
                       f"trainer.resume_every_minutes={minutes}", "trainer.callbacks.KillAfterBestModel={epoch: 2}",
                       f"trainer.logger.log_dir={run_dir}")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "38" in os.listdir(run_dir / "checkpoints") and not (run_dir / "resume" / "38").exists()
    over = not any(p.name.isdigit() for p in (run_dir / "resume").glob("*"))  # nothing to resume from
    assert over or minutes == 0
    for i in range(2):  # a second resume of the finished run changes nothing
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code, out, err = gyre("resume", run_dir, "--quiet")
        assert code == 0, out + err
        assert printed_metrics(out) == printed_metrics(reference_out)  # as if never killed
        said = " ".join(str(w.message) for w in caught)
        assert ("starts over from step 0" in said and "moved aside" in said) == (over and i == 0), said
    # a start-over keeps the models it will save again aside: the folder might be another run's
    aside = ["19.before-restart", "38.before-restart"] if over else []
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == sorted(["19", "38", *aside])
    for name in ("train_epoch_0002.json", "val_epoch_0002.json", "test_epoch_0002.json"):
        resumed, straight = (json.loads((r / "metrics" / name).read_text()) for r in (run_dir, reference))
        assert {k: v for k, v in resumed.items() if not k.endswith("/time")} == \
            {k: v for k, v in straight.items() if not k.endswith("/time")}
    with open(run_dir / "history.csv") as f:
        assert [int(line.split(",")[0]) for line in f.read().splitlines()[1:]] == list(range(38))


def test_resume_needs_a_run_folder_with_resume_checkpoints(tmp_path):
    code, _, err = gyre("resume", tmp_path / "nope")
    assert code == 2 and f"gyre resume: error: run {str(tmp_path / 'nope')!r} is not a run folder " \
        "(it does not exist)" in err
    (tmp_path / "config.yaml").write_text("{}")  # no resume/: the run starts over, loudly, from its config
    with pytest.warns(LoopWarning, match="holds no resume checkpoint yet .* it starts over from step 0"):
        code, _, err = gyre("resume", tmp_path)
    assert code == 2 and "gyre resume: error: 3 mistakes in the config" in err


def test_a_nan_stops_a_config_run_by_default_long_before_its_end(tmp_path):
    config = tmp_path / "no_detect_nans.yaml"  # the config leaves detect_nans to its default
    config.write_text("\n".join(line for line in Path(MLP).read_text().splitlines() if "detect_nans" not in line))
    code, out, err = gyre("fit", config, "optimizer.learning_rate=1e30", "model.c_hid=8",
                          "trainer.enable_progress_bar=false", f"trainer.logger.log_dir={tmp_path / 'run'}")
    assert code == cli.EXIT_NON_FINITE == 3, out + err
    assert err.splitlines()[0] == 'gyre fit: error: "loss" is nan at step 1'
    noticed = int(err.split("noticed it during step ")[1].split()[0])
    assert noticed < 15 * 19 // 2  # not at the run's end (285 steps): within about a second
    assert "trainer.detect_nans=false" in err and "test/" not in out


def test_num_gpus_that_the_device_count_does_not_follow_warns(tmp_path):
    # jax_trainer's num_gpus is not read: num_gpus: 4 trained on one device without a word
    short = ["model.c_hid=8", "trainer.train_epochs=1", "trainer.max_steps_per_epoch=2", "trainer.enable_progress_bar=false"]
    with pytest.warns(UserWarning, match=r"num_gpus: 4 is not read: the trainer trains on trainer.num_devices "
                      r"devices, here 1(.|\n)*fix: set trainer.num_devices: 4"):
        code, out, err = gyre("fit", MLP, *short, "num_gpus=4", f"trainer.logger.log_dir={tmp_path / 'a'}")
    assert code == 0, out + err
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = gyre("fit", MLP, *short, "num_gpus=4", "trainer.num_devices=4", f"trainer.logger.log_dir={tmp_path / 'b'}")
    assert code == 0, out + err
    assert not [w for w in caught if "num_gpus" in str(w.message)]


def test_an_out_folder_under_the_home_folder_is_there(monkeypatch, tmp_path):
    # gyre fit CONFIG --out=~/runs: the shell leaves that ~ alone; it made a folder named "~"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    run_dir = _run.make_run_dir("~/runs")
    assert run_dir.parent == tmp_path / "home" / "runs" and not (tmp_path / "~").exists()


def test_gyre_test_of_a_folder_that_is_no_run(tmp_path):
    code, _, err = gyre("test", tmp_path / "nope")
    assert code == 2 and "is not a run folder (it does not exist)" in err and "Traceback" not in err


# -- mistakes: explained, exit 2, before any training -------------------------------------


@pytest.mark.parametrize(
    ("override", "path", "suggestion"),
    [
        ("seeed=1", "seeed", "seed"),
        ("trainer.train_epoch=1", "trainer.train_epoch", "train_epochs"),
        ("trainer.logger.log_step_every=5", "trainer.logger.log_step_every", "log_steps_every"),
        ("trainer.callbacks.ModelCheckpoint.monitr=val/acc", "trainer.callbacks.ModelCheckpoint.monitr", "monitor"),
        ("model.c_hidd=8", "model.c_hidd", "c_hid"),
        ("optimizer.learning_rat=0.1", "optimizer.learning_rat", "learning_rate"),
        ("dataset.global_batchsize=8", "dataset.global_batchsize", "global_batch_size"),
    ],
)
def test_a_misspelt_key_in_each_section_fails_before_training(tmp_path, override, path, suggestion):
    code, out, err = gyre("fit", MLP, override, "--out", tmp_path)
    assert code == 2 and out == "" and "Traceback" not in err
    first, expected = err.splitlines()[:2]
    assert first.startswith(f"gyre fit: error: unknown key {path}") and f"Did you mean {suggestion!r}?" in first
    assert expected.startswith("  expected: a key of ") and suggestion in expected  # the valid keys
    assert not any(tmp_path.iterdir())  # no run folder: nothing trained


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fit", "nope.yaml"], "no config file 'nope.yaml'"),
        (["fit", MLP, "model.class_name=SimpleMLP"], "unknown models name 'SimpleMLP' at model.class_name"),
        (["fit", MLP, "trainer.class_name=Trainer"], "unknown trainers name 'Trainer'"),
        (["fit", MLP, "model"], "malformed override 'model'"),
        (["fit", MLP, "model.act_fn=swish"], "invalid value at model.act_fn"),  # the parameter's Literal
        (["config", MLP, "model.act_fn=gelux"], "invalid value at model.act_fn. Did you mean 'gelu'?"),
        # what a constructor refuses names the section it was built from; gyre config builds the callbacks
        (["config", MLP, "trainer.callbacks.EarlyStopping.patience=-1"],
         "patience must be a whole number >= 1"),
        (["config", MLP, "trainer.callbacks.ModelCheckpoint.save_top_k=-3"],
         "(raised by ModelCheckpoint, built from the config's trainer.callbacks.ModelCheckpoint)"),
        (["fit", MLP, "dataset.global_batch_size=0"],
         "(raised by DigitsDataset, built from the config's dataset)"),
        (["fit", MLP, "trainer.train_epochs=[1"], "the value of the override 'trainer.train_epochs=[1' is not valid YAML"),
        (["fit", MLP, "trainer.train_epochs=two"], "trainer.train_epochs"),
        (["config", MLP, "optimizer.learning_rate={class_name: WarmupCosineDecay, peak_value: 0.1, "
          "warmup_steps: 10, decay_steps: 20, steps: 25}"], "the schedule's phases exceed its total"),
    ],
)
def test_config_mistakes_are_explained_without_a_traceback(tmp_path, argv, message):
    code, out, err = gyre(*argv, *(["--out", tmp_path] if argv[0] == "fit" else []))
    assert code == cli.EXIT_USAGE == 2, out + err
    assert err.startswith(f"gyre {argv[0]}: error: ") and message in err
    assert "\n  expected: " in err and "\n  fix: " in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


def test_bad_yaml_and_empty_files(tmp_path):
    (tmp_path / "bad.yaml").write_text("trainer:\n  train_epochs: [1\n")
    (tmp_path / "empty.yaml").write_text("")
    code, _, err = gyre("config", tmp_path / "bad.yaml")
    assert code == 2 and "is not valid YAML" in err and "Traceback" not in err
    code, _, err = gyre("config", tmp_path / "empty.yaml")
    assert code == 2 and "is empty" in err


def test_the_demo_options_are_refused_beside_a_config(capsys):
    code, _, err = gyre("fit", MLP, "--learning-rate", "0.1")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "gyre fit: error: argument --learning-rate: belongs to the digits demo (gyre fit without a config); "
        "with a config, write optimizer.learning_rate=LR")
    code, _, err = gyre("fit", "trainer.seed=1")
    assert code == 2 and "need a CONFIG before them" in err
    code, _, err = gyre("fit", MLP, "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus" in err


def test_a_dataset_without_loaders_is_explained():
    @register_dataset("NoLoadersDataset")
    class NoLoadersDataset:
        def __init__(self, size: int = 3) -> None:
            self.train_loader = [size]

    config = _run.resolve_config(MLP, ["dataset={class_name: NoLoadersDataset}"])
    with pytest.raises(TypeError, match=r"the dataset 'NoLoadersDataset' has no val_loader, test_loader"):
        _run.build_dataset(config)


def test_a_bug_is_not_dressed_as_a_user_error(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("an internal bug")

    monkeypatch.setattr(_run, "resolve_config", broken)
    with pytest.raises(ValueError, match="an internal bug"):  # the traceback is kept
        cli.main(["config", MLP])


# -- gyre config --------------------------------------------------------------------------


def test_gyre_config_prints_the_validated_config_with_defaults():
    code, out, err = gyre("config", MLP, "trainer.train_epochs=3")
    assert code == 0, err
    printed = yaml.safe_load(out)
    assert printed["trainer"]["train_epochs"] == 3
    assert printed["trainer"]["check_val_every_n_epoch"] == 1  # defaults, not in the file
    assert printed["trainer"]["logger"]["log_file_verbosity"] == "info"
    assert printed["trainer"]["callbacks"]["ModelCheckpoint"]["save_optimizer_state"] is False
    assert printed["model"]["act_fn"] == "relu" and printed["optimizer"]["b1"] == 0.9
    assert printed["dataset"]["image_shape"] is False
    assert load_config(printed) == _run.resolve_config(MLP, ["trainer.train_epochs=3"])  # it reads back


# -- the helpers --------------------------------------------------------------------------


def test_run_folder_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(_run.RunError, match=r"out '.*notes.txt' is a file, not a folder"):
        _run.make_run_dir(tmp_path / "notes.txt")
    with pytest.raises(_run.RunError, match=r"out '.*notes.txt/runs' cannot be created: .* is a file"):
        _run.check_out(tmp_path / "notes.txt" / "runs")
    with pytest.raises(_run.RunError, match="out must be a folder name, received int 3"):
        _run.check_out(3)
    with pytest.raises(_run.RunError, match="is not a run folder"):
        _run.find_run_dir(tmp_path)
    with pytest.raises(ConfigError, match="unknown key trainer.train_epoch"):
        _run.run_config(MLP, ["trainer.train_epoch=1"], out=tmp_path)


def test_user_errors_are_told_from_bugs():
    from gyre.core._errors import explain

    message = explain("no 'val/x'", expected="a logged name", received="val/acc", fix="monitor: val/acc")
    assert _run.is_user_error(KeyError(message)) and _run.user_message(KeyError(message)) == message
    assert not _run.is_user_error(RuntimeError(message))  # only the kinds a mistake raises
    assert not _run.is_user_error(KeyError("params"))
    assert _run.metric_lines({"test/acc": float("nan"), "test/n": 3, "test/m": [1]}) == ["test/acc: nan", "test/n: 3"]


# -- the run's log file, seed and hyperparameters (trainer.logger.log_file_verbosity, seed) ----


def test_fit_writes_the_run_log_and_the_config_as_hyperparameters(finished):
    from tests.loggers.readers import tensorboard_values

    run_dir, _ = finished
    lines = (run_dir / "run.log").read_text().splitlines()
    messages = [line.split(" ", 2)[2] for line in lines if " INFO gyre.run: " in line]
    assert messages[0].startswith(f"INFO gyre.run: config: {MLP} (seed 0)")
    assert messages[1] == "INFO gyre.run: run: ImgClassifierTrainer, 38 training steps (2 epochs)"
    assert messages[-1].startswith("INFO gyre.run: trained 38 steps (2 epochs) in ") and "test/acc: " in messages[-1]
    values = tensorboard_values(run_dir / "tensorboard")
    assert "_hparams_/session_start_info" in values
    start = values["_hparams_/session_start_info"][0][1].metadata.plugin_data.content
    assert b"trainer.train_epochs" in start and b"optimizer.learning_rate" in start
    (step, acc), = values["hparams/test/acc"]
    assert step == 0 and acc.simple_value == pytest.approx(printed_metrics(finished[1])["test/acc"])


def test_the_log_file_keeps_its_level_and_a_run_that_cannot_start_leaves_nothing(tmp_path):
    out = tmp_path / "runs"
    with pytest.warns(UserWarning, match=r"optimizer.learning_rate \(Linear\) lasts 5 steps, but the run trains 19"):
        code, _, err = gyre("fit", MLP, *SMALL, "trainer.train_epochs=1", "trainer.logger.log_file_verbosity=warning",
                            "optimizer.learning_rate={class_name: Linear, init_value: 0.001, end_value: 0.0, steps: 5}",
                            "--out", out)
    assert code == 0, err
    (run_dir,) = out.iterdir()
    text = (run_dir / "run.log").read_text()
    assert "WARNING gyre.run: UserWarning: optimizer.learning_rate (Linear) lasts 5 steps" in text
    assert " INFO " not in text  # warning and up only
    code, _, err = gyre("fit", MLP, "dataset.global_batch_size=100000", "--out", tmp_path / "none")
    assert code == 2 and not any((tmp_path / "none").iterdir())


def test_a_runs_steps_are_its_epochs_times_the_loaders_length_and_its_monitor_takes_the_mode_from_the_name():
    from types import SimpleNamespace as NS

    from gyre.trainer._run import _monitored, run_steps_of

    assert run_steps_of(NS(trainer=NS(train_epochs=5)), NS(train_loader=[0] * 9)) == 45
    given = NS(trainer=NS(callbacks={"ModelCheckpoint": {"monitor": "val/acc", "mode": "max"}}))
    implied = NS(trainer=NS(callbacks={"ModelCheckpoint": {"monitor": "val/acc"}}))
    assert _monitored(given) == _monitored(implied) == {"monitor": "val/acc", "mode": "max"}



def test_an_empty_log_dir_means_a_new_run_folder_holding_everything(tmp_path, monkeypatch):
    """The fork writes log_dir: "" for "no folder of mine": the whole run goes to one timestamped
    folder of --out (it used to split: config, curves and metrics in the current folder)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = gyre("fit", MLP, "trainer.train_epochs=1", "model.c_hid=8", "trainer.enable_progress_bar=false",
                          "trainer.logger.log_dir=''", "--out", "runs")
    assert code == 0, out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert {"config.yaml", "checkpoints", "resume", "history.csv"} <= {p.name for p in run_dir.iterdir()}


def test_a_schedule_without_steps_lasts_the_steps_max_steps_per_epoch_leaves(tmp_path):
    out = tmp_path / "runs"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a 5-step schedule fits a run of 5 steps: no "lasts" warning
        code, _, err = gyre("fit", MLP, *SMALL, "trainer.train_epochs=1", "trainer.max_steps_per_epoch=5",
                            "optimizer.learning_rate={class_name: Linear, init_value: 0.001, end_value: 0.0, steps: 5}",
                            "--out", out)
    assert code == 0, err
    (run_dir,) = out.iterdir()
    text = (run_dir / "run.log").read_text()
    assert "run: ImgClassifierTrainer, 5 training steps (1 epochs)" in text and "trained 5 steps (1 epochs)" in text
