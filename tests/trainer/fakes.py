"""A fake trainer (the :class:`gyre.trainer._callback.TrainerView` members, nothing else), a
writer that records what it is given, and a driver that calls a callback's hooks in the order
the TrainerModule does."""

import pathlib
from types import SimpleNamespace

import gyre
from gyre.trainer._callback import overrides_training_step


class RecordingWriter(gyre.Writer):
    """Records every write as given, on the caller's thread, without reading any value
    (so a test can check that a hook passed the very device array, unread). The arguments
    are checked as a real writer checks them (it is inactive: nothing is queued)."""

    kinds = frozenset({"scalars", "images", "histograms", "texts"})

    def __init__(self, kinds=None):
        if kinds is not None:
            self.kinds = frozenset(kinds)
        self.calls = []
        super().__init__()
        self.active = False  # checks arguments, starts no thread, reads nothing

    def write_scalars(self, step, values):
        super().write_scalars(step, values)
        self.calls.append(("scalars", step, dict(values)))

    def write_images(self, step, images):
        super().write_images(step, images)
        self.calls.append(("images", step, dict(images)))

    def of(self, kind):
        return [(step, values) for k, step, values in self.calls if k == kind]


class FakeTrainer:
    """The TrainerView members: a run folder, a state, a writer, a step count, a stop
    request and a learning rate."""

    def __init__(self, log_dir, *, writer=None, lr=None, state=None):
        self.log_dir = pathlib.Path(log_dir)
        self.state = state if state is not None else SimpleNamespace(params={}, opt_state=(), step=0)
        self.writer = writer if writer is not None else RecordingWriter()
        self.global_step = 0
        self.stops = []
        self._lr = lr

    def stop_training(self, reason):
        self.stops.append(reason)

    def learning_rate(self):
        return self._lr


def drive(callbacks, trainer, *, epochs=4, steps=2, train=None, val=None, test=None, step_metrics=None):
    """Calls the hooks as a trainer does: bind, start, each epoch (training start, steps,
    end; validation start, end), training end, test start and end, finalize("success").

    ``train``/``val``/``test``/``step_metrics`` are functions of the epoch (and step) giving
    the metrics dicts; the trainer's global step counts the steps done."""
    for cb in callbacks:
        cb.bind(trainer)
    stepping = [cb for cb in callbacks if overrides_training_step(cb)]
    for cb in callbacks:
        cb.on_training_start()
    for epoch in range(1, epochs + 1):
        for cb in callbacks:
            cb.on_training_epoch_start(epoch)
        for _ in range(steps):
            trainer.global_step += 1
            metrics = step_metrics(epoch, trainer.global_step) if step_metrics else {}
            for cb in stepping:
                cb.on_training_step(metrics, epoch, trainer.global_step)
        for cb in callbacks:
            cb.on_training_epoch_end(train(epoch) if train else {"train/loss_epoch": 1.0}, epoch)
        for cb in callbacks:
            cb.on_validation_epoch_start(epoch)
        for cb in callbacks:
            cb.on_validation_epoch_end(val(epoch) if val else {"val/loss": 1.0}, epoch)
    for cb in callbacks:
        cb.on_training_end()
    for cb in callbacks:
        cb.on_test_epoch_start(epochs)
    for cb in callbacks:
        cb.on_test_epoch_end(test(epochs) if test else {"test/loss": 1.0}, epochs)
    for cb in callbacks:
        cb.finalize("success")
