"""The ``gyre`` command (gyre.cli): options, output, and usage errors instead of tracebacks."""

import os
import sys

import pytest

import gyre
from gyre import _demo as demo
from gyre import cli
from tests.loggers.readers import tensorboard_values


def test_cli_fit_passes_options_and_prints_the_result(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake_fit(**kwargs):
        seen.update(kwargs)
        return demo.DemoResult(
            tmp_path / "run", 0.97361, gyre.history(), gyre.Elapsed(steps=44, epochs=2), 1.25
        )

    monkeypatch.setattr(demo, "fit_digits", fake_fit)
    code = cli.main(["fit", "--epochs", "2", "--batch-size", "32", "--learning-rate", "0.01",
                     "--seed", "3", "--out", str(tmp_path), "--quiet"])
    assert code == 0
    assert seen == {"epochs": 2, "batch_size": 32, "learning_rate": 0.01, "seed": 3,
                    "out": str(tmp_path), "quiet": True, "resume": None}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"run folder: {tmp_path / 'run'}"
    assert lines[-1] == "final test accuracy: 0.9736"


def test_cli_defaults():
    args = cli.build_parser().parse_args(["fit"])
    assert (args.epochs, args.batch_size, args.learning_rate, args.seed, args.out, args.quiet) == (
        15, 64, 3e-3, 0, "runs", False)
    assert (args.config, args.overrides, args.resume) == (None, [], None)  # no config: the demo


@pytest.mark.parametrize("argv", [["fit", "--epochs", "0"], ["fit", "--learning-rate", "x"], ["nope"]])
def test_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: gyre" in capsys.readouterr().err


def test_plain_gyre_prints_help(capsys):
    assert cli.main([]) == 0
    assert "fit" in capsys.readouterr().out


def test_version_prints_gyres_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"gyre {gyre.__version__}\n"


# -- usage errors: never a traceback ------------------------------------------------------


def _usage_error(argv, capsys):
    """Runs the command, expects argparse's usage error; returns its message line."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gyre fit") and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gyre fit: error: argument ")
    return last


def test_cli_out_naming_a_file(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("keep me")
    message = _usage_error(["fit", "--quiet", "--out", str(tmp_path / "notes.txt")], capsys)
    assert message.endswith(f"argument --out: {str(tmp_path / 'notes.txt')!r} is a file, not a "
                            "folder to hold the run folders")
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_cli_out_under_a_file(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("")
    out = tmp_path / "notes.txt" / "runs"
    message = _usage_error(["fit", "--quiet", "--out", str(out)], capsys)
    assert f"argument --out: {str(out)!r} cannot be created: " in message
    assert message.endswith("is a file")


def test_cli_out_that_cannot_be_written(tmp_path, capsys, monkeypatch):
    # Root writes anywhere a mode allows, so the refusal of the file system is simulated.
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(demo.Path, "mkdir", refuse)
    message = _usage_error(["fit", "--quiet", "--out", str(tmp_path / "runs")], capsys)
    assert message.endswith(f"cannot create a run folder in {str(tmp_path / 'runs')!r}: Permission denied")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write anywhere")
def test_cli_out_in_a_read_only_folder(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    message = _usage_error(["fit", "--quiet", "--out", str(locked / "runs")], capsys)
    assert "is not writable" in message


@pytest.mark.parametrize("seed", ["-1", "x", str(2**63)])
def test_cli_bad_seed(seed, capsys, tmp_path):
    message = _usage_error(["fit", "--seed", seed, "--out", str(tmp_path)], capsys)
    assert message.endswith(f"argument --seed: expected a whole number from 0 to {2**63 - 1}, "
                            f"received {seed!r}")
    assert not any(tmp_path.iterdir())
    assert cli.MAX_SEED == demo.MAX_SEED  # one bound: the CLI checks --seed with the demo's


def test_cli_batch_larger_than_the_data(capsys, tmp_path):
    message = _usage_error(["fit", "--quiet", "--batch-size", "5000", "--out", str(tmp_path)], capsys)
    assert message.endswith("argument --batch-size: must be at most 1237, the number of digits "
                            "training samples, received 5000")  # 1437 less 200 held out for validation
    assert not any(tmp_path.iterdir())  # no run folder for a run that cannot start


def test_cli_learning_rate_must_be_finite(capsys):
    message = _usage_error(["fit", "--learning-rate", "inf"], capsys)
    assert message.endswith("expected a finite number > 0, received 'inf'")


# -- a training that diverges: exit code 3, the explanation, no traceback ------------------


def test_cli_fit_exits_3_with_the_explanation_when_the_training_diverges(tmp_path, capsys):
    # a finite but absurd learning rate: the loss is NaN from the second step on
    argv = ["fit", "--learning-rate", "1e30", "--epochs", "1", "--batch-size", "512", "--quiet", "--out", str(tmp_path)]
    assert cli.main(argv) == cli.EXIT_NON_FINITE == 3
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0] == 'gyre fit: error: "loss" is nan at step 1'
    assert "lower optimizer.learning_rate" in captured.err and "Traceback" not in captured.err
    (run_dir,) = tmp_path.iterdir()
    assert lines[-1] == f"run folder: {run_dir}"
    assert "final test accuracy" not in captured.out  # no result is reported as if it went well


def test_help_documents_the_exit_codes(capsys):
    cli.main([])
    out = capsys.readouterr().out
    assert "exit codes:" in out
    for code in (cli.EXIT_OK, cli.EXIT_USAGE, cli.EXIT_NON_FINITE):
        assert f"\n  {code}  " in out
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    assert "3  the training diverged" in capsys.readouterr().out


def test_sigterm_saves_the_step_exits_75_and_resume_continues(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    args = [sys.executable, "-m", "gyre", "fit", "--epochs", "40", "--batch-size", "256", "--quiet", "--out", str(tmp_path)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for the first epoch's best model: training runs
        if any(p.name.isdigit() for p in tmp_path.glob("*/checkpoints/*")):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, out + err
    run_dir = next(tmp_path.iterdir())
    assert f"continue with: gyre resume {run_dir}" in out
    steps = int(out.split("preempted after ")[1].split()[0])
    saved = max(int(p.name) for p in (run_dir / "resume").iterdir() if p.name.isdigit())
    assert saved == steps and 0 < steps < 40 * 4  # the signalled step, saved (4 steps per epoch)
    assert "final test accuracy" not in out  # a preempted run is not tested

    done = subprocess.run(args + ["--resume", str(run_dir)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trained 160 steps (40 epochs)" in done.stdout
    with open(run_dir / "history.csv") as f:
        lines = f.read().splitlines()
    steps_column = [int(line.split(",")[0]) for line in lines[1:] if line.split(",")[0].isdigit()]
    assert [s for s in steps_column if s < 160] == list(range(160))  # no step twice, none missing
    epochs = sorted(int(p.name[len("train_epoch_"):-5]) for p in (run_dir / "metrics").glob("train_epoch_*.json"))
    assert epochs == list(range(1, 41))  # every epoch's metrics file, from both runs
    written = tensorboard_values(str(run_dir / "tensorboard"))  # two event files, one per run
    assert sorted(step for step, _ in written["loss"]) == list(range(160))


def test_resume_names_a_run_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["fit", "--resume", str(tmp_path / "nope")])
    assert info.value.code == 2
    assert "--resume: must name the run folder of an earlier run" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        cli.main(["fit", "--resume", str(tmp_path / "empty")])
    assert "'" + str(tmp_path / "empty") + "' holds no resume/" in capsys.readouterr().err


# -- a config's mistakes: every one at once, exit 2, no traceback ----------------------------------


def test_fit_reports_every_config_mistake_at_once(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(open("examples/configs/digits_mlp.yaml").read()
                      .replace("train_epochs: 15", "train_epoch: 15")
                      .replace("c_hid: 256", "c_hdi: 256")
                      .replace("global_batch_size: 64", "global_batch_size: many"))
    code = cli.main(["fit", str(config), "optimizer.lerning_rate=1e-3", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("gyre fit: error: 4 mistakes in the config (each explained below):")
    for mistake in ("(1) unknown key trainer.train_epoch in trainer. Did you mean 'train_epochs'?",
                    "(2) unknown key model.c_hdi for the model 'SimpleClassifier'. Did you mean 'c_hid'?",
                    "(3) unknown key optimizer.lerning_rate for the optimizer 'Adam'. Did you mean 'learning_rate'?",
                    "wrong type at dataset.global_batch_size"):
        assert mistake in err
    assert not (tmp_path / "runs").exists()  # nothing was made


@pytest.mark.parametrize("model, mode, fix", [("SimpleCNNLinen", "nnx", "model_mode: linen"),
                                              ("SimpleCNN", "linen", "model_mode: nnx")])
def test_fit_explains_a_model_of_the_other_flax_api(model, mode, fix, tmp_path, capsys):
    # a left-out model_mode is the model class's own (tests/config/test_schema.py); a given
    # one that contradicts the class is refused before anything runs
    overrides = [f"model.class_name={model}", f"trainer.model_mode={mode}"]
    source = tmp_path / "cnn.yaml"
    source.write_text("".join(line for line in open("examples/configs/digits_cnn_linen.yaml")
                              if "model_mode" not in line))
    code = cli.main(["fit", str(source), *overrides, "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"fix: write {fix} in the trainer section" in err


def test_a_preempted_demo_says_to_continue_with_gyre_resume(monkeypatch, capsys, tmp_path):
    seen = {}

    def preempted(**kwargs):
        seen.update(kwargs)
        return demo.DemoResult(tmp_path / "run", float("nan"), gyre.history(), gyre.Elapsed(steps=7), 1.0, True)

    monkeypatch.setattr(demo, "fit_digits", preempted)
    assert cli.main(["fit", "--epochs", "40", "--quiet"]) == cli.EXIT_PREEMPTED
    out = capsys.readouterr().out
    # gyre fit --resume RUN without the options retrained the default 15 epochs: gyre resume reads them
    assert f"continue with: gyre resume {tmp_path / 'run'}" in out and "--resume" not in out
    cli.main(["fit", "--resume", str(tmp_path / "run"), "--epochs", "50"])
    assert (seen["epochs"], seen["batch_size"], seen["learning_rate"], seen["seed"]) == (50, None, None, None)


def test_a_refused_resume_keeps_the_runs_config_and_gyre_resume_still_works(tmp_path, capsys):
    assert cli.main(["fit", "--epochs", "1", "--batch-size", "512", "--quiet", "--out", str(tmp_path)]) == 0
    (run_dir,) = tmp_path.iterdir()
    before = (run_dir / "config.yaml").read_bytes()
    capsys.readouterr()
    message = _usage_error(["fit", "--resume", str(run_dir), "--batch-size", "64"], capsys)
    assert "argument --batch-size: is 64" in message and "leave --batch-size out" in message
    config = str(run_dir / "config.yaml")
    overrides = ["trainer.resume=latest", "dataset.global_batch_size=64", f"trainer.logger.log_dir={run_dir}"]
    assert cli.main(["fit", config, *overrides, "--quiet"]) == cli.EXIT_USAGE  # refused before config.yaml is written
    err = capsys.readouterr().err
    assert "a run of 2 batches per epoch, and train_loader now gives 19" in err
    assert f"continue the run with its own config: gyre resume {run_dir}" in err
    assert (run_dir / "config.yaml").read_bytes() == before  # not rewritten by either refusal
    assert cli.main(["resume", str(run_dir), "--quiet"]) == 0
    assert "trained 2 steps (1 epochs)" in capsys.readouterr().out


def test_a_nan_at_the_first_step_is_not_called_a_divergence():
    assert "lower optimizer.learning_rate" in cli.diverged_fix(1)
    fix = cli.diverged_fix(0)
    assert "labels outside the model's classes" in fix and "trainer.detect_nans=false" in fix
    assert "lower optimizer.learning_rate" not in fix


def test_a_nan_is_noticed_within_a_block_and_the_fix_is_in_the_commands_terms(tmp_path, capsys):
    argv = ["fit", "--learning-rate", "1e30", "--quiet", "--out", str(tmp_path)]  # 15 epochs, 285 steps
    assert cli.main(argv) == cli.EXIT_NON_FINITE
    err = capsys.readouterr().err
    assert "the loop noticed it during step" in err  # not "when it ended, after 285 steps"
    noticed = int(err.split("noticed it during step ")[1].split()[0])
    assert noticed <= 2 * 64 + 16
    fix = next(line for line in err.splitlines() if line.startswith("  fix: "))
    assert "optimizer.learning_rate" in fix and "--learning-rate" in fix and "GradClipNorm" in fix
    assert "nan_policy" not in fix and "@gyre.managed" not in fix  # Python's fixes, not the command's


def test_a_warning_reads_as_the_commands():
    import warnings

    assert cli.command_warning("gyre fit")(UserWarning("short"), UserWarning, "gyre", 6) == "gyre fit: warning: short\n"
    assert cli.command_warning("gyre test")("slow", DeprecationWarning, "x", 1) == "gyre test: DeprecationWarning: slow\n"
    before = warnings.formatwarning
    cli.main(["config", "no-such.yaml"])
    assert warnings.formatwarning is before  # restored after the command


def test_a_schedules_values_are_mistakes_reported_with_the_others(capsys):
    code = cli.main(["config", "examples/configs/digits_mlp.yaml", "trainer.train_epoch=3",
                     "optimizer.learning_rate={class_name: WarmupCosineDecay, peak_value: 0.1, warmup_steps: 50, steps: 40}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("gyre config: error: 2 mistakes in the config")
    assert "(1) unknown key trainer.train_epoch" in err
    assert "(2) optimizer.learning_rate (WarmupCosineDecaySchedule): the schedule's phases exceed its total" in err


def test_cli_fit_without_the_examples_extra_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    """`pip install gyre` alone has no scikit-learn: the demo says which extra to install (exit 2),
    it does not print a traceback."""
    monkeypatch.setitem(sys.modules, "sklearn", None)  # what a missing package looks like to import
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    assert cli.main(["fit", "--epochs", "1", "--quiet", "--out", str(tmp_path)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "gyre fit: error:" in err and "scikit-learn" in err and "gyre[examples]" in err
