"""Checks shared by everything that holds jaxloop actions: a list of callables, each with a positive
whole ``interval``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gyre.core._checks import whole
from gyre.core._errors import describe, explain


def check_interval(interval: Any, owner: str) -> int:
    """``interval`` as an int >= 1, else a ``ValueError`` that says so."""
    return whole(interval, "interval", minimum=1, problem=f"{owner}'s interval must be a positive whole number",
                 expected="an int >= 1: the action runs every `interval` loops (or steps)",
                 fix="pass interval=1 to run it every time, interval=10 for every tenth")


def check_actions(actions: Any, name: str, owner: str, example: str) -> list[Any]:
    """``actions`` as a checked list (``None``: none); ``example`` is the action shown in the
    fix."""
    if actions is None:
        return []
    if callable(actions) or isinstance(actions, str | bytes | Mapping) or not isinstance(actions, Iterable):
        raise TypeError(explain(
            f"{owner}'s {name} must be a list of actions",
            expected=f"a list, e.g. {name}=[gyre.jaxloop.{example}]", received=describe(actions),
            fix=f"put the action in a list: {name}=[action]"))
    actions = list(actions)
    for action in actions:
        interval = getattr(action, "interval", None)
        if not callable(action) or interval is None:
            missing = "no interval" if callable(action) else "not callable"
            raise TypeError(explain(
                f"{owner}'s {name} must hold actions: {describe(action, 40)} is {missing}",
                expected="gyre.jaxloop.Action subclasses (or objects with an interval, called "
                "as action(state, outputs, **kwargs))",
                received=describe(action),
                fix="subclass gyre.jaxloop.Action, define __call__(self, state, outputs, **kwargs), "
                "and call super().__init__(interval=...) in any __init__ of your own"))
        check_interval(interval, type(action).__name__)
    return actions
