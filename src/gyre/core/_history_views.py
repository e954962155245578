"""The views and exports of a history: :class:`Record` and ``History``'s ``collect``, ``names``,
``to_records``, ``to_csv`` and ``plot`` (a mixin over the history's host blocks).
"""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any, NamedTuple, Protocol

import numpy as np

from gyre.core._checks import instance, require
from gyre.core._clock import CLOCK_FIELDS, Elapsed
from gyre.core._errors import ExplainedKeyError, closest, explain, suggest
from gyre.core._host import to_python
from gyre.core._logs import Logs, put, resolution_order

__all__ = ["HistoryViews", "Record"]

MISSING = object()  # where a record has no value for a key (lookup)


class HostBlock(Protocol):
    """What the views read of a history block (a :class:`gyre.Block`, which ``_history`` defines)."""

    count: int
    clocks: dict[str, Any]
    entries: dict[tuple[str, str], tuple[np.ndarray, Any]]
    sizes: Sequence[int | None]
    orders: dict[int, tuple[tuple[str, str], ...]] | None


class Record(NamedTuple):
    """One committed step: its clock, its logs and its batch size (or None).

    It also reads like ciclo's record: ``record["metrics"]["acc"]``, ``record["elapsed"]["steps"]``.

    Example:
        >>> r = Record(Elapsed(steps=3), Logs().add_metric("acc", 0.5))
        >>> r["metrics"]["acc"], r["elapsed"]["steps"], r.keys(), "losses" in r, r.get("losses", {})
        (0.5, 3, ['elapsed', 'metrics'], False, {})
    """

    elapsed: Elapsed
    logs: Logs
    batch_size: int | None = None

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if not isinstance(key, str):
            return tuple.__getitem__(self, key)
        if key == "elapsed":
            return self.elapsed.to_dict()
        if key in self.logs:
            return self.logs[key]
        raise ExplainedKeyError(
            explain(f"this record has no collection {key!r}", expected=f"one of {self.keys()}", received=repr(key),
                    fix="index a collection, then an entry: record['metrics']['accuracy']")
        )

    def keys(self) -> list[str]:
        """``"elapsed"`` and the record's collections (example: see :class:`Record`)."""
        return ["elapsed", *self.logs]

    def __contains__(self, key: object) -> bool:
        return key == "elapsed" or key in self.logs

    def get(self, key: str, default: Any = None) -> Any:
        """``record[key]``, or ``default`` when the record has no such collection (example: see
        :class:`Record`)."""
        return self[key] if key in self else default


def _as_list(column: Any) -> list[Any]:
    return column.tolist() if isinstance(column, np.ndarray) else list(column)



def block_records(block: HostBlock) -> Iterator[Record]:
    """The records of a host block, in order (:meth:`Block.records`)."""
    logs = [Logs() for _ in range(block.count)]
    for (collection, name), (rows, values) in block.entries.items():
        for k, i in enumerate(rows.tolist()):
            put(logs[i], collection, name, values[k])
    for i, keys in (block.orders or {}).items():
        old, logs[i] = logs[i], Logs()
        for collection, name in keys:
            put(logs[i], collection, name, old[collection][name])
    clocks = zip(*[_as_list(block.clocks[f]) for f in CLOCK_FIELDS], strict=True)
    for clock, lg, size in zip(clocks, logs, block.sizes, strict=True):
        yield Record(Elapsed(*clock), lg, size)


def lookup(block: HostBlock, key: str) -> list[Any]:
    """The value of ``key`` in each record of a host block (``MISSING`` where it has none),
    found as :meth:`History.collect` finds keys."""
    out: list[Any] = [MISSING] * block.count
    if key.startswith("elapsed."):
        field = key[len("elapsed.") :]
        return _as_list(block.clocks[field]) if field in CLOCK_FIELDS else out
    collection, dot, name = key.partition(".")
    keys = [(collection, name)] if dot and (collection, name) in block.entries else []
    keys += [(c, key) for c in resolution_order({c: None for c, n in block.entries if n == key})]
    for found in keys:
        rows, values = block.entries[found]
        python = values.tolist() if isinstance(values, np.ndarray) and values.ndim == 1 else map(to_python, values)
        for i, value in zip(rows.tolist(), python, strict=True):
            if out[i] is MISSING:
                out[i] = value
    if key in CLOCK_FIELDS:
        clock = _as_list(block.clocks[key])
        out = [clock[i] if v is MISSING else v for i, v in enumerate(out)]
    return out


def block_collect(block: HostBlock, keys: Sequence[str]) -> list[list[Any]]:
    """The values of ``keys`` of the records of a host block that have all of them (:meth:`Block.collect`)."""
    columns = [lookup(block, key) for key in keys]
    keep = [i for i in range(block.count) if all(c[i] is not MISSING for c in columns)]
    return [[c[i] for i in keep] for c in columns]


class HistoryViews:
    """What :class:`~gyre.History` offers to read a whole history: each view flushes it to the
    host (``_host_parts``) and reads its blocks."""

    _host_parts: Callable[[], list[tuple[HostBlock, int]]]
    __len__: Callable[[], int]
    __iter__: Callable[[], Iterator[Record]]

    def collect(self, *keys: str) -> list[Any] | tuple[list[Any], ...]:
        """Values of ``keys`` from every record that has all of them (keys: see :class:`History`).

        One key gives a list, several a tuple of lists; scalars as Python numbers, arrays as numpy.

        Example:
            >>> from gyre import History
            >>> h = History()
            >>> h.commit(Elapsed(steps=0), Logs().add_metric("acc", 0.5))
            >>> h.commit(Elapsed(steps=1), Logs().add_loss("loss", 2.0))
            >>> h.collect("acc"), h.collect("steps", "loss")
            ([0.5], ([1], [2.0]))
        """
        if not keys:
            raise ValueError(
                explain("collect() needs at least one key", expected="names like 'loss', 'metrics.accuracy' or 'steps'",
                        received="no keys", fix="e.g. history.collect('steps', 'loss')")
            )
        for key in keys:
            instance(key, "history keys", str, kind="strings", expected="'loss', 'metrics.accuracy' or 'steps'",
                     fix="pass the key's name as a string")
        columns: list[list[Any]] = [[] for _ in keys]
        for block, _ in self._host_parts():
            for column, values in zip(columns, block_collect(block, keys), strict=True):
                column.extend(values)
        if not columns[0] and len(self):
            self._check_keys(keys)
        return columns[0] if len(keys) == 1 else tuple(columns)

    def _check_keys(self, keys: Sequence[str]) -> None:
        """Raises a KeyError for a key that no record holds (a typo would otherwise give [])."""
        for key in keys:
            if any(v is not MISSING for block, _ in self._host_parts() for v in lookup(block, key)):
                continue
            names = self.names()
            known = [f"{c}.{n}" for c, ns in names.items() for n in ns] + [n for ns in names.values() for n in ns]
            close = difflib.get_close_matches(key, known, n=len(known), cutoff=0.0)
            raise ExplainedKeyError(explain(
                f"no record of this history has the key {key!r}",
                expected="a logged name, 'collection.name', or a clock counter (" + ", ".join(CLOCK_FIELDS) + ")",
                received=f"{key!r}; the logged names, closest first: {close[:12]}",
                fix=f"use one of the logged names{', e.g. ' + repr(close[0]) if close else ''}"))

    def names(self) -> dict[str, list[str]]:
        """Every entry name seen, by collection, in order of first appearance.

        Example:
            >>> from gyre import History
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.names()
            {'metrics': ['a']}
        """
        seen: dict[str, dict[str, None]] = {}
        for block, _ in self._host_parts():
            for collection, name in block.entries:
                seen.setdefault(collection, {}).setdefault(name, None)
        return {c: list(v) for c, v in seen.items()}

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per record: the clock counters, then every entry by its bare name, or as
        ``collection.name`` when another collection uses the name.

        Example:
            >>> from gyre import History
            >>> h = History(); h.commit(Elapsed(steps=3), Logs().add_metric("a", 1))
            >>> h.to_records()[0]["steps"], h.to_records()[0]["a"]
            (3, 1)
        """
        owners = Counter(chain.from_iterable(self.names().values()))
        rows = []
        for record in self:
            row: dict[str, Any] = record.elapsed.to_dict()
            for collection, name, value in record.logs.entries():
                row[name if owners[name] == 1 and name not in row else f"{collection}.{name}"] = to_python(value)
            rows.append(row)
        return rows

    def to_csv(self, path: str) -> None:
        """Writes :meth:`to_records` as CSV (scalar entries only), creating the file's folder.

        Example:
            >>> import tempfile, os
            >>> from gyre import History
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1))
            >>> tmp = tempfile.TemporaryDirectory(); p = os.path.join(tmp.name, "h.csv"); h.to_csv(p)
            >>> open(p).read().splitlines()[0]
            'steps,samples,epochs,step_in_epoch,time,date,a'
            >>> tmp.cleanup()
        """
        import csv

        rows = [{k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))} for row in self.to_records()]
        columns = dict.fromkeys(chain.from_iterable(rows))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows(rows)

    def plot(self, path: str | None = None, keys: Sequence[str | Sequence[str]] | None = None, *, x: str = "steps") -> Any:
        """Plots entries against the clock counter ``x`` with matplotlib; returns the figure.

        ``keys``: one panel per key or per nested group (``[["loss", "loss_test"], ["acc"]]``); by
        default every scalar entry, ``name_<suffix>`` on ``name``'s panel. Saved to ``path`` (which
        needs an extension; its folder is created) without pyplot, leaving the backend alone;
        ``path=None`` makes a pyplot figure for ``plt.show()``. A key no record holds raises.

        Example:
            >>> import tempfile, os
            >>> from gyre import History
            >>> h = History()
            >>> for i in range(3): h.commit(Elapsed(steps=i), Logs().add_loss("loss", 1.0 / (i + 1)))
            >>> with tempfile.TemporaryDirectory() as tmp:
            ...     fig = h.plot(os.path.join(tmp, "curves.png"))
        """
        if path is not None and not os.path.splitext(path)[1]:
            raise _extensionless(self, os.fspath(path))
        groups = _plot_groups(self, keys)
        if keys is not None and len(self):
            self._check_keys([x, *chain.from_iterable(groups)])
        # a figure to save is made without pyplot: the user's backend and figures are left alone
        if path is None:
            make = require("matplotlib.pyplot", "History.plot", extra="plot").figure
        else:
            make = require("matplotlib.figure", "History.plot", extra="plot").Figure
        fig = make(figsize=(5 * max(len(groups), 1), 3.6))
        axes = list(fig.subplots(1, max(len(groups), 1), squeeze=False)[0])
        for ax, group in zip(axes, groups, strict=False):
            for key in group:
                xs, ys = self.collect(x, key)
                if ys and getattr(ys[0], "ndim", 0) == 0:
                    ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=key)
            ax.set_xlabel(x)
            ax.set_title(group[0])
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        if path is not None:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fig.savefig(path, dpi=100)
        return fig


def _extensionless(history: HistoryViews, path: str) -> Exception:
    """The error for ``plot(path)`` whose path has no extension (matplotlib would add
    ``.png``): a KeyError when it reads like a series' name (``plot("loss")``)."""
    names = [n for ns in history.names().values() for n in ns]
    near = path if path in names else closest(path, names)
    if near is None:
        return ValueError(
            explain(f"History.plot: the file {path!r} has no extension", received=repr(path),
                    expected="a file name ending in the format, e.g. 'curves.png', '.pdf' or '.svg'",
                    fix=f"history.plot({path + '.png'!r})")
        )
    return ExplainedKeyError(explain(
        "History.plot(path, keys): the first argument is the file to write, "
        + (f"and {path!r} is the name of a series" if near == path else
        f"and no series is named {path!r}." + suggest(path, names)),
        expected="a file name with an extension first, the series to draw in keys=",
        received=f"plot({path!r}), which would write {path + '.png'!r}",
        fix=f"history.plot('curves.png', keys=[{near!r}])"))


def _plot_groups(history: HistoryViews, keys: Sequence[str | Sequence[str]] | None) -> list[list[str]]:
    if keys is not None:
        return [[k] if isinstance(k, str) else list(k) for k in keys]
    by_collection = {c: ns for c, ns in history.names().items() if c != "outputs"}
    owners = Counter(chain.from_iterable(by_collection.values()))
    groups: dict[str, list[str]] = {}
    for collection in resolution_order(by_collection):  # a name of several collections: once per collection
        for name in by_collection[collection]:
            name = name if owners[name] == 1 else f"{collection}.{name}"
            groups.setdefault(next((b for b in groups if name.startswith(b + "_")), name), []).append(name)
    return list(groups.values())

