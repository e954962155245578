#!/usr/bin/env python3
"""The structure of src/gyre, checked (the suite runs it: tests/test_structure.py).

1. No import cycle among modules (imports inside functions count).
2. No module imports a higher layer, nor another package of its own layer (DESIGN.md's
   direction rule, ordered within each of its layers by what the packages use:
   core <- data/testing <- engine <- parallel <- steps <- frameworks <- callbacks <- loggers
   <- config <- jaxloop/trainer/fitting <- _demo <- cli; the three rungs share a layer and import
   nothing of each other). A package's facade (``from gyre.trainer import x``) counts as its
   package, and every module has a layer: a new package or top-level module gets one here.
3. No module but the package's doors (``gyre/__init__.py``, ``gyre/__main__.py``) imports the
   package ``gyre`` itself (``import gyre``, ``from gyre import x``): a rung uses the module
   that defines a name, so importing it never runs the whole package.
4. No module reads another package's private names (``from gyre.core._clock import _x``):
   what a lower package shares it names without the underscore.
5. No function in src/gyre/engine longer than 80 lines of code (docstrings, comments and blank
   lines excluded): the engine stays readable by the next maintainer.

Prints one line per finding and exits 1 if there is any; run from anywhere:
``python tools/check_structure.py [path/to/src/gyre]`` (the default: this checkout's).
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src" / "gyre"
LAYERS = {
    "core": 0, "data": 1, "engine": 2, "parallel": 3, "steps": 4, "frameworks": 5,
    "callbacks": 6, "loggers": 7, "config": 8, "jaxloop": 9, "trainer": 9, "fitting": 9, "_demo": 10, "cli": 11,
    "testing": 1, "_version": 0,
}
DOORS = ("gyre", "gyre.__main__")  # the modules that may import the package itself
MAX_LINES = 80
LIMITED = ("engine",)


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def imports(tree: ast.AST, modules: dict[str, pathlib.Path], me: str) -> set[str]:
    """The modules of ``modules`` that ``me`` imports, package facades included."""
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found.update(name for name in names if name in modules and name != me)
    return found


def imports_package(tree: ast.AST) -> bool:
    """Whether a module imports the package ``gyre`` itself (not one of its modules)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "gyre" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "gyre":
            return True
    return False


def private_reads(tree: ast.AST, modules: dict[str, pathlib.Path], me: str) -> list[str]:
    """The private names (``_x``; not modules, not dunders) ``me`` imports from another package."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("gyre."):
            theirs = node.module.split(".")[1]
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and name not in modules and theirs != me.split(".")[1]:
                    found.append(name)
    return found


def direction(name: str, target: str) -> str | None:
    """What is wrong with ``name`` importing ``target`` (``None``: nothing)."""
    mine, theirs = layer(name), layer(target)
    if mine is None or theirs is None or name.split(".")[1] == target.split(".")[1]:
        return None
    if theirs > mine:
        return "upward import"
    return "sideways import" if theirs == mine else None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def code_lines(node: ast.AST, source: list[str]) -> int:
    """Lines of code in a function: without its docstring, comments and blank lines."""
    skip: set[int] = set()
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        skip.update(range(body[0].lineno, body[0].end_lineno + 1))
    count = 0
    for number in range(node.lineno, node.end_lineno + 1):
        text = source[number - 1].strip()
        if number not in skip and text and not text.startswith("#"):
            count += 1
    return count


FIXES = {
    "upward import": "a module imports its own layer or lower ones: move the shared piece down",
    "sideways import": "packages of one layer import nothing of each other: move the shared piece down a layer",
}


def main(root: pathlib.Path = ROOT) -> int:
    modules = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    edges: dict[str, set[str]] = {}
    problems: list[str] = []
    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source)
        edges[name] = imports(tree, modules, name)
        if name not in DOORS and layer(name) is None:
            problems.append(f"module without a layer: {name} (give it one in LAYERS of tools/check_structure.py)")
        for target in sorted(edges[name]):
            wrong = direction(name, target)
            if wrong:
                problems.append(f"{wrong}: {name} -> {target} ({FIXES[wrong]})")
        if name not in DOORS and imports_package(tree):
            problems.append(f"import of the package itself: {name} (import the module that defines the name)")
        for read in private_reads(tree, modules, name):
            problems.append(f"private read across packages: {name} <- {read} (name it without the underscore)")
        if layer(name) is not None and name.split(".")[1] in LIMITED:
            lines = source.splitlines()
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = code_lines(node, lines)
                    if n > MAX_LINES:
                        problems.append(f"long function: {name}.{node.name} has {n} lines of code (max {MAX_LINES})")
    # a facade imports its package's modules, so a module using its own facade is no cycle
    modules_only = {name: {t for t in targets if modules[t].name != "__init__.py"} for name, targets in edges.items()}
    problems += [f"import cycle: {' <-> '.join(c)}" for c in cycles(modules_only)]
    print("\n".join(problems) if problems else "structure: no cycles, no upward or sideways imports, no import of "
          "gyre itself, no private reads across packages, no long functions")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
