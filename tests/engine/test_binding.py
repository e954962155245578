"""gyre.engine._binding: a callback's parameters bound once, by name or by position."""

import functools

import pytest

import gyre
from gyre.engine._binding import StateMethod, bind, callback_name, inject


def test_binding_by_name_and_by_position():
    got = {}

    def by_name(loop, logs, elapsed, batch, state):
        got["name"] = (state, batch, elapsed.steps, type(logs).__name__, type(loop).__name__)

    def by_position(s, b, e):
        got["pos"] = (s, b, e.steps)

    def with_default(batch, extra=7):
        got["default"] = (batch, extra)

    class Obj:
        def __call__(self, state, batch):
            got["obj"] = (state, batch)

    gyre.loop("S", ["B"], {gyre.every(1): [by_name, by_position, with_default, Obj()]})
    assert got == {
        "name": ("S", "B", 0, "Logs", "LoopState"),
        "pos": ("S", "B", 0),
        "default": ("B", 7),
        "obj": ("S", "B"),
    }


def test_callback_not_callable_and_unbindable():
    with pytest.raises(TypeError, match="callable"):
        gyre.loop(None, range(3), {gyre.every(1): [3]})
    with pytest.raises(TypeError, match="cannot bind"):
        gyre.loop(None, range(3), {gyre.every(1): [lambda a, b, c, d, e, f: None]})


# -- the binding rules, one by one ----------------------------------------------------------------


def _values():
    return ("S", "B", "E", "L", "P")  # state, batch, elapsed, logs, loop


def test_keyword_only_and_positional_only_parameters():
    def kw_only(*, elapsed, state):
        return state, elapsed

    def pos_only(s, b, /):
        return s, b

    assert bind(kw_only).call(*_values()) == ("S", "E")
    assert bind(pos_only).call(*_values()) == ("S", "B")


def test_var_positional_gets_all_five_and_var_keyword_is_ignored():
    assert bind(lambda *args: args).call(*_values()) == _values()
    assert bind(lambda state, **extra: (state, extra)).call(*_values()) == ("S", {})


def test_names_after_an_unknown_defaulted_parameter_go_by_keyword():
    def cb(batch, extra=7, *, logs):
        return batch, extra, logs

    def late(extra=7, state=None):  # `state` comes after an unknown positional: by keyword
        return extra, state

    assert bind(cb).call(*_values()) == ("B", 7, "L")
    assert bind(late).call(*_values()) == (7, "S")


def test_ciclos_loop_state_name_and_inject():
    assert bind(lambda loop_state, elapsed: (loop_state, elapsed)).call(*_values()) == ("P", "E")
    assert inject(lambda state, batch: state + batch)(1, 2, "elapsed", "loop") == 3
    assert inject(lambda a, b, c: (a, b, c))(1, 2, 3, 4) == (1, 2, 3)
    spread = lambda *args: args  # noqa: E731
    assert inject(spread) is spread
    assert inject(len).__wrapped__ is len


def test_methods_partials_objects_and_state_methods():
    class Box:
        def __init__(self, x):
            self.x = x

        def bump(self, batch):
            return self.x + batch

        def __call__(self, elapsed, state):
            return state.x, elapsed

    assert bind(Box(1).bump).call(None, 2, None, None, None) == 3
    assert bind(Box(0)).call(Box(5), None, "E", None, None) == (5, "E")
    assert bind(functools.partial(lambda k, state: (k, state), 9)).call(*_values()) == (9, "S")
    method = bind(StateMethod(Box.bump))
    assert method.call(Box(10), 5, None, None, None) == 15 and method.name.endswith("Box.bump")


def test_loop_callback_objects_receive_the_loop_state():
    class Ciclo:
        def __loop_callback__(self, loop_state):
            return loop_state

    assert bind(Ciclo()).call(*_values()) == "P"


def test_names_for_messages_and_invokers_pass_through():
    class Obj:
        def method(self):
            pass

    assert callback_name(Obj().method) == "Obj.method"
    assert callback_name(lambda: 0).endswith("<lambda>")  # the qualified name
    assert callback_name(functools.partial(len)) == "partial"
    invoker = bind(len)
    assert bind(invoker) is invoker and callback_name(invoker) == "len"
    assert repr(invoker) == "<gyre callback len>" and not invoker.returned_state


def test_an_unreadable_signature_is_explained():
    class Odd:
        __signature__ = 42  # inspect.signature refuses it

        def __call__(self):
            pass

    with pytest.raises(TypeError, match="cannot read the signature of callback") as err:
        bind(Odd())
    assert "lambda state, batch: fn(state, batch)" in str(err.value)


def test_too_many_positional_parameters_and_required_keywords_are_explained():
    with pytest.raises(TypeError, match="cannot bind the parameters") as err:
        bind(lambda a, *, b: None)
    assert "parameters ['a', 'b']" in str(err.value)


def test_a_near_miss_of_a_values_name_bound_by_position_is_refused_naming_the_value():
    seen = []

    def cb(elapsd):  # by position it would get the state, silently
        seen.append(elapsd)

    with pytest.raises(TypeError) as err:
        gyre.loop({"w": 1.0}, range(2), {gyre.every(1): cb})
    text = str(err.value)
    assert "parameter 'elapsd' looks like a misspelling of 'elapsed'" in text
    assert "'elapsd' would get the state, not the elapsed" in text and "rename it 'elapsed'" in text
    assert seen == []
    for typo, meant in (("log", "logs"), ("bach", "batch"), ("loops", "loop")):
        with pytest.raises(TypeError, match=f"'{typo}' looks like a misspelling of '{meant}'"):
            bind(eval(f"lambda {typo}: None"))
    with pytest.raises(TypeError, match="'elapsd' looks like a misspelling of 'elapsed'"):
        bind(lambda s, elapsd: None)  # the second position is the batch


def test_positional_callbacks_with_names_unlike_the_values_or_near_their_own_still_bind():
    assert bind(lambda s, b: (s, b)).call(1, 2, None, None, None) == (1, 2)
    assert bind(lambda x: x).call(1, 2, None, None, None) == 1
    assert bind(lambda logits: logits).call(1, 2, None, None, None) == 1  # 0.8 from 'logs': not a typo
    assert bind(lambda states, batches: (states, batches)).call(1, 2, None, None, None) == (1, 2)
    assert bind(lambda step: step).call(1, 2, None, None, None) == 1


def test_a_near_miss_with_a_default_is_refused_it_would_always_keep_its_default():
    for source in ("lambda state, elapsd=None: None", "lambda elapsd=None: None",
                   "lambda state, *, loggs=None: None", "lambda s, b, elapsd=None: None"):
        with pytest.raises(TypeError, match=r"(?s)parameter '\w+' looks like a misspelling of '\w+'.*"
                           r"keeps its default"):
            bind(eval(source))
    assert bind(lambda state, logits=None, mask=None: state).call(1, 2, None, None, None) == 1
    assert bind(lambda state, extra=3: state + extra).call(1, 2, None, None, None) == 4
    assert bind(lambda elapsed, log=[]: log).call(1, 2, None, None, None) == []  # a capture: its own


def test_a_callable_objects_parameters_are_read_once_per_class(monkeypatch):
    import inspect

    from gyre.engine import _binding

    class Counter:
        def __call__(self, elapsed, logs):
            return None

    reads = []
    original = inspect.signature
    monkeypatch.setattr(_binding.inspect, "signature", lambda fn: (reads.append(fn), original(fn))[1])
    first, second = Counter(), Counter()
    assert _binding.bind(first).uses == _binding.bind(second).uses == frozenset({"elapsed", "logs"})
    assert reads == [first]

    class Told(Counter):  # an object that states its own signature is read as it says
        pass

    told = Told()
    told.__signature__ = inspect.Signature([inspect.Parameter("state", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    assert _binding.bind(told).uses == frozenset({"state"})
