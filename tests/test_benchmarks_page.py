"""``benchmarks/run_all.py`` writes the benchmark page: the machine, the commit, a table of ratios
per benchmark with its plot, and the command that reproduces it (issue 26).

One quick run of the cheapest benchmark (``data_sources``: no compiled step) into a temporary
folder; the full page is ``docs/benchmarks.md``, written by a full run.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_ALL = os.path.join(ROOT, "benchmarks", "run_all.py")


def test_a_quick_run_writes_the_page_with_the_machine_the_commit_the_ratios_and_the_command(tmp_path):
    out = tmp_path / "docs" / "benchmarks.md"
    args = ["--quick", "--only", "data_sources", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, RUN_ALL, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    page = out.read_text()

    assert re.search(r"^\*\*Machine:\*\* .+, \d+ cores; (no GPU|.+)\. Load average at start: [\d.]+", page, re.M)
    assert re.search(r"^\| commit \| `[0-9a-f]{12}` \((clean tree|the tree had uncommitted changes)\)", page, re.M)
    assert re.search(r"^\| jax / jaxlib \| \d", page, re.M)
    assert re.search(r"^\| date \| \d{4}-\d\d-\d\d \d\d:\d\d UTC \|", page, re.M)
    assert "| command | `python benchmarks/run_all.py --quick --only data_sources --out " in page
    assert "A quick run" in page  # a quick page says its figures mean nothing

    assert "## data_sources" in page and "## loop_overhead" not in page
    assert "Run alone: `python benchmarks/data_sources.py --batches 5 --rounds 1`" in page
    table = re.search(r"^\| variant \| ratio \(median of 1 rounds\) \| against \|.*\n\|---.*\n((?:\|.*\n)+)", page, re.M)
    assert table, page
    rows = table.group(1).splitlines()
    assert len(rows) == 3 and all(re.match(r"\| .+ \| \d+\.\d{3} \| numpy path \(workers=0\) \|", r) for r in rows)

    assert "![data_sources: ratios](images/bench_data_sources.png)" in page  # relative, as the docs site needs
    image = out.parent / "images" / "bench_data_sources.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_host_path_still_times_gyre_s_own_step_call():
    """``host_path.py`` reaches into the engine (it times the compiled ring step through
    ``_ring._ring_function``): a change there must not break the benchmark's acceptance figure."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "host_path.py"), "--steps", "12",
                           "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    row = re.search(r"^\| gyre\.loop \(bar \+ history\), ring call timed \|(.*)\|$", done.stdout, re.M)
    assert row, done.stdout
    inside, outside = (float(cell) for cell in row.group(1).split("|")[-2:])
    assert inside > 0 and outside > 0
    assert re.search(r"^target: .* -> (PASS|FAIL) \([+-]\d+\.\d us", done.stdout, re.M)


def test_ab_checkouts_reads_each_side_against_its_own_hand_loop_and_lists_what_fell(tmp_path):
    """``ab_checkouts.py`` (two versions of gyre in alternating processes): its verdict line
    names a variant whose new / base, paired by process, fell by more than the tolerance."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import ab_checkouts
    finally:
        sys.path.pop(0)
    base = [{"loop": 1.00, "fit": 0.90}, {"loop": 0.95, "fit": 0.92}]
    new = [{"loop": 1.01, "fit": 0.80}, {"loop": 0.96, "fit": 0.85}]
    text = ab_checkouts.compare(base, new, tolerance=0.02)
    assert "| loop | 0.975 | 0.985 | 1.010 (1.010..1.011) |" in text
    assert "| fit | 0.910 | 0.825 | 0.906 (0.889..0.924) |" in text
    assert text.endswith("lower than base by more than 2%: fit")
    src = ab_checkouts.extract("HEAD", str(tmp_path))
    assert os.path.isfile(os.path.join(src, "gyre", "__init__.py"))
