"""One test per private JAX API gyre uses (gyre.core._compat): a JAX upgrade that removes one
fails here, by name."""

import jax
import jax.numpy as jnp

from gyre.core import _compat


def test_is_jitted_recognises_jit_and_nothing_else():
    assert _compat.is_jitted(jax.jit(lambda x: x))
    assert not _compat.is_jitted(lambda x: x)
    assert not _compat.is_jitted(jax.grad(lambda x: x))


def test_donated_argnums_reads_the_jit_options():
    assert _compat.donated_argnums(jax.jit(lambda s, b: s, donate_argnums=0)) == (0,)
    assert _compat.donated_argnums(jax.jit(lambda s, b: s)) == ()
    assert _compat.donated_argnums(jax.jit(lambda s, b: s, donate_argnums=(0, 1))) == (0, 1)
    assert _compat.donated_argnums(lambda s, b: s) is None


def test_cache_size_counts_compiled_programs():
    f = jax.jit(lambda x: x * 2)
    assert _compat.cache_size(f) == 0
    f(jnp.ones(2))
    f(jnp.ones(2))
    assert _compat.cache_size(f) == 1
    f(jnp.ones(3))
    assert _compat.cache_size(f) == 2
    assert _compat.cache_size(lambda x: x) == 0


def test_backends_started_after_first_use():
    jnp.zeros(1).block_until_ready()
    assert _compat.backends_started() is True
