"""Plain text: ``ConsoleWriter`` prints lines; ``CSVWriter`` and ``JSONLWriter`` write scalars to files, one
record per write."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from typing import Any, TextIO

from gyre.core import _checks as checks
from gyre.core._errors import explain, keywords_checked
from gyre.loggers._writer import Writer


class _TextFileWriter(Writer):
    """A writer of scalars to one text file, created (or truncated) at once, its folder too; a run
    resumed from a checkpoint (``write_to`` tells it) keeps the earlier run's records of the steps before,
    and a writer closed without writing leaves the file as it was."""

    kinds = frozenset({"scalars"})
    _newline: str | None = None  # open()'s newline=
    _file: TextIO | None = None

    @keywords_checked
    def __init__(self, path: str | os.PathLike[str]) -> None:
        who = type(self).__name__
        self.path = checks.path(path, f"{who} needs a file path", expected="a str or pathlib.Path, e.g. "
                                "'runs/metrics.csv'", fix=f"gyre.{who}('runs/metrics.csv')")
        if os.path.isdir(self.path):
            name = "metrics.jsonl" if who == "JSONLWriter" else "metrics.csv"
            raise IsADirectoryError(explain(
                f"{who} needs a file path, and {self.path!r} is a folder",
                expected="the path of the file to write (created, or replaced)", received=f"the folder {self.path!r}",
                fix=f"gyre.{who}(os.path.join({self.path!r}, {name!r}))"))
        super().__init__()

    def _open(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:  # what an earlier run wrote: kept in part if this run resumes it (_purge), before any write
            with open(self.path, newline=self._newline) as earlier:
                self._earlier: str | None = earlier.read()
        except (FileNotFoundError, UnicodeDecodeError):
            self._earlier = None
        self._file = open(self.path, "w", newline=self._newline)  # noqa: SIM115 (closed by close())

    def _purge(self, step: int) -> None:
        earlier, self._earlier = self._earlier, None
        if self._file is not None and self._file.tell():  # this writer wrote already (a loop that failed
            self._file.close()  # earlier in this process, resumed with it): the steps from ``step`` go
            with open(self.path, newline=self._newline) as own:
                earlier = own.read()
            self._file = open(self.path, "w", newline=self._newline)  # noqa: SIM115 (closed by close())
        if earlier and self._file is not None:
            # a last line without its end was cut short by the crash (a killed run's file ends where
            # its buffer was last written out): "9,9.2" of "9,9.25", or "1" of "10,10.25", is no record
            self._keep(earlier[: earlier.rfind("\n") + 1].removeprefix("\ufeff"), step)  # (a BOM: saved by Excel)

    def _keep(self, earlier: str, step: int) -> None:
        """Writes again the records of ``earlier`` (the file's text) of steps before ``step``."""
        raise NotImplementedError

    @staticmethod
    def _before(value: Any, step: int) -> bool:
        """Whether a record's ``step`` (``5``; ``"5"`` or ``"5.0"`` in a CSV a spreadsheet saved) is before ``step``."""
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return False
        return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer() and value < step

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        self._earlier = None  # this run writes: a resume's word came before (no earlier text to keep)
        self._record(step, values)

    def _record(self, step: int, values: dict[str, float]) -> None:
        """Writes one record of ``values`` at ``step``."""
        raise NotImplementedError

    def _flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def _close(self) -> None:
        if self._file is not None:
            if self._earlier and not self._file.tell():  # nothing written nor resumed (a resume the loop
                self._file.write(self._earlier)  # refused, say): the file is left as it was, not emptied
            self._file.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


class CSVWriter(_TextFileWriter):
    """Writes scalars to a CSV file (created or truncated at once, its folder too): ``step``, then a
    column per name; a name that appears late rewrites the file once with the wider header. A run
    resumed from a checkpoint keeps the earlier run's rows of the steps before the resumed one.

    Example:
        >>> import gyre, os, tempfile
        >>> with tempfile.TemporaryDirectory() as root:
        ...     path = os.path.join(root, "metrics.csv")
        ...     with gyre.CSVWriter(path) as writer:
        ...         writer.write_scalars(0, {"loss": 1.0})
        ...         writer.write_scalars(1, {"loss": 0.5, "accuracy": 0.75})
        ...     print(open(path).read(), end="")
        step,loss,accuracy
        0,1.0,
        1,0.5,0.75
    """

    _newline = ""  # the csv module's own line ends

    def _open(self) -> None:
        self._header = ["step"]
        super()._open()

    def _keep(self, earlier: str, step: int) -> None:
        self._header = ["step"]
        reader = csv.DictReader(io.StringIO(earlier, newline=""))
        names = [name for name in reader.fieldnames or () if name and name != "step"]  # ("": pandas' index)
        rows = [{name: row.get(name) for name in ["step", *names]} for row in reader if self._before(row.get("step"), step)]
        if rows:  # (the step column first, as this writer writes it; fields beyond the header dropped)
            self._header = ["step", *names]
            writer = csv.DictWriter(self._file, self._header, restval="")  # type: ignore[arg-type]
            writer.writeheader()
            writer.writerows(rows)

    def _record(self, step: int, values: dict[str, float]) -> None:
        assert self._file is not None
        if new := [name for name in values if name not in self._header]:
            self._widen(new)
        row = {"step": step, **values}
        csv.DictWriter(self._file, self._header, restval="").writerow(row)

    def _widen(self, new: list[str]) -> None:
        assert self._file is not None
        self._file.close()
        with open(self.path, newline="") as old:
            rows = list(csv.DictReader(old)) if len(self._header) > 1 else []
        self._header = self._header + new
        temporary = self.path + ".tmp"
        with open(temporary, "w", newline="") as out:
            writer = csv.DictWriter(out, self._header, restval="")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(temporary, self.path)
        self._file = open(self.path, "a", newline="")  # noqa: SIM115


class JSONLWriter(_TextFileWriter):
    """Writes scalars as JSON lines, one ``{"step": ..., name: value}`` per write (file created or
    truncated at once, a resumed run keeping the earlier run's lines before its step; non-finite as ``NaN``).

    Example:
        >>> import gyre, pathlib, tempfile
        >>> with tempfile.TemporaryDirectory() as root, gyre.JSONLWriter(f"{root}/m.jsonl") as writer:
        ...     writer.write_scalars(0, {"loss": 1.0}); writer.flush()
        ...     print(pathlib.Path(writer.path).read_text(), end="")
        {"step": 0, "loss": 1.0}
    """

    def _keep(self, earlier: str, step: int) -> None:
        assert self._file is not None
        for line in earlier.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # (a line the user broke)
            if isinstance(record, dict) and self._before(record.get("step"), step):
                self._file.write(line + "\n")

    def _record(self, step: int, values: dict[str, float]) -> None:
        assert self._file is not None
        self._file.write(json.dumps({"step": step, **values}) + "\n")


def _pairs(values: dict[str, Any]) -> str:
    """``name=value, ...``, floats to 6 significant digits."""
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


class ConsoleWriter(Writer):
    """Prints ``step 3: loss=0.25, accuracy=0.9`` lines (and texts, and hyperparameters) to ``file``
    (default: ``sys.stdout`` at each write).

    Example:
        >>> import gyre
        >>> with gyre.ConsoleWriter() as writer:
        ...     writer.write_scalars(3, {"loss": 0.25, "accuracy": 0.9})
        step 3: loss=0.25, accuracy=0.9
    """

    kinds = frozenset({"scalars", "texts", "hparams"})

    def __init__(self, file: TextIO | None = None) -> None:
        self.file = file
        super().__init__()

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        print(f"step {step}: {_pairs(values)}", file=self.file)

    def _texts(self, step: int, texts: dict[str, str]) -> None:
        for name, text in texts.items():
            print(f"step {step}: {name}: {text}", file=self.file)

    def _hparams(self, params: dict[str, Any], metrics: dict[str, float] | None) -> None:
        print(f"hparams: {_pairs(params)}", file=self.file)
        if metrics:
            print(f"hparams metrics: {_pairs(metrics)}", file=self.file)

    def _flush(self) -> None:
        (self.file if self.file is not None else sys.stdout).flush()

    def __repr__(self) -> str:
        return "ConsoleWriter()" if self.file is None else f"ConsoleWriter({self.file!r})"
