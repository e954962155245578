"""``Logs``: what a step reports, grouped in collections, as a pytree that can leave ``jit``.

Collections: ``losses`` (what managed steps differentiate), ``metrics``, ``stateful_metrics``
(accumulated; the last value is the running result), ``outputs`` and custom names. Values stay
on the device: nothing here reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax

from gyre.core._checks import instance
from gyre.core._errors import ExplainedKeyError, describe, explain, suggest, warn

#: The standard collections, in the order a bare name is resolved (see :meth:`Logs.lookup`).
COLLECTIONS = ("losses", "metrics", "stateful_metrics", "outputs")


class Collection(dict):
    """One collection of a :class:`Logs`: a dict whose entries read as attributes.

    Example:
        >>> c = Collection(loss=1.0)
        >>> c.loss
        1.0
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"no entry {name!r} in this collection; it has {sorted(self)}"
            ) from None


class Logs(dict):
    """Named values a step reports, by collection: ``logs.metrics.accuracy``.

    Another ``Logs`` (or a dict of collections) merges in with :meth:`merge` or the write-only
    ``logs.updates = other``.

    Example:
        >>> logs = Logs()
        >>> logs.add_loss("loss", 0.5).add_metric("accuracy", 0.9)
        Logs(losses={'loss': 0.5}, metrics={'accuracy': 0.9})
        >>> logs.updates = {"metrics": {"f1": 0.8}}
        >>> sorted(logs.metrics)
        ['accuracy', 'f1']
    """

    def __getattr__(self, name: str) -> Collection:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "updates":  # the property's getter raised: keep its message
            raise AttributeError("logs.updates is write-only: assign logs to it to merge them in")
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no collection {name!r} in these logs; they have {sorted(self)}") from None

    def add_entry(self, collection: str, name: str, value: Any) -> Logs:
        """Adds ``value`` under ``collection.name`` (creating the collection); returns self."""
        if not isinstance(collection, str) or not isinstance(name, str):
            raise TypeError(explain(
                "log entries are named by strings",
                expected="add_entry(collection: str, name: str, value)",
                received=f"collection={describe(collection)}, name={describe(name)}",
                fix="pass the collection and entry names as strings"))
        other = _SHARED.get(collection)
        if other is not None and name in self.get(other, ()) and self[other][name] is not value:
            _warn_shared(name, collection, other)
        put(self, collection, name, value)
        return self

    def add_entries(self, collection: str, values: Mapping[str, Any]) -> Logs:
        """Adds every ``name: value`` of a mapping to ``collection``; returns self.

        Example:
            >>> Logs().add_entries("metrics", {"a": 1, "b": 2})
            Logs(metrics={'a': 1, 'b': 2})
        """
        instance(values, "values", Mapping, problem=f"add_{collection}() takes a mapping of names to values",
                 expected="a dict like {'accuracy': acc}", fix="pass a dict, or call the singular form for one value")
        for name, value in values.items():
            self.add_entry(collection, name, value)
        return self

    def add_metric(self, name: str, value: Any) -> Logs:
        """Adds a metric. Example: ``Logs().add_metric("acc", 1.0)``."""
        return self.add_entry("metrics", name, value)

    def add_metrics(self, values: Mapping[str, Any] | None = None, /, **entries: Any) -> Logs:
        """Adds several metrics, as a dict and/or as keywords (ciclo's form)."""
        return self._add_both("metrics", values, entries)

    def add_loss(self, name: str, value: Any, *, add_metric: bool = False) -> Logs:
        """Adds a loss; ``add_metric=True`` (ciclo's option) logs it as a metric too.

        Example:
            >>> Logs().add_loss("mse", 0.1, add_metric=True)
            Logs(losses={'mse': 0.1}, metrics={'mse': 0.1})
        """
        self.add_entry("losses", name, value)
        return self.add_entry("metrics", name, value) if add_metric else self

    def add_losses(
        self, values: Mapping[str, Any] | None = None, /, *, add_metrics: bool = False, **entries: Any
    ) -> Logs:
        """Adds several losses, as a dict and/or keywords (``add_metrics=True``: as metrics too).

        Example:
            >>> Logs().add_losses(mse=0.1, kl=0.2)
            Logs(losses={'mse': 0.1, 'kl': 0.2})
        """
        given = {**(values or {}), **entries}
        self._add_both("losses", values, entries)
        return self.add_entries("metrics", given) if add_metrics else self

    def add_stateful_metric(self, name: str, value: Any) -> Logs:
        """Adds a metric accumulated across steps (its last value is the running result)."""
        return self.add_entry("stateful_metrics", name, value)

    def add_stateful_metrics(self, values: Mapping[str, Any] | None = None, /, **entries: Any) -> Logs:
        """Adds several stateful metrics, as a dict and/or keywords.

        Example:
            >>> Logs().add_stateful_metrics(**{"a": 1, "b": 2})
            Logs(stateful_metrics={'a': 1, 'b': 2})
        """
        return self._add_both("stateful_metrics", values, entries)

    def add_output(self, name: str, value: Any) -> Logs:
        """Adds an output (predictions, embeddings...). Example: ``Logs().add_output("y", 1)``."""
        return self.add_entry("outputs", name, value)

    def add_outputs(self, values: Mapping[str, Any] | None = None, /, **entries: Any) -> Logs:
        """Adds several outputs, as a dict and/or as keywords."""
        return self._add_both("outputs", values, entries)

    def _add_both(self, collection: str, values: Mapping[str, Any] | None, entries: Mapping[str, Any]) -> Logs:
        """Adds the dict ``values`` (unless ``None``), then the keyword ``entries``."""
        if values is not None:
            self.add_entries(collection, values)
        return self.add_entries(collection, entries)

    def merge(self, other: Mapping[str, Mapping[str, Any]] | None) -> Logs:
        """Merges another ``Logs`` or dict of collections (``None``: nothing) in; returns self.

        Entries of ``other`` replace entries of the same name.

        Example:
            >>> a = Logs().add_metric("x", 1)
            >>> a.merge(Logs().add_metric("x", 2).add_loss("l", 3))
            Logs(metrics={'x': 2}, losses={'l': 3})
        """
        if other is None or other is self:
            return self
        if type(other) is not Logs:  # a Logs is well formed by construction
            _check_collections(other)
        for collection, entries in other.items():
            mine = self.get(collection)
            if mine is None:
                self[collection] = Collection(entries)
            else:
                mine.update(entries)
        return self

    # reading it falls through to __getattr__, which says it is write-only
    updates = property(None, merge, doc="Write-only: ``logs.updates = other`` merges ``other`` in (``None``: nothing).")

    def entries(self) -> Iterator[tuple[str, str, Any]]:
        """Every ``(collection, name, value)``."""
        for collection, values in self.items():
            for name, value in values.items():
                yield collection, name, value

    def entry_path(self, key: str) -> tuple[str, str] | None:
        """ciclo's ``entry_path``: ``(collection, name)`` of a key (see :meth:`lookup`), or None.

        Example:
            >>> Logs().add_metric("acc", 1).entry_path("acc")
            ('metrics', 'acc')
        """
        if "." in key:
            collection, _, name = key.partition(".")
            if name in self.get(collection, ()):
                return collection, name
        for collection in resolution_order(self):
            if key in self[collection]:
                return collection, key
        return None

    def entry_collection(self, key: str) -> str | None:
        """The collection holding ``key`` (see :meth:`entry_path`), or ``None``."""
        path = self.entry_path(key)
        return None if path is None else path[0]

    def entry_value(self, key: str) -> Any:
        """The value of ``key`` (see :meth:`lookup`), or a ``KeyError`` listing the entries.

        Example:
            >>> Logs().add_metric("acc", 0.5).entry_value("metrics.acc")
            0.5
        """
        path = self.entry_path(key)
        if path is None:
            names = [f"{c}.{n}" for c, n, _ in self.entries()]
            raise ExplainedKeyError(explain(
                f"no entry {key!r} in these logs",
                expected="a logged name or 'collection.name'", received=f"{key!r}; the logs hold {names}",
                fix="use one of the names held" + suggest(key, [n.split('.')[1] for n in names])))
        return self[path[0]][path[1]]

    def lookup(self, key: str) -> tuple[bool, Any]:
        """``(found, value)`` of an entry by ``"collection.name"`` or bare ``"name"``.

        A bare name resolves to the first collection holding it: ``losses``, ``metrics``,
        ``stateful_metrics``, ``outputs``, then custom collections by name.

        Example:
            >>> logs = Logs().add_stateful_metric("acc", 2).add_metric("acc", 1)
            >>> logs.lookup("acc"), logs.lookup("stateful_metrics.acc"), logs.lookup("nope")
            ((True, 1), (True, 2), (False, None))
        """
        path = self.entry_path(key)
        return (False, None) if path is None else (True, self[path[0]][path[1]])

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={dict(v)!r}" for k, v in self.items())
        return f"Logs({inner})"


def _check_collections(other: Any) -> None:
    instance(other, "logs", Mapping, problem="logs can only be merged with logs",
             expected="a gyre.Logs or a dict of collections like {'metrics': {...}}",
             fix="build the value with gyre.logs().add_metric(name, value)")
    for collection, entries in other.items():
        if not isinstance(entries, Mapping):
            raise TypeError(explain(
                f"collection {collection!r} of the logs is not a mapping",
                expected="{collection: {name: value}}, e.g. {'metrics': {'acc': acc}}",
                received=f"{collection!r}: {describe(entries)}",
                fix="build the value with gyre.logs().add_metric(name, value)"))


def resolution_order(collections: Mapping[str, Any]) -> list[str]:
    """The order in which a bare name is looked up among ``collections``."""
    standard = [c for c in COLLECTIONS if c in collections]
    return standard + sorted(c for c in collections if c not in COLLECTIONS)


def put(logs: Logs, collection: str, name: str, value: Any) -> None:
    """Sets ``logs[collection][name]`` (creating the collection) without ``add_entry``'s checks."""
    found = logs.get(collection)
    if found is None:
        found = logs[collection] = Collection()
    found[name] = value


def logs() -> Logs:
    """A new, empty :class:`Logs`."""
    return Logs()


#: A Logs' structure: ``((collection, (name, ...)), ...)``, hashable.
Shape = tuple[tuple[str, tuple[str, ...]], ...]


def flatten_logs(value: Logs) -> tuple[list[Any], Shape]:
    """The values of a ``Logs`` in order, and its structure (also its pytree flattening)."""
    shape = tuple([(c, tuple(v)) for c, v in value.items()])
    children = [x for v in value.values() for x in v.values()]
    return children, shape


def unflatten_logs(shape: Shape, children: Any) -> Logs:
    """The ``Logs`` of :func:`flatten_logs`' structure holding ``children``."""
    out = Logs()
    values = iter(children)  # zip takes from ``names`` first: it never consumes a value too many
    for collection, names in shape:
        out[collection] = Collection(zip(names, values))  # noqa: B905 - names bounds it
    return out


jax.tree_util.register_pytree_node(Logs, flatten_logs, unflatten_logs)


_SHARED = {"losses": "metrics", "metrics": "losses"}


def _warn_shared(name: str, collection: str, other: str) -> None:
    """Explains a name logged as a loss and as a different metric (the bare name reads the loss)."""
    warn(
        f"{name!r} is logged as {other}.{name} and {collection}.{name} with different values in "
        f"one step: the bare name {name!r} reads losses.{name} (collect, monitors, bars); "
        f"metrics.{name} must be read by its qualified name\n"
        f"  fix: give them distinct names (e.g. '{name}_metric'), or log one value under both "
        f"with add_loss({name!r}, value, add_metric=True)"
    )
