"""``WandbWriter``: a Weights & Biases run, offline by default (no network, no account)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gyre.core._checks import choice, require
from gyre.loggers._writer import Writer

#: The modes ``wandb.init`` accepts (its settings refuse any other, with a pydantic error).
WANDB_MODES = ("offline", "online", "disabled", "shared", "dryrun", "run")
#: The x-axis of every value: W&B's own ``step=`` drops a value whose step is below the last one
#: logged, and ``write_to``'s rows arrive after a callback's direct writes of later steps.
STEP_KEY = "gyre/step"


class WandbWriter(Writer):
    """Writes to a W&B run that it starts (``pip install 'gyre[wandb]'``); ``close()`` finishes it.
    Each value is logged beside its step as ``gyre/step``, every chart's x-axis, so values may
    arrive out of step order (W&B's own ``step=`` drops those).

    Args:
        mode: ``"offline"`` (default: files only, ``wandb sync`` uploads later), ``"online"`` or
            ``"disabled"``.
        dir: the folder of W&B's ``wandb/`` folder (default: ``$WANDB_DIR`` or the working
            directory).
        **init_kwargs: anything else ``wandb.init`` takes (``config=``, ``tags=``...).

    Raises:
        ImportError: wandb is not installed.

    Example:
        >>> import gyre, os, tempfile
        >>> with tempfile.TemporaryDirectory() as root:
        ...     with gyre.WandbWriter(project="demo", dir=root, settings={"silent": True}) as writer:
        ...         writer.write_scalars(0, {"loss": 1.0})
        ...     sorted(os.listdir(os.path.join(root, "wandb")))[-1].startswith("offline-run-")
        True
    """

    kinds = frozenset({"scalars", "histograms", "images", "texts", "hparams"})

    def __init__(
        self,
        project: str | None = None,
        run: str | None = None,
        mode: str = "offline",
        dir: str | os.PathLike[str] | None = None,
        **init_kwargs: Any,
    ) -> None:
        choice(mode, "WandbWriter's mode", WANDB_MODES,
               fix="pass mode='offline' (upload later with `wandb sync`) or mode='online'.")
        self.project = project
        self.name = run
        self.mode = mode
        self.dir = None if dir is None else os.fspath(dir)
        self.init_kwargs = init_kwargs
        self.run: Any = None
        super().__init__()

    def _open(self) -> None:
        wandb = require("wandb", extra="wandb", who="WandbWriter")
        if self.dir is not None:
            os.makedirs(self.dir, exist_ok=True)
        options = {"reinit": "create_new", **self.init_kwargs}
        self.run = wandb.init(project=self.project, name=self.name, mode=self.mode, dir=self.dir, **options)
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)

    def _log(self, step: int, data: dict[str, Any]) -> None:
        self.run.log({STEP_KEY: step, **data})

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        self._log(step, values)

    def _histograms(self, step: int, arrays: dict[str, np.ndarray], num_buckets: int | None) -> None:
        import wandb

        data = {
            name: wandb.Histogram(np_histogram=np.histogram(np.asarray(a, np.float64).ravel(), bins=num_buckets or 64))
            for name, a in arrays.items()
        }
        self._log(step, data)

    def _images(self, step: int, images: dict[str, np.ndarray]) -> None:
        import wandb

        self._log(step, {name: [wandb.Image(image) for image in batch] for name, batch in images.items()})

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        self._log(step, dict(texts))

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        self.run.config.update(params, allow_val_change=True)
        if metrics:
            self.run.summary.update(metrics)

    def _close(self) -> None:
        self.run.finish()

    def __repr__(self) -> str:
        return f"WandbWriter(project={self.project!r}, run={self.name!r}, mode={self.mode!r})"
