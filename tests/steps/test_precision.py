"""Mixed precision: the MixedPrecision name, its deprecated Policy alias, and get_policy."""

import warnings

import jax.numpy as jnp
import pytest

import gyre
from gyre.steps import _precision as precision


def test_mixed_precision_is_exported_and_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = gyre.MixedPrecision(compute_dtype=jnp.bfloat16)
    assert policy.casts and precision.get_policy(policy) is policy
    assert precision.get_policy("bfloat16") == gyre.MixedPrecision(compute_dtype=jnp.bfloat16)


@pytest.mark.parametrize("alias", [gyre.Policy, precision.Policy], ids=["gyre.Policy", "precision.Policy"])
def test_policy_is_a_deprecated_alias_that_warns_and_still_works(alias):
    with pytest.warns(DeprecationWarning, match="gyre.MixedPrecision") as caught:
        policy = alias(compute_dtype=jnp.float16)
    assert "deprecated" in str(caught[0].message)
    assert isinstance(policy, gyre.MixedPrecision) and policy.compute_dtype == jnp.float16
    assert policy.cast_to_compute(jnp.ones(2)).dtype == jnp.float16
    assert precision.get_policy(policy) is policy  # accepted wherever policy= is


def test_unknown_policy_names_the_new_class():
    with pytest.raises(ValueError, match="unknown precision policy 'bf16'") as info:
        precision.get_policy("bf16")
    assert "gyre.MixedPrecision" in str(info.value)
