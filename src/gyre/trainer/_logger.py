"""What a run writes besides its checkpoints, and the kpoeppel jax_trainer fork's logger surface.

:class:`EpochMetricFiles` writes jax_trainer's ``metrics/<phase>_epoch_NNNN.json`` files off the
training thread (each holds ``"epoch"``, ``"step"`` and the scalar metrics as floats); figures are
drawn to images and embeddings written as TensorBoard projector files
(``projector_config.pbtxt``, ``tensors.tsv``, ``metadata.tsv``, ``sprite.png``). The fork's
``ToolLoggerInterface`` puts its method names over one gyre :class:`~gyre.loggers.Writer` (tags
``<logging_mode>/<key><log_postfix>``), and its ``Logger`` does the step and epoch bookkeeping of
a hand-written training loop over :func:`~gyre.trainer.update_metrics`; unlike the fork,
``config.log_dir`` wins over the writer's folder, and ``log_image`` / ``log_embedding`` pass
their step, mode and postfix on. The fork's array specs and pytree files come without pickle:
:func:`save_pytree` writes one ``.npz`` with every array in full and the tree as JSON, so values
come back exact.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.config._schema import LoggerConfig
from gyre.config._tools import TensorboardConfig, build_tool_writer
from gyre.core._checks import instance, require, whole
from gyre.core._checks import path as folder_path
from gyre.core._errors import describe, explain
from gyre.loggers import Writer
from gyre.trainer._metrics import LogFreq, get_metrics, is_scalar

_TREE = "__gyre_tree__"


@dataclass
class ArraySpec:
    """An array described by its shape, dtype, device (``"numpy"``, ``"cpu"``, ``"cuda:0"``) and one
    fill value.

    Example:
        >>> spec = ArraySpec(shape=(2,), dtype=np.float32, device="numpy", value=1.5)
        >>> spec_to_array(spec)
        array([1.5, 1.5], dtype=float32)
    """

    shape: tuple[int, ...]
    dtype: Any
    device: Any
    value: Any = 0


def array_to_spec(array: jax.Array) -> ArraySpec:
    """The spec of a JAX array: its shape, dtype, device and first element.

    Example:
        >>> spec = array_to_spec(jnp.array([3.0, 4.0]))
        >>> spec.shape, spec.value
        ((2,), 3.0)
    """
    device = next(iter(array.devices())) if hasattr(array, "devices") else array.device
    return ArraySpec(shape=tuple(array.shape), dtype=array.dtype, device=str(device),
                     value=array.reshape(-1)[0].item() if array.size else 0)


def np_array_to_spec(array: np.ndarray) -> ArraySpec:
    """The spec of a numpy array (device ``"numpy"``).

    Example:
        >>> np_array_to_spec(np.zeros((2, 3))).shape
        (2, 3)
    """
    return ArraySpec(shape=tuple(array.shape), dtype=array.dtype, device="numpy",
                     value=array.reshape(-1)[0] if array.size else 0)


def _device(name: Any) -> Any:
    if not isinstance(name, str):
        return name
    platform, _, index = name.partition(":")
    try:
        return jax.devices(platform.lower())[int(index or 0)]
    except (RuntimeError, ValueError, IndexError):
        return jax.devices()[0]  # a spec saved on another machine: the default device


def spec_to_array(spec: ArraySpec) -> Any:
    """The array a spec describes: numpy for device ``"numpy"``, else a JAX array on that device (or
    the default).

    Example:
        >>> spec_to_array(ArraySpec(shape=(2,), dtype=jnp.int32, device="cpu", value=7))
        Array([7, 7], dtype=int32)
    """
    instance(spec, "spec", ArraySpec, problem="spec_to_array takes an ArraySpec",
             expected="ArraySpec(shape=..., dtype=..., device=..., value=...)",
             fix="build the spec with array_to_spec(array) or ArraySpec(...)")
    if spec.device == "numpy":
        return np.full(spec.shape, spec.value, dtype=spec.dtype)
    return jax.device_put(jnp.full(spec.shape, spec.value, dtype=spec.dtype), _device(spec.device))


def convert_to_array_spec(value: Any) -> Any:
    """A JAX or numpy array as its :class:`ArraySpec`; anything else unchanged.

    Example:
        >>> convert_to_array_spec(np.ones(3)).shape, convert_to_array_spec(42)
        ((3,), 42)
    """
    if isinstance(value, jax.Array):
        return array_to_spec(value)
    if isinstance(value, np.ndarray):
        return np_array_to_spec(value)
    return value


def convert_from_array_spec(value: Any) -> Any:
    """An :class:`ArraySpec` as its array; anything else unchanged.

    Example:
        >>> convert_from_array_spec(ArraySpec((2,), np.int8, "numpy", 1)), convert_from_array_spec("a")
        (array([1, 1], dtype=int8), 'a')
    """
    return spec_to_array(value) if isinstance(value, ArraySpec) else value


def _unsupported(value: Any, where: str) -> TypeError:
    return TypeError(explain(
        f"save_pytree cannot store the leaf at {where or 'the root'}",
        expected="dicts with str keys, lists, tuples, None, bool, int, float, str, "
             "and numeric JAX or numpy arrays",
        received=describe(value),
        fix="convert it first (a dataclass to a dict, an object array to a list); "
        "gyre stores no pickled objects"))


def _encode(node: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    if isinstance(node, Mapping):
        if not all(isinstance(k, str) for k in node):
            raise _unsupported(node, where)
        return ["dict", {k: _encode(v, arrays, f"{where}/{k}") for k, v in node.items()}]
    if isinstance(node, (list, tuple)):
        return ["tuple" if isinstance(node, tuple) else "list",
                [_encode(v, arrays, f"{where}/{i}") for i, v in enumerate(node)]]
    if node is None or isinstance(node, (bool, int, float, str)):
        return ["value", node]
    if isinstance(node, (jax.Array, np.ndarray, np.generic)):
        host = np.asarray(jax.device_get(node))
        if host.dtype.hasobject:
            raise _unsupported(node, where)
        name = f"a{len(arrays)}"
        arrays[name] = host
        return ["array", name, "jax" if isinstance(node, jax.Array) else "numpy", str(host.dtype)]
    raise _unsupported(node, where)


def _decode(node: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    kind = node[0]
    if kind == "dict":
        return {k: _decode(v, arrays) for k, v in node[1].items()}
    if kind in ("list", "tuple"):
        items = [_decode(v, arrays) for v in node[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return node[1]
    _, name, origin, dtype = node
    array = arrays[name]
    if str(array.dtype) != dtype:  # bfloat16 and friends come back as raw bytes
        array = array.view(jnp.dtype(dtype))
    return jnp.asarray(array) if origin == "jax" else array


def save_pytree(pytree: Any, path: str | os.PathLike[str]) -> None:
    """Writes ``pytree`` (dicts with str keys, lists, tuples, scalars, arrays) to the ``.npz`` file
    ``path``.

    Raises:
        TypeError: a leaf that cannot be stored without pickle, naming where it is.

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "tree")
        >>> save_pytree({"w": jnp.arange(3.0), "n": 2}, path)
        >>> load_pytree(path)
        {'w': Array([0., 1., 2.], dtype=float32), 'n': 2}
    """
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(pytree, arrays, "")
    with open(os.fspath(path), "wb") as out:
        np.savez(out, allow_pickle=False, **{_TREE: np.array(json.dumps(tree))}, **arrays)


def load_pytree(path: str | os.PathLike[str]) -> Any:
    """Reads a pytree written by :func:`save_pytree`, JAX arrays as JAX arrays, numpy as numpy.

    Raises:
        ValueError: the file is not one :func:`save_pytree` wrote (the fork's pickles included).

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "tree.npz")
        >>> save_pytree((np.ones(2, np.int8), None), path)
        >>> load_pytree(path)
        (array([1, 1], dtype=int8), None)
    """
    try:
        with np.load(os.fspath(path), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(explain(
            f"load_pytree cannot read {os.fspath(path)!r}",
            expected="a file written by gyre's save_pytree (an .npz archive, read without pickle)",
            received=f"{type(error).__name__}: {error}",
            fix="save the tree again with gyre.trainer.save_pytree "
            "(the fork's save_pytree pickled, which gyre never loads)")) from None
    if _TREE not in arrays:
        raise ValueError(explain(
            f"load_pytree: {os.fspath(path)!r} is an .npz archive without gyre's tree",
            expected=f"a file written by save_pytree (it holds {_TREE!r})", received=f"the arrays {sorted(arrays)}",
            fix="read a plain archive with numpy.load; write trees with save_pytree"))
    return _decode(json.loads(str(arrays.pop(_TREE))), arrays)


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


PHASE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # a phase, or a named loader's mode (val_ood)
_RESERVED = ("epoch", "step")


def python_numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def write_json(path: str, record: Any, **options: Any) -> None:
    """Writes ``record`` as JSON to ``path`` through a temporary file (no half-written file)."""
    with open(path + ".tmp", "w") as out:
        json.dump(record, out, **options)
    os.replace(path + ".tmp", path)


class EpochMetricFiles(Writer):
    """Writes ``<directory>/metrics/<phase>_epoch_NNNN.json``, one file per phase and epoch; see
    :meth:`flush`.

    Example:
        >>> import json, os, tempfile, jax.numpy as jnp
        >>> with tempfile.TemporaryDirectory() as run:
        ...     files = EpochMetricFiles(run)
        ...     files.write("val", epoch=1, step=50, metrics={"val/acc": jnp.float32(0.75)})
        ...     files.flush()
        ...     print(open(files.path("val", 1)).read())
        ...     files.close()
        {"epoch": 1, "step": 50, "val/acc": 0.75}
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        directory = folder_path(directory, "EpochMetricFiles needs the run folder",
                                expected="a str or pathlib.Path, e.g. 'runs/digits'", fix="EpochMetricFiles('runs/digits')")
        self.directory = os.path.join(directory, "metrics")
        super().__init__()

    def path(self, phase: str, epoch: int) -> str:
        """The file of ``phase`` at ``epoch`` (numbered from 1; 0: before training)."""
        return os.path.join(self.directory, f"{phase}_epoch_{epoch:04d}.json")

    def write(self, phase: str, epoch: int, step: int, metrics: Mapping[str, Any]) -> None:
        """Queues the file of ``phase`` at ``epoch`` with ``step`` and the scalar ``metrics``; reads
        no device value.

        Raises:
            ValueError: a bad phase name, epoch or step, a metric that is not one number, or
                one named ``"epoch"`` or ``"step"``.
            WriterError: an earlier file failed on the writer's thread.
        """
        if not isinstance(phase, str) or not PHASE_NAME.match(phase):
            raise ValueError(explain(
                "EpochMetricFiles.write: the phase names the file",
                expected="a lowercase name such as 'train', 'val' or 'test'", received=describe(phase),
                fix="write('val', epoch, step, metrics)"))
        epoch = whole(epoch, "EpochMetricFiles.write: epoch", device=True,
                      fix="pass epoch=1 (epochs are numbered from 1; 0 is before training)")
        step = whole(step, "EpochMetricFiles.write: step", device=True, fix="pass step=500 (the global step)")
        if not isinstance(metrics, Mapping) or not all(isinstance(k, str) for k in metrics):
            raise TypeError(explain(
                "EpochMetricFiles.write takes a dict of metrics",
                expected="a dict from names to numbers, e.g. {'val/acc': acc}", received=describe(metrics),
                fix="pass the epoch's metrics as a dict"))
        for name, value in metrics.items():
            if name in _RESERVED:
                raise ValueError(explain(
                    f"EpochMetricFiles.write: a metric is named {name!r}",
                    expected="metric names other than 'epoch' and 'step' (the file's own keys)",
                    received=f"{name!r}", fix="log the metric under its phase's name, e.g. 'val/acc'"))
            if not is_scalar(value):
                shape = f" (shape {np.shape(value)})" if hasattr(value, "shape") else ""
                raise ValueError(explain(
                    f"EpochMetricFiles.write: metric {name!r} is not one number",
                    expected="numbers or 0-d arrays only", received=describe(value) + shape,
                    fix="drop arrays and CONCAT metrics first: scalars_for_writers(metrics, specs)"))
        self._submit("epoch metrics", phase, epoch, step, dict(metrics))

    def _open(self) -> None:
        os.makedirs(self.directory, exist_ok=True)

    def _do(self, kind: str, args: tuple[Any, ...]) -> None:
        if kind != "epoch metrics":
            super()._do(kind, args)
            return
        phase, epoch, step, metrics = args
        epoch, step, values = jax.device_get((epoch, step, list(metrics.values())))
        record: dict[str, Any] = {"epoch": int(epoch), "step": int(step)}
        record.update((name, float(v)) for name, v in zip(metrics, values, strict=True))
        write_json(self.path(phase, int(epoch)), record)

    def __repr__(self) -> str:
        return f"EpochMetricFiles({os.path.dirname(self.directory)!r})"


LOGGER = logging.getLogger(__name__)


def _tag(key: str, log_postfix: str, logging_mode: str | None) -> str:
    return f"{logging_mode}/{key}{log_postfix}" if logging_mode else f"{key}{log_postfix}"


class ToolLoggerInterface:
    """The fork's tool-logger methods over a gyre writer; subclass it to change one.

    ``config`` is the ``tool_config`` section the writer was built from, kept for reading.

    Example:
        >>> import io, gyre
        >>> out = io.StringIO()
        >>> tool = ToolLoggerInterface(gyre.loggers.ConsoleWriter(out))
        >>> tool.log_metrics({"train/loss": 0.5}, step=3)
        >>> tool.finalize("success")
        >>> print(out.getvalue(), end="")
        step 3: train/loss=0.5
    """

    def __init__(self, writer: Writer, config: Mapping[str, Any] | None = None) -> None:
        instance(writer, "writer", Writer, problem="ToolLoggerInterface writes through a gyre writer",
                 expected="a gyre.loggers.Writer (TensorBoardWriter, WandbWriter, ...)",
                 fix="build one from a tool_config section: gyre.config.build_tool_writer(section, log_dir=...)")
        self.writer = writer
        self.config = config

    @property
    def log_dir(self) -> str | None:
        """The writer's folder (TensorBoard's event folder, W&B's ``dir``), or ``None``."""
        folder = getattr(self.writer, "logdir", None) or getattr(self.writer, "dir", None)
        return None if folder is None else os.fspath(folder)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Writes scalar metrics at ``step``."""
        self.writer.write_scalars(step, metrics)

    def log_image(
        self, key: str, image: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes one image (HWC) at ``step`` (``None``: 0)."""
        self.writer.write_images(step or 0, {_tag(key, log_postfix, logging_mode): np.asarray(image)})

    def log_figure(
        self, key: str, figure: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes a matplotlib figure, drawn as an image, at ``step`` (``None``: 0)."""
        self.writer.write_images(step or 0, {_tag(key, log_postfix, logging_mode): figure_image(figure)})

    def log_embedding(
        self, key: str, encodings: Any, metadata: Any = None, label_img: Any = None, step: int | None = None,
        log_postfix: str = "", logging_mode: str | None = None,
    ) -> None:
        """Writes an embedding for TensorBoard's projector in the writer's folder, if it has one."""
        folder = getattr(self.writer, "logdir", None)
        if folder is None:
            LOGGER.warning("Embedding logging is only implemented for TensorBoard (got %s).", type(self.writer).__name__)
            return
        write_embedding(folder, _tag(key, log_postfix, logging_mode), step or 0, encodings, metadata, label_img)

    def finalize(self, status: str) -> None:
        """Closes the writer (``status``, e.g. ``"success"``, is the fork's argument)."""
        self.writer.close()


_MODE = re.compile(r"^(train|(val|test)[a-z0-9_]*)$")


class LoggingModeError(ValueError, AssertionError):
    """An unknown logging mode: a ``ValueError``, and an ``AssertionError`` as the fork's
    ``assert``."""


def _scalar(value: Any) -> Any:
    """A one-element array as a Python number; other arrays ``None``; anything else as is."""
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return np.asarray(jax.device_get(value)).item() if np.size(value) == 1 else None
    return value


class Logger:
    """Step and epoch logging of a training loop, as the fork's ``Logger``.

    ``config`` is a :class:`~gyre.config.LoggerConfig` (or its mapping) whose ``tool_config``
    (default TensorBoard) picks the writer.

    Example:
        >>> import tempfile
        >>> from gyre.config import LoggerConfig, TensorboardConfig
        >>> from gyre.trainer import update_metrics
        >>> run = tempfile.mkdtemp()
        >>> logger = Logger(LoggerConfig(log_dir=run, tool_config=TensorboardConfig(version="0")), {})
        >>> logger.start_epoch(1)
        >>> metrics = update_metrics(None, {"loss": 0.5}, train=True, batch_size=8)
        >>> metrics = logger.log_step(metrics)
        >>> metrics, final = logger.end_epoch(metrics, save_metrics=True)
        >>> final["train/loss"], sorted(os.listdir(os.path.join(run, "metrics")))
        (0.5, ['train_epoch_0001.json'])
        >>> logger.finalize("success")
    """

    def __init__(self, config: LoggerConfig | Mapping[str, Any], full_config: Any) -> None:
        if isinstance(config, Mapping):
            config = LoggerConfig.model_validate(dict(config))
        instance(config, "config", LoggerConfig, problem="Logger takes a LoggerConfig",
                 expected="gyre.config.LoggerConfig(...) or its mapping",
                 fix="Logger(LoggerConfig(log_steps_every=50, tool_config=TensorboardConfig()), full_config)")
        self.config = config
        self.full_config = full_config
        tool = config.tool_config if config.tool_config is not None else TensorboardConfig()
        writer = build_tool_writer(dict(tool), log_dir=config.log_dir or os.getcwd())
        self.logger = ToolLoggerInterface(writer, tool)  # a typed config stays one: .config.save_dir
        self.logging_mode = "train"
        self.step_metrics = self._get_new_metrics_dict()
        self.step_count = 0
        self.full_step_counter = 0
        self.log_steps_every = config.log_steps_every
        self.epoch_metrics: dict[str, Any] = self._get_new_metrics_dict()
        self.epoch_idx = 0
        self.epoch_element_count = 0
        self.epoch_step_count = 0
        self.epoch_log_prefix = ""
        self.epoch_start_time: float | None = None
        self._files: EpochMetricFiles | None = None

    def _get_new_metrics_dict(self) -> defaultdict[str, dict[str, Any]]:
        return defaultdict(lambda: {"value": 0, "mode": "mean"})

    @property
    def log_dir(self) -> str:
        """``config.log_dir``, else the writer's folder, else the current folder."""
        return self.config.log_dir or self.logger.log_dir or os.getcwd()

    def log_metrics(self, metrics: Mapping[str, Any], step: int, log_postfix: str = "") -> None:
        """Writes the scalar ``metrics`` at ``step``, keys suffixed ``_<log_postfix>`` if given."""
        chosen = {}
        for key, value in metrics.items():
            value = _scalar(value)
            if value is not None:
                chosen[f"{key}_{log_postfix}" if log_postfix else key] = value
        if chosen:
            self.logger.log_metrics(chosen, step=step)

    def log_scalar(self, metric_key: str, metric_value: Any, step: int, log_postfix: str = "") -> None:
        """Writes one scalar (see :meth:`log_metrics`)."""
        self.log_metrics({metric_key: metric_value}, step, log_postfix)

    def finalize(self, status: str) -> None:
        """Closes the writer and the metric files."""
        if self._files is not None:
            self._files.close()
        self.logger.finalize(status)

    def start_epoch(self, epoch: int, mode: str = "train") -> None:
        """Starts epoch ``epoch`` of ``mode``: ``"train"``, or ``"val..."`` or ``"test..."``."""
        if not isinstance(mode, str) or not _MODE.match(mode):
            raise LoggingModeError(explain(
                "Logger.start_epoch: unknown logging mode",
                expected="'train', or a lowercase name starting with 'val' or 'test'", received=describe(mode),
                fix="logger.start_epoch(epoch, mode='val')"))
        self.logging_mode = mode
        self.epoch_idx = epoch
        self._reset_epoch_metrics()

    def log_step(self, metrics: Mapping[str, Any]) -> Any:
        """Counts a step; every ``log_steps_every`` steps writes and resets the step entries."""
        self.epoch_step_count += 1
        if self.logging_mode == "train" and self.log_steps_every > 0:
            self.step_count += 1
            self.full_step_counter += 1
            if self.step_count >= self.log_steps_every:
                metrics, step_metrics = get_metrics(metrics, log_freq=LogFreq.STEP, reset_metrics=True)
                self.log_metrics(self._finalize_metrics(step_metrics), step=self.full_step_counter, log_postfix="step")
                self._reset_step_metrics()
        return metrics

    def _reset_step_metrics(self) -> None:  # the fork's name: its tests call it
        self.step_count = 0

    def _reset_epoch_metrics(self) -> None:
        self.epoch_metrics = {}
        self.epoch_step_count = 0
        self.epoch_start_time = time.time()

    def log_epoch_scalar(self, key: str, value: Any) -> None:
        """Adds a scalar to the current epoch's metrics (written at :meth:`end_epoch`)."""
        self.epoch_metrics[key] = value

    def _finalize_metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        final = {}
        for key, value in metrics.items():
            scalar = _scalar(value)
            final[key if "/" in key else f"{self.logging_mode}/{key}"] = value if scalar is None else scalar
        return final

    def end_epoch(self, metrics: Mapping[str, Any], save_metrics: bool = False) -> tuple[Any, dict[str, Any]]:
        """Writes the epoch's metrics (and with ``save_metrics``
        ``metrics/<mode>_epoch_NNNN.json``).

        Returns ``metrics`` with the epoch entries reset, and the epoch's metrics by logged name.
        """
        self.log_epoch_scalar("time", time.time() - (self.epoch_start_time or time.time()))
        metrics, epoch_metrics = get_metrics(metrics, log_freq=LogFreq.EPOCH, reset_metrics=True)
        epoch_metrics.update(self.epoch_metrics)
        final = self._finalize_metrics(epoch_metrics)
        self.log_metrics(final, step=self.epoch_idx, log_postfix="epoch" if self.logging_mode == "train" else "")
        if save_metrics:  # the scalars, in metrics/<mode>_epoch_NNNN.json
            if self._files is None:
                self._files = EpochMetricFiles(self.log_dir)
            self._files.write(self.logging_mode, self.epoch_idx, self.full_step_counter, python_numbers(final))
            self._files.flush()
        if self.logging_mode == "train" and 0 < self.epoch_step_count < self.log_steps_every:
            metrics, _ = get_metrics(metrics, log_freq=LogFreq.STEP, reset_metrics=True)
            self._reset_step_metrics()
        self._reset_epoch_metrics()
        return metrics, final

    def save_metrics(self, filename: str, metrics: Mapping[str, Any]) -> None:
        """Writes the numbers, strings and booleans of ``metrics`` to
        ``<log_dir>/metrics/<filename>.json``."""
        if not isinstance(filename, str) or not filename or os.sep in filename:
            raise ValueError(explain(
                "Logger.save_metrics: the file's name",
                expected="a name without folders or suffix, e.g. 'val_best'", received=describe(filename),
                fix="logger.save_metrics('val_best', metrics)"))
        kept = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
        folder = os.path.join(self.log_dir, "metrics")
        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, f"{filename}.json"), kept, indent=4)

    def log_image(
        self, key: str, image: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes an image (HWC) at ``step`` (default: the global step)."""
        self.logger.log_image(key=key, image=np.asarray(jax.device_get(image)),
                              **self._at(step, log_postfix, logging_mode))

    def log_figure(
        self, key: str, figure: Any, step: int | None = None, log_postfix: str = "", logging_mode: str | None = None
    ) -> None:
        """Writes a matplotlib figure at ``step`` (default: the global step)."""
        self.logger.log_figure(key, figure=figure, **self._at(step, log_postfix, logging_mode))

    def log_embedding(
        self, key: str, encodings: Any, step: int | None = None, metadata: Any = None, images: Any = None,
        log_postfix: str = "", logging_mode: str | None = None,
    ) -> None:
        """Writes an embedding for TensorBoard's projector (see :class:`ToolLoggerInterface`)."""
        self.logger.log_embedding(key, encodings=encodings, metadata=metadata, label_img=images,
                                  **self._at(step, log_postfix, logging_mode))

    def _at(self, step: int | None, log_postfix: str, logging_mode: str | None) -> dict[str, Any]:
        """Where a media call writes: ``step`` and ``logging_mode`` default to the logger's own."""
        return {"step": self.full_step_counter if step is None else step, "log_postfix": log_postfix,
                "logging_mode": self.logging_mode if logging_mode is None else logging_mode}
