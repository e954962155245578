"""What makes a checkpoint trustworthy: each leaf's path, shape, dtype and CRC-32 (of its bytes in C
order; none for a leaf split over processes), recorded at save and compared around a restore."""

from __future__ import annotations

import re
import zlib
from typing import Any

import jax
import numpy as np

from gyre.core._errors import describe, explain
from gyre.core._host import fetch

Leaf = dict[str, Any]  # {"path": str, "shape": [int], "dtype": str, "crc32": int | None}


class Unreadable(Exception):
    """A checkpoint that must not be loaded: ``kind`` is ``"corrupt"`` or ``"fit"`` (another tree)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def leaf_path(path: tuple[Any, ...]) -> str:
    """A leaf's key path as ``"params/Dense_0/kernel"`` (dict and dataclass states alike)."""
    return jax.tree_util.keystr(tuple(path), simple=True, separator="/")


def _is_key(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def leaf_type(x: Any, *, where: str = "state") -> tuple[tuple[int, ...], str]:
    """A leaf's ``(shape, dtype name)``; a Python number's dtype is its type's name."""
    if isinstance(x, (bool, int, float, complex)):
        return (), type(x).__name__
    if isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)):
        return tuple(int(n) for n in x.shape), str(x.dtype)
    raise TypeError(explain(
        f"a checkpoint saves arrays and numbers; the {where} holds something else",
        expected="a pytree whose leaves are jax or numpy arrays or Python numbers", received=describe(x),
        fix="keep other values out of the state (static fields of a flax struct, "
        "or the callback's JSON-able state_dict)"))


def _crc(host: Any) -> int:
    flat = np.ascontiguousarray(np.asarray(host)).reshape(-1)
    return zlib.crc32(flat.view(np.uint8)) if flat.size else 0


def _in_host_memory(x: Any) -> bool:
    """Whether ``x`` is held whole by this process's CPU devices (read in place)."""
    return isinstance(x, jax.Array) and x.is_fully_addressable and all(
        d.platform == "cpu" for d in x.sharding.device_set)


def _host_values(leaves: list[Any]) -> list[Any]:
    """The host values of ``leaves``, the ones not on the host in one transfer."""
    away = [x for x in leaves if not _in_host_memory(x)]
    fetched = iter(fetch(away) if away else ())
    return [np.asarray(x) if _in_host_memory(x) else next(fetched) for x in leaves]


def checksums(leaves: list[Any]) -> list[int | None]:
    """CRC-32 of each leaf's bytes; ``None`` for a leaf no process holds whole."""
    readable = [not (isinstance(x, jax.Array) and not x.is_fully_addressable) for x in leaves]
    raw = [jax.random.key_data(x) if _is_key(x) else x for x, ok in zip(leaves, readable, strict=True) if ok]
    host = iter(_host_values(raw))
    return [_crc(next(host)) if ok else None for ok in readable]


def describe_tree(tree: Any, *, with_checksums: bool, where: str = "state") -> list[Leaf]:
    """Every leaf of ``tree``: path, shape, dtype and (when asked) checksum."""
    leaves, paths, _ = _structure(tree)
    types = [leaf_type(x, where=where) for x in leaves]
    sums = checksums(leaves) if with_checksums else [None] * len(leaves)
    return [{"path": path, "shape": list(shape), "dtype": dtype, "crc32": crc}
            for path, (shape, dtype), crc in zip(paths, types, sums, strict=True)]


#: leaf paths and empty nodes by tree structure: a run saves one structure again and again
_STRUCTURES: dict[Any, tuple[list[str], list[str]]] = {}


def _structure(tree: Any) -> tuple[list[Any], list[str], list[str]]:
    """``tree``'s leaves, their paths and its empty nodes' paths, computed once per structure."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    try:
        known = _STRUCTURES.get(treedef)
    except TypeError:  # a node whose static data cannot be hashed: nothing is cached
        treedef, known = None, None
    if known is None:
        paths = [leaf_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
        flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_empty)[0]
        known = (paths, [leaf_path(p) for p, x in flat if _is_empty(x)])
        if treedef is not None:
            if len(_STRUCTURES) >= 64:
                _STRUCTURES.clear()
            _STRUCTURES[treedef] = known
    return leaves, known[0], known[1]


def _one_sided(kind: str, target: Any, saved: Any) -> list[str]:
    """The paths of ``target`` missing from ``saved`` and the other way round, as problems."""
    missing = [p for p in target if p not in saved]
    extra = [p for p in saved if p not in target]
    return ([f"{len(missing)} target {kind} not in the checkpoint ({_listed(missing)})"] if missing else []) + (
        [f"{len(extra)} saved {kind} not in the target ({_listed(extra)})"] if extra else [])


def _listed(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _is_empty(x: Any) -> bool:
    return x is None or (isinstance(x, (dict, list, tuple)) and not x)


def empty_nodes(tree: Any) -> list[str]:
    """The paths of ``tree``'s nodes that hold no leaf (``None``, ``{}``, ``EmptyState()``)."""
    return list(_structure(tree)[2])


def mismatch(
    saved: list[Leaf], target: Any, *, where: str = "state", saved_empty: list[str] | None = None
) -> str | None:
    """Why ``target`` cannot receive the saved leaves (never cast), or ``None``."""
    wanted = {leaf_path(p): leaf_type(x, where=where) for p, x in jax.tree_util.tree_flatten_with_path(target)[0]}
    have = {d["path"]: (tuple(d["shape"]), d["dtype"]) for d in saved}
    problems = [] if saved_empty is None else _one_sided("nodes", empty_nodes(target), saved_empty)
    problems += _one_sided("leaves", wanted, have)
    hidden = 0
    for i, what in enumerate(("shape", "dtype")):
        differ = [p for p in wanted if p in have and have[p][i] != wanted[p][i]]
        problems += [f"{what} of {p or 'the state'}: saved {have[p][i]}, target {wanted[p][i]}" for p in differ[:3]]
        hidden += max(len(differ) - 3, 0)
    if hidden:
        problems.append(f"{hidden} more leaves of another shape or dtype")
    return "; ".join(problems) or None


def abstract(target: Any) -> Any:
    """The target as sharded ``jax.ShapeDtypeStruct`` (default: the first local device)."""
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def one(x: Any) -> Any:
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, jax.ShapeDtypeStruct) and x.sharding is None:
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device)
        return x

    return jax.tree_util.tree_map(one, target)


def verify(saved: list[Leaf], restored: Any) -> None:
    """Raises :class:`Unreadable` when a restored leaf's checksum is not the saved one."""
    expected = {d["path"]: d.get("crc32") for d in saved}
    flat = jax.tree_util.tree_flatten_with_path(restored)[0]
    checked = [(leaf_path(p), x) for p, x in flat if expected.get(leaf_path(p)) is not None]
    if not checked:
        return
    sums = checksums([x for _, x in checked])
    bad = [path for (path, _), crc in zip(checked, sums, strict=True) if crc is not None and crc != expected[path]]
    if bad:
        raise Unreadable(
            "corrupt",
            f"the values of {_listed(bad)} differ from those saved (checksum mismatch: the "
            "files were changed after the save)")


_STATUS = {
    "NOT_FOUND": "a file is missing",
    "OUT_OF_RANGE": "a file is truncated",
    "DATA_LOSS": "a file is damaged",
    "FAILED_PRECONDITION": "a file is damaged",
    "INVALID_ARGUMENT": "a file is damaged",
}


def _status_line(text: str, step_dir: str | None) -> str | None:
    status = re.match(r"([A-Z_]{4,}):", text)
    if not status:
        return None
    head = text.split("[tensorstore_spec")[0]
    files = re.findall(r'local file "([^"]+)"', head)
    where = files[-1] if files else ""
    if where.endswith("/"):  # the database, not a file: name the array read instead
        keys = re.findall(r'Error (?:reading|writing) "([^"/]+)/', head)
        where = f"array {keys[0]}" if keys else ""
    elif where and step_dir and where.startswith(step_dir.rstrip("/") + "/"):
        where = where[len(step_dir.rstrip("/")) + 1 :]
    meaning = _STATUS.get(status.group(1), status.group(1).lower().replace("_", " "))
    return f"{meaning} ({where})" if where else meaning


def reason(err: BaseException, step_dir: str | None = None) -> str:
    """One readable line for an error reading a checkpoint (a TensorStore status: its meaning and file)."""
    chain, seen = [err], {id(err)}
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and id(nxt) not in seen:
        chain.append(nxt)
        seen.add(id(nxt))
    for one in chain:
        line = _status_line(str(one).strip(), step_dir)
        if line is not None:
            return line
    text = str(err).strip()
    if not text:
        return type(err).__name__
    line = re.split(r"\s*(?:See full TensorStore details|\[tensorstore_spec)", text.splitlines()[0])[0]
    if len(line) > 160:
        line = line[:157] + "..."
    return f"{type(err).__name__}: {line}"
