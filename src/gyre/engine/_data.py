"""The data position of a running loop (``loop.data``), saved with a checkpoint.

Data sources: an object with ``state_dict()`` (the position after the batches handed out, as
JSON values in a new dict each call; it is called after every batch pulled, so keep it cheap,
or give ``index`` and ``state_dict_at(index)`` as ``gyre.data.batches`` does) and
``load_state_dict(d)`` (called before ``iter(obj)``; raise when ``d`` is another data's); a
grain iterator (``get_state``/``set_state``); anything else restarts or skips, by
``data_resume`` (docs/concepts/checkpoints.md: "Resume after a crash").
"""

from __future__ import annotations

import base64
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np

from gyre.core._checks import whole
from gyre.core._errors import describe, explain, suggest, warn
from gyre.data._arrays import Batches
from gyre.engine._elapse import check_dataset, check_iterable, dataset_epoch_steps

#: The values of ``data_resume=``.
DATA_RESUME = ("restart", "skip")

#: How a position is saved: the source's own ``state_dict``, grain's ``get_state``, or a count.
KINDS = ("state_dict", "grain", "count")


class Clock(Protocol):
    """What :meth:`DataTracker.follow` reads of the loop's clock (a :class:`~gyre.engine._elapse.Elapse`)."""

    @property
    def elapsed(self) -> Any: ...  # pragma: no cover

    @property
    def batch_size(self) -> int | None: ...  # pragma: no cover


def check_data_resume(data_resume: Any) -> str:
    """``data_resume`` when it is one of :data:`DATA_RESUME`, else the explained error."""
    if isinstance(data_resume, str) and data_resume in DATA_RESUME:
        return data_resume
    hint = suggest(data_resume, DATA_RESUME) if isinstance(data_resume, str) else ""
    raise ValueError(explain(
        "data_resume= must say how a resumed run treats data that cannot save its position",
        expected="'restart' (start the data again, with a warning) or 'skip' (pull and drop "
        "the batches consumed before the checkpoint: O(position))",
        received=describe(data_resume), fix="pass data_resume='restart' or data_resume='skip'." + hint))


def _has(obj: Any, *names: str) -> bool:
    return all(callable(getattr(obj, name, None)) for name in names)


class _Recorder(Iterator[Any]):
    """Iterates a stateful source and keeps its state after each of the latest pulls, so the
    position of a batch is known after the source has been read past it."""

    __slots__ = ("_next", "_capture", "states", "pulled")

    def __init__(self, pull: Callable[[], Any], capture: Callable[[], Any], keep: int) -> None:
        self._next = pull
        self._capture = capture
        self.states: deque[Any] = deque([capture()], maxlen=keep)  # the last: after `pulled`
        self.pulled = 0

    def __iter__(self) -> _Recorder:
        return self

    def __next__(self) -> Any:
        item = self._next()
        self.pulled += 1
        self.states.append(self._capture())
        return item

    def keep(self, keep: int) -> None:
        if keep > (self.states.maxlen or 0):
            self.states = deque(self.states, maxlen=keep)

    def restart(self) -> None:
        """Forgets the states taken so far (a position was loaded before any pull)."""
        self.states.clear()
        self.states.append(self._capture())

    def state_after(self, pulls: int) -> Any:
        """The source's state once ``pulls`` items had been taken from it."""
        index = pulls - (self.pulled - len(self.states) + 1)
        if not 0 <= index < len(self.states):
            raise RuntimeError(
                f"gyre internal error: the data position after {pulls} batches is no longer "
                f"known ({self.pulled} pulled, the last {len(self.states)} positions kept)"
            )
        return self.states[index]


class _Later(Iterator[Any]):
    """Starts a pass over a re-iterable source at its first pull, so a position loaded after
    the loop took its iterator still applies to the pass."""

    __slots__ = ("_start", "_it")

    def __init__(self, start: Callable[[], Iterator[Any]]) -> None:
        self._start = start
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> _Later:
        return self

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            it = self._it = self._start()
        return next(it)


class DataTracker:
    """A loop's dataset and the position of the batches it consumed (``loop.data``). ``track=False``:
    no position is kept for batches read ahead of their use (``state_dict()`` then fails there)."""

    def __init__(self, dataset: Any, data_resume: str = "restart", *, track: bool = True) -> None:
        self.data_resume = check_data_resume(data_resume)
        check_iterable(dataset)
        self.dataset = dataset
        self.epoch_steps = dataset_epoch_steps(dataset)
        self._track = bool(track)
        self._kind: str | None = None
        self._target: Any = None  # what state_dict / get_state is asked of
        self._it: Iterator[Any] | None = None  # the iterator pulled from, once made
        self._handed: Iterator[Any] | None = None  # what __iter__ returned
        self._recorder: _Recorder | None = None
        self._ahead = 0
        self._offset = 0  # count kind: batches of the source consumed before this loop
        self._clock: Clock | None = None
        self._start = 0
        # the position of any batch follows from its index (gyre's batches, the trainer's
        # epochs over a list): no recording after every pull
        self._indexed = isinstance(dataset, Batches) or (
            _has(dataset, "state_dict_at", "load_state_dict") and isinstance(getattr(dataset, "index", None), int)
        )
        self._base = 0  # their index when the loop started pulling

    @property
    def wrapped_dataset(self) -> Any:
        """The dataset (for messages about it: see :func:`gyre.engine._elapse.source_of`)."""
        return self.dataset

    @property
    def kind(self) -> str:
        """How the position is saved: ``"state_dict"``, ``"grain"`` or ``"count"``."""
        return self._open()

    def _open(self) -> str:
        """Finds how the dataset saves its position (the kind); makes its iterator when that
        is needed to tell (a grain dataset's state is its iterator's)."""
        if self._kind is not None:
            return self._kind
        dataset = self.dataset
        if _has(dataset, "state_dict", "load_state_dict"):
            self._kind, self._target = "state_dict", dataset
        elif _has(dataset, "get_state", "set_state"):
            self._kind, self._target = "grain", dataset
        else:
            self._it = it = check_dataset(dataset)
            if _has(it, "get_state", "set_state"):
                self._kind, self._target = "grain", it
            elif _has(it, "state_dict", "load_state_dict"):
                self._kind, self._target = "state_dict", it
            else:
                self._kind = "count"
        return self._kind

    def _capture(self) -> Callable[[], Any]:
        target = self._target
        return target.get_state if self._kind == "grain" else target.state_dict

    def _restore(self) -> Callable[[Any], Any]:
        """What puts the source at a captured position (:meth:`_capture`'s twin)."""
        target = self._target
        return target.set_state if self._kind == "grain" else target.load_state_dict

    def read_ahead(self, size: int) -> None:
        """Keeps positions ``size`` batches back: the batches are read that far ahead of use."""
        self._ahead = max(self._ahead, int(size))
        if self._recorder is not None:
            self._recorder.keep(self._ahead + 8)

    def __iter__(self) -> Iterator[Any]:
        """The iterator the loop pulls from, recording positions when the loop reads ahead."""
        if self._handed is not None:
            return self._handed
        self._open()
        later = self._it is None and self._target is self.dataset and not isinstance(self.dataset, Iterator)
        if later:  # a data loader with state_dict: its pass starts at the first pull
            handed: Iterator[Any] = _Later(self._start_pass)
        else:
            if self._it is None:
                self._it = check_dataset(self.dataset)
            handed = self._it
        if self._track and self._kind != "count" and not self._indexed:
            # fused chunks read one batch ahead, prefetching `size` more
            handed = self._recorder = _Recorder(handed.__next__, self._capture(), self._ahead + 8)
        self._handed = handed
        return handed

    def _start_pass(self) -> Iterator[Any]:
        self._it = check_dataset(self.dataset)
        return self._it

    def follow(self, clock: Clock) -> DataTracker:
        """Counts the batches consumed by the loop's clock from now on (a step in progress
        counts, as in the checkpoint's clock); returns the tracker."""
        self._clock = clock
        self._start = clock.elapsed.steps + (clock.batch_size is not None)
        if self._indexed:
            self._base = self.dataset.index
        return self

    @property
    def consumed(self) -> int:
        """Batches consumed since :meth:`follow` (the step in progress included)."""
        clock = self._clock
        if clock is None:
            raise RuntimeError("gyre internal error: the data tracker follows no clock (call follow())")
        return clock.elapsed.steps + (clock.batch_size is not None) - self._start

    def _pulled_any(self) -> bool:
        if self._recorder is not None and self._recorder.pulled:
            return True
        return self._clock is not None and self.consumed > 0

    def state_dict(self) -> dict[str, Any]:
        """The position after the batches the loop consumed: ``{"kind", "source", "state"}``,
        ``kind`` being ``"state_dict"``, ``"grain"`` or ``"count"`` (batches consumed).

        Raises:
            RuntimeError: the loop reads ahead and was told not to track the position.
            TypeError: a data source's ``state_dict()`` returned something JSON cannot hold.
        """
        kind = self.kind
        out: dict[str, Any] = {"kind": kind, "source": type(self.dataset).__name__}
        if kind == "count":
            out["state"] = self._offset + self.consumed
            return out
        state = self._position()
        if isinstance(state, (bytes, bytearray)):
            out["state"], out["encoding"] = _encode(bytes(state))
        else:
            out["state"] = to_json(state, f"the state of {type(self.dataset).__name__}")
        return out

    def _position(self) -> Any:
        if self._indexed and self._clock is not None:
            return self.dataset.state_dict_at(self._base + self.consumed)
        if self._recorder is not None:
            consumed = self.consumed if self._clock is not None else self._recorder.pulled
            return self._recorder.state_after(consumed)
        if self._handed is not None and not self._track and self._ahead:
            raise RuntimeError(
                "the data position is not tracked in this loop (it reads ahead of its use, "
                "and track_data(..., track=False) was given)"
            )
        return self._capture()()

    def give_back(self) -> None:
        """At the loop's end: a source that keeps its own position and was read ahead of the steps
        (prefetch, a fused chunk) is put back after the batches the loop consumed, so a next loop
        over it continues there. A plain iterator cannot be put back (``prefetch_to_device`` says so)."""
        if self._clock is None:
            return
        consumed = self.consumed
        if self._indexed:
            if self.dataset.index > self._base + consumed:
                self.dataset.load_state_dict(self.dataset.state_dict_at(self._base + consumed))
        elif self._recorder is not None and self._recorder.pulled > consumed and isinstance(self._target, Iterator):
            self._restore()(self._recorder.state_after(consumed))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Puts the dataset at the position ``state`` names, before the first batch is pulled.

        Raises:
            TypeError, ValueError: ``state`` is not a saved data position, or another dataset's.
            RuntimeError: batches were pulled already.
        """
        kind, saved = _check_saved(state)
        if kind != self.kind:
            raise ValueError(_other_kind(state, kind, self))
        if self._pulled_any():
            raise RuntimeError(
                "gyre internal error: a data position was loaded after the loop pulled batches"
            )
        source = type(self.dataset).__name__
        if kind == "count":
            self._load_count(saved)
            return
        if kind == "grain":
            if state.get("encoding") is not None:
                saved = _decode(saved, state.get("encoding"))
        elif self._it is not None and self._target is self.dataset and self._it is not self.dataset:
            raise RuntimeError(
                f"gyre internal error: the position of {source} was loaded after its "
                "iterator was made"
            )
        try:
            self._restore()(saved)
        except Exception as err:
            err.add_note(f"(while restoring the data position of a {source} from a checkpoint)")
            raise
        if self._recorder is not None:
            self._recorder.restart()
        if self._indexed:
            self._base = self.dataset.index

    def _load_count(self, saved: Any) -> None:
        count = _count(saved)
        source = type(self.dataset).__name__
        if self.data_resume == "skip":
            self._skip(count, source)
            self._offset = count
            return
        self._offset = 0
        if count:
            warn(
                f"resuming: the dataset (a {source}) cannot save its position, so it starts "
                f"again from its first batch, not after the {count} batches consumed before "
                "the checkpoint. Pass data_resume='skip' to skip them (O(position): each is "
                "produced and dropped), or give the loop a data source with state_dict() / "
                "load_state_dict() (gyre.data.batches, a grain dataset)"
            )

    def _skip(self, count: int, source: str) -> None:
        self._open()
        if self._it is None:
            self._it = check_dataset(self.dataset)
        it = self._it
        for done in range(count):
            try:
                next(it)
            except StopIteration:
                raise ValueError(explain(
                    "the data ended while skipping the batches consumed before the checkpoint "
                    f"(data_resume='skip'): it held {done}, the run had consumed {count}",
                    expected=f"the same data as the run that saved it: at least {count} batches",
                    received=f"a {source} of {done} batches",
                    fix="resume with the same data (repeated for as many epochs), or "
                    "data_resume='restart' to start it again from its beginning")) from None

    def __repr__(self) -> str:
        kind = self._kind or "unopened"
        return f"<DataTracker over {type(self.dataset).__name__} ({kind}), data_resume={self.data_resume!r}>"


def _count(saved: Any) -> int:
    return whole(saved, "count", problem="a saved data position of kind 'count' must be a number of batches >= 0",
                 expected="{'kind': 'count', 'state': <batches consumed>}, as the loop saved it",
                 fix="pass the data position the loop saved (loop.data.state_dict()), unchanged")


def _check_saved(state: Any) -> tuple[str, Any]:
    if not isinstance(state, Mapping) or "kind" not in state or "state" not in state:
        raise TypeError(explain(
            "a data position must be the dict that loop.data.state_dict() returned",
            expected="{'kind': 'state_dict' | 'grain' | 'count', 'source': ..., 'state': ...}",
            received=describe(state),
            fix="pass the saved data position unchanged (a checkpoint's meta['data'])"))
    kind = state["kind"]
    if kind not in KINDS:
        raise ValueError(explain(
            f"unknown kind of data position {kind!r}",
            expected=f"one of {list(KINDS)}", received=describe(state),
            fix="pass the data position the loop saved, unchanged"))
    return kind, state["state"]


_KIND_WORDS = {
    "state_dict": "a data source with state_dict()/load_state_dict()",
    "grain": "a grain iterator (get_state()/set_state())",
    "count": "data that cannot save its position (a count of batches)",
}


def _other_kind(state: Mapping[str, Any], kind: str, tracker: DataTracker) -> str:
    saved_from = state.get("source", "?")
    here = type(tracker.dataset).__name__
    return explain(
        "the saved data position belongs to another kind of dataset, so this loop's data "
        "cannot continue from it",
        expected=f"a position saved from {_KIND_WORDS[tracker.kind]}, as this loop's dataset (a {here}) is",
        received=f"a position saved from {_KIND_WORDS[kind]} (a {saved_from})",
        fix=f"resume with the dataset the run was saved with (a {saved_from}, built with the "
        "same arguments), or start a new run instead of resuming")


def _encode(raw: bytes) -> tuple[str, str]:
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


def _decode(text: Any, encoding: Any) -> bytes:
    if not isinstance(text, str) or encoding not in ("utf-8", "base64"):
        raise ValueError(explain(
            "a saved grain state stored as text cannot be read back",
            expected="{'kind': 'grain', 'state': <text>, 'encoding': 'utf-8' or 'base64'}",
            received=f"state {describe(text)}, encoding {describe(encoding)}",
            fix="pass the data position the loop saved, unchanged"))
    return text.encode("utf-8") if encoding == "utf-8" else base64.b64decode(text)


def to_json(value: Any, where: str) -> Any:
    """``value`` as JSON values (numpy as Python, tuples as lists), or the explained ``TypeError``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _not_json(f"{where}, key {key!r}", key, "a key that is not a string")
            out[key] = to_json(item, f"{where}[{key!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise _not_json(where, value, describe(value))


def _not_json(where: str, value: Any, what: str) -> TypeError:
    return TypeError(explain(
        f"{where} cannot be saved in a checkpoint: a data position is stored as JSON",
        expected="ints, floats, strings, bools, None, and lists and dicts (string keys) of them",
        received=what, fix="make state_dict() return plain values (e.g. an int position, a seed), and "
        "rebuild anything else from them in load_state_dict()"))


track_data = DataTracker
