"""Several processes, one training run: ``initialize`` and who does the side effects.

After :func:`initialize`, ``jax.devices()`` lists every process's devices and
:meth:`~gyre.Strategy.place_batch` builds global batches; every process computes the same
values, and side effects run on process 0 only. Everything here works without it (one process).

Example:
    >>> import gyre
    >>> gyre.distributed.process_count(), gyre.distributed.is_main_process()
    (1, True)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

from gyre.core._checks import whole
from gyre.core._compat import backends_started
from gyre.core._errors import describe, explain

F = TypeVar("F", bound=Callable[..., Any])

#: environment variables read when an argument of :func:`initialize` is left out
ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(explain(
            f"the environment variable {name} is not a whole number",
            expected=f"{name}=<int>, e.g. {name}=0", received=f"{name}={raw!r}",
            fix=f"set {name} to an integer, or pass the value to gyre.distributed.initialize")) from None


def _check_int(name: str, value: Any, *, low: int) -> None:
    whole(value, name, minimum=low, none=True, problem=f"{name} must be an integer >= {low}",
          expected=f"{name}=<int >= {low}>", fix=f"pass {name} as a whole number (or set it through the environment)")


def _check_address(address: Any) -> None:
    if address is None:
        return
    ok = isinstance(address, str) and ":" in address
    if ok:
        host, _, port = address.rpartition(":")
        ok = bool(host) and port.isdigit() and 0 < int(port) < 65536
    if not ok:
        raise ValueError(explain(
            "coordinator_address must be 'host:port'",
            expected="the address of process 0, e.g. '127.0.0.1:1234' or 'node0:8476'",
            received=describe(address), fix="pass coordinator_address='<host of process 0>:<a free port>'"))


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    **kwargs: Any,
) -> None:
    """Connects this process to the others of a multi-process run (``jax.distributed``); call it
    first, before any JAX computation.

    Arguments left out come from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``,
    ``JAX_PROCESS_ID``, else JAX's cluster detection (Slurm, Open MPI, Cloud TPU, Kubernetes).
    On one machine, ``initialize("127.0.0.1:PORT", 2, i)`` works on CPU.

    Args:
        coordinator_address: ``"host:port"`` of process 0.
        local_device_ids: the local devices this process uses (default all).
        **kwargs: passed to :func:`jax.distributed.initialize`.

    Raises:
        RuntimeError: when called twice, or after JAX has started its backend.
        ValueError: for arguments that cannot be right.

    Example:
        >>> import gyre
        >>> gyre.distributed.initialize("127.0.0.1:1234", 2, 5)
        Traceback (most recent call last):
        ...
        ValueError: process_id must be below num_processes
        ...
    """
    if coordinator_address is None:
        coordinator_address = os.environ.get(ENV_COORDINATOR) or None
    num_processes = _env_int(ENV_NUM_PROCESSES) if num_processes is None else num_processes
    process_id = _env_int(ENV_PROCESS_ID) if process_id is None else process_id
    _check_address(coordinator_address)
    _check_int("num_processes", num_processes, low=1)
    _check_int("process_id", process_id, low=0)
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        raise ValueError(explain(
            "process_id must be below num_processes",
            expected=f"0 <= process_id < {num_processes}",
            received=f"process_id={process_id}, num_processes={num_processes}",
            fix="number the processes 0, 1, ..., num_processes - 1"))
    if jax.distributed.is_initialized():
        raise RuntimeError(explain(
            "gyre.distributed.initialize was called twice",
            expected="one call per process, at the start of the script",
            received=f"a second call (this is process {jax.process_index()} of {jax.process_count()})",
            fix="remove the second call; check gyre.distributed.is_initialized() first"))
    if backends_started():
        raise RuntimeError(explain(
            "gyre.distributed.initialize must run before JAX starts its backend",
            expected="initialize() first, before any computation, jax.devices(), "
            "jax.device_put or jax.process_index()",
            received="a process where JAX has already computed or listed devices",
            fix="move gyre.distributed.initialize(...) to the top of the script, right "
            "after the imports (importing gyre and jax is fine)"))
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                   local_device_ids=local_device_ids, **kwargs)
    except (ValueError, TypeError) as err:
        given = {"coordinator_address": coordinator_address, "num_processes": num_processes, "process_id": process_id}
        missing = [name for name, value in given.items() if value is None]
        if not missing:
            raise
        raise ValueError(explain(
            "gyre.distributed.initialize could not tell how the processes are laid out",
            expected="coordinator_address, num_processes and process_id, as arguments, "
            f"through {ENV_COORDINATOR} / {ENV_NUM_PROCESSES} / {ENV_PROCESS_ID}, or "
            "on a cluster JAX detects (Slurm, Open MPI, Cloud TPU)",
            received=f"no value for {', '.join(missing)} (JAX said: {err})",
            fix="pass e.g. initialize('127.0.0.1:1234', num_processes=2, process_id=i)")) from err


def is_initialized() -> bool:
    """Whether :func:`initialize` (or ``jax.distributed.initialize``) has run in this process.

    Example:
        >>> import gyre
        >>> gyre.distributed.is_initialized()
        False
    """
    return bool(jax.distributed.is_initialized())


def process_index() -> int:
    """This process's index (0 in a single-process run).

    Example:
        >>> import gyre
        >>> gyre.distributed.process_index()
        0
    """
    return int(jax.process_index())


def process_count() -> int:
    """How many processes take part (1 in a single-process run).

    Example:
        >>> import gyre
        >>> gyre.distributed.process_count()
        1
    """
    return int(jax.process_count())


def is_main_process() -> bool:
    """True on process 0, the one that draws progress bars and writes logs.

    Example:
        >>> import gyre
        >>> gyre.distributed.is_main_process()
        True
    """
    return jax.process_index() == 0


def main_process_only(fn: F) -> F:
    """Decorator: ``fn`` runs on process 0 only, returning ``None`` elsewhere (never use it on
    computations every process must join: they would hang).

    Example:
        >>> import gyre
        >>> @gyre.distributed.main_process_only
        ... def report(elapsed):
        ...     print("step", elapsed.steps)
        >>> _ = gyre.loop(None, range(2), {gyre.every(1): report})
        step 0
        step 1
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs) if jax.process_index() == 0 else None

    return wrapper  # type: ignore[return-value]
