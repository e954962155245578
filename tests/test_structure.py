"""The structure check (tools/check_structure.py) runs in the suite: no import cycle, no
import from a higher layer or sideways within one, no import of the package itself inside it,
no private name read across packages, no function of the engine over 80 lines of code; and tests/
mirrors src/gyre/: every module has its test file."""

import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parent.parent / "tools" / "check_structure.py"


def test_structure_has_no_cycles_no_upward_or_sideways_imports_no_long_functions():
    run = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("structure: no cycles")


def test_the_check_finds_each_kind_of_problem(tmp_path, monkeypatch):
    sys.path.insert(0, str(TOOL.parent))
    try:
        import check_structure as check
    finally:
        sys.path.pop(0)
    assert check.cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert check.layer("gyre.callbacks._bars") > check.layer("gyre.engine._engine")
    import ast

    assert check.direction("gyre.steps._managed", "gyre.frameworks._adapters") == "upward import"
    assert check.direction("gyre.jaxloop._loop", "gyre.trainer._module") == "sideways import"
    assert check.direction("gyre.trainer._module", "gyre.config._schema") is None  # a lower layer
    assert check.direction("gyre.trainer._module", "gyre.trainer._steps") is None  # its own package
    assert check.imports_package(ast.parse("def f():\n    import gyre\n"))
    assert check.imports_package(ast.parse("from gyre import checkpoint"))
    assert not check.imports_package(ast.parse("from gyre.callbacks import checkpoint\nimport gyre.data as d"))
    source = "def f():\n    '''doc\n    more'''\n    # comment\n\n    x = 1\n    return x\n"
    node = ast.parse(source).body[0]
    assert check.code_lines(node, source.splitlines()) == 3  # def, x = 1, return



def fake_package(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    """A package ``gyre`` under ``root`` made of ``files`` (path -> source), with its ``__init__``s."""
    package = root / "gyre"
    for relative, source in {"__init__.py": "import gyre.core\n", **files}.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(source)
    return package


def check(package: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(package)], capture_output=True, text=True, timeout=60)


def test_the_check_refuses_a_rung_importing_gyre_a_sideways_import_and_a_private_read(tmp_path):
    package = fake_package(tmp_path, {
        "core/_clock.py": "_FIELDS = ()\nFIELDS = ()\n",
        "steps/_step.py": "",
        "parallel/_mesh.py": "from gyre.core._clock import _FIELDS, FIELDS\nimport gyre.steps._step\n",
        "trainer/_fit.py": "def fit():\n    import gyre\n    return gyre\n",
        "jaxloop/_loop.py": "from gyre.trainer import fit\nfrom gyre.core import _clock\n",
        "__main__.py": "from gyre import core\n",
        "extra.py": "",
    })
    run = check(package)
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stdout.splitlines() == [
        "module without a layer: gyre.extra (give it one in LAYERS of tools/check_structure.py)",
        "sideways import: gyre.jaxloop._loop -> gyre.trainer (packages of one layer import nothing of each other:"
        " move the shared piece down a layer)",
        "upward import: gyre.parallel._mesh -> gyre.steps._step (a module imports its own layer or lower ones:"
        " move the shared piece down)",
        "private read across packages: gyre.parallel._mesh <- gyre.core._clock._FIELDS"
        " (name it without the underscore)",
        "import of the package itself: gyre.trainer._fit (import the module that defines the name)",
    ]  # the doors (gyre, gyre.__main__) may import gyre; importing a private module is no private read


def test_the_check_passes_a_package_that_keeps_the_rules(tmp_path):
    package = fake_package(tmp_path, {
        "core/_clock.py": "FIELDS = ()\n",
        "trainer/_fit.py": "from gyre.core._clock import FIELDS\nfrom gyre.trainer import _run\n",
        "trainer/_run.py": "from gyre.core import _clock\n",
    })
    run = check(package)
    assert (run.returncode, run.stdout.split(",")[0]) == (0, "structure: no cycles"), run.stdout + run.stderr


# -- tests/ mirrors src/gyre/ module by module -------------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parent.parent


def expected_test_file(module: pathlib.Path) -> pathlib.Path | None:
    """Where the tests of ``src/gyre/<pkg>/_<mod>.py`` (or ``<mod>.py``) live:
    ``tests/<pkg>/test_<mod>.py``; ``__main__.py`` is tested in ``test_main.py``; a
    package's ``__init__.py`` (its facade) needs no file of its own."""
    relative = module.relative_to(ROOT / "src" / "gyre")
    name = module.stem
    if name == "__init__":
        return None
    stem = "main" if name == "__main__" else name.lstrip("_")
    return ROOT / "tests" / relative.parent / f"test_{stem}.py"


def test_every_module_has_its_test_file():
    modules = sorted((ROOT / "src" / "gyre").rglob("*.py"))
    assert len(modules) > 40
    missing = [
        f"{module.relative_to(ROOT)} -> {expected.relative_to(ROOT)}"
        for module in modules
        if (expected := expected_test_file(module)) is not None and not expected.is_file()
    ]
    assert missing == [], "modules without their test file:\n" + "\n".join(missing)


def test_the_test_file_of_each_kind_of_module():
    src = ROOT / "src" / "gyre"
    tests = ROOT / "tests"
    assert expected_test_file(src / "loop" / "_engine.py") == tests / "loop" / "test_engine.py"
    assert expected_test_file(src / "core" / "metrics.py") == tests / "core" / "test_metrics.py"
    assert expected_test_file(src / "_demo.py") == tests / "test_demo.py"
    assert expected_test_file(src / "__main__.py") == tests / "test_main.py"
    assert expected_test_file(src / "cli.py") == tests / "test_cli.py"
    assert expected_test_file(src / "data" / "__init__.py") is None
