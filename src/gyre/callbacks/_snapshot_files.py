"""The files beside a checkpoint directory's steps (:attr:`Snapshot.files`), written atomically by
process 0 and listed in ``gyre-files.json`` so gyre deletes only what it wrote."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

from gyre.core._errors import describe, explain

MARKER = "gyre-files.json"
RESERVED = (".orbax-checkpoint-tmp", ".corrupt")  # in the names of steps' directories
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=-]*$")
_TEMPORARY = ".tmp-gyre-"


def check_file_name(name: Any) -> str:
    """A :attr:`Snapshot.files` name, checked: a relative path not taken for a step, temporary or marker."""
    parts = name.split("/") if isinstance(name, str) else []
    top = parts[0] if parts else ""
    if (
        not parts
        or not all(_PART.match(p) for p in parts)
        or top.isdigit()
        or top == MARKER
        or any(word in top for word in RESERVED)
        or _TEMPORARY in parts[-1]
    ):
        raise ValueError(explain(
            "a checkpoint file name must be a relative path of plain names",
            expected="'folder/name.json': letters, digits, '_', '-', '.', '=' per part, "
            "not starting with '.', and a first part that is not a step number",
            received=describe(name), fix="name the files of a Snapshot like 'history/000120.json'"))
    return name


def _write_atomically(path: str, data: bytes) -> None:
    temporary = f"{path}{_TEMPORARY}{os.getpid()}"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


class Files:
    """The files under a checkpoint directory ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, name: str) -> str:
        return os.path.join(self.root, *check_file_name(name).split("/"))

    def write(self, files: Mapping[str, bytes]) -> None:
        """Writes each file atomically (the caller writes on process 0 only)."""
        names = [check_file_name(name) for name in files]
        for name in names:
            path = self._path(name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomically(path, bytes(files[name]))
        self._mark({name.split("/")[0] for name in names})

    def _mark(self, names: set[str]) -> None:
        current = self.tops()
        tops = sorted(set(current) | names)
        if tops != current:
            os.makedirs(self.root, exist_ok=True)
            _write_atomically(os.path.join(self.root, MARKER), json.dumps({"names": tops}).encode())

    def tops(self) -> list[str]:
        """The top-level names of the files gyre wrote here."""
        try:
            with open(os.path.join(self.root, MARKER)) as f:
                names = json.load(f).get("names", [])
        except (OSError, ValueError, AttributeError):
            return []
        return sorted(n for n in names if isinstance(n, str) and _PART.match(n) and not n.isdigit())

    def read(self, name: str) -> bytes | None:
        """The content of file ``name``, or ``None`` when there is none."""
        try:
            with open(self._path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def list(self, folder: str) -> list[str]:
        """The files under ``folder`` (any depth), as sorted relative paths."""
        found = []
        for here, _, names in os.walk(self._path(folder.rstrip("/"))):
            for name in names:
                if _TEMPORARY not in name:
                    path = os.path.relpath(os.path.join(here, name), self.root)
                    found.append(path.replace(os.sep, "/"))
        return sorted(found)

    def delete(self) -> None:
        """Deletes every file gyre wrote here, and the marker."""
        for name in [*self.tops(), MARKER]:
            path = os.path.join(self.root, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)

    def copy_from(self, other: Files) -> None:
        """Copies ``other``'s files here (a run resumed from a checkpoint elsewhere)."""
        for name in other.tops():
            source = os.path.join(other.root, name)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(self.root, name), dirs_exist_ok=True)
            elif os.path.isfile(source):
                os.makedirs(self.root, exist_ok=True)
                shutil.copy2(source, os.path.join(self.root, name))
        self._mark(set(other.tops()))
