"""The ``--json PATH`` option every benchmark shares: its results, machine-readable, for
``run_all.py`` (which turns them into ``docs/benchmarks.md`` and its plots).

A benchmark adds the option with :func:`add_option` and, when it is given, calls :func:`write`
once at the end with its rows: each a variant, its ratio against the variant named in
``against`` (the median of the per-round ratios; ``None`` for a reference row) and, where the
ratio is not the whole story, a ``value`` with its ``unit``. The printed report is kept as it is
and stored beside the rows (``report``).

Example:
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.json")
    >>> write(path, benchmark="demo", steps=10, rounds=3, report="| a |",
    ...       rows=[row("hand", None, "hand"), row("gyre", 0.98, "hand")])
    >>> saved = json.load(open(path))
    >>> saved["rounds"], [r["ratio"] for r in saved["rows"]]
    (3, [None, 0.98])
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_option(parser: argparse.ArgumentParser) -> None:
    """Adds ``--json PATH`` to a benchmark's command line."""
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the results as JSON to PATH (what run_all.py reads)")


def row(variant: str, ratio: float | None, against: str, *, value: Any = None, unit: str = "") -> dict[str, Any]:
    """One result: ``variant``'s ``ratio`` to ``against`` (``None``: the reference itself).

    Example:
        >>> row("gyre.loop", 0.97, "hand-written", value=1234.5, unit="steps/s")["unit"]
        'steps/s'
    """
    return {"variant": variant, "ratio": None if ratio is None else float(ratio), "against": against,
            "value": value, "unit": unit}


def write(path: str | None, *, benchmark: str, steps: int | None, rounds: int | None, rows: list[dict[str, Any]],
          report: str, lower_is_better: bool = False, note: str = "") -> None:
    """Writes the results to ``path`` (nothing when ``path`` is ``None``)."""
    if path is None:
        return
    payload = {"benchmark": benchmark, "steps": steps, "rounds": rounds, "rows": rows, "report": report,
               "lower_is_better": lower_is_better, "note": note}
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)
