"""gyre.data._adapters: torch / tf.data loaders as numpy, tested with stand-in tensors (neither
package is a dependency) and the error that names the package to install."""

import collections
import sys
import types

import numpy as np
import pytest

from gyre.data import NumpyLoader, from_tf, from_torch


class TorchLike:
    """A stand-in for a torch tensor: only .detach().cpu().numpy() gives the values."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.value.copy()


class TfLike:
    def __init__(self, value):
        self.value = np.asarray(value)

    def numpy(self):
        return self.value.copy()


@pytest.fixture
def fake_packages(monkeypatch):
    for name in ("torch", "tensorflow"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))


def test_from_torch_converts_every_batch_each_pass(fake_packages):
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int32)
    loader = [(TorchLike(x[i : i + 2]), TorchLike(y[i : i + 2])) for i in range(0, 6, 2)]
    out = from_torch(loader)
    assert isinstance(out, NumpyLoader) and len(out) == 3
    for _ in range(2):  # re-iterable: one pass per epoch
        batches = list(out)
        assert len(batches) == 3
        for i, (xb, yb) in enumerate(batches):
            assert type(xb) is np.ndarray and xb.dtype == np.float32
            np.testing.assert_array_equal(xb, x[2 * i : 2 * i + 2])
            np.testing.assert_array_equal(yb, y[2 * i : 2 * i + 2])


def test_from_tf_converts_dicts_and_namedtuples(fake_packages):
    Pair = collections.namedtuple("Pair", "image label")
    data = [{"batch": Pair(TfLike([[1.0]]), TfLike([3]))}]
    (batch,) = list(from_tf(data))
    assert isinstance(batch["batch"], Pair)
    assert batch["batch"].image.tolist() == [[1.0]] and batch["batch"].label.tolist() == [3]


@pytest.mark.parametrize("adapter, package", [(from_torch, "torch"), (from_tf, "tensorflow")])
def test_missing_package_names_it(monkeypatch, adapter, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes the import fail
    with pytest.raises(ImportError, match=f"needs {package}, which is not installed[\\s\\S]*pip install {package}"):
        adapter([])


@pytest.mark.parametrize("adapter", [from_torch, from_tf])
def test_one_pass_iterators_are_refused(fake_packages, adapter):
    with pytest.raises(TypeError, match=r"takes a re-iterable loader[\s\S]*not iter\(loader\)"):
        adapter(iter([]))
    with pytest.raises(TypeError, match="takes a re-iterable loader"):
        adapter(3)


def test_loader_without_length():
    loader = NumpyLoader(range(0))
    assert len(loader) == 0
    with pytest.raises(TypeError):
        len(NumpyLoader(x for x in ()))
