"""Stateful metric objects in a managed step's logs, merged into the state's accumulators on the
device (as ciclo does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from gyre.core._errors import describe, explain
from gyre.core._logs import Logs


def _is_metric(value: Any) -> bool:
    return not isinstance(value, jax.Array) and all(callable(getattr(value, m, None)) for m in ("merge", "compute"))


def _accumulator(state: Any, name: str, value: Any, where: str) -> tuple[Any, bool]:
    """The state's accumulator ``name`` and whether it is a field (else an extra)."""
    fields = getattr(type(state), "__dataclass_fields__", {})
    extras = getattr(state, "extras", None) if "extras" in fields else None
    if name in fields and name != "extras":
        found, is_field = getattr(state, name), True
    elif isinstance(extras, Mapping) and name in extras:
        found, is_field = extras[name], False
    else:
        kind = type(value).__name__
        raise ValueError(explain(
            f"{where} logged the metric object {name!r} ({kind}) as a stateful metric, but the "
            f"state has no {name!r} to accumulate it in",
            expected=f"a state field or extra named {name!r} holding an empty {kind}",
            received=f"a {type(state).__name__} with fields {sorted(f for f in fields if f != 'extras')}",
            fix=f"create the state with {name}={kind}.empty() (ManagedState.create(..., {name}=...)) "
            f"or declare `{name}: {kind}` in your state class; reset it with "
            f"state.replace({name}={kind}.empty()); or log {name}.compute() for this batch alone"))
    if type(found) is not type(value):
        raise TypeError(explain(
            f"state.{name} cannot accumulate the stateful metric {name!r} logged by {where}",
            expected=f"state.{name} of the logged metric's type, {type(value).__name__}",
            received=f"state.{name} = {describe(found)}",
            fix=f"initialise it with {type(value).__name__}.empty()"))
    return found, is_field


def merge_stateful_metrics(logs: Any, state: Any, where: str = "step") -> tuple[Any, Any]:
    """Merges each metric object of ``logs.stateful_metrics`` into the state's accumulator of that
    name and logs its ``compute()``."""
    entries = logs.get("stateful_metrics") if isinstance(logs, Mapping) else None
    if not entries or not any(_is_metric(v) for v in entries.values()):
        return logs, state
    values: dict[str, Any] = {}
    for name, value in entries.items():
        if not _is_metric(value):
            values[name] = value
            continue
        accumulator, is_field = _accumulator(state, name, value, where)
        merged = accumulator.merge(value)
        state = state.replace(**{name: merged}) if is_field else state.replace(extras={**state.extras, name: merged})
        result = merged.compute()
        if isinstance(result, Mapping):
            values.update({str(k): v for k, v in result.items()})
        else:
            values[name] = result
    out = Logs().merge({c: v for c, v in logs.items() if c != "stateful_metrics"})
    return out.add_stateful_metrics(values), state
