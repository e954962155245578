"""Data for gyre loops: batches of in-memory arrays and built-in data sets.

Example:
    >>> import gyre.data
    >>> (x_train, y_train), _ = gyre.data.digits()
    >>> x, y = next(gyre.data.batches((x_train, y_train), 32))
    >>> x.shape, y.shape
    ((32, 64), (32,))
"""

from gyre.data.arrays import batches as batches
from gyre.data.arrays import steps_per_epoch as steps_per_epoch
from gyre.data.datasets import digits as digits
from gyre.data.datasets import stratified_split as stratified_split

__all__ = ["batches", "digits", "steps_per_epoch", "stratified_split"]
