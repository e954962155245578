"""Data for gyre loops: batches of in-memory arrays and built-in data sets (docs/how-to/datasets.md).

``gyre.data`` needs only numpy; :func:`digits` imports scikit-learn when called
(``pip install 'gyre[examples]'``).

Example:
    >>> import gyre
    >>> (x_train, y_train), _ = gyre.data.digits()
    >>> x, y = next(gyre.data.batches((x_train, y_train), 32))
    >>> x.shape, y.shape
    ((32, 64), (32,))
"""

from gyre.data._adapters import NumpyLoader as NumpyLoader
from gyre.data._adapters import from_tf as from_tf
from gyre.data._adapters import from_torch as from_torch
from gyre.data._arrays import Batches as Batches
from gyre.data._arrays import batches as batches
from gyre.data._arrays import steps_per_epoch as steps_per_epoch
from gyre.data._augment import Augmented as Augmented
from gyre.data._augment import augment as augment
from gyre.data._augment import augmented as augmented
from gyre.data._augment import random_crop as random_crop
from gyre.data._augment import random_flip as random_flip
from gyre.data._batch import ProcessShare as ProcessShare
from gyre.data._batch import Supervised as Supervised
from gyre.data._batch import SupervisedBatch as SupervisedBatch
from gyre.data._batch import process_share as process_share
from gyre.data._batch import supervised as supervised
from gyre.data._datasets import cifar10 as cifar10
from gyre.data._datasets import digits as digits
from gyre.data._datasets import fashion_mnist as fashion_mnist
from gyre.data._datasets import mnist as mnist
from gyre.data._datasets import stratified_split as stratified_split
from gyre.data._padding import Padded as Padded
from gyre.data._padding import accepts_mask as accepts_mask
from gyre.data._padding import pad_batch as pad_batch
from gyre.data._padding import padded as padded
from gyre.data._source import EvalBatches as EvalBatches
from gyre.data._source import GrainBatches as GrainBatches
from gyre.data._source import Sources as Sources
from gyre.data._source import arrays as arrays

__all__ = [
    "Augmented",
    "Batches",
    "EvalBatches",
    "GrainBatches",
    "NumpyLoader",
    "Padded",
    "ProcessShare",
    "Sources",
    "Supervised",
    "SupervisedBatch",
    "accepts_mask",
    "arrays",
    "augment",
    "augmented",
    "batches",
    "cifar10",
    "digits",
    "fashion_mnist",
    "from_tf",
    "from_torch",
    "mnist",
    "pad_batch",
    "padded",
    "process_share",
    "random_crop",
    "random_flip",
    "steps_per_epoch",
    "stratified_split",
    "supervised",
]
