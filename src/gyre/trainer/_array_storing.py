"""The kpoeppel jax_trainer fork's array specs and pytree files, without pickle.

Unlike the fork's pickles (arrays kept as specs: shape and first element), :func:`save_pytree`
writes one ``.npz`` with every array in full and the tree as JSON, so values come back exact.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gyre.core._checks import instance
from gyre.core._errors import describe, explain

_TREE = "__gyre_tree__"


@dataclass
class ArraySpec:
    """An array described by its shape, dtype, device (``"numpy"``, ``"cpu"``, ``"cuda:0"``) and one
    fill value.

    Example:
        >>> spec = ArraySpec(shape=(2,), dtype=np.float32, device="numpy", value=1.5)
        >>> spec_to_array(spec)
        array([1.5, 1.5], dtype=float32)
    """

    shape: tuple[int, ...]
    dtype: Any
    device: Any
    value: Any = 0


def array_to_spec(array: jax.Array) -> ArraySpec:
    """The spec of a JAX array: its shape, dtype, device and first element.

    Example:
        >>> spec = array_to_spec(jnp.array([3.0, 4.0]))
        >>> spec.shape, spec.value
        ((2,), 3.0)
    """
    device = next(iter(array.devices())) if hasattr(array, "devices") else array.device
    return ArraySpec(shape=tuple(array.shape), dtype=array.dtype, device=str(device),
                     value=array.reshape(-1)[0].item() if array.size else 0)


def np_array_to_spec(array: np.ndarray) -> ArraySpec:
    """The spec of a numpy array (device ``"numpy"``).

    Example:
        >>> np_array_to_spec(np.zeros((2, 3))).shape
        (2, 3)
    """
    return ArraySpec(shape=tuple(array.shape), dtype=array.dtype, device="numpy",
                     value=array.reshape(-1)[0] if array.size else 0)


def _device(name: Any) -> Any:
    if not isinstance(name, str):
        return name
    platform, _, index = name.partition(":")
    try:
        return jax.devices(platform.lower())[int(index or 0)]
    except (RuntimeError, ValueError, IndexError):
        return jax.devices()[0]  # a spec saved on another machine: the default device


def spec_to_array(spec: ArraySpec) -> Any:
    """The array a spec describes: numpy for device ``"numpy"``, else a JAX array on that device (or
    the default).

    Example:
        >>> spec_to_array(ArraySpec(shape=(2,), dtype=jnp.int32, device="cpu", value=7))
        Array([7, 7], dtype=int32)
    """
    instance(spec, "spec", ArraySpec, problem="spec_to_array takes an ArraySpec",
             expected="ArraySpec(shape=..., dtype=..., device=..., value=...)",
             fix="build the spec with array_to_spec(array) or ArraySpec(...)")
    if spec.device == "numpy":
        return np.full(spec.shape, spec.value, dtype=spec.dtype)
    return jax.device_put(jnp.full(spec.shape, spec.value, dtype=spec.dtype), _device(spec.device))


def convert_to_array_spec(value: Any) -> Any:
    """A JAX or numpy array as its :class:`ArraySpec`; anything else unchanged.

    Example:
        >>> convert_to_array_spec(np.ones(3)).shape, convert_to_array_spec(42)
        ((3,), 42)
    """
    if isinstance(value, jax.Array):
        return array_to_spec(value)
    if isinstance(value, np.ndarray):
        return np_array_to_spec(value)
    return value


def convert_from_array_spec(value: Any) -> Any:
    """An :class:`ArraySpec` as its array; anything else unchanged.

    Example:
        >>> convert_from_array_spec(ArraySpec((2,), np.int8, "numpy", 1)), convert_from_array_spec("a")
        (array([1, 1], dtype=int8), 'a')
    """
    return spec_to_array(value) if isinstance(value, ArraySpec) else value


def _unsupported(value: Any, where: str) -> TypeError:
    return TypeError(explain(
        f"save_pytree cannot store the leaf at {where or 'the root'}",
        expected="dicts with str keys, lists, tuples, None, bool, int, float, str, "
             "and numeric JAX or numpy arrays",
        received=describe(value),
        fix="convert it first (a dataclass to a dict, an object array to a list); "
        "gyre stores no pickled objects"))


def _encode(node: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    if isinstance(node, Mapping):
        if not all(isinstance(k, str) for k in node):
            raise _unsupported(node, where)
        return ["dict", {k: _encode(v, arrays, f"{where}/{k}") for k, v in node.items()}]
    if isinstance(node, (list, tuple)):
        return ["tuple" if isinstance(node, tuple) else "list",
                [_encode(v, arrays, f"{where}/{i}") for i, v in enumerate(node)]]
    if node is None or isinstance(node, (bool, int, float, str)):
        return ["value", node]
    if isinstance(node, (jax.Array, np.ndarray, np.generic)):
        host = np.asarray(jax.device_get(node))
        if host.dtype.hasobject:
            raise _unsupported(node, where)
        name = f"a{len(arrays)}"
        arrays[name] = host
        return ["array", name, "jax" if isinstance(node, jax.Array) else "numpy", str(host.dtype)]
    raise _unsupported(node, where)


def _decode(node: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    kind = node[0]
    if kind == "dict":
        return {k: _decode(v, arrays) for k, v in node[1].items()}
    if kind in ("list", "tuple"):
        items = [_decode(v, arrays) for v in node[1]]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return node[1]
    _, name, origin, dtype = node
    array = arrays[name]
    if str(array.dtype) != dtype:  # bfloat16 and friends come back as raw bytes
        array = array.view(jnp.dtype(dtype))
    return jnp.asarray(array) if origin == "jax" else array


def save_pytree(pytree: Any, path: str | os.PathLike[str]) -> None:
    """Writes ``pytree`` (dicts with str keys, lists, tuples, scalars, arrays) to the ``.npz`` file
    ``path``.

    Raises:
        TypeError: a leaf that cannot be stored without pickle, naming where it is.

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "tree")
        >>> save_pytree({"w": jnp.arange(3.0), "n": 2}, path)
        >>> load_pytree(path)
        {'w': Array([0., 1., 2.], dtype=float32), 'n': 2}
    """
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(pytree, arrays, "")
    with open(os.fspath(path), "wb") as out:
        np.savez(out, allow_pickle=False, **{_TREE: np.array(json.dumps(tree))}, **arrays)


def load_pytree(path: str | os.PathLike[str]) -> Any:
    """Reads a pytree written by :func:`save_pytree`, JAX arrays as JAX arrays, numpy as numpy.

    Raises:
        ValueError: the file is not one :func:`save_pytree` wrote (the fork's pickles included).

    Example:
        >>> import tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "tree.npz")
        >>> save_pytree((np.ones(2, np.int8), None), path)
        >>> load_pytree(path)
        (array([1, 1], dtype=int8), None)
    """
    try:
        with np.load(os.fspath(path), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(explain(
            f"load_pytree cannot read {os.fspath(path)!r}",
            expected="a file written by gyre's save_pytree (an .npz archive, read without pickle)",
            received=f"{type(error).__name__}: {error}",
            fix="save the tree again with gyre.trainer.save_pytree "
            "(the fork's save_pytree pickled, which gyre never loads)")) from None
    if _TREE not in arrays:
        raise ValueError(explain(
            f"load_pytree: {os.fspath(path)!r} is an .npz archive without gyre's tree",
            expected=f"a file written by save_pytree (it holds {_TREE!r})", received=f"the arrays {sorted(arrays)}",
            fix="read a plain archive with numpy.load; write trees with save_pytree"))
    return _decode(json.loads(str(arrays.pop(_TREE))), arrays)
