"""``write_to``: a loop callback that sends the history's scalar entries to a writer."""

from __future__ import annotations

from typing import Any

import numpy as np

from gyre.callbacks._wandb_logger import FollowsHistory, scalar_runs
from gyre.core._checks import instance, whole
from gyre.core._clock import Elapsed
from gyre.core._errors import keywords_checked
from gyre.core._history import Block
from gyre.core._logs import Logs
from gyre.engine._tasks import ChunkSafe, LoopElement
from gyre.loggers._writer import Writer


class WriteTo(FollowsHistory, ChunkSafe, LoopElement):
    """The callback :func:`write_to` returns.

    Attributes:
        writer: the writer it sends to.
        every: steps between two reads of the history.
        sent: how many records it has read.

    Example:
        >>> import gyre, io
        >>> callback = gyre.write_to(gyre.ConsoleWriter(io.StringIO()), every=10)
        >>> isinstance(callback, gyre.loggers.WriteTo), callback.every, callback.sent
        (True, 10, 0)
    """

    def __init__(self, writer: Writer, *, every: int, write_every: int = 1) -> None:
        instance(writer, "writer", Writer, problem="write_to needs a gyre writer",
                 expected="a gyre.Writer, e.g. gyre.TensorBoardWriter('runs/tb')",
                 fix="gyre.write_to(gyre.TensorBoardWriter('runs/tb'))")
        if "scalars" not in writer.kinds:
            raise writer._unsupported("scalars")
        self.every = whole(every, "write_to's every", minimum=1, unit="steps",
                           expected="every=1 (read the history at every step) or a larger int",
                           fix="pass every=1, or every=100 to read the history less often")
        self.write_every = whole(write_every, "write_to's write_every", minimum=1, unit="steps",
                                 fix="pass write_every=50 to write every 50th step",
                                 expected="write_every=1 (every step) or e.g. write_every=50 (every 50th step, and every evaluation)")
        self.writer = writer
        self.sent = 0
        self._written: frozenset[str] = frozenset()  # names of the last row written (thinning)
        self._due = 0  # the step at which it next reads the history
        self._train = False
        self._told: Any = None  # the resumed loop whose resume the writer was told of

    def _tell_resume(self, loop: Any) -> None:
        """Tells the writer, once per loop, that ``loop`` resumed from a checkpoint: the steps from it on
        are written again (TensorBoard then drops the earlier run's, as SummaryWriter's ``purge_step``)."""
        step = getattr(loop, "resumed_step", None)
        if step is not None and self._told is not loop and not self._skipped():
            self._told = loop
            self.writer._resumed(step)

    _on_loop_resumed = _tell_resume  # (the engine's word at a resumed loop's start, before any task or on_start)

    def __call__(self, elapsed: Elapsed, logs: Logs, loop: Any = None) -> None:
        self._tell_resume(loop)
        # once it follows this loop's history, _skipped and _follow would find nothing to do
        if not (self._silent is False and loop is not None and loop.history is self._history):
            if self._skipped():
                return
            followed = self._history
            self._follow(elapsed, logs, loop)
            if self._history is not followed:
                self._due = elapsed.steps + self.every - 1
        # counted in steps, not calls: a block engine calls it once per block of steps
        if elapsed.steps >= self._due:
            self._send(wait=False)
            self._due = elapsed.steps + self.every

    def on_train_begin(self, loop: Any = None) -> None:
        """In a ``train_loop``: evaluations reach the writer through the training history only from
        here on.

        Example:
            >>> import gyre
            >>> callback = gyre.write_to(gyre.ConsoleWriter()); callback.on_train_begin()
            >>> callback.on_test_batch_end(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 1.0))
            >>> callback.sent
            0
        """
        self._tell_resume(loop)  # before anything of this run is written
        self._train = True

    def on_train_batch_end(self, elapsed: Elapsed, logs: Logs, loop: Any = None) -> None:
        """In a named loop's ``callbacks=``: runs after every training step.

        Example:
            >>> import gyre
            >>> step = lambda state, batch: (gyre.logs().add_loss("loss", float(batch)), state + 1)
            >>> writer = gyre.ConsoleWriter()
            >>> _ = gyre.train_loop(0, [2, 1], {gyre.on_train_step: step}, callbacks=[gyre.write_to(writer)])
            step 0: loss=2
            step 1: loss=1
        """
        self._train = True
        self(elapsed, logs, loop)

    def on_test_batch_end(self, elapsed: Elapsed, logs: Logs, loop: Any = None) -> None:
        """In a ``test_loop`` or ``predict_loop``: runs after every step; in a ``train_loop`` the
        evaluations come through the training history instead.

        Example:
            >>> import gyre
            >>> step = lambda state, batch: gyre.logs().add_metric("accuracy", float(batch))
            >>> writer = gyre.ConsoleWriter()
            >>> _ = gyre.test_loop(None, [0.5], {gyre.on_test_step: step}, callbacks=[gyre.write_to(writer)])
            step 0: accuracy=0.5
        """
        if not self._train:
            self(elapsed, logs, loop)

    on_predict_batch_end = on_test_batch_end

    def flush(self) -> None:
        """Sends every record not sent yet (waiting for the device) and flushes the writer.

        Example:
            >>> import gyre
            >>> callback = gyre.write_to(gyre.ConsoleWriter())
            >>> callback(gyre.Elapsed(steps=0), gyre.logs().add_loss("loss", 0.5)); callback.flush()
            step 0: loss=0.5
        """
        if self._silent:
            return
        self._send(wait=True)
        self.writer.flush()

    on_loop_end = flush  # (in a train_loop, an evaluation's end too: its last record is not the run's)

    def _on_saved(self) -> None:
        """After a checkpoint's save: sends the records read so far and has the writer flush them,
        without waiting. A killed run's file then holds the steps before that checkpoint, which a
        resume from it keeps: CSVWriter's text sat in its buffer (a kill at step 950 of a run saved at
        801 left rows 0-506 on disk, and the resumed run wrote 801 on: rows 507-800 lost)."""
        if not self._skipped():
            self._send(wait=False)
            self.writer._flush_soon()

    def _on_loop_failed(self) -> None:
        """A failed loop's records are sent too (``gyre.engine._engine._send_recorded``)."""
        self._train = False
        self.flush()

    def on_train_end(self) -> None:
        """In a ``train_loop``: sends the rest and flushes the writer (see :meth:`flush`)."""
        self._train = False
        self.flush()

    def on_test_end(self) -> None:
        """In a ``test_loop`` or ``predict_loop``: sends the rest and flushes the writer."""
        if not self._train:
            self.flush()

    on_predict_end = on_test_end

    def _send(self, *, wait: bool) -> None:
        block = self._read(wait=wait, fresh=False)  # per-step records: in the history's batches
        if block.count and self.write_every == 1:  # turned into runs of rows on the writer's thread
            self.writer._write_block(block)
        elif block.count:  # which rows to write depends on the previous ones: decided here, in order
            keep = self._thinned(block, last=wait and not self._train)  # (the run's last step)
            if keep.any():
                self.writer._write_block(block, keep)
        self.sent += block.count

    def _thinned(self, block: Block, *, last: bool) -> np.ndarray:
        """The rows to write under ``write_every``: its multiples, a row bringing a new name, and
        with ``last`` the block's last row."""
        keep = np.zeros(block.count, bool)
        runs = list(scalar_runs(block))
        for i, (start, names, steps, _, _) in enumerate(runs):
            mask = steps % self.write_every == 0
            mask[0] |= not self._written.issuperset(names)
            mask[-1] |= last and i == len(runs) - 1
            if mask.any():
                keep[start : start + len(steps)] = mask
                self._written = frozenset(names)
        return keep

    def __repr__(self) -> str:
        extra = f", write_every={self.write_every}" if self.write_every != 1 else ""
        return f"gyre.write_to({self.writer!r}, every={self.every}{extra})"


@keywords_checked
def write_to(writer: Writer, *, every: int = 1, write_every: int = 1) -> WriteTo:
    """A callback that sends every step's scalar entries to a writer, at their own 0-based steps.

    Entries go out by bare names (``collection.name`` when two collections share one); arrays
    are left out. It follows the loop's history, never waiting for the device, so records arrive
    a block or so late; at the loop's end it sends the rest and flushes (not closes) the writer.
    Under a schedule of its own it still writes every record from the loop's first step.

    Args:
        writer: any :class:`gyre.Writer`.
        every: steps between two reads of the history (when records arrive, not which).
        write_every: write only steps that are multiples of this, plus each step that logs a new
            name (an evaluation's ``loss_test``) and the last step; for backends that cost much
            per step (W&B, MLflow).

    Raises:
        TypeError: ``writer`` is not a gyre writer, or one that does not write scalars.
        ValueError: ``every`` or ``write_every`` is not a whole number >= 1.

    Example:
        >>> import gyre
        >>> step = lambda elapsed: gyre.logs().add_loss("loss", 1.0 / 2 ** elapsed.steps)
        >>> writer = gyre.ConsoleWriter()
        >>> _ = gyre.loop(None, range(3), {gyre.every(1): step, **gyre.write_to(writer)})
        step 0: loss=1
        step 1: loss=0.5
        step 2: loss=0.25
        >>> writer.close()
    """
    return WriteTo(writer, every=every, write_every=write_every)
