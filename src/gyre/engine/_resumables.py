"""The objects of a loop whose state a checkpoint carries (docs/concepts/checkpoints.md: "Resume after a crash").

Anything in a task table with ``state_dict()``/``load_state_dict(d)`` is resumable; a
``state_dict`` holds JSON values and arrays (arrays through orbax, nothing pickled). Objects
are named by class and rank (``"EarlyStopping#2"``), so a table built the same way finds them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from gyre.core._errors import describe, explain
from gyre.core._host import to_python
from gyre.engine._binding import Invoker
from gyre.engine._snapshot import Checkpointer
from gyre.engine._tasks import Task

_ARRAY = "__gyre_array__"


def has_state(obj: Any) -> bool:
    """Whether ``obj`` has the ``state_dict``/``load_state_dict`` pair."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def owner_of(fn: Any) -> Any:
    """The object a callback belongs to: the instance behind a bound method, else itself."""
    owner = getattr(fn, "__self__", None)
    return fn if owner is None or isinstance(owner, type) else owner


def _candidates(tasks: Sequence[Task], extra: Iterable[Invoker]) -> Iterable[Any]:
    for task in tasks:
        if task.schedule is not None:
            yield task.schedule
        for invoker in task.invokers:
            yield owner_of(invoker.fn)
    for invoker in extra:
        yield owner_of(invoker.fn)


def collect(tasks: Sequence[Task], extra: Iterable[Invoker] = ()) -> dict[str, Any]:
    """The resumable objects of a table (and ``extra`` callbacks) by name, not checkpoints."""
    found: dict[str, Any] = {}
    seen: set[int] = set()
    counts: dict[str, int] = {}
    for obj in _candidates(tasks, extra):
        if id(obj) in seen or not has_state(obj) or isinstance(obj, Checkpointer):
            continue
        seen.add(id(obj))
        kind = type(obj).__name__
        counts[kind] = counts.get(kind, 0) + 1
        found[kind if counts[kind] == 1 else f"{kind}#{counts[kind]}"] = obj
    return found


def checkpointers(tasks: Sequence[Task], extra: Iterable[Invoker] = ()) -> list[Checkpointer]:
    """The checkpoints of a task table, each once, in table order."""
    found: list[Checkpointer] = []
    for obj in _candidates(tasks, extra):
        if isinstance(obj, Checkpointer) and all(obj is not c for c in found):
            found.append(obj)
    return found


# -- state dicts: JSON with arrays set aside ----------------------------------------------------


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (str, bytes))


def split_arrays(tree: Any, arrays: dict[str, Any], where: str) -> Any:
    """``tree`` with every array replaced by a reference into ``arrays``, so the rest is JSON."""
    if tree is None or isinstance(tree, (bool, str)):
        return tree
    if isinstance(tree, (Integral, Real)) and not _is_array(tree):
        return _json_number(tree, where)
    if isinstance(tree, np.generic):
        return _json_number(to_python(tree), where)
    if _is_array(tree):
        key = f"a{len(arrays)}"  # orbax item keys: plain names
        arrays[key] = tree
        return {_ARRAY: key}
    if isinstance(tree, Mapping):
        out = {}
        for key, value in tree.items():
            if not isinstance(key, str):
                _not_json(where, f"a key {describe(key)}")
            out[key] = split_arrays(value, arrays, f"{where}.{key}")
        return out
    if isinstance(tree, (list, tuple)):
        return [split_arrays(v, arrays, f"{where}.{i}") for i, v in enumerate(tree)]
    _not_json(where, describe(tree))


def _json_number(value: Any, where: str) -> Any:
    if isinstance(value, bool) or isinstance(value, Integral):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else {"__gyre_float__": repr(value)}


def _not_json(where: str, what: str) -> None:
    raise TypeError(explain(
        f"the state_dict value at {where} cannot be saved in a checkpoint",
        expected="JSON values (dicts with str keys, lists, str, numbers, bool, None) and arrays",
        received=what, fix="return plain values and arrays from state_dict(); flatten a pytree with "
        "jax.tree_util.tree_leaves and rebuild it in load_state_dict"))


def join_arrays(tree: Any, arrays: Mapping[str, Any]) -> Any:
    """The inverse of :func:`split_arrays`."""
    if isinstance(tree, Mapping):
        if set(tree) == {_ARRAY}:
            return arrays[tree[_ARRAY]]
        if set(tree) == {"__gyre_float__"}:
            return float(tree["__gyre_float__"])
        return {k: join_arrays(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [join_arrays(v, arrays) for v in tree]
    return tree


def state_dicts(objects: Mapping[str, Any], arrays: dict[str, Any]) -> dict[str, Any]:
    """The JSON side of every object's ``state_dict()``, arrays set aside into ``arrays``."""
    out = {}
    for name, obj in objects.items():
        values = obj.state_dict()
        if not isinstance(values, Mapping):
            raise TypeError(explain(
                f"{name}.state_dict() must return a dict",
                expected="a dict of JSON values and arrays", received=describe(values),
                fix="return e.g. {'count': self.count} from state_dict()"))
        out[name] = split_arrays(values, arrays, name)
    return out


def load_state_dicts(objects: Mapping[str, Any], saved: Mapping[str, Any], arrays: Mapping[str, Any]) -> list[str]:
    """Hands every object its saved ``state_dict``; returns the names with nothing saved."""
    missing = []
    for name, obj in objects.items():
        if name in saved:
            obj.load_state_dict(join_arrays(saved[name], arrays))
        else:
            missing.append(name)
    return missing
