"""YAML configs: the loader's scalars (1e-3 is a float), duplicate keys, dotted overrides, the
errors for files that are not configs, and the resolved config written out and read back."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
import yaml

from gyre.config import Config, ConfigError, config_to_dict, dump_config, load_config
from gyre.config._yaml import ConfigDumper, ConfigLoader, apply_override

from .test_schema import config_data, toys  # noqa: F401 (toys is a fixture)

# The seed file 003 example, its components replaced by the toys of test_schema (the real ones
# are tested by the trainer's integration tests).
SEED = """\
seed: 42
num_gpus: 1
trainer:
  class_name: TestOnlyTrainer
  train_epochs: 5
  check_val_every_n_epoch: 1
  debug: False
  enable_progress_bar: True
  seed: 42
  log_grad_norm: True
  detect_nans: True
  num_classes: 10
  logger:
    class_name: Logger
    log_dir: tests/checkpoints/BuildTrainerTest/
    log_steps_every: 50
    tool_config:
      class_name: TensorboardToolLogger
      name: ""
      save_dir: tests/checkpoints/BuildTrainerTest/
      use_timestamp_version: false
      version: "0"
    log_file_verbosity: warning
  callbacks:
    TestOnlyCheckpoint:
      class_name: TestOnlyCheckpoint
      monitor: val/acc
      mode: max
      save_top_k: 1
    LearningRateMonitor:
      class_name: TestOnlyCheckpoint
      every_n_epochs: 1
    # GradientSpikeMonitor:
    #   every_n_epochs: 1
model:
  class_name: TestOnlyModel
  c_hid: 32
  num_classes: 10
  act_fn: gelu
optimizer:
  class_name: TestOnlyAdamW
  b1: 0.9
  b2: 0.999
  eps: 1.0e-08
  learning_rate:
    class_name: TestOnlyWarmupCosine
    decay_factor: 0.1
    decay_steps: 1555
    init_value: 0.0
    peak_value: 0.001
    steps: 1755
    warmup_steps: 200
  nesterov: false
  weight_decay:
    class_name: TestOnlyWeightDecay
    mode: whitelist
    parameter_regex_exclude: ""
    parameter_regex_include: ((.*weight$)|(.*kernel$))
    value: 0.01
dataset:
  class_name: TestOnlyData
  batch_size: 128
  data_dir: data/
"""


def toy_adamw(*, learning_rate: Any, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
              weight_decay: Any = 0.0, nesterov: bool = False) -> None:
    pass


def toy_warmup_cosine(*, peak_value: float, init_value: float = 0.0, warmup_steps: int = 0,
                      decay_steps: int | None = None, steps: int | None = None,
                      decay_factor: float | None = None) -> None:
    pass


def toy_weight_decay(*, value: float, mode: str = "whitelist", parameter_regex_include: str = "",
                     parameter_regex_exclude: str = "", before_optimizer: bool = False) -> None:
    pass


@pytest.fixture
def seed(toys, monkeypatch, tmp_path):  # noqa: F811 (the fixture imported above)
    """The seed YAML in a file, its optimizer parts registered."""
    from gyre.config import REGISTRIES

    monkeypatch.setitem(REGISTRIES["optimizers"]._items, "TestOnlyAdamW", toy_adamw)
    monkeypatch.setitem(REGISTRIES["schedules"]._items, "TestOnlyWarmupCosine", toy_warmup_cosine)
    monkeypatch.setitem(REGISTRIES["transforms"]._items, "TestOnlyWeightDecay", toy_weight_decay)
    path = tmp_path / "seed.yaml"
    path.write_text(SEED)
    return path


def write(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


# -- the loader ---------------------------------------------------------------------------------


def test_exponents_are_floats_and_only_true_and_false_are_booleans():
    text = "a: 1e-3\nb: 5E+2\nc: -2.5e-1\nd: 1.0e-08\ne: .5\nf: 3\ng: '1e-3'\nh: yes\ni: off\nj: True\nk: 2024-01-01\nl: .inf\nm: 1_000"
    assert yaml.load(text, Loader=ConfigLoader) == {
        "a": 0.001, "b": 500.0, "c": -0.25, "d": 1e-08, "e": 0.5, "f": 3, "g": "1e-3", "h": "yes", "i": "off",
        "j": True, "k": "2024-01-01", "l": float("inf"), "m": 1000,
    }
    assert type(yaml.load("x: 1e3", Loader=ConfigLoader)["x"]) is float
    assert yaml.safe_load("x: 1e-3")["x"] == "1e-3"  # what plain YAML 1.1 does (and the loader fixes)


def test_the_dumper_quotes_strings_either_reader_would_misread():
    values = {"a": "1e-3", "b": "yes", "c": "2024-01-01", "d": "text", "e": 1e-8, "f": True}
    text = yaml.dump(values, Dumper=ConfigDumper, sort_keys=False)
    assert text == "a: '1e-3'\nb: 'yes'\nc: '2024-01-01'\nd: text\ne: 1.0e-08\nf: true\n"
    assert yaml.load(text, Loader=ConfigLoader) == values and yaml.safe_load(text) == values


def test_a_key_written_twice_is_an_error_naming_both_lines(tmp_path):
    path = write(tmp_path, "trainer:\n  train_epochs: 3\n  debug: true\n  train_epochs: 4\n")
    with pytest.raises(ConfigError, match=r"(?s)is not valid YAML.*the first 'train_epochs' is on line 2.*"
                                          r"found the key 'train_epochs' twice.*line 4"):
        load_config(path)


def test_yaml_merge_keys_still_work():
    data = yaml.load("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n", Loader=ConfigLoader)
    assert data["other"] == {"x": 1, "y": 3}


# -- loading files ------------------------------------------------------------------------------


def test_the_seed_structure_validates(seed):
    config = load_config(seed)
    assert config.trainer.num_classes == 10 and config.trainer.train_epochs == 5
    assert config.trainer.log_grad_norm is True and config.trainer.detect_nans is True
    assert config.trainer.logger.log_file_verbosity == "warning"
    assert config.trainer.logger.tool_config == {
        "class_name": "TensorboardToolLogger", "name": "", "save_dir": "tests/checkpoints/BuildTrainerTest/",
        "use_timestamp_version": False, "version": "0"}
    assert config.trainer.callbacks["TestOnlyCheckpoint"] == {
        "class_name": "TestOnlyCheckpoint", "monitor": "val/acc", "mode": "max", "save_top_k": 1, "every_n_epochs": 1}
    assert list(config.trainer.callbacks) == ["TestOnlyCheckpoint", "LearningRateMonitor"]
    assert config.optimizer == {
        "class_name": "TestOnlyAdamW",
        "learning_rate": {"class_name": "TestOnlyWarmupCosine", "peak_value": 0.001, "init_value": 0.0,
                          "warmup_steps": 200, "decay_steps": 1555, "steps": 1755, "decay_factor": 0.1},
        "b1": 0.9, "b2": 0.999, "eps": 1e-08,
        "weight_decay": {"class_name": "TestOnlyWeightDecay", "value": 0.01, "mode": "whitelist",
                         "parameter_regex_include": "((.*weight$)|(.*kernel$))", "parameter_regex_exclude": "",
                         "before_optimizer": False},
        "nesterov": False,
    }
    assert config.dataset == {"class_name": "TestOnlyData", "batch_size": 128, "data_dir": "data/"}


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("  train_epochs: 5", "  train_epochs: 5\n  train_epoch: 5", r"unknown key trainer\.train_epoch in trainer\. Did you mean 'train_epochs'\?"),
        ("    log_steps_every: 50", "    log_steps_evry: 50", r"unknown key trainer\.logger\.log_steps_evry .*Did you mean 'log_steps_every'\?"),
        ("      version: \"0\"", "      versio: \"0\"", r"unknown key trainer\.logger\.tool_config\.versio .*Did you mean 'version'\?"),
        ("      monitor: val/acc", "      monitr: val/acc", r"unknown key trainer\.callbacks\.TestOnlyCheckpoint\.monitr .*Did you mean 'monitor'\?"),
        ("  c_hid: 32", "  c_hdi: 32", r"unknown key model\.c_hdi .*Did you mean 'c_hid'\?"),
        ("  b1: 0.9", "  b_1: 0.9", r"unknown key optimizer\.b_1 .*Did you mean 'b1'\?"),
        ("    warmup_steps: 200", "    warmup_step: 200", r"unknown key optimizer\.learning_rate\.warmup_step .*Did you mean 'warmup_steps'\?"),
        ("    value: 0.01", "    valeu: 0.01", r"unknown key optimizer\.weight_decay\.valeu .*Did you mean 'value'\?"),
        ("  batch_size: 128", "  batch_sise: 128", r"unknown key dataset\.batch_sise .*Did you mean 'batch_size'\?"),
        ("num_gpus: 1", "num_gpu: 1", r"unknown key num_gpu at the top level of the config\. Did you mean 'num_gpus'\?"),
        ("  train_epochs: 5", "  train_epochs: five", r"wrong type at trainer\.train_epochs\.\n  expected: int"),
        ("    peak_value: 0.001", "    peak_value: high", r"wrong type at optimizer\.learning_rate\.peak_value\.\n  expected: float"),
    ],
)
def test_a_mistake_in_any_section_names_its_path(seed, old, new, message):
    assert old in SEED
    seed.write_text(SEED.replace(old, new, 1))
    with pytest.raises(ConfigError, match=message):
        load_config(seed)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"the config file '.*' is empty"),
        ("# only a comment\n", r"the config file '.*' is empty"),
        ("- trainer\n- model\n", r"the config must be a mapping of keys to values\n.*\n  received: list \['trainer', 'model'\]"),
        ("trainer: [1,\n", r"(?s)the config file '.*' is not valid YAML.*line 2"),
        ("trainer: !!python/object:os.system {}\n", r"(?s)is not valid YAML.*could not determine a constructor"),
    ],
)
def test_a_file_that_is_not_a_config_is_refused(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_a_missing_file_or_a_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no config file '.*nowhere\.yaml'\n"):
        load_config(tmp_path / "nowhere.yaml")
    with pytest.raises(FileNotFoundError, match=r"no config file '.*' \(is it a folder\?\)"):
        load_config(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"load_config\(yaml\.safe_load\(text\)\)"):
        load_config("trainer:\n  train_epochs: 3\n")
    with pytest.raises(TypeError, match=r"load_config reads a YAML file or a mapping"):
        load_config(b"config.yaml")


@pytest.mark.parametrize("section", ["trainer", "model", "optimizer", "dataset"])
def test_a_missing_section_is_named(seed, section):
    data = yaml.load(SEED, Loader=ConfigLoader)
    del data[section]
    with pytest.raises(ConfigError, match=rf"missing required key {section}\n"):
        load_config(data)


# -- overrides ----------------------------------------------------------------------------------


def test_overrides_set_nested_keys_read_as_yaml(seed):
    config = load_config(seed, [
        "trainer.train_epochs=3",
        "optimizer.learning_rate.peak_value=1e-2",
        "trainer.callbacks.TestOnlyCheckpoint.mode=min",
        "trainer.logger.log_dir=runs/a b",
        "dataset.data_dir='1e-3'",
        "optimizer.weight_decay={class_name: TestOnlyWeightDecay, value: 0}",
    ])
    assert config.trainer.train_epochs == 3
    assert config.optimizer["learning_rate"]["peak_value"] == 0.01
    assert config.trainer.callbacks["TestOnlyCheckpoint"]["mode"] == "min"
    assert config.trainer.logger.log_dir == "runs/a b"
    assert config.dataset["data_dir"] == "1e-3"
    assert config.optimizer["weight_decay"]["value"] == 0.0
    stored = config_to_dict(config)  # the overrides are in the stored config
    assert stored["trainer"]["train_epochs"] == 3 and stored["optimizer"]["learning_rate"]["peak_value"] == 0.01


def test_an_override_may_add_a_callback_or_fill_an_empty_section(seed, monkeypatch):
    from gyre.config import REGISTRIES

    from .test_schema import toy_checkpoint

    monkeypatch.setitem(REGISTRIES["callbacks"]._items, "TestOnlyEmpty", toy_checkpoint)
    seed.write_text(SEED.replace("    LearningRateMonitor:\n      class_name: TestOnlyCheckpoint\n      every_n_epochs: 1\n",
                                 "    TestOnlyEmpty:\n"))
    config = load_config(seed, ["trainer.callbacks.TestOnlyEmpty.save_top_k=2",
                                "trainer.callbacks.added.class_name=TestOnlyCheckpoint"])
    assert config.trainer.callbacks["TestOnlyEmpty"]["save_top_k"] == 2
    assert config.trainer.callbacks["added"] == {"class_name": "TestOnlyCheckpoint", "monitor": "val/loss",
                                                 "mode": "min", "save_top_k": 1, "every_n_epochs": 1}


def test_a_tilde_override_removes_a_callback_which_null_keeps_with_its_defaults(seed):
    # was: no way to drop a callback from the command line; LearningRateMonitor=null kept it
    kept = load_config(seed, ["trainer.callbacks.LearningRateMonitor=null"])
    assert "LearningRateMonitor" in kept.trainer.callbacks
    removed = load_config(seed, ["~trainer.callbacks.LearningRateMonitor"])
    assert "LearningRateMonitor" not in removed.trainer.callbacks
    with pytest.raises(ConfigError, match=r"(?s)removes trainer.callbacks.LearningRateMoniter, which the config "
                       r"does not hold.*Did you mean 'LearningRateMonitor'"):
        load_config(seed, ["~trainer.callbacks.LearningRateMoniter"])


def test_overriding_a_key_that_does_not_exist_is_caught_by_the_schema(seed):
    with pytest.raises(ConfigError, match=r"unknown key trainer\.callbacks\.TestOnlyCheckpoint\.mdoe .*"
                                          r"Did you mean 'mode'\?"):
        load_config(seed, ["trainer.callbacks.TestOnlyCheckpoint.mdoe=max"])
    with pytest.raises(ConfigError, match=r"wrong type at trainer\.train_epochs\.\n  expected: int"):
        load_config(seed, ["trainer.train_epochs=3.5"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.train_epochs", r"malformed override 'trainer\.train_epochs'\n  expected: dotted\.key=value"),
        ("trainer..train_epochs=3", r"malformed override 'trainer\.\.train_epochs=3'"),
        ("=3", r"malformed override '=3'"),
        ("trainer.train_epochs.value=3", r"the override 'trainer\.train_epochs\.value=3' goes through "
                                         r"trainer\.train_epochs, which is not a section\n.*\n  received: int 5"),
        ("trainer.train_epochs=[3", r"the value of the override 'trainer\.train_epochs=\[3' is not valid YAML"),
    ],
)
def test_a_bad_override_is_named(seed, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(seed, [override])


def test_an_override_through_a_list_is_told_to_write_the_whole_list():
    data = {"optimizer": {"transforms": [{"class_name": "GradClipNorm", "max_norm": 1.0}]}}
    with pytest.raises(ConfigError, match=r"goes through optimizer\.transforms, which is not a section(.|\n)*"
                                          r"fix: override the whole value instead: optimizer\.transforms=\[\.\.\.\]"):
        apply_override(data, "optimizer.transforms.0.max_norm=2")  # it offered a mapping of keys


def test_overrides_must_be_a_list_of_strings(seed):
    with pytest.raises(ConfigError, match=r"overrides must be a list of 'dotted\.key=value' strings(.|\n)*"
                                          r"fix: wrap it in a list: \['trainer\.train_epochs=3'\]"):
        load_config(seed, "trainer.train_epochs=3")
    with pytest.raises(ConfigError, match=r"an override must be a 'dotted\.key=value' string"):
        load_config(seed, [("trainer.train_epochs", 3)])


def test_overrides_leave_the_given_mapping_as_it_was(toys):  # noqa: F811
    data = config_data()
    before = json.dumps(data, sort_keys=True)
    assert load_config(data, ["trainer.train_epochs=7", "model.c_hid=4"]).model["c_hid"] == 4
    assert json.dumps(data, sort_keys=True) == before


def test_an_empty_value_is_null():
    data = {"trainer": {"logger": {"log_dir": "runs"}}}
    apply_override(data, "trainer.logger.log_dir=")
    assert data == {"trainer": {"logger": {"log_dir": None}}}


# -- the resolved config ------------------------------------------------------------------------


def test_the_resolved_config_is_plain_data_with_every_default(seed):
    config = load_config(seed)
    stored = config_to_dict(config)
    assert json.loads(json.dumps(stored)) == stored
    assert list(stored) == ["seed", "num_gpus", "trainer", "model", "optimizer", "dataset"]
    assert stored["trainer"]["steps_per_call"] == 1 and stored["trainer"]["resume"] is None
    assert stored["trainer"]["num_classes"] == 10  # the trainer's config_class key
    assert stored["model"] == {"class_name": "TestOnlyModel", "c_hid": 32, "num_classes": 10, "act_fn": "gelu",
                               "dropout": 0.0}


def test_a_config_rebuilds_from_its_dict_and_from_its_yaml(seed, tmp_path):
    config = load_config(seed, ["dataset.data_dir='1e-3'", "trainer.logger.tool_config.version=yes"])
    assert load_config(config_to_dict(config)) == config
    text = dump_config(config)
    assert "data_dir: '1e-3'" in text and "version: 'yes'" in text and "eps: 1.0e-08" in text
    path = tmp_path / "resolved.yaml"
    path.write_text(text)
    assert load_config(path) == config
    assert yaml.safe_load(text) == config_to_dict(config)  # plain YAML readers agree


def test_the_dump_is_in_schema_order(seed):
    text = dump_config(load_config(seed))
    keys = re.findall(r"^(\w+):", text, flags=re.M)
    assert keys == ["seed", "num_gpus", "trainer", "model", "optimizer", "dataset"]
    assert text.index("  class_name: TestOnlyTrainer") < text.index("  train_epochs: 5")


def test_config_to_dict_takes_a_config():
    with pytest.raises(TypeError, match=r"config_to_dict takes a validated config"):
        config_to_dict({"trainer": {}})


def test_a_config_equals_itself_rebuilt_field_by_field(toys):  # noqa: F811
    config = load_config(config_data())
    assert Config(**{k: getattr(config, k) for k in Config.model_fields}) == config


def test_flatten_configdict_joins_the_paths():
    from ml_collections import ConfigDict

    from gyre.config import flatten_configdict, flatten_dict

    nested = {"a": 1, "b": {"c": 2, "d": {"e": [3, 4]}}, "f": {}}
    assert flatten_configdict(nested) == {"a": 1, "b.c": 2, "b.d.e": [3, 4]}
    assert flatten_dict(ConfigDict(nested), separation_mark="/") == {"a": 1, "b/c": 2, "b/d/e": [3, 4]}
    with pytest.raises(TypeError, match=r"separation_mark must be a non-empty string"):
        flatten_configdict(nested, separation_mark="")
    with pytest.raises(TypeError, match=r"flatten_configdict takes a nested mapping"):
        flatten_configdict([1, 2])


def _laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_at_once(tmp_path):
    text = _laughs(9)  # 9**9 strings from under 1 KB
    assert len(text) < 1024
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="expands to more than") as err:
        load_config(write(tmp_path, text))
    assert time.perf_counter() - start < 1.0
    assert "alias" in str(err.value) and "fix:" in str(err.value)
    with pytest.raises(ConfigError, match="expands to more than"):
        apply_override({}, "trainer.callbacks={" + _laughs(9).replace("\n", ", ") + "}")


def test_aliases_that_expand_little_are_read():
    text = "base: &b {lr: 0.1, steps: [1, 2, 3]}\none: *b\ntwo: *b\n"
    assert yaml.load(text, Loader=ConfigLoader)["two"] == {"lr": 0.1, "steps": [1, 2, 3]}
    with pytest.raises(ConfigError, match="the YAML of the text holds itself"):
        yaml.load("a: &a [1, *a]\n", Loader=ConfigLoader)


def test_changed_settings_lists_each_setting_old_and_new():
    from gyre.config._yaml import changed_settings

    before = "trainer:\n  train_epochs: 1\n  resume: null\n  logger: {log_dir: a}\noptimizer: {learning_rate: 0.003}\n"
    after = {"trainer": {"train_epochs": 2, "resume": "latest", "logger": {"log_dir": "b"}, "seed": 1},
             "optimizer": {"learning_rate": 0.03}}
    assert changed_settings(before, after) == [
        "trainer.train_epochs 1 → 2", "trainer.seed (none) → 1", "optimizer.learning_rate 0.003 → 0.03"]
    assert changed_settings(before, yaml.safe_load(before)) == []
    assert changed_settings("not: [valid", after) == []  # an unreadable old config: nothing to compare


def test_resuming_with_other_settings_than_the_saved_config_warns_naming_each(tmp_path):
    import warnings

    from gyre.config._yaml import warn_changed_settings

    saved = tmp_path / "config.yaml"
    saved.write_text("optimizer: {learning_rate: 0.003}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_changed_settings(saved, {"optimizer": {"learning_rate": 0.03}})
        warn_changed_settings(saved, {"optimizer": {"learning_rate": 0.003}})  # the same: no warning
    (message,) = [str(w.message) for w in caught]
    assert "with settings other than its config.yaml's: optimizer.learning_rate 0.003 → 0.03" in message
