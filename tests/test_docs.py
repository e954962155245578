"""The documentation site (``mkdocs.yml``, ``docs/``): it builds with ``--strict`` (no broken
link, no missing reference, no page missing from the nav), and its API reference documents every
public name of gyre and of its public subpackages and modules.

The site is built once per test run (both tests read the same build, also under pytest-xdist),
without the search index and without colouring code (neither can break a link).
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import zlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _locked(path: pathlib.Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory, request) -> dict:
    """``{"returncode", "output", "seconds", "site"}`` of one ``mkdocs build --strict``."""
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker has its own basetemp inside the run's folder: share the build there
    shared = base.parent if hasattr(request.config, "workerinput") else base
    site, result = shared / "docs-site", shared / "docs-site.json"
    with _locked(shared / "docs-site.lock"):
        if not result.exists():
            env = {**os.environ, "GYRE_DOCS_SEARCH": "false", "GYRE_DOCS_PYGMENTS": "false", "NO_MKDOCS_2_WARNING": "1"}
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml"),
                 "-d", str(site)],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
            )
            seconds = time.perf_counter() - start
            result.write_text(json.dumps({"returncode": done.returncode, "output": done.stdout + done.stderr,
                                          "seconds": seconds, "site": str(site)}))
    return json.loads(result.read_text())


def test_the_site_builds_strictly(built_site):
    assert built_site["returncode"] == 0, built_site["output"][-6000:]
    site = pathlib.Path(built_site["site"])
    assert (site / "index.html").is_file() and (site / "objects.inv").is_file()
    print(f"mkdocs build --strict: {built_site['seconds']:.1f} s")


def _inventory(site: pathlib.Path) -> set[str]:
    """The object names of the site's ``objects.inv`` (Sphinx's inventory, version 2)."""
    data = (site / "objects.inv").read_bytes()
    offset = 0
    for _ in range(4):  # four header lines, then the zlib-compressed body
        offset = data.index(b"\n", offset) + 1
    return {line.split(" ", 1)[0] for line in zlib.decompress(data[offset:]).decode().splitlines() if line}


def public_names() -> dict[str, list[str]]:
    """Every public namespace of gyre with its public names: ``__all__`` where it has one, else
    the names it defines without a leading underscore (``gyre.core.metrics``, ``gyre.managed``)."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_public_exceptions import public_namespaces
    finally:
        sys.path.remove(str(ROOT / "tests"))
    names = {}
    for module in public_namespaces():
        if any(part.startswith("_") for part in module.__name__.split(".")):
            continue  # gyre._version: a private module that gyre/__init__ imports from
        if hasattr(module, "__all__"):
            names[module.__name__] = list(module.__all__)
        else:
            names[module.__name__] = [
                name for name, value in vars(module).items()
                if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
                and (inspect.isclass(value) or inspect.isfunction(value))
            ]
    return names


def test_every_public_name_is_in_the_api_reference(built_site):
    assert built_site["returncode"] == 0, "the site did not build: see test_the_site_builds_strictly"
    documented = _inventory(pathlib.Path(built_site["site"]))
    missing = sorted(f"{module}.{name}" for module, names in public_names().items() for name in names
                     if f"{module}.{name}" not in documented)
    assert missing == [], "public names missing from the API reference (docs/api/*.md): " + ", ".join(missing)


def test_the_gyre_page_lists_every_top_level_name():
    import gyre

    page = (ROOT / "docs" / "api" / "gyre.md").read_text()
    listed = set(re.findall(r"^\| \[?`gyre\.(\w+)`", page, flags=re.MULTILINE))
    assert listed == set(gyre.__all__), {"missing": set(gyre.__all__) - listed, "extra": listed - set(gyre.__all__)}
    for module in public_names():
        page_of = "gyre" if module == "gyre" else module.split(".")[1]
        text = (ROOT / "docs" / "api" / f"{page_of}.md").read_text()
        assert f"::: {module}\n" in text, f"docs/api/{page_of}.md has no '::: {module}' directive"


def test_the_config_catalogue_lists_every_registered_class_name():
    import gyre.trainer  # noqa: F401  (registers the trainer's classes)
    from gyre.config import REGISTRIES

    page = (ROOT / "docs" / "concepts" / "trainer.md").read_text()
    table = page.split("## The catalogue of config class names")[1].split("\n## ")[0]
    listed = set(re.findall(r"`(\w+)`", "\n".join(line.split("|")[2] for line in table.splitlines()
                                                    if line.startswith("| `"))))
    listed |= {f"{name}Schedule" for name in listed if f"{name}Schedule" in REGISTRIES["schedules"]}
    # gyre's own names: a test's, an example's or a doctest's registered classes (same process) are
    # not listed; a doctest's class names gyre's module but is not one of its attributes
    registered = {name for registry in REGISTRIES.values() for name in registry
                  if (cls := registry.get(name)).__module__.startswith("gyre.")
                  and getattr(sys.modules[cls.__module__], cls.__name__, None) is cls}
    assert listed == registered, {"missing": registered - listed, "extra": listed - registered}


@pytest.mark.parametrize("page", ["README.md", "docs/first-loop.md"])
def test_the_first_loop_runs_as_written(page, capsys):
    code = (ROOT / page).read_text().split("```python\n")[1].split("```")[0]  # the page's first block
    namespace: dict = {}
    exec(compile(code, page, "exec"), namespace)
    assert namespace["elapsed"].steps == 500 and float(namespace["history"].collect("loss")[-1]) < 0.2


def test_the_troubleshooting_page_names_every_exported_error_class():
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_public_exceptions import exported_exceptions
    finally:
        sys.path.remove(str(ROOT / "tests"))
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    missing = sorted(cls.__name__ for cls in exported_exceptions() if f".{cls.__name__}`" not in page)
    assert missing == [], f"docs/troubleshooting.md does not name {missing}: add what each means and what to do"
