"""``MLflowWriter``: an MLflow run, in a local file store or on a tracking server."""

from __future__ import annotations

import os
import posixpath
import re
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from gyre.callbacks._wandb_logger import scalar_runs
from gyre.core._checks import path, require
from gyre.core._errors import explain, keywords_checked, suggest
from gyre.core._history import Block
from gyre.loggers._writer import Writer

_BATCH = 1000  # metrics per log_batch: MLflow's limit for one request
_NAME = re.compile(r"[/\w.\- :]*")  # MLflow's characters for metric and param names (colons: not on Windows)
_LONGEST = 250  # MLflow's MAX_ENTITY_KEY_LENGTH
NAME_RULE = (f"at most {_LONGEST} characters: alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), "
             "colons (:) and slashes (/), as a relative path in normal form (no leading /, no // or . or .. parts, "
             "no trailing /)")


def _refused(name: str) -> bool:
    """Whether MLflow refuses ``name`` as a metric or param name (mlflow.utils.validation's rule)."""
    norm = posixpath.normpath(name)
    return (len(name) > _LONGEST or not _NAME.fullmatch(name) or norm != name or norm == "."
            or norm.startswith(("..", "/")))


_IMAGE_KEY = re.compile(r"[a-zA-Z0-9_\-./ ]+")  # MLflow's log_image(key=) characters: no colon, ASCII only
IMAGE_RULE = "ASCII alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ) and slashes (/)"


def check_names(names: Iterable[Any], what: str) -> None:
    """Refuses, before anything is sent, a name MLflow would refuse: it refuses the whole batch
    holding it, so the other values of that request were lost too (an image: on the writer's thread)."""
    image = what == "image"
    for name in names:
        if isinstance(name, str) and image and not _IMAGE_KEY.fullmatch(name):
            raise ValueError(explain(
                f"MLflowWriter cannot write the image {name!r}: MLflow's log_image refuses the key",
                expected=f"a name of {IMAGE_RULE}", received=repr(name),
                fix=f"rename it, e.g. {re.sub(r'[^a-zA-Z0-9_./ -]', '_', name) or 'image'!r}"))
        if isinstance(name, str) and not image and _refused(name):
            fixed = posixpath.normpath(re.sub(r"[^/\w.\- :]", "_", name)).strip("/.")[:_LONGEST] or "value"
            shown = repr(name) if len(name) <= 80 else f"{name[:60]!r}... ({len(name)} characters)"
            raise ValueError(explain(
                f"MLflowWriter cannot write the {what} {shown}: MLflow refuses the name (and with it every "
                "value sent in the same request)",
                expected=f"a name of {NAME_RULE}", received=shown,
                fix=f"rename it, e.g. {fixed!r}" if len(name) <= _LONGEST
                else f"rename it: shorten it to {_LONGEST} characters or fewer, of the characters expected"))


def _tracking_uri(uri: Any) -> tuple[str, bool]:
    """The URI MLflow is given and whether it is a local file store."""
    text = path(uri, "MLflowWriter needs a tracking URI",
                fix="gyre.MLflowWriter('runs/mlruns', experiment_name='digits')", expected="a folder for a local file store ('runs/mlruns'), a file: URI, or a server's http(s):// URI")
    if text.startswith("file:"):
        return text, True
    if "://" not in text:
        return Path(text).expanduser().resolve().as_uri(), True
    scheme = text.split("://", 1)[0]
    if scheme not in ("http", "https"):
        raise ValueError(explain(
            f"MLflowWriter cannot log to a {scheme}:// URI." + suggest(scheme, ("http", "https", "file")),
            expected="a folder or file: URI (MLflow's local file store, which works offline), or "
            "the http:// or https:// URI of a running MLflow tracking server",
            received=repr(text),
            fix="gyre.MLflowWriter('runs/mlruns') for a local store; for another store, run a "
            "tracking server on it (mlflow server --backend-store-uri ...) and pass its http:// URI"))
    return text, False


def _reach(uri: str) -> None:
    """Raises at once when nothing listens at a server's address (MLflow's client retries for minutes)."""
    parts = urllib.parse.urlsplit(uri)
    if urllib.request.getproxies().get(parts.scheme):
        return
    try:
        socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)), timeout=5).close()
    except OSError as err:
        raise ConnectionError(explain(
            f"no MLflow tracking server answers at {uri}",
            expected="a tracking server running there (mlflow server --host 127.0.0.1 --port 5000)",
            received=f"{type(err).__name__}: {err}",
            fix="start the server, correct the URI, or log offline to a local file store: "
            "gyre.MLflowWriter('runs/mlruns')")) from err


class MLflowWriter(Writer):
    """Writes to an MLflow run that it starts (``pip install 'gyre[mlflow]'``); ``close()`` ends it.

    Scalars are metrics; hyperparameters are params; texts and images are artifacts. MLflow has
    no histograms: writing them raises. For a local store the writer sets
    ``MLFLOW_ALLOW_FILE_STORE=true`` in its process unless already set (MLflow 3 needs it).

    Args:
        tracking_uri: a folder or ``file:`` URI (the local file store), or the ``http(s)://`` URI
            of a running tracking server (checked at once; other stores go through a server).
        experiment_name: the experiment (created if missing).

    Raises:
        ImportError: mlflow is not installed.
        ValueError: a URI of another scheme.
        ConnectionError: nothing answers at a server URI.

    Example:
        >>> import gyre, tempfile
        >>> from mlflow.tracking import MlflowClient
        >>> with tempfile.TemporaryDirectory() as root:
        ...     with gyre.MLflowWriter(root, experiment_name="demo") as writer:
        ...         writer.write_scalars(2, {"loss": 0.5})
        ...     history = MlflowClient(writer.tracking_uri).get_metric_history(writer.run_id, "loss")
        ...     [(m.step, m.value) for m in history]
        [(2, 0.5)]
    """

    kinds = frozenset({"scalars", "images", "texts", "hparams"})

    @keywords_checked
    def __init__(
        self,
        tracking_uri: str | os.PathLike[str] = "mlruns",
        *,
        experiment_name: str = "gyre",
        run_name: str | None = None,
    ) -> None:
        self.tracking_uri, self._file_store = _tracking_uri(tracking_uri)
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.run_id: str | None = None
        self._client: Any = None
        self._names_ok: set[str] = set()  # the history's entry names checked already
        self._params: dict[str, str] = {}  # the params written, as MLflow keeps them (str)
        super().__init__()

    def _open(self) -> None:
        require("mlflow", extra="mlflow", who="MLflowWriter")
        from mlflow.tracking import MlflowClient

        if self._file_store:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        else:
            _reach(self.tracking_uri)
        self._client = MlflowClient(self.tracking_uri)
        found = self._client.get_experiment_by_name(self.experiment_name)
        experiment = found.experiment_id if found else self._client.create_experiment(self.experiment_name)
        self.run_id = self._client.create_run(experiment, run_name=self.run_name).info.run_id

    def _submit(self, kind: str, *args: Any, batched: bool = False) -> None:
        # on the caller's thread (also through a MultiWriter): a name MLflow refuses raises here
        if batched:
            self._check_block(args[0])
        elif kind == "scalars":
            check_names(args[1], "metric")
        elif kind == "images":
            check_names(args[1], "image")
        elif kind == "hparams":
            check_names(args[0], "param")
            check_names(args[1] or (), "metric")
            self._check_params(args[0])
        super()._submit(kind, *args, batched=batched)

    def _check_params(self, params: dict[str, Any]) -> None:
        """Refuses a param written before with another value (MLflow refuses the whole request:
        'Changing param values is not allowed', on the writer's thread), then remembers these."""
        for name, value in params.items():
            before = self._params.get(name)
            if before is not None and before != str(value):
                raise ValueError(explain(
                    f"MLflowWriter cannot write the param {name!r} again with another value: MLflow keeps "
                    "a run's first value of each param and refuses a change (with the whole request)",
                    expected=f"{name}={before} (the value written before), or a new name",
                    received=f"{name}={value}", fix=f"write it under another name (e.g. '{name}_2'), or "
                    "as a metric if it changes during the run"))
        self._params.update((name, str(value)) for name, value in params.items())

    def _check_block(self, block: Block) -> None:
        """The names of a history block's scalars (write_to's), each checked once."""
        for key, entry in block.entries.items():
            name = key[1]
            if name in self._names_ok:
                continue
            if not _refused(name):
                self._names_ok.add(name)
            elif next(scalar_runs(Block(block.count, block.clocks, {key: entry})), None) is not None:
                check_names([name], "metric")  # a number MLflow would get (an array per record it does not)

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, step) for name, value in values.items()]
        self._client.log_batch(self.run_id, metrics=metrics)

    def _scalar_block(self, block: Block, keep: np.ndarray | None) -> None:  # one request per _BATCH metrics
        from mlflow.entities import Metric

        metrics = []
        for _, names, steps, dates, values in scalar_runs(block, keep):
            stamps = np.round(dates * 1000).astype(np.int64).tolist()
            for step, stamp, row in zip(steps.tolist(), stamps, values.tolist(), strict=True):
                metrics.extend(Metric(name, value, stamp, step) for name, value in zip(names, row, strict=True))
        for start in range(0, len(metrics), _BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[start : start + _BATCH])

    def _images(self, step: int, images: dict[str, np.ndarray]) -> None:
        for name, batch in images.items():
            for i, image in enumerate(batch):
                key = name if len(batch) == 1 else f"{name}_{i}"
                self._client.log_image(self.run_id, image, key=key, step=step)

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        for name, text in texts.items():
            self._client.log_text(self.run_id, text, f"texts/{name}/step_{step:08d}.txt")

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        from mlflow.entities import Param

        self._client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        if metrics:
            self._scalars(0, metrics)

    def _close(self) -> None:
        self._client.set_terminated(self.run_id)

    def __repr__(self) -> str:
        return f"MLflowWriter({self.tracking_uri!r}, experiment_name={self.experiment_name!r})"
