"""gyre.Logs: collections, merging, lookup, the pytree, and the add_* forms (dict and keywords)."""

import jax
import jax.numpy as jnp
import pytest

import gyre


def test_collections_and_attribute_access():
    logs = gyre.logs()
    logs.add_loss("loss", 1.0).add_metric("acc", 0.5).add_stateful_metric("mean", 2.0)
    logs.add_output("pred", 3).add_entry("custom", "thing", 4)
    logs.add_losses({"aux": 0.1}).add_metrics({"f1": 0.2}).add_stateful_metrics({"s": 5}).add_outputs({"y": 6})
    assert logs.losses.loss == 1.0 and logs.losses.aux == 0.1
    assert logs.metrics.acc == 0.5 and logs.metrics.f1 == 0.2
    assert logs.stateful_metrics.mean == 2.0 and logs.outputs.y == 6
    assert logs.custom.thing == 4
    with pytest.raises(AttributeError, match="no collection"):
        logs.nothing  # noqa: B018
    with pytest.raises(AttributeError, match="no entry"):
        logs.metrics.nothing  # noqa: B018


def test_merge_and_write_only_updates():
    logs = gyre.logs().add_metric("a", 1)
    logs.updates = gyre.logs().add_metric("a", 2).add_loss("l", 3)
    logs.updates = None
    assert dict(logs.metrics) == {"a": 2} and dict(logs.losses) == {"l": 3}
    with pytest.raises(AttributeError, match="write-only"):
        logs.updates  # noqa: B018
    with pytest.raises(TypeError, match="merged"):
        logs.merge(5)
    with pytest.raises(TypeError, match="not a mapping"):
        logs.merge({"metrics": 5})


def test_logs_is_a_pytree_that_leaves_jit():
    @jax.jit
    def f(x):
        return gyre.logs().add_metric("m", x * 2).add_loss("l", x)

    out = f(jnp.float32(3))
    assert isinstance(out, gyre.Logs)
    assert float(out.metrics.m) == 6.0 and float(out.losses.l) == 3.0
    doubled = jax.tree_util.tree_map(lambda v: v * 2, out)
    assert isinstance(doubled, gyre.Logs) and float(doubled.metrics.m) == 12.0


def test_lookup_resolution_order():
    logs = gyre.logs().add_entry("zz", "v", 1).add_entry("aa", "v", 2).add_metric("m", 3)
    assert logs.lookup("v") == (True, 2)  # custom collections by name
    logs.add_stateful_metric("v", 4)
    assert logs.lookup("v") == (True, 4)  # standard collections first
    logs.add_loss("v", 5)
    assert logs.lookup("v") == (True, 5)
    assert logs.lookup("zz.v") == (True, 1)
    assert logs.lookup("missing") == (False, None)


def test_add_entry_needs_string_names():
    with pytest.raises(TypeError, match="strings"):
        gyre.logs().add_entry("metrics", 3, 1.0)
    with pytest.raises(TypeError, match="mapping"):
        gyre.logs().add_metrics([1, 2])


# -- add_metrics / add_losses / add_stateful_metrics / add_outputs: dict and keyword forms --


@pytest.mark.parametrize("collection", ["metrics", "losses", "stateful_metrics", "outputs"])
def test_dict_and_keyword_forms(collection):
    add = getattr(gyre.Logs(), f"add_{collection}")
    logs = add({"a": 1}, b=2)
    assert dict(logs[collection]) == {"a": 1, "b": 2}
    assert dict(getattr(gyre.Logs(), f"add_{collection}")(**{"a": 1})[collection]) == {"a": 1}
    assert dict(getattr(gyre.Logs(), f"add_{collection}")({"a": 1})[collection]) == {"a": 1}
    # an entry may be called "values": the dict form is positional-only
    assert dict(getattr(gyre.Logs(), f"add_{collection}")(values=3)[collection]) == {"values": 3}


def test_ciclo_spreads_a_computed_dict():
    computed = {"accuracy": 0.5, "loss": 0.25}
    logs = gyre.logs().add_stateful_metrics(**computed)
    assert logs.stateful_metrics.accuracy == 0.5 and logs.stateful_metrics.loss == 0.25


def test_a_non_mapping_is_still_explained():
    with pytest.raises(TypeError, match="takes a mapping of names to values"):
        gyre.logs().add_metrics([("a", 1)])


def test_ciclo_logs_helpers():
    logs = gyre.logs().add_loss("loss", 1.0, add_metric=True).add_losses(add_metrics=True, aux=0.5)
    assert dict(logs.metrics) == {"loss": 1.0, "aux": 0.5} and dict(logs.losses) == {"loss": 1.0, "aux": 0.5}
    assert logs.entry_path("aux") == ("losses", "aux") and logs.entry_path("metrics.aux") == ("metrics", "aux")
    assert logs.entry_collection("nope") is None and logs.entry_value("metrics.loss") == 1.0
    with pytest.raises(KeyError, match="no entry 'los'") as err:
        logs.entry_value("los")
    assert "Did you mean 'loss'?" in str(err.value)
