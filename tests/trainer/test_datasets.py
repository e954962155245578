"""MNISTDataset, CIFAR10Dataset and build_dataset_module: jax_trainer's data sets from local
files (small fakes written here in the real formats), as SupervisedBatch loaders."""

import gzip

import numpy as np
import pytest

from gyre.config import ConfigError
from gyre.data import SupervisedBatch
from gyre.trainer import CIFAR10Dataset, MNISTDataset, build_dataset_module


def _cifar(folder, n_train=20, n_test=6):
    folder = folder / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def records(n):
        labels = np.arange(n) % 10
        pixels = rng.integers(0, 256, (n, 3072))
        return b"".join(bytes([int(label)]) + bytes(p.astype(np.uint8)) for label, p in zip(labels, pixels, strict=True))

    for i in range(1, 6):
        (folder / f"data_batch_{i}.bin").write_bytes(records(n_train // 5))
    (folder / "test_batch.bin").write_bytes(records(n_test))
    return folder.parent


def _mnist(folder, n_train=12, n_test=4):
    folder.mkdir(parents=True)

    def idx(magic, dims, values):
        return magic.to_bytes(4, "big") + np.array(dims, ">u4").tobytes() + bytes(values)

    for part, n in (("train", n_train), ("t10k", n_test)):
        (folder / f"{part}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(0x803, [n, 28, 28], [128] * (n * 784))))
        (folder / f"{part}-labels-idx1-ubyte").write_bytes(idx(0x801, [n], [i % 10 for i in range(n)]))
    return folder


def test_cifar10_gives_normalised_supervised_batches_from_its_files(tmp_path):
    import gyre

    folder = _cifar(tmp_path)
    d = CIFAR10Dataset(str(folder), global_batch_size=4, val_size=4, num_workers=4)
    for loader, batches in ((d.train_loader, 4), (d.val_loader, 1), (d.test_loader, 2)):
        batch = next(iter(loader))
        assert isinstance(batch, SupervisedBatch) and batch.size == 4 and len(loader) == batches
        assert batch.input.shape == (4, 32, 32, 3) and batch.input.dtype == np.float32
        assert batch.target.shape == (4,) and batch.target.dtype == np.int64
    test = np.concatenate([b.input for b in d.test_loader])
    _, (raw, labels) = gyre.data.cifar10(folder)
    mean, std = np.array([0.4914, 0.4822, 0.4465]), np.array([0.2023, 0.1994, 0.2010])
    np.testing.assert_allclose(test, (raw - mean) / std, rtol=1e-5, atol=1e-6)  # CIFAR-10's channel statistics
    assert np.concatenate([b.target for b in d.test_loader]).tolist() == labels.tolist()
    assert d.train_loader.epoch_steps == 4 and "epoch" in d.train_loader.state_dict()


def test_build_dataset_module_reads_class_names_and_jax_trainers_constructors(tmp_path):
    from ml_collections import ConfigDict

    folder = str(_mnist(tmp_path / "mnist"))
    d = build_dataset_module(ConfigDict({"constructor": "jax_trainer.datasets.build_mnist_datasets",
                                         "batch_size": 4, "data_dir": folder, "val_size": 4, "normalize": False}))
    assert isinstance(d, MNISTDataset) and d.global_batch_size == 4
    batch = next(iter(d.val_loader))
    assert batch.input.shape == (4, 28, 28, 1) and float(batch.input.max()) == pytest.approx(128 / 255)
    d = build_dataset_module({"class_name": "MNISTDataset", "data_dir": folder, "val_size": 2, "global_batch_size": 2})
    assert d.train_loader.epoch_steps == 5


def test_bad_dataset_sections_are_explained(tmp_path):
    with pytest.raises(ValueError, match=r"(?s)dataset.constructor names code to import: tests.data.build"
                                         r".*register_dataset"):
        build_dataset_module({"constructor": "tests.data.build"})
    with pytest.raises(TypeError, match=r"(?s)build_dataset_module takes the dataset section.*received: str"):
        build_dataset_module("CIFAR10Dataset")
    with pytest.raises(ConfigError, match="data_dri"):
        build_dataset_module({"class_name": "CIFAR10Dataset", "data_dri": "data/"})
    with pytest.raises(FileNotFoundError, match="cifar"):
        CIFAR10Dataset(str(tmp_path / "nothing"))
    with pytest.raises(ValueError, match=r"(?s)local_batch_size must be global_batch_size split.*leave local_batch_size out"):
        CIFAR10Dataset(str(_cifar(tmp_path)), global_batch_size=4, local_batch_size=3, val_size=4)
    with pytest.raises(ValueError, match="global_batch_size must be a whole number >= 1"):
        MNISTDataset(str(tmp_path), global_batch_size=0)


def test_a_config_trains_on_a_named_dataset(tmp_path):
    from gyre.trainer import ImgClassifierTrainer

    d = build_dataset_module({"class_name": "CIFAR10Dataset", "data_dir": str(_cifar(tmp_path / "data")),
                              "global_batch_size": 4, "val_size": 4})
    t = ImgClassifierTrainer({"train_epochs": 1, "enable_progress_bar": False, "logger": {"log_dir": str(tmp_path / "run")}},
                             {"class_name": "SimpleCNN", "c_hid": 4, "image_size": 32, "channels": 3},
                             {"class_name": "Adam", "learning_rate": 1e-3}, exmp_input=next(iter(d.train_loader)))
    out = t.train_model(d.train_loader, d.val_loader, d.test_loader)
    assert 0.0 <= out[1]["val/acc"] <= 1.0 and t.global_step == 4
    assert sum(1 for _ in d.test_loader) == 2


def test_cifar10_config_is_the_typed_form_of_the_registered_dataset(tmp_path):
    import dataclasses
    import typing

    from gyre.trainer import CIFAR10Config, DatasetModule, MNISTConfig, init_ddp_mesh

    assert CIFAR10Config.class_name == "CIFAR10Dataset" and MNISTConfig.class_name == "MNISTDataset"
    assert {CIFAR10Config, MNISTConfig} <= set(typing.get_args(DatasetModule.cfgtype))
    fields = [f.name for f in dataclasses.fields(CIFAR10Config)]
    assert fields == ["data_dir", "global_batch_size", "local_batch_size", "val_size", "split_seed",
                      "normalize", "num_workers"]  # CIFAR10Dataset's parameters, its defaults
    config = CIFAR10Config(data_dir=str(_cifar(tmp_path)), global_batch_size=4, val_size=4)
    data = config.instantiate(DatasetModule, init_ddp_mesh())
    assert isinstance(data, CIFAR10Dataset) and isinstance(data, DatasetModule)
    batch = next(iter(data.train_loader))
    assert batch.input.shape == (4, 32, 32, 3) and str(batch.target.dtype) == "int64"


def test_a_typed_dataset_config_explains_a_bad_interface_or_mesh(tmp_path):
    from gyre.trainer import CIFAR10Config

    config = CIFAR10Config(data_dir=str(tmp_path))
    with pytest.raises(TypeError, match="builds a DatasetModule") as err:
        config.instantiate(dict)
    assert "fix:" in str(err.value)
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        config.instantiate(None, "data")


def test_with_several_processes_each_gets_its_share_of_every_batch(tmp_path, monkeypatch):
    # was: every process fed the whole global batch, so the global batch held each row once per
    # process: sum metrics and sample counts doubled on 2 processes (the means agreed)
    import jax

    from gyre.trainer import DigitsDataset

    one = DigitsDataset(global_batch_size=64, val_size=200, eval_batch_size=100)
    expected = next(iter(one.train_loader))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    for index in (0, 1):
        monkeypatch.setattr(jax, "process_index", lambda index=index: index)
        digits = DigitsDataset(global_batch_size=64, val_size=200, eval_batch_size=100)
        x, y = next(iter(digits.train_loader))
        np.testing.assert_array_equal(x, expected[0][32 * index : 32 * (index + 1)])
        assert y.tolist() == expected[1][32 * index : 32 * (index + 1)].tolist()
        assert [len(b[1]) for b in digits.val_loader] == [50, 50] and len(digits.test_loader) == 4
        assert digits.train_loader.epoch_steps == one.train_loader.epoch_steps
        assert digits.train_loader.state_dict() == {**one.train_loader.state_dict_at(1)}  # one position for all
        mnist = MNISTDataset(str(_mnist(tmp_path / f"mnist{index}")), global_batch_size=4, val_size=2)
        batch = next(iter(mnist.val_loader))
        assert isinstance(batch, SupervisedBatch) and batch.size == 1
    with pytest.raises(ValueError, match=r"(?s)a batch of 201 rows cannot be shared evenly by 2 processes.*"
                       r"fix: choose batch sizes \(global_batch_size, eval_batch_size, val_size\) divisible by 2"):
        DigitsDataset(global_batch_size=64, val_size=201)
