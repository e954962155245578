"""``curves.png`` of a run (``gyre fit``): one panel per metric with its step, epoch-mean and
validation series, x in epochs, a loss on a log scale, other panels zoomed past the first
epoch, the best checkpoint marked."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

#: the prefixes of a metric's series, and the names they are shown under
KINDS = (("", "train, per step"), ("train/", "train, epoch mean"), ("val/", "validation"), ("test/", "test"))


def series_groups(names: Sequence[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Panels: ``(metric, [(entry, label), ...])``, one entry per kind of series; window means
    (``train/<m>_step``) beside per-step values, times and the epoch counter are left out."""
    panels: dict[str, dict[str, str]] = {}
    for name in names:
        prefix, _, rest = name.rpartition("/")
        prefix = prefix + "/" if prefix else ""
        if prefix not in ("", "train/", "val/", "test/"):
            continue
        base = rest.removesuffix("_epoch")
        step_window = rest.endswith("_step") and prefix == "train/"
        base = base.removesuffix("_step")
        if base in ("time", "epoch") or (step_window and base in names):
            continue
        label = dict(KINDS)[prefix] if not step_window else "train, window mean"
        panels.setdefault(base, {}).setdefault(label, name)
    order = [label for _, label in KINDS] + ["train, window mean"]
    return [(base, sorted(((n, lbl) for lbl, n in by.items()), key=lambda p: order.index(p[1]))) for base, by in panels.items()]


def best_step(history: Any, monitor: str | None, mode: str = "max") -> int | None:
    """The step of the best ``monitor`` value (the first of equals, as a checkpoint keeps it),
    counted as completed steps (a checkpoint's number); ``None`` without one."""
    if monitor is None:
        return None
    steps, values = history.collect("steps", monitor)
    if not values:
        return None
    sign = 1.0 if mode == "max" else -1.0
    best = max(range(len(values)), key=lambda i: (sign * float(values[i]), -i))
    return int(steps[best]) + 1


def _epoch_length(history: Any) -> int | None:
    positions = history.collect("step_in_epoch")
    return max(positions) + 1 if positions and history.collect("epochs") and max(history.collect("epochs")) > 0 else None


def _zoom(ax: Any, curves: list[tuple[list[float], list[float], bool]], start: float) -> None:
    """Limits the y-axis to where the curves differ: their values after ``start`` (a step
    series by its 5th percentile, its noise left out), with a margin."""
    import numpy as np

    low, high = [], []
    for xs, ys, per_step in curves:
        kept = np.array([y for x, y in zip(xs, ys, strict=True) if x > start + 1e-9 and math.isfinite(y)])
        if kept.size:
            low.append(np.percentile(kept, 5) if per_step else kept.min())
            high.append(kept.max())
    if low:
        lo, hi = min(low), max(high)
        pad = max((hi - lo) * 0.1, 1e-3)
        ax.set_ylim(lo - pad, hi + pad)


def plot_curves(
    history: Any, path: str | os.PathLike[str], *, title: str | None = None,
    monitor: str | None = None, mode: str = "max",
) -> None:
    """Draws ``history``'s scalar series into the PNG ``path``, marking the best ``monitor`` value
    by ``mode`` (the checkpoint's metric; see the module docs)."""
    from matplotlib.figure import Figure  # no pyplot: the user's backend and figures are left alone

    names = history.names()
    panels = series_groups([*names.get("losses", []), *names.get("metrics", [])])
    if not panels:
        return
    epoch = _epoch_length(history)
    scale = (lambda s: (s + 1) / epoch) if epoch else (lambda s: s + 1)
    best = best_step(history, monitor, mode)
    fig = Figure(figsize=(5.2 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (base, entries) in zip(axes[0], panels, strict=True):
        curves = []
        for name, label in entries:
            steps, values = history.collect("steps", name)
            xs, ys = [scale(s) for s in steps], [float(v) for v in values]
            per_step = label == "train, per step"
            style = {"linewidth": 0.8, "alpha": 0.45} if per_step else {"marker": "o", "markersize": 3.5}
            ax.plot(xs, ys, label=label, **style)
            curves.append((xs, ys, per_step))
            if name == monitor and best is not None:  # the best value itself, starred
                y = ys[[s + 1 for s in steps].index(best)]
                ax.plot([scale(best - 1)], [y], marker="*", markersize=13, color="black", linestyle="none")
        if "loss" in base and all(y > 0 for _, ys, _ in curves for y in ys if math.isfinite(y)):
            ax.set_yscale("log")
        else:
            _zoom(ax, curves, start=1.0 if epoch else 0.0)
        if best is not None:
            ax.axvline(scale(best - 1), color="0.3", linestyle=":", linewidth=1.2,
                       label=f"best checkpoint ({monitor}, {'epoch' if epoch else 'step'} {scale(best - 1):g})")
        ax.set_title(base)
        ax.set_xlabel("epoch" if epoch else "step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(os.fspath(path), dpi=100)
