"""Internal helpers of gyre.core whose docstring examples were their only test (moved here when
the internal docstrings lost their doctests: doctests are for public names)."""

import jax.numpy as jnp
import optax
import pytest

from gyre.core._compat import backends_started
from gyre.core._errors import as_pair, keywords_checked, unknown_keyword
from gyre.core._logs import Logs, flatten_logs, resolution_order, unflatten_logs
from gyre.core._train_state import check_optimizer


def test_keywords_checked_passes_known_keywords_and_names_the_close_one():
    @keywords_checked
    def fit(data, *, keep: int = 3, stop: int = 10) -> int:
        return keep + stop

    assert fit(0, keep=1) == 11
    with pytest.raises(TypeError, match="unexpected keyword argument 'kep'") as err:
        fit(0, kep=1)
    assert "one of ['data', 'keep', 'stop']" in str(err.value)
    assert "did you mean keep=?" in str(err.value)


def test_unknown_keyword_translates_a_known_alias():
    text = str(unknown_keyword("gyre.checkpoint", "max_to_keep", ["directory", "keep"]))
    assert text.splitlines()[0] == "gyre.checkpoint() got an unexpected keyword argument 'max_to_keep'"
    assert "use keep= (gyre's name for max_to_keep)" in text


def test_as_pair_explains_a_missing_return():
    assert as_pair((1, 2), "run") == (1, 2)
    with pytest.raises(TypeError, match=r"MyStep.run must return \(state, outputs\)") as err:
        as_pair(None, "MyStep.run")
    assert "a missing return gives None" in str(err.value)


def test_logs_flatten_and_unflatten_in_collection_order():
    values, structure = flatten_logs(Logs().add_loss("l", 1).add_metric("a", 2))
    assert (values, structure) == ([1, 2], (("losses", ("l",)), ("metrics", ("a",))))
    assert unflatten_logs((("metrics", ("a",)),), [2]) == Logs(metrics={"a": 2})
    order = resolution_order({"zz": {}, "metrics": {}, "aa": {}, "losses": {}})
    assert order == ["losses", "metrics", "aa", "zz"]


def test_check_optimizer_accepts_optax_and_refuses_a_name():
    assert check_optimizer(optax.sgd(0.1), argument="tx", none_means="no training") is None
    with pytest.raises(TypeError, match="tx= must be an optax optimizer"):
        check_optimizer("adam", argument="tx", none_means="no training")


def test_backends_started_once_jax_has_computed():
    jnp.zeros(1).block_until_ready()
    assert backends_started()
