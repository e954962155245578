"""Figures drawn to images, and embeddings written as TensorBoard projector files
(``projector_config.pbtxt``, ``tensors.tsv``, ``metadata.tsv``, ``sprite.png``)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from gyre.core._checks import instance, require
from gyre.core._errors import describe, explain


def matplotlib_canvas(who: str) -> tuple[Any, Any]:
    """matplotlib's ``Figure`` and Agg canvas (no pyplot, the user's backend untouched), or an
    ImportError saying that ``who`` needs the extra."""
    figure = require("matplotlib.figure", who, extra="plot")
    return figure.Figure, require("matplotlib.backends.backend_agg", who, extra="plot").FigureCanvasAgg


def figure_image(figure: Any) -> np.ndarray:
    """A matplotlib figure drawn as an ``(height, width, 3)`` uint8 RGB image."""
    Figure, FigureCanvasAgg = matplotlib_canvas("log_figure")
    canvas = FigureCanvasAgg(instance(
        figure, "figure", Figure, problem="log_figure takes a matplotlib figure",
        expected="a matplotlib.figure.Figure (plt.figure(), fig of plt.subplots())",
        fix="pass the figure, e.g. fig, ax = plt.subplots(); ...; trainer.log_figure('name', fig)"))
    canvas.draw()
    return np.array(canvas.buffer_rgba(), dtype=np.uint8)[..., :3]


def _embedding_arrays(encodings: Any, metadata: Any, images: Any) -> tuple[np.ndarray, list[str] | None, Any]:
    vectors = np.asarray(encodings)
    if vectors.ndim != 2 or not np.issubdtype(vectors.dtype, np.number) or len(vectors) == 0:
        raise ValueError(explain(
            "log_embedding takes one vector per point",
            expected="encodings of shape (points, dimensions), numbers",
            received=describe(encodings) + (f" of shape {vectors.shape}" if hasattr(vectors, "shape") else ""),
            fix="pass features.reshape(len(features), -1)"))
    labels = None if metadata is None else [str(m) for m in np.asarray(metadata).reshape(-1)]
    if labels is not None and len(labels) != len(vectors):
        raise ValueError(explain(
            "log_embedding's metadata must label each point",
            expected=f"{len(vectors)} labels (one per encoding)", received=f"{len(labels)} labels",
            fix="pass metadata=labels of the same examples as the encodings"))
    if images is not None:
        images = np.asarray(images)
        if images.ndim != 4 or len(images) != len(vectors):
            raise ValueError(explain(
                "log_embedding's images must picture each point",
                expected=f"an array of shape ({len(vectors)}, height, width, channels)",
                received=f"shape {images.shape}", fix="pass images=batch.input[:n] for the n encoded examples (NHWC)"))
    return vectors, labels, images


def _sprite(images: np.ndarray) -> np.ndarray:
    """The images tiled on a square grid, scaled to [0, 1] (one grayscale channel kept as is)."""
    low, high = float(images.min()), float(images.max())
    images = (images - low) / (high - low) if high > low else np.zeros_like(images, dtype=np.float32)
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    n, h, w, c = images.shape
    side = math.ceil(math.sqrt(n))
    grid = np.zeros((side * h, side * w, c), np.float32)
    for i, image in enumerate(images):
        row, col = divmod(i, side)
        grid[row * h : (row + 1) * h, col * w : (col + 1) * w] = image
    return grid


def write_embedding(
    folder: str | os.PathLike[str], key: str, step: int, encodings: Any, metadata: Any = None, images: Any = None
) -> Path:
    """Writes one embedding for TensorBoard's projector into ``folder``; returns its own folder."""
    vectors, labels, pictures = _embedding_arrays(encodings, metadata, images)
    folder = Path(folder)
    name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}_{int(step):08d}"
    where = folder / name
    where.mkdir(parents=True, exist_ok=True)
    np.savetxt(where / "tensors.tsv", vectors, delimiter="\t", fmt="%.6g")
    entry = [f'  tensor_name: "{key}:{int(step)}"', f'  tensor_path: "{name}/tensors.tsv"']
    if labels is not None:
        (where / "metadata.tsv").write_text("".join(f"{label}\n" for label in labels))
        entry.append(f'  metadata_path: "{name}/metadata.tsv"')
    if pictures is not None:
        import matplotlib.image

        matplotlib.image.imsave(where / "sprite.png", _sprite(pictures.astype(np.float32)), format="png")
        h, w = pictures.shape[1:3]
        entry.append(f'  sprite {{ image_path: "{name}/sprite.png" single_image_dim: {w} single_image_dim: {h} }}')
    with open(folder / "projector_config.pbtxt", "a") as config:
        config.write("embeddings {\n" + "\n".join(entry) + "\n}\n")
    return where
