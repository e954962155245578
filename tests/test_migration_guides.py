"""The jaxloop, jax_trainer and Jax Fit migration guides (``docs/migration/``): every seed example
is quoted in its guide, every block a guide shows from a gyre file is in that file, the gyre
versions under ``examples/migration/`` run, and the jax_trainer guide's config catalogue is the
registries' (a new registered name, or a removed one, fails here)."""

from __future__ import annotations

import importlib.util
import re
import runpy
import sys
from pathlib import Path

import pytest

from tests.trainer.test_run import gyre  # runs the gyre command in this process

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "migration"
EXAMPLES = ROOT / "examples"
MIGRATION = EXAMPLES / "migration"
GUIDES = ("jaxloop.md", "jax_trainer.md", "jax_fit.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _blocks(guide):
    return FENCE.findall((DOCS / guide).read_text())


def _lines(text):
    return {line.strip() for line in text.splitlines() if line.strip()}


# -- the guides' blocks ---------------------------------------------------------------------


@pytest.mark.parametrize("guide", GUIDES)
def test_every_block_shown_from_a_file_is_in_that_file(guide):
    """A block whose first line is ``# examples/...`` (or ``# from examples/...``) shows lines of
    that file: each of its lines is one of the file's (``...`` marks lines left out)."""
    shown = 0
    for _, code in _blocks(guide):
        first, _, rest = code.partition("\n")
        match = re.fullmatch(r"# (?:from )?(examples/\S+)(?: .*)?", first.strip())
        if not match:
            continue
        path = ROOT / match.group(1)
        assert path.is_file(), f"{guide} shows {match.group(1)}, which does not exist"
        missing = sorted(_lines(rest) - _lines(path.read_text()) - {"..."})
        assert not missing, f"{guide}: lines not in {match.group(1)}: {missing}"
        shown += 1
    assert shown >= 2, guide


def test_every_guide_names_only_example_files_that_exist():
    for guide in GUIDES:
        for name in re.findall(r"`(examples/[\w./-]+\.(?:py|yaml))`", (DOCS / guide).read_text()):
            assert (ROOT / name).is_file(), f"{guide} names {name}"


def test_each_guide_ends_with_its_table_of_differences():
    for guide in GUIDES:
        text = (DOCS / guide).read_text()
        last = text.rstrip().split("\n## ")[-1]
        assert last.startswith("Behaviour that differs on purpose"), guide
        assert last.count("\n|") >= 5, guide


# -- the jax_trainer catalogue ----------------------------------------------------------------

SECTIONS = {  # the catalogue's first column: the registry of that section's class_name
    "`trainer`": "trainers", "`model`": "models", "`trainer.callbacks`": "callbacks",
    "`optimizer`": "optimizers", "`optimizer.learning_rate`": "schedules", "`optimizer.transforms`": "transforms",
    "`optimizer.weight_decay`": "transforms", "`dataset`": "datasets", "`trainer.logger.tool_config`": "loggers",
}


def _catalogue(marker):
    text = (DOCS / "jax_trainer.md").read_text()
    table = text.split(f"<!-- {marker} -->")[1].split(f"<!-- /{marker} -->")[0]
    rows = [row.split("|")[1:-1] for row in table.strip().splitlines()[2:]]
    return [(cells[0].strip(), set(re.findall(r"`([^`]+)`", cells[1]))) for cells in rows]


def test_the_config_catalogue_lists_every_registered_name():
    import gyre.trainer  # noqa: F401  (registers the trainer's classes)
    from gyre.config import REGISTRIES

    listed = {}
    for section, names in _catalogue("catalogue"):
        listed.setdefault(SECTIONS[section], set()).update(names)
    for kind, registry in REGISTRIES.items():
        # a test's, an example's or a doctest's own names are not gyre's (a doctest's class names
        # gyre's module but is not one of its attributes)
        gyres = {name for name in registry if (cls := registry.get(name)).__module__.startswith("gyre.")
                 and getattr(sys.modules[cls.__module__], cls.__name__, None) is cls}
        assert listed.get(kind, set()) == gyres, kind


def test_the_catalogue_of_phlippes_names_is_what_gyre_reads():
    from gyre.config import _jax_trainer, _tools

    listed = dict(_catalogue("phlippe-catalogue"))
    assert listed["`optimizer.name`"] == set(_jax_trainer._NAMES)
    assert listed["`optimizer.scheduler.name`"] == set(_jax_trainer.SCHEDULERS)
    assert listed["`optimizer.transforms`"] == set(_jax_trainer.TRANSFORM_KEYS)
    assert listed["`dataset.constructor`"] == set(_jax_trainer.DATASET_CONSTRUCTORS)
    assert {name.lower() for name in listed["`trainer.logger.tool`"]} == set(_tools._TOOLS)


# -- the seed's YAML, as it is ----------------------------------------------------------------


def test_the_seeds_yaml_as_quoted_validates_and_asks_for_the_cifar_files(tmp_path, monkeypatch):
    (seed,) = [code for lang, code in _blocks("jax_trainer.md")
               if lang == "yaml" and "tests/checkpoints/BuildTrainerTest/" in code and "# gyre" not in code]
    path = tmp_path / "seed.yaml"
    path.write_text(seed)
    monkeypatch.chdir(tmp_path)
    code, out, err = gyre("config", path)
    assert code == 0, err
    assert "class_name: CIFAR10Dataset" in out and "model_mode: nnx" in out
    code, out, err = gyre("fit", path)
    assert code == 2
    assert "the CIFAR-10 folder does not exist" in err and str(tmp_path / "data") in err


# -- the gyre versions ------------------------------------------------------------------------


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_jax_trainer_classifier_trains_from_the_command_line(tmp_path):
    _load(MIGRATION / "jax_trainer_classifier.py", "example_jax_trainer_classifier")  # registers its classes
    code, out, err = gyre("fit", MIGRATION / "jax_trainer_classifier.yaml", "trainer.train_epochs=1",
                          "--out", tmp_path)
    assert code == 0, out + err
    assert "training starts" in out and "epoch 1: val/acc" in out and "training ends" in out  # the callback
    metrics = {k: float(v) for k, v in (line.split(": ") for line in out.splitlines() if line.startswith("test/"))}
    assert set(metrics) == {"test/acc", "test/errors", "test/loss", "test/worst"}  # MAX, SUM on EVAL
    assert metrics["test/acc"] > 0.3  # one epoch; chance is 0.1
    assert metrics["test/errors"] == round((1 - metrics["test/acc"]) * 360)  # a sum over the 360 test digits


def test_phlippes_config_form_trains(tmp_path):
    code, out, err = gyre("fit", MIGRATION / "jax_trainer_phlippe.yaml", "trainer.train_epochs=1", "--out", tmp_path)
    assert code == 0, out + err
    assert "trained 19 steps (1 epochs)" in out
    (run,) = tmp_path.iterdir()
    stored = (run / "config.yaml").read_text()
    assert "class_name: SimpleClassifierLinen" in stored and "class_name: GradClipNorm" in stored


def test_jaxloop_orbax_actions_saves_through_the_seeds_manager(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GYRE_EXAMPLE_WORKDIR", str(tmp_path))
    example = runpy.run_path(str(MIGRATION / "jaxloop_orbax_actions.py"), run_name="__main__")
    assert int(example["state"].step) == 100
    assert list(example["ckpt_manager"].all_steps()) == [60, 80, 100]  # every 2nd loop of 10, max_to_keep=3
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["100", "60", "80"]
    assert list(tmp_path.glob("events.out.tfevents.*"))
    assert "100 steps; orbax checkpoints [60, 80, 100]" in capsys.readouterr().out


def test_jax_fit_usage_runs_the_seeds_code(tmp_path, monkeypatch):
    monkeypatch.setenv("GYRE_EXAMPLE_WORKDIR", str(tmp_path))
    monkeypatch.setenv("GYRE_EXAMPLE_EPOCHS", "2")
    example = runpy.run_path(str(MIGRATION / "jax_fit_usage.py"), run_name="__main__")
    history = example["history"]
    assert len(history.collect("accuracy_test")) == 2  # eval_freq=1
    assert history.collect("accuracy_test")[-1] > 0.5
    assert (tmp_path / "mnist" / "checkpoints").is_dir() and list((tmp_path / "mnist").glob("events.out.tfevents.*"))


def test_the_jax_fit_guides_block_in_one_screen_runs_as_written(tmp_path, monkeypatch):
    text = (DOCS / "jax_fit.md").read_text()
    code = text.split("## The three keys in one screen")[1].split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)  # fit writes under ./runs
    namespace = {"print": lambda *a, **k: None}
    exec(compile(code, "docs/migration/jax_fit.md", "exec"), namespace)
    history = namespace["history"]
    assert history.collect("accuracy_test")[-1] >= 0.9
    assert len(history.collect("accuracy_val")) == 5
    assert (tmp_path / "runs" / "digits").is_dir()
