"""A clean machine: what ``import gyre`` runs is declared, and each optional package is asked
for where it is used.

Two checks. From the source: every third-party import at module level in ``src/gyre`` belongs to
a distribution in ``[project] dependencies`` (an import inside a function, or inside a ``try``
that catches ``ImportError``, is optional). At run time: with every package of the extras made
unimportable, ``import gyre`` and each public subpackage still import, and a feature that needs
an extra says which one to install.
"""

import ast
import importlib.metadata
import pathlib
import re
import subprocess
import sys
import textwrap
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "gyre"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def distribution_name(requirement: str) -> str:
    """``'orbax-checkpoint>=0.12'`` -> ``'orbax_checkpoint'`` (PEP 503 normalised, ``_``)."""
    name = re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "_", name).lower()


def guarded(node: ast.Try) -> bool:
    """A ``try`` whose handlers catch ImportError (or its subclass ModuleNotFoundError)."""
    caught = []
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        caught += [getattr(kind, "id", None) for kind in kinds]
    return bool({"ImportError", "ModuleNotFoundError"} & set(caught))


def module_level_imports(tree: ast.Module) -> set[str]:
    """Top-level package names imported when the module loads: module-level statements and
    the branches of module-level ``if`` (not ``if TYPE_CHECKING``); not functions or classes'
    methods, not a ``try`` that catches ImportError."""
    found: set[str] = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try) and not guarded(node):
                visit(node.body)
                visit(node.finalbody)
            elif isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(tree.body)
    return found


def test_every_import_at_load_time_is_a_declared_dependency():
    declared = {distribution_name(req) for req in PROJECT["dependencies"]}
    owners = importlib.metadata.packages_distributions()
    undeclared = []
    modules = sorted(SOURCE.rglob("*.py"))
    assert len(modules) > 40
    for path in modules:
        for name in sorted(module_level_imports(ast.parse(path.read_text()))):
            if name in sys.stdlib_module_names or name == "gyre":
                continue
            distributions = {distribution_name(d) for d in owners.get(name, [name])}
            if not distributions & declared:
                undeclared.append(f"{path.relative_to(ROOT)}: import {name} ({sorted(distributions)})")
    assert undeclared == [], (
        "imported when gyre loads, but not in [project] dependencies (declare it, or import it "
        "inside the function that needs it and raise an error naming the extra):\n"
        + "\n".join(undeclared)
    )


def test_the_check_sees_what_a_module_imports_at_load_time():
    source = textwrap.dedent(
        """
        import numpy as np
        from yaml import safe_load
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import wandb
        try:
            import grain
        except ImportError:
            grain = None
        def f():
            import matplotlib
        class C:
            import pydantic
        """
    )
    assert module_level_imports(ast.parse(source)) == {"numpy", "yaml", "typing", "pydantic"}


# What each extra brings that gyre imports, as the module names the code uses.
OPTIONAL_MODULES = [
    "wandb", "mlflow", "grain", "equinox", "sklearn", "matplotlib", "tensorboardX", "crc32c",
    "clu", "haiku", "simple_pytree", "torch", "tensorflow", "tensorflow_datasets",
]  # fmt: skip

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = set(sys.argv[1].split(","))
    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, Absent())
    """
)


def run_without_extras(code: str) -> subprocess.CompletedProcess:
    program = BLOCKER + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program, ",".join(OPTIONAL_MODULES)],
        capture_output=True, text=True, timeout=180, env={"JAX_PLATFORMS": "cpu", "PATH": ""},
    )  # fmt: skip


def test_gyre_and_its_public_subpackages_import_without_any_extra():
    run = run_without_extras(
        """
        import importlib
        for name in ["gyre", "gyre.cli", "gyre.callbacks", "gyre.config", "gyre.core",
                     "gyre.data", "gyre.frameworks", "gyre.jaxloop", "gyre.loggers",
                     "gyre.engine", "gyre.parallel", "gyre.steps", "gyre.testing", "gyre.trainer"]:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        print("leaked", leaked)
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "leaked []" in run.stdout


def test_a_feature_of_an_extra_names_the_extra_to_install(tmp_path):
    run = run_without_extras(
        f"""
        import gyre.data, gyre.loggers
        for make, extra in [(lambda: gyre.data.digits(), "examples"),
                            (lambda: gyre.loggers.TensorBoardWriter({str(tmp_path)!r}), "tensorboard"),
                            (lambda: gyre.loggers.WandbWriter(mode="offline"), "wandb"),
                            (lambda: gyre.loggers.MLflowWriter(), "mlflow")]:
            try:
                make()
            except ImportError as err:
                assert f"gyre[{{extra}}]" in str(err), str(err)
                print("explained", extra)
            else:
                raise AssertionError(f"no ImportError for the extra {{extra}}")
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == [
        "explained", "examples", "explained", "tensorboard", "explained", "wandb", "explained", "mlflow"
    ]  # fmt: skip
