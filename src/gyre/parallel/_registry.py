"""The registry of strategy names; importing it registers the built-in ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from gyre.core._errors import describe, explain, suggest
from gyre.parallel._strategies import FSDP, SPMD, DataParallel, Eager, Jit
from gyre.parallel._strategy import Strategy

StrategyConstructor = Callable[[], "Strategy"]
C = TypeVar("C", bound=Callable[[], Any])

#: Every strategy name and the constructor it stands for (see :func:`register_strategy`).
STRATEGIES: dict[str, StrategyConstructor] = {}


@overload
def register_strategy(name: str) -> Callable[[C], C]: ...


@overload
def register_strategy(name: str, *, constructor: StrategyConstructor, replace: bool = ...) -> None: ...


@overload
def register_strategy(name: str, *, replace: bool) -> Callable[[C], C]: ...


def register_strategy(
    name: str, *, constructor: StrategyConstructor | None = None, replace: bool = False
) -> Callable[[C], C] | None:
    """Registers a strategy constructor under ``name``, for ``strategy="name"`` anywhere gyre takes
    one.

    ciclo's signature: ``register_strategy(name, constructor=fn)``, or ``register_strategy(name)``
    as a decorator returning the constructor unchanged; the constructor is called with no
    arguments at each lookup; ``replace`` allows replacing a registered name.

    Raises:
        ValueError: the name is taken (without ``replace``), or not a string.
        TypeError: the constructor is not callable.

    Example:
        >>> import gyre
        >>> gyre.register_strategy("doc_jit_keep", constructor=lambda: gyre.Jit(donate=False))
        >>> gyre.get_strategy("doc_jit_keep").donate
        False
    """
    if not isinstance(name, str) or not name:
        raise ValueError(explain(
            "a strategy name must be a non-empty string",
            expected="e.g. register_strategy('my_strategy', constructor=MyStrategy)", received=describe(name),
            fix="pass the name as a string"))

    def register(fn: C) -> C:
        if not callable(fn):
            raise TypeError(explain(
                f"the constructor of strategy {name!r} is not callable",
                expected="a Strategy subclass or a function with no arguments that returns a gyre.Strategy",
                received=describe(fn),
                fix=f"register_strategy({name!r}, constructor=lambda: gyre.Jit(donate=False))"))
        if name in STRATEGIES and not replace:
            raise ValueError(explain(
                f"strategy {name!r} is already registered",
                expected=f"a new name (registered: {sorted(STRATEGIES)})",
                received=f"register_strategy({name!r}, ...) a second time",
                fix="choose another name, or pass replace=True to replace it on purpose"))
        STRATEGIES[name] = fn
        return fn

    if constructor is None:
        return register
    register(constructor)  # type: ignore[arg-type]
    return None


def get_strategy(strategy: str | Strategy) -> Strategy:
    """A strategy from its registered name, or as given when it already is one.

    Names: ``"eager"``, ``"jit"``, ``"data_parallel"``, ``"fsdp"``, ``"spmd"``, ``"dp"``, ciclo's
    ``"jit_donate"``, ``"data_parallel_donate"``, ``"data-parallel"``, and registered ones.

    Example:
        >>> import gyre
        >>> gyre.get_strategy("data-parallel").name
        'data_parallel'
        >>> gyre.get_strategy("jti")
        Traceback (most recent call last):
        ValueError: unknown strategy 'jti'
        ...
          fix: pick a registered name. Did you mean 'jit'?
    """
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str):
        constructor = STRATEGIES.get(strategy)
        if constructor is not None:
            built = constructor()
            if not isinstance(built, Strategy):
                raise TypeError(explain(
                    f"the constructor registered as strategy {strategy!r} did not build a gyre.Strategy",
                    expected="a gyre.Strategy (e.g. a subclass of gyre.Jit or gyre.DataParallel)",
                    received=describe(built),
                    fix=f"register_strategy({strategy!r}, constructor=..., replace=True) with "
                    "a constructor that returns a gyre.Strategy"))
            return built
    valid = list(STRATEGIES)
    raise ValueError(explain(
        f"unknown strategy {strategy!r}",
        expected=f"one of {valid}, or a gyre.Strategy object such as gyre.DataParallel(mesh=..., data_axis=...)",
        received=describe(strategy),
        fix="pick a registered name." + (suggest(strategy, valid) if isinstance(strategy, str) else "")))


register_strategy("eager", constructor=Eager)
register_strategy("jit", constructor=Jit)
register_strategy("data_parallel", constructor=DataParallel)
register_strategy("fsdp", constructor=FSDP)
register_strategy("spmd", constructor=SPMD)
# ciclo's names (its "jit" and "data_parallel" do not donate; gyre's do: docs/migration/ciclo.md)
register_strategy("jit_donate", constructor=lambda: Jit(donate=True))
register_strategy("data_parallel_donate", constructor=lambda: DataParallel(donate=True))
register_strategy("data-parallel", constructor=DataParallel)
register_strategy("dp", constructor=DataParallel)
