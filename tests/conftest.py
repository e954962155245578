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


# -- the host-sync detector (DESIGN.md performance rule 1) ------------------------------------

# Every way a jax.Array hands its value to Python or numpy.
READERS = ("_value", "__array__", "item", "tolist", "__float__", "__int__", "__bool__", "__index__", "__format__")


class SyncDetector:
    """Watches every read of a device value while installed.

    * An implicit read (``float(x)``, ``x.item()``, ``f"{x}"``...) raises: gyre reads device
      values only through ``jax.device_get`` (``gyre.core._host.fetch``), in batches.
    * An explicit read is counted (``explicit``); when a value it reads is not computed yet,
      the host waits for the device: that is a *stall*, recorded in ``stalls`` with the
      place that read it. Values read after ``end()`` was called are not stalls (a loop may
      wait for its last values when it ends).

    On CPU, numpy can also read a jax.Array through the C buffer protocol, which Python cannot
    intercept; on GPU it goes through ``__array__`` and is caught.
    """

    def __init__(self, monkeypatch):
        import traceback

        from jax._src import array as jax_array

        self.explicit = 0
        self.stalls: list[str] = []
        self.ended = False
        self._inside = False
        original_get = jax.device_get
        detector = self

        def guard(name, original):
            def guarded(self_, *args, **kwargs):
                if not detector._inside:
                    raise AssertionError(f"implicit host sync: {name} read a device value outside jax.device_get")
                return original(self_, *args, **kwargs)

            return guarded

        for name in READERS:
            original = jax_array.ArrayImpl.__dict__[name]
            if isinstance(original, property):
                monkeypatch.setattr(jax_array.ArrayImpl, name, property(guard(name, original.fget)))
            else:
                monkeypatch.setattr(jax_array.ArrayImpl, name, guard(name, original))

        def device_get(tree):
            detector.explicit += 1
            waiting = [x for x in jax.tree_util.tree_leaves(tree) if isinstance(x, jax.Array) and not x.is_ready()]
            if waiting and not detector.ended:
                detector.stalls.append("".join(traceback.format_stack(limit=6)[:-1]))
            detector._inside = True
            try:
                return original_get(tree)
            finally:
                detector._inside = False

        monkeypatch.setattr(jax, "device_get", device_get)

    def end(self, *_):
        """Marks the end of the part of a run that must not stall (usable as a callback)."""
        self.ended = True


@pytest.fixture
def sync_detector(monkeypatch):
    """A :class:`SyncDetector` installed for the test."""
    return SyncDetector(monkeypatch)


@pytest.fixture
def run_readme(tmp_path, monkeypatch):
    """``run(heading, namespace=None, page="README.md")``: runs the first python block of the
    section ``## <heading>`` of ``page`` (README.md or a page of the docs site, ``docs/...``) as
    written, in ``tmp_path``, and returns the namespace it filled."""
    from pathlib import Path

    def run(heading, namespace=None, page="README.md"):
        readme = (Path(__file__).resolve().parents[1] / page).read_text()
        section = readme.split(f"## {heading}")[1].split("\n## ")[0]
        code = section.split("```python\n")[1].split("```")[0]
        monkeypatch.chdir(tmp_path)
        namespace = {} if namespace is None else namespace
        exec(compile(code, f"{page} ({heading})", "exec"), namespace)
        return namespace

    return run
