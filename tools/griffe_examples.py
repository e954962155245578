"""A griffe extension for the docs site (mkdocs.yml loads it): gyre's docstrings head their
doctests ``Example:``, which griffe's Google parser does not know (it knows ``Examples:``), so
their ``>>>`` lines would render as plain text; this renames the heading before parsing."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Reads each ``Example:`` section heading as ``Examples:``."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
