"""gyre.loggers: the facade exports every writer and write_to, and gyre re-exports them."""

import types

import gyre
import gyre.loggers


def test_all_lists_exactly_the_public_names_and_gyre_reexports_them():
    public = {
        name for name, value in vars(gyre.loggers).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(gyre.loggers.__all__) == public
    assert gyre.loggers.__all__ == sorted(gyre.loggers.__all__)
    assert "loggers" in gyre.__all__
    for name in public - {"WriteTo"}:
        assert getattr(gyre, name) is getattr(gyre.loggers, name) and name in gyre.__all__
