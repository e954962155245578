"""Writers: one contract (:class:`Writer`), many destinations, and :func:`write_to`, which feeds
them from a loop's history.

Example:
    >>> import gyre, io
    >>> out = io.StringIO()
    >>> step = lambda elapsed: gyre.logs().add_loss("loss", 0.5)
    >>> with gyre.loggers.ConsoleWriter(out) as writer:
    ...     _ = gyre.loop(None, range(2), {gyre.every(1): step, **gyre.loggers.write_to(writer)})
    >>> print(out.getvalue(), end="")
    step 0: loss=0.5
    step 1: loss=0.5
"""

from gyre.loggers._mlflow import MLflowWriter as MLflowWriter
from gyre.loggers._plain_files import ConsoleWriter as ConsoleWriter
from gyre.loggers._plain_files import CSVWriter as CSVWriter
from gyre.loggers._plain_files import JSONLWriter as JSONLWriter
from gyre.loggers._tensorboard import TensorBoardWriter as TensorBoardWriter
from gyre.loggers._wandb import WandbWriter as WandbWriter
from gyre.loggers._write_to import WriteTo as WriteTo
from gyre.loggers._write_to import write_to as write_to
from gyre.loggers._writer import MultiWriter as MultiWriter
from gyre.loggers._writer import Writer as Writer
from gyre.loggers._writer import WriterError as WriterError

__all__ = [
    "CSVWriter",
    "ConsoleWriter",
    "JSONLWriter",
    "MLflowWriter",
    "MultiWriter",
    "TensorBoardWriter",
    "WandbWriter",
    "WriteTo",
    "Writer",
    "WriterError",
    "write_to",
]
