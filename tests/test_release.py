"""The release: ``python -m build`` makes an sdist and a wheel that hold what they should, and the
wheel, installed in a fresh virtual environment beside only the distributions it declares, runs
``gyre --version`` and ``gyre fit``; ``ruff check`` passes over the code base.

Offline: the build runs without isolation (``build`` and ``setuptools>=77`` come with the dev
extra) and nothing is downloaded. The fresh environment is ``python -m venv --without-pip``; the
wheel goes in with this environment's pip (``pip --python``, ``--no-deps --no-index``), and the
dependencies are the distributions installed here that ``gyre[examples]`` requires, resolved
recursively from the wheel's own metadata, and linked into the new site-packages (their folders
whole, a folder shared with an undeclared distribution file by file). So an import that works
there works because the wheel declares what it needs. About 30 s of CPU, two thirds of it gyre fit.
"""

import csv
import email.parser
import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import jax
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import gyre

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "gyre"
EXTRA = "examples"  # the demo behind `gyre fit` reads the digits (scikit-learn) and plots
NOT_DECLARED = ["pytest", "ruff", "wandb", "grain", "clu", "haiku"]  # here, but not in the closure


def copy_checkout(destination: pathlib.Path) -> pathlib.Path:
    """The files a clean clone builds from (none of this checkout's caches), and a runs/ folder
    with a file in it, as a user's checkout has after `gyre fit`."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    destination.mkdir()
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, destination / path.name)
    for folder in ("src", "tests", "examples"):
        shutil.copytree(ROOT / folder, destination / folder, ignore=ignore)
    (destination / "runs" / "20250101_000000").mkdir(parents=True)
    (destination / "runs" / "20250101_000000" / "history.csv").write_text("step\n1\n")
    return destination


def build(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """``python -m build``: the sdist, then the wheel built from the unpacked sdist."""
    checkout = copy_checkout(tmp_path / "checkout")
    dist = tmp_path / "dist"
    run = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(checkout)],
        capture_output=True, text=True, timeout=300, cwd=checkout,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
    return sdist, wheel


def package_files() -> set[str]:
    """What the package needs at run time: its modules and py.typed (gyre/..., as in the wheel)."""
    files = {p for p in SOURCE.rglob("*.py") if "__pycache__" not in p.parts} | {SOURCE / "py.typed"}
    return {str(p.relative_to(SOURCE.parent).as_posix()) for p in files}


def check_wheel(wheel: pathlib.Path) -> list[str]:
    """Checks the wheel's files and metadata; returns its Requires-Dist."""
    names = zipfile.ZipFile(wheel).namelist()
    info = f"gyre-{gyre.__version__}.dist-info"
    assert wheel.name == f"gyre-{gyre.__version__}-py3-none-any.whl"
    assert {n for n in names if not n.startswith(info + "/")} == package_files()  # no tests/, no runs/
    metadata = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode())
    assert metadata["Version"] == gyre.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "gyre = gyre.cli:main" in entry_points
    return metadata.get_all("Requires-Dist")


def check_sdist(sdist: pathlib.Path) -> None:
    """The sdist: the package, pyproject.toml, README, CHANGELOG, LICENSE; no tests/, runs/."""
    top = f"gyre-{gyre.__version__}"
    assert sdist.name == f"{top}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = {n.removeprefix(top + "/") for n in archive.getnames()} - {top}
    assert {f"src/{f}" for f in package_files()} <= names
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE"):
        assert name in names or not (ROOT / name).exists(), name
    outside = {n.split("/")[0] for n in names} - {"src", "PKG-INFO", "setup.cfg", "pyproject.toml",
                                                   "README.md", "CHANGELOG.md", "LICENSE", "MANIFEST.in"}
    assert outside == set()  # no tests/, examples/, runs/


def wanted(requirement: Requirement, extras: set[str]) -> bool:
    """Whether ``requirement`` applies here when its requirer was asked for with ``extras``."""
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras | {""})


def closure(requirements: list[str], extras: set[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need, recursively, by canonical name;
    each must be installed here and satisfy the version the requirer asks for."""
    found: dict[str, importlib.metadata.Distribution] = {}
    seen = set()
    todo = [(Requirement(line), "gyre") for line in requirements if wanted(Requirement(line), extras)]
    while todo:
        requirement, requirer = todo.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise AssertionError(f"{requirer} requires {requirement}, not installed here") from None
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            f"{requirer} requires {requirement}, installed here: {dist.version}")
        found[key[0]] = dist
        todo += [(sub, dist.metadata["Name"]) for line in dist.requires or []
                 if wanted(sub := Requirement(line), set(requirement.extras))]  # fmt: skip
    return found


def installed_files(place: pathlib.Path) -> dict[str, list[str]]:
    """The files each distribution installed in ``place`` (a site-packages) lists in its RECORD,
    by canonical name (read as text: ``Distribution.files`` takes seconds over a whole venv)."""
    found: dict[str, list[str]] = {}
    for info in place.glob("*.dist-info"):
        if (info / "RECORD").is_file():
            rows = csv.reader((info / "RECORD").read_text().splitlines())
            found[canonicalize_name(info.name.split("-")[0])] = [row[0] for row in rows if row]
    return found


def link_into(site: pathlib.Path, dists: dict[str, importlib.metadata.Distribution]) -> None:
    """Makes exactly ``dists`` importable from ``site``: a top-level folder or module that only
    they install is linked whole; one shared with a distribution outside them (a namespace
    package, __pycache__) becomes a folder of links to their files."""
    places = {pathlib.Path(d.locate_file("")) for d in dists.values()}
    for place in places:
        files = installed_files(place)
        owners: dict[str, set[str]] = {}  # top-level name: the distributions with files under it
        for name, paths in files.items():
            for path in paths:
                owners.setdefault(path.split("/")[0], set()).add(name)
        for name in set(dists) & set(files):
            for path in files[name]:
                top = path.split("/")[0]
                if top == ".." or not (place / path).exists():
                    continue  # a script in bin/, or a file the RECORD lists but nothing wrote
                whole = owners[top] <= set(dists)
                target = site / (top if whole else path)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    target.symlink_to(place / (top if whole else path))
        assert {n for n in dists if pathlib.Path(dists[n].locate_file("")) == place} <= set(files), (
            "a distribution without a RECORD cannot be linked")


def fresh_environment(tmp_path: pathlib.Path, wheel: pathlib.Path, requires: list[str]) -> pathlib.Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check",
         "install", "--no-deps", "--no-index", "--no-compile", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    dists = closure(requires, {EXTRA})
    assert {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "scikit-learn"} <= set(dists)
    link_into(pathlib.Path(site), dists)
    return venv


def test_the_wheel_and_sdist_build_and_the_wheel_runs_gyre_fit_in_a_fresh_environment(tmp_path):
    sdist, wheel = build(tmp_path)
    requires = check_wheel(wheel)
    check_sdist(sdist)

    venv = fresh_environment(tmp_path, wheel, requires)
    work = tmp_path / "work"
    (work / "home").mkdir(parents=True)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(work / "home"), "JAX_PLATFORMS": "cpu",
           "MPLCONFIGDIR": str(work / "mpl"), "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
           # the suite's compilation cache (tests/conftest.py): half the CPU time of gyre fit
           "JAX_COMPILATION_CACHE_DIR": jax.config.jax_compilation_cache_dir or "",
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(jax.config.jax_persistent_cache_min_compile_time_secs)}  # fmt: skip

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=work, env=env)

    where = run("python", "-c", "import importlib.util as u, sys; print(u.find_spec('gyre').origin, sys.prefix);"
                f"print([n for n in {NOT_DECLARED!r} if u.find_spec(n)])")  # fmt: skip
    assert where.returncode == 0, where.stderr
    origin, prefix = (pathlib.Path(p).resolve() for p in where.stdout.split("\n")[0].split())
    assert origin.is_relative_to(venv.resolve()) and prefix == venv.resolve(), where.stdout  # not src/
    assert where.stdout.split("\n")[1] == "[]"  # only the declared closure is importable

    version = run("gyre", "--version")
    assert (version.returncode, version.stdout) == (0, f"gyre {gyre.__version__}\n"), version.stderr

    fit = run("gyre", "fit", "--epochs", "1", "--batch-size", "256", "--quiet", "--out", "runs")
    assert fit.returncode == 0, fit.stdout + fit.stderr[-5000:]
    assert "final test accuracy: " in fit.stdout, fit.stdout
    (run_dir,) = (work / "runs").iterdir()
    assert (run_dir / "curves.png").is_file() and (run_dir / "history.csv").is_file()


def test_ruff_check_passes():
    folders = [f for f in ("src", "tests", "examples", "benchmarks", "tools") if (ROOT / f).is_dir()]
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *folders],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr
