"""``History``: the per-step records of a run, moved to the host in batches.

``commit`` keeps device values as they are (it never waits for the device). Every
``flush_every`` commits, the records older than the newest ``lag`` are copied to the host in
one explicit transfer, so the device is never stalled on the value it just produced and the
host never pays one transfer per step. ``collect``, ``to_records`` and ``plot`` flush
everything first: they are the moments a user asks for numbers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from gyre.core.clock import _FIELDS as CLOCK_FIELDS
from gyre.core.clock import Elapsed
from gyre.core.errors import describe, explain
from gyre.core.host import fetch, fetch_columns, to_python
from gyre.core.logs import Logs, Shape, flatten_logs, resolution_order, unflatten_logs


class Record(NamedTuple):
    """One committed step: the clock at the step, its logs, and its batch size (or None)."""

    elapsed: Elapsed
    logs: Logs
    batch_size: int | None = None


class _Chunk(NamedTuple):
    """Records moved to the host together: their clocks, and their values by column."""

    clocks: list[tuple[Elapsed, int | None]]
    # one (structure of the logs, record positions, host columns) per structure
    columns: list[tuple[Shape, list[int], list[Any]]]

    def records(self) -> list[Record]:
        logs: list[Any] = [None] * len(self.clocks)
        for shape, rows, columns in self.columns:
            for k, i in enumerate(rows):
                logs[i] = unflatten_logs(shape, [column[k] for column in columns])
        return [Record(e, lg, b) for (e, b), lg in zip(self.clocks, logs, strict=True)]


class _Stacked(NamedTuple):
    """A block of steps committed together, their logs stacked (rows start, start+1, ...)."""

    clocks: list[Elapsed]
    logs: Logs
    batch_sizes: list[int | None]
    start: int


class History:
    """Per-step records of a run: ``commit`` on the step path, ``collect`` afterwards.

    Keys for :meth:`collect`: a clock counter (``"steps"``, ``"samples"``, ``"epochs"``,
    ``"step_in_epoch"``, ``"time"``, ``"date"``, also as ``"elapsed.steps"``), a qualified
    entry (``"metrics.loss"``) or a bare entry name (``"loss"``). A bare name resolves to the
    first collection that holds it in *that record*, in the order ``losses``, ``metrics``,
    ``stateful_metrics``, ``outputs``, then custom collections by name; if no collection
    holds it, a clock counter of that name is used. Records missing a key are skipped.

    Args:
        flush_every: commits between two batched host transfers.
        lag: newest records left on the device at a batched transfer.

    Example:
        >>> h = History()
        >>> for i in range(3):
        ...     h.commit(Elapsed(steps=i), Logs().add_loss("loss", 1.0 / (i + 1)))
        >>> h.collect("steps", "loss")
        ([0, 1, 2], [1.0, 0.5, 0.3333333333333333])
    """

    def __init__(self, *, flush_every: int = 256, lag: int = 16) -> None:
        if flush_every < 1 or lag < 0:
            raise ValueError(
                explain(
                    "History needs flush_every >= 1 and lag >= 0",
                    expected="e.g. History(flush_every=256, lag=16)",
                    received=f"flush_every={flush_every!r}, lag={lag!r}",
                    fix="pass positive numbers",
                )
            )
        self._records: list[Record] = []  # on the host, ready to read
        self._chunks: list[_Chunk] = []  # on the host, not yet turned into records
        self._pending: list[Any] = []  # still on the device: commits, or _Stacked blocks
        self._stacked_extra = 0  # rows beyond the first of the _Stacked blocks in _pending
        self._flush_every = flush_every
        self._lag = lag

    # -- the step path ---------------------------------------------------------------------
    def commit(self, elapsed: Elapsed, logs: Logs, *, batch_size: int | None = None) -> None:
        """Appends one step's logs (device values are kept; nothing waits)."""
        if type(logs) is not Logs:
            logs = Logs().merge(logs)
        pending = self._pending
        pending.append((elapsed, logs, batch_size))
        if len(pending) >= self._flush_every + self._lag:
            self.flush(lag=self._lag)

    def commit_stacked(
        self,
        clocks: Sequence[Elapsed],
        logs: Logs,
        *,
        batch_sizes: Sequence[int | None] | None = None,
        start: int = 0,
    ) -> None:
        """Appends ``len(clocks)`` steps whose logs come stacked, one row per step.

        Every value of ``logs`` has a leading axis (what a fused step returns: see
        :func:`gyre.fuse`); step ``i`` gets row ``start + i``. Nothing is sliced on the device:
        the rows are split on the host when the values are moved there.

        Args:
            clocks: the clock of each step.
            logs: the stacked logs.
            batch_sizes: samples of each step (default: unknown).
            start: the row of the first step.

        Example:
            >>> import numpy as np
            >>> h = History()
            >>> h.commit_stacked([Elapsed(steps=i) for i in range(3)],
            ...                  Logs().add_loss("loss", np.array([3.0, 2.0, 1.0])))
            >>> h.collect("steps", "loss")
            ([0, 1, 2], [3.0, 2.0, 1.0])
        """
        rows = len(clocks)
        if rows == 0:
            return
        if type(logs) is not Logs:
            logs = Logs().merge(logs)
        for collection, name, value in logs.entries():
            shape = getattr(value, "shape", ())
            if not shape or shape[0] < start + rows:
                raise ValueError(
                    explain(
                        f"stacked logs entry {collection}.{name} has no row for every step",
                        expected=f"arrays with a leading axis of at least {start + rows} "
                        "(one row per step)",
                        received=f"shape {tuple(shape)}",
                        fix="commit per-step logs with History.commit, or stack them along axis 0",
                    )
                )
        sizes = [None] * rows if batch_sizes is None else list(batch_sizes)
        if len(sizes) != rows:
            raise ValueError(
                explain(
                    "commit_stacked needs one batch size per clock",
                    expected=f"{rows} batch sizes",
                    received=f"{len(sizes)}",
                    fix="pass batch_sizes=[...] of the same length as clocks, or leave it out",
                )
            )
        self._pending.append(_Stacked(list(clocks), logs, sizes, start))
        self._stacked_extra += rows - 1
        if len(self._pending) + self._stacked_extra >= self._flush_every + self._lag:
            self.flush(lag=self._lag)

    def flush(self, *, lag: int = 0) -> None:
        """Copies all records but the newest ``lag`` to the host, one transfer per entry.

        Records of the same entries are fetched column by column; they become :class:`Record`
        objects only when read, so the step path pays for the transfer and nothing else.
        Stacked commits (:meth:`commit_stacked`) move whole, in one transfer for all of them.

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.flush()
        """
        stop = len(self._pending) - lag
        if self._stacked_extra:  # lag counts rows: keep the newest blocks that hold lag rows
            kept, stop = 0, len(self._pending)
            while stop > 0 and kept < lag:
                stop -= 1
                entry = self._pending[stop]
                kept += len(entry.clocks) if type(entry) is _Stacked else 1
        if stop <= 0:
            return
        moving, self._pending = self._pending[:stop], self._pending[stop:]
        groups: dict[Any, tuple[list[int], list[list[Any]]]] = {}
        clocks: list[tuple[Elapsed, int | None]] = []
        stacked: list[tuple[Any, list[int], int, int, list[Any]]] = []
        for entry in moving:
            if type(entry) is _Stacked:
                self._stacked_extra -= len(entry.clocks) - 1
                first = len(clocks)
                clocks.extend(zip(entry.clocks, entry.batch_sizes, strict=True))
                leaves, shape = flatten_logs(entry.logs)
                stacked.append((shape, list(range(first, len(clocks))), entry.start, len(entry.clocks), leaves))
                continue
            elapsed, logs, batch_size = entry
            i = len(clocks)
            clocks.append((elapsed, batch_size))
            leaves, shape = flatten_logs(logs)
            group = groups.get(shape)
            if group is None:
                group = groups[shape] = ([], [])
            group[0].append(i)
            group[1].append(leaves)
        columns = [
            (shape, rows, fetch_columns(list(zip(*leaves, strict=True))))
            for shape, (rows, leaves) in groups.items()
        ]
        if stacked:
            host = fetch([leaves for *_, leaves in stacked])
            for (shape, rows, start, count, _), values in zip(stacked, host, strict=True):
                columns.append((shape, rows, [v[start : start + count] for v in values]))
        self._chunks.append(_Chunk(clocks, columns))

    def _host_records(self) -> list[Record]:
        """Every record, on the host (flushes and builds the pending ones)."""
        self.flush()
        for chunk in self._chunks:
            self._records.extend(chunk.records())
        self._chunks = []
        return self._records

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return (
            len(self._records) + sum(len(c.clocks) for c in self._chunks) + len(self._pending)
            + self._stacked_extra
        )

    def __iter__(self) -> Iterator[Record]:
        return iter(self._host_records())

    def __getitem__(self, index: int) -> Record:
        return self._host_records()[index]

    def extend(self, other: History) -> None:
        """Appends every record of ``other`` (used when a run is continued).

        Example:
            >>> a, b = History(), History()
            >>> b.commit(Elapsed(), Logs()); a.extend(b); len(a)
            1
        """
        for record in other:
            self.commit(record.elapsed, record.logs, batch_size=record.batch_size)

    def collect(self, *keys: str) -> list[Any] | tuple[list[Any], ...]:
        """Values of ``keys`` from every record that has all of them.

        One key gives a list; several give a tuple of lists of equal length. Scalars come back
        as Python numbers, arrays as numpy arrays.

        Example:
            >>> h = History()
            >>> h.commit(Elapsed(steps=0), Logs().add_metric("acc", 0.5))
            >>> h.commit(Elapsed(steps=1), Logs().add_loss("loss", 2.0))
            >>> h.collect("acc"), h.collect("steps", "loss")
            ([0.5], ([1], [2.0]))
        """
        if not keys:
            raise ValueError(
                explain(
                    "collect() needs at least one key",
                    expected="names like 'loss', 'metrics.accuracy' or 'steps'",
                    received="no keys",
                    fix="e.g. history.collect('steps', 'loss')",
                )
            )
        for key in keys:
            if not isinstance(key, str):
                raise TypeError(
                    explain(
                        "history keys are strings",
                        expected="'loss', 'metrics.accuracy' or 'steps'",
                        received=describe(key),
                        fix="pass the key's name as a string",
                    )
                )
        columns: list[list[Any]] = [[] for _ in keys]
        for record in self._host_records():
            row = []
            for key in keys:
                found, value = _find(record, key)
                if not found:
                    break
                row.append(to_python(value))
            else:
                for column, value in zip(columns, row, strict=True):
                    column.append(value)
        return columns[0] if len(keys) == 1 else tuple(columns)

    def names(self) -> dict[str, list[str]]:
        """Every entry name seen, by collection, in order of first appearance.

        Example:
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1)); h.names()
            {'metrics': ['a']}
        """
        seen: dict[str, dict[str, None]] = {}
        for record in self._host_records():
            for collection, values in record.logs.items():
                bucket = seen.setdefault(collection, {})
                for name in values:
                    bucket.setdefault(name, None)
        return {c: list(v) for c, v in seen.items()}

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per record: the clock counters, then every entry.

        An entry is named by its bare name when no other collection in the history uses that
        name, else ``collection.name``.

        Example:
            >>> h = History(); h.commit(Elapsed(steps=3), Logs().add_metric("a", 1))
            >>> h.to_records()[0]["steps"], h.to_records()[0]["a"]
            (3, 1)
        """
        owners: dict[str, int] = {}
        for names in self.names().values():
            for name in names:
                owners[name] = owners.get(name, 0) + 1
        rows = []
        for record in self._host_records():
            row: dict[str, Any] = record.elapsed.to_dict()
            for collection, name, value in record.logs.entries():
                column = name if owners[name] == 1 and name not in row else f"{collection}.{name}"
                row[column] = to_python(value)
            rows.append(row)
        return rows

    def to_csv(self, path: str) -> None:
        """Writes :meth:`to_records` as CSV (scalar entries only; arrays are left out).

        Example:
            >>> import tempfile, os
            >>> h = History(); h.commit(Elapsed(), Logs().add_metric("a", 1))
            >>> p = os.path.join(tempfile.mkdtemp(), "h.csv"); h.to_csv(p)
            >>> open(p).read().splitlines()[0]
            'steps,samples,epochs,step_in_epoch,time,date,a'
        """
        import csv

        rows = [
            {k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))}
            for row in self.to_records()
        ]
        columns: dict[str, None] = {}
        for row in rows:
            for key in row:
                columns.setdefault(key, None)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows(rows)

    def plot(
        self,
        path: str | None = None,
        keys: Sequence[str | Sequence[str]] | None = None,
        *,
        x: str = "steps",
    ) -> Any:
        """Plots entries against ``x`` with matplotlib, one panel per key or group of keys.

        Args:
            path: where to save the figure (PNG by extension); ``None`` keeps it open.
            keys: names to plot; a nested sequence puts several curves on one panel, e.g.
                ``[["loss", "loss_test"], ["accuracy", "accuracy_test"]]``. By default every
                scalar entry, with ``name_<suffix>`` drawn on the panel of ``name``.
            x: the clock counter on the horizontal axis.

        Returns:
            The matplotlib figure.

        Example:
            >>> import tempfile, os
            >>> h = History()
            >>> for i in range(3): h.commit(Elapsed(steps=i), Logs().add_loss("loss", 1.0 / (i + 1)))
            >>> fig = h.plot(os.path.join(tempfile.mkdtemp(), "curves.png"))
        """
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise ImportError(
                "History.plot needs matplotlib: pip install 'gyre[plot]'"
            ) from err
        groups = _plot_groups(self, keys)
        fig, axes = plt.subplots(1, max(len(groups), 1), figsize=(5 * max(len(groups), 1), 3.6))
        axes = [axes] if len(groups) <= 1 else list(axes)
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
            fig.savefig(path, dpi=100)
            plt.close(fig)
        return fig


def _find(record: Record, key: str) -> tuple[bool, Any]:
    if key.startswith("elapsed."):
        name = key[len("elapsed.") :]
        if name in CLOCK_FIELDS:
            return True, getattr(record.elapsed, name)
        return False, None
    found, value = record.logs.lookup(key)
    if found:
        return True, value
    if key in CLOCK_FIELDS:
        return True, getattr(record.elapsed, key)
    return False, None


def _plot_groups(
    history: History, keys: Sequence[str | Sequence[str]] | None
) -> list[list[str]]:
    if keys is not None:
        return [[k] if isinstance(k, str) else list(k) for k in keys]
    names: list[str] = []
    by_collection = history.names()
    for collection in resolution_order(by_collection):
        if collection == "outputs":
            continue
        for name in by_collection[collection]:
            if name not in names:
                names.append(name)
    groups: dict[str, list[str]] = {}
    for name in names:
        base = next((b for b in groups if name.startswith(b + "_")), name)
        groups.setdefault(base, []).append(name)
    return list(groups.values())


def history(*, flush_every: int = 256, lag: int = 16) -> History:
    """A new, empty :class:`History`.

    Example:
        >>> len(history())
        0
    """
    return History(flush_every=flush_every, lag=lag)

