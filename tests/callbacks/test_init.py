"""gyre.callbacks: the facade exports every factory and the class it returns."""

import io
import types

import pytest

import gyre
import gyre.callbacks

FACTORIES = {
    "keras_bar": ("KerasBar", lambda f: f(total=3, file=io.StringIO())),
    "tqdm_bar": ("TqdmBar", lambda f: f(total=3, file=io.StringIO())),
    "checkpoint": ("Checkpoint", lambda f: f("unused-directory")),
    "early_stopping": ("EarlyStopping", lambda f: f("loss", patience=2)),
    "inner_loop": ("InnerLoop", lambda f: f("test", lambda state: None)),
}


def test_all_lists_exactly_the_public_names():
    public = {
        name for name, value in vars(gyre.callbacks).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(gyre.callbacks.__all__) == public
    assert gyre.callbacks.__all__ == sorted(gyre.callbacks.__all__)
    assert "callbacks" in gyre.__all__


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_each_factory_returns_the_exported_class(factory):
    cls_name, make = FACTORIES[factory]
    obj = make(getattr(gyre.callbacks, factory))
    assert type(obj) is getattr(gyre.callbacks, cls_name)
    assert cls_name in gyre.callbacks.__all__


def test_existing_import_paths_still_work():
    # gyre.callbacks.checkpoint is the factory (as in ciclo); the modules are private.
    from gyre.callbacks._bars import BarValues, KerasBar, TqdmBar, keras_bar, tqdm_bar
    from gyre.callbacks._checkpoint import Checkpoint, checkpoint
    from gyre.callbacks._monitor import EarlyStopping, early_stopping
    from gyre.callbacks._noop import noop

    assert gyre.keras_bar is gyre.callbacks.keras_bar is keras_bar
    assert gyre.tqdm_bar is gyre.callbacks.tqdm_bar is tqdm_bar
    assert gyre.checkpoint is gyre.callbacks.checkpoint is checkpoint
    assert gyre.early_stopping is gyre.callbacks.early_stopping is early_stopping
    assert gyre.noop is gyre.callbacks.noop is noop
    assert gyre.inner_loop is gyre.callbacks.inner_loop
    assert (KerasBar, TqdmBar, Checkpoint, EarlyStopping) == (
        gyre.callbacks.KerasBar, gyre.callbacks.TqdmBar, gyre.callbacks.Checkpoint,
        gyre.callbacks.EarlyStopping)
    assert BarValues.__module__ == "gyre.callbacks._bars"
