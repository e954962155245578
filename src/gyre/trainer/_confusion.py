"""Confusion matrices (rows true labels, columns predictions): :func:`confusion_matrix`, counted
in the loss function under a key ending in ``conf_matrix`` (mode ``sum``, log_mode ``eval``), and
:class:`ConfusionMatrixCallback`, which draws them."""

import numbers
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.config._registry import register_callback
from gyre.core._checks import instance, whole
from gyre.core._errors import ExplainedKeyError, describe, explain, suggest
from gyre.core._host import fetch
from gyre.trainer._callback import Callback
from gyre.trainer._media import matplotlib_canvas

SUFFIX = "conf_matrix"
FOLDER = "confusion_matrix"
ANNOTATE_UP_TO = 30  # classes; a larger matrix is drawn without the numbers in its cells


def confusion_matrix(labels: Any, predictions: Any, num_classes: int) -> jax.Array:
    """Counts (true label, prediction) pairs in a ``(num_classes, num_classes)`` int32 array
    (jittable).

    ``predictions`` are classes (``logits.argmax(-1)``), of the labels' shape; pairs outside
    ``[0, num_classes)`` (a padding label ``-1``) are not counted.

    Example:
        >>> import jax.numpy as jnp
        >>> confusion_matrix(jnp.array([0, 1, 1, 2, -1]), jnp.array([0, 1, 2, 2, 0]), 3).tolist()
        [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    """
    num_classes = whole(num_classes, "confusion_matrix: num_classes", minimum=1, expected="a Python int, e.g. 10",
                        fix="pass the number of classes, e.g. confusion_matrix(labels, preds, 10)")
    labels, predictions = jnp.asarray(labels), jnp.asarray(predictions)
    for name, value in (("labels", labels), ("predictions", predictions)):
        if not jnp.issubdtype(value.dtype, jnp.integer):
            raise TypeError(explain(
                f"confusion_matrix: {name} must hold integer classes",
                expected="integer arrays of class indices", received=f"dtype {value.dtype}, shape {value.shape}",
                fix="pass predicted classes, e.g. logits.argmax(-1), not the logits"))
    if labels.shape != predictions.shape:
        raise ValueError(explain(
            "confusion_matrix: labels and predictions differ in shape",
            expected="one prediction per label (the same shape)",
            received=f"labels {labels.shape}, predictions {predictions.shape}",
            fix="take the argmax over the class axis only: logits.argmax(-1)"))
    n = int(num_classes)
    labels, predictions = labels.reshape(-1), predictions.reshape(-1)
    valid = (labels >= 0) & (labels < n) & (predictions >= 0) & (predictions < n)
    cells = jnp.where(valid, labels * n + predictions, 0).astype(jnp.int32)
    counts = jnp.bincount(cells, weights=valid.astype(jnp.int32), length=n * n)
    return counts.astype(jnp.int32).reshape(n, n)


@register_callback
class ConfusionMatrixCallback(Callback):
    """Draws each metric ending in ``conf_matrix`` of filtered validations and of tests.

    Each is a PNG at ``log_dir/confusion_matrix/<phase>_epoch_NNNN.png`` and an image
    ``<phase>/confusion_matrix`` for the writer. Needs matplotlib (``gyre[plot]``).

    Args:
        normalize: divide each row by its total.
        figsize: the figure's (width, height) in inches.
        format: a cell's format spec; ``None``: ``".2f"`` when normalized, else ``"d"``.

    Example:
        >>> import tempfile, gyre, optax, jax.numpy as jnp
        >>> from flax import nnx
        >>> callback = ConfusionMatrixCallback(figsize=(2, 2), dpi=50)
        >>> trainer = gyre.TrainerModule(model=nnx.Linear(1, 1, rngs=nnx.Rngs(0)), optimizer=optax.sgd(0.1),
        ...                              log_dir=tempfile.mkdtemp(), callbacks=[callback])
        >>> matrix = confusion_matrix(jnp.array([0, 1, 1]), jnp.array([0, 1, 0]), 2)
        >>> callback.on_validation_epoch_end({"val/conf_matrix": matrix}, 3)
        >>> sorted(p.name for p in (trainer.log_dir / "confusion_matrix").iterdir())
        ['val_epoch_0003.png']
        >>> trainer.close_writer()
    """

    def __init__(
        self,
        *,
        normalize: bool = True,
        cmap: str = "Blues",
        figsize: tuple[float, float] = (8, 8),
        format: str | None = None,
        dpi: int = 100,
        every_n_epochs: int = 1,
    ) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.normalize = instance(normalize, "normalize", bool, problem="ConfusionMatrixCallback: bad normalize",
                                  expected="True or False", fix="pass normalize=True")
        if not isinstance(cmap, str) or not cmap:
            raise TypeError(_bad("cmap", cmap, "a matplotlib colormap name, e.g. 'Blues'", "pass cmap='Blues'"))
        size = tuple(figsize) if isinstance(figsize, (tuple, list)) else None
        if size is None or len(size) != 2 or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 < v < 1000 for v in size
        ):
            raise ValueError(_bad("figsize", figsize, "(width, height) in inches, two numbers > 0",
                                  "pass figsize=(8, 8)"))
        self.dpi = whole(dpi, "dpi", minimum=1, maximum=2000, problem="ConfusionMatrixCallback: bad dpi",
                         expected="a whole number from 1 to 2000", fix="pass dpi=100")
        fmt = format if format is not None else (".2f" if normalize else "d")
        try:
            _cell(1.0, fmt)
        except (TypeError, ValueError) as err:
            raise ValueError(_bad("format", format, "a format spec for one number, e.g. '.2f' or 'd'",
                                  "pass format='.2f', or leave it out")) from err
        self.cmap = cmap
        self.figsize = (float(size[0]), float(size[1]))
        self.format = fmt

    def on_filtered_validation_epoch_end(self, eval_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Draws the validation matrix."""
        self._draw(eval_metrics, epoch_idx, "val")

    def on_test_epoch_end(self, test_metrics: dict[str, Any], epoch_idx: int) -> None:
        """Draws the test matrix."""
        self._draw(test_metrics, epoch_idx, "test")

    def _draw(self, metrics: dict[str, Any], epoch_idx: int, phase: str) -> None:
        trainer = self._bound()
        keys = [k for k in metrics if isinstance(k, str) and k.endswith(SUFFIX)]
        if not keys:
            raise ExplainedKeyError(explain(
                f"ConfusionMatrixCallback found no confusion matrix in the {phase} metrics "
                f"of epoch {epoch_idx}",
                expected=f"a metric whose key ends with {SUFFIX!r}, e.g. '{phase}/{SUFFIX}'",
                received=f"keys {sorted(map(str, metrics))}",
                fix="return {'conf_matrix': {'value': gyre.trainer.confusion_matrix(labels, "
                "preds, n), 'mode': 'sum', 'log_mode': 'eval'}} from the loss function"))
        for key in keys:
            shape = np.shape(metrics[key])  # metadata: no read
            if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 1:
                raise ValueError(explain(
                    f"ConfusionMatrixCallback: {key!r} is not a square matrix",
                    expected="an (n, n) array: rows true labels, columns predictions",
                    received=f"{describe(metrics[key])} of shape {shape}",
                    fix="log gyre.trainer.confusion_matrix(labels, preds, n) with mode 'sum'"))
        images = {}
        folder = pathlib.Path(trainer.log_dir) / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        for key, matrix in zip(keys, fetch([metrics[k] for k in keys]), strict=True):  # one read
            stem = key.rsplit("/", 1)[-1]
            name = phase if len(keys) == 1 else f"{phase}_{stem}"
            rgba = self._render(np.asarray(matrix, np.float64), key, epoch_idx,
                                folder / f"{name}_epoch_{epoch_idx:04d}.png")
            images[f"{phase}/confusion_matrix" if len(keys) == 1 else f"{phase}/{stem}"] = rgba[..., :3]
        self._write("images", images)

    def _render(self, matrix: np.ndarray, key: str, epoch_idx: int, path: pathlib.Path) -> np.ndarray:
        """Draws the picture into the PNG ``path``; returns it as an (height, width, 4) uint8 RGBA array."""
        figure, agg = matplotlib_canvas("ConfusionMatrixCallback")
        import matplotlib.image

        try:
            cmap = matplotlib.colormaps[self.cmap]
        except KeyError:
            names = sorted(matplotlib.colormaps)
            raise ValueError(explain(
                f"ConfusionMatrixCallback: unknown colormap {self.cmap!r}." + suggest(self.cmap, names),
                expected="a matplotlib colormap name, e.g. 'Blues', 'viridis', 'Greys'", received=describe(self.cmap),
                fix="pass cmap='Blues'")) from None
        if self.normalize:
            matrix = _normalize(matrix)
        n = matrix.shape[0]
        fig = figure(figsize=self.figsize, dpi=self.dpi)
        canvas = agg(fig)
        ax = fig.subplots()
        top = 1.0 if self.normalize else max(float(matrix.max()), 1.0)
        ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=top, interpolation="nearest")
        if n <= ANNOTATE_UP_TO:
            for i in range(n):
                for j in range(n):
                    ax.text(j, i, _cell(matrix[i, j], self.format), ha="center", va="center",
                            fontsize="small", color="white" if matrix[i, j] > top / 2 else "black")
        ticks = list(range(n)) if n <= ANNOTATE_UP_TO else list(range(0, n, max(n // 10, 1)))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("Predicted label")
        ax.set_ylabel("True label")
        ax.set_title(f"{key}, epoch {epoch_idx}")
        fig.tight_layout()
        canvas.draw()
        rgba = np.array(canvas.buffer_rgba(), dtype=np.uint8)
        matplotlib.image.imsave(path, rgba, format="png")
        return rgba


def _normalize(matrix: np.ndarray) -> np.ndarray:
    """Each row divided by its total; a row of zeros stays zeros."""
    totals = matrix.sum(axis=1, keepdims=True)
    return np.divide(matrix, totals, out=np.zeros_like(matrix, dtype=np.float64), where=totals > 0)


def _cell(value: float, fmt: str) -> str:
    if fmt.endswith(("d", "x", "X", "o", "b", "c")):
        return format(int(round(float(value))), fmt)
    return format(float(value), fmt)


def _bad(name: str, value: Any, expected: str, fix: str) -> str:
    return explain(f"ConfusionMatrixCallback: bad {name}", expected=expected, received=describe(value), fix=fix)
