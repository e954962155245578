"""Every exception (and warning) class that gyre exports shows its public path: the shortest
public namespace that exports it (``gyre.NonFiniteError``, not ``gyre.engine._nan.NonFiniteError``),
in tracebacks, reprs and ``pytest.raises`` output. The test walks every public namespace."""

import importlib
import inspect
import pathlib
import pkgutil
import traceback

import gyre

SRC = pathlib.Path(gyre.__file__).resolve().parent


def public_namespaces() -> list:
    """gyre, its public subpackages and modules (no leading underscore, at any depth), and
    the modules gyre re-exports under another name (``gyre.managed``)."""
    names = {"gyre"}
    for info in pkgutil.walk_packages(gyre.__path__, "gyre."):
        if not any(part.startswith("_") for part in info.name.split(".")) and info.name != "gyre.cli":
            names.add(info.name)
    modules = [importlib.import_module(name) for name in sorted(names)]
    # gyre re-exports by name in __all__ (a submodule another test imported, gyre.cli, is not one)
    modules += [value for name, value in vars(gyre).items() if inspect.ismodule(value) and value not in modules
                and getattr(value, "__name__", "").startswith("gyre.") and name in gyre.__all__]
    return modules


def exported_exceptions() -> dict[type, list[str]]:
    """Each exception class defined in gyre and exported (in ``__all__``) by a public
    namespace, with the namespaces that export it."""
    found: dict[type, list[str]] = {}
    for module in public_namespaces():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if isinstance(value, type) and issubclass(value, BaseException):
                if pathlib.Path(inspect.getfile(value)).resolve().is_relative_to(SRC):
                    found.setdefault(value, []).append(module.__name__)
    return found


def test_every_exported_exception_shows_its_shortest_public_path():
    found = exported_exceptions()
    assert {cls.__name__ for cls in found} >= {"NonFiniteError", "LoopWarning", "CheckpointError", "ConfigError"}
    wrong = {}
    for cls, modules in found.items():
        expected = min(modules, key=lambda m: (m.count("."), m))
        if cls.__module__ != expected:
            wrong[cls.__qualname__] = (cls.__module__, expected)
        assert getattr(importlib.import_module(cls.__module__), cls.__qualname__) is cls
    assert wrong == {}, "class: (shown path, public path)"


def test_a_traceback_names_the_public_class():
    try:
        raise gyre.NonFiniteError("boom", step=3, collection="losses", name="loss", value=float("nan"))
    except gyre.NonFiniteError as err:
        line = traceback.format_exception_only(err)[-1]
    assert line.startswith("gyre.NonFiniteError: boom")
    assert repr(gyre.callbacks.CheckpointError).endswith("'gyre.callbacks.CheckpointError'>")
