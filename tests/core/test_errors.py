"""gyre.core._errors: the one format of gyre's errors, integral numbers of any kind, and
warnings attributed to the user's line."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from gyre.core._errors import (
    ExplainedKeyError,
    LoopWarning,
    as_integer,
    describe,
    explain,
    suggest,
    warn,
)


def test_explain_puts_one_fact_per_line():
    text = explain("bad stop", expected="an int >= 1", received="int 0", fix="pass stop=100")
    assert text.splitlines() == [
        "bad stop", "  expected: an int >= 1", "  received: int 0", "  fix: pass stop=100",
    ]


def test_describe_names_the_type_and_clips_long_values():
    assert describe("abc") == "str 'abc'"
    long = describe(list(range(100)), limit=20)
    assert long.startswith("list [0, 1, 2") and long.endswith("...") and len(long) == len("list ") + 20


def test_suggest_gives_the_closest_name_or_nothing():
    assert suggest("los", ["loss", "accuracy"]) == " Did you mean 'loss'?"
    assert suggest("zzz", ["loss", "accuracy"]) == ""
    assert suggest("loss", []) == ""


@pytest.mark.parametrize(
    "value, expected",
    [(3, 3), (np.int64(4), 4), (np.uint8(5), 5), (np.array(6), 6), (jnp.int32(7), 7), (jnp.array(8), 8),
     (True, None), (np.bool_(True), None), (2.0, None), (np.float32(2.0), None), (np.arange(2), None),
     ("3", None), (None, None)],
)
def test_as_integer_accepts_integral_numbers_of_any_kind_and_nothing_else(value, expected):
    got = as_integer(value)
    assert got == expected and (got is None or type(got) is int)


def test_explained_key_error_prints_its_lines_and_is_still_a_key_error():
    err = ExplainedKeyError("no entry 'los'\n  fix: use 'loss'")
    assert isinstance(err, KeyError)
    assert str(err) == "no entry 'los'\n  fix: use 'loss'"  # a plain KeyError shows its repr
    assert str(KeyError("a\nb")) == "'a\\nb'"
    assert str(ExplainedKeyError()) == ""


def test_warn_is_a_loop_warning_attributed_to_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn("the data ended early")  # this line is outside gyre: the warning points here
    (w,) = caught
    assert w.category is LoopWarning and issubclass(LoopWarning, UserWarning)
    assert w.filename == __file__
    assert str(w.message) == "the data ended early"


def test_a_warning_raised_deep_in_gyre_points_at_the_users_call():
    import gyre

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gyre.loop(None, range(2), {}, stop=5)  # the data ends before the stop
    (w,) = [w for w in caught if w.category is LoopWarning]
    assert w.filename == __file__ and "the data ended after 2 steps" in str(w.message)


def test_warn_takes_another_category():
    with pytest.warns(DeprecationWarning, match="old name"):
        warn("old name", DeprecationWarning)
