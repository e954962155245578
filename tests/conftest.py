"""Test settings shared by the whole suite.

8 simulated CPU devices (set before JAX is imported), strict rank promotion, and JAX's
persistent compilation cache so repeated runs skip most compilation.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".jax_cache")
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


@pytest.fixture
def tmp_run_dir(tmp_path):
    """A fresh directory for files a test writes."""
    return tmp_path
