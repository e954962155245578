"""Data for gyre loops: batches of in-memory arrays and built-in data sets.

``import gyre`` is enough: ``gyre.data`` needs only numpy; scikit-learn, which ships the
digits, is imported when :func:`digits` is called (``pip install 'gyre[examples]'``).

- :func:`digits`: ``((x_train, y_train), (x_test, y_test))`` as numpy arrays.
- :func:`batches`: a :class:`Batches` iterator of ``(x, y)`` batches, reshuffled every epoch,
  that knows its epoch length and saves its position (``state_dict`` / ``load_state_dict``),
  so a resumed run continues with exactly the next batch.
- :func:`steps_per_epoch`: how many batches one epoch holds.
- :func:`stratified_split`: the train/test indices ``digits`` uses, for your own arrays.

Example:
    >>> import gyre
    >>> (x_train, y_train), _ = gyre.data.digits()
    >>> x, y = next(gyre.data.batches((x_train, y_train), 32))
    >>> x.shape, y.shape
    ((32, 64), (32,))
    >>> gyre.data.steps_per_epoch(len(x_train), 32)
    44
"""

from gyre.data._arrays import Batches as Batches
from gyre.data._arrays import batches as batches
from gyre.data._arrays import steps_per_epoch as steps_per_epoch
from gyre.data._datasets import digits as digits
from gyre.data._datasets import stratified_split as stratified_split

__all__ = ["Batches", "batches", "digits", "steps_per_epoch", "stratified_split"]
