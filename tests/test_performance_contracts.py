"""Performance rules 1 and 2 of DESIGN.md, as tests.

On CPU, JAX's transfer guard never fires (device buffers are host memory), so the no-sync
test also installs a detector that works everywhere: every read of a device value goes
through ``ArrayImpl._value``, which is patched to raise unless the read happens inside an
explicit ``jax.device_get`` (gyre's one, batched, door to the host: ``gyre.core.host.fetch``).
"""

import io

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax._src import array as jax_array

import gyre


def make_problem(n_batches=20, batch=16, features=8, classes=3):
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(features, classes))
    xs = [rng.normal(size=(batch, features)).astype(np.float32) for _ in range(n_batches)]
    batches = [(x, np.argmax(x @ true_w, axis=-1).astype(np.int32)) for x in xs]  # learnable
    params = {"w": jnp.zeros((features, classes)), "b": jnp.zeros(classes)}
    tx = optax.sgd(0.1)
    traces = []

    def step(state, batch):
        traces.append(1)
        params, opt_state = state
        x, y = batch

        def loss_fn(p):
            logits = x @ p["w"] + p["b"][None, :]
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        logs = gyre.logs().add_loss("loss", loss).add_metric("accuracy", jnp.mean(jnp.argmax(logits, -1) == y))
        return logs, (params, opt_state)

    return batches, (params, tx.init(params)), jax.jit(step, donate_argnums=0), traces


# Every way a jax.Array hands its value to Python or numpy.
READERS = ("_value", "__array__", "item", "tolist", "__float__", "__int__", "__bool__", "__index__", "__format__")


class SyncDetector:
    """Raises on any implicit device-to-host read; counts the explicit batched ones."""

    def __init__(self, monkeypatch):
        self.explicit = 0
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
            detector._inside = True
            try:
                return original_get(tree)
            finally:
                detector._inside = False

        monkeypatch.setattr(jax, "device_get", device_get)


CPU_BUFFER_PROTOCOL = pytest.mark.xfail(
    jax.default_backend() == "cpu",
    reason="on CPU numpy reads a jax.Array through the C buffer protocol, which Python cannot "
    "intercept (test_step_path_modules_never_convert_to_numpy covers it); on GPU numpy goes "
    "through __array__ and is caught",
    strict=True,
)


@pytest.mark.parametrize(
    "read",
    [
        float, int, bool, lambda x: x.item(), lambda x: x.tolist(), lambda x: f"{x:.2f}",
        pytest.param(np.asarray, marks=CPU_BUFFER_PROTOCOL),
    ],
)
def test_detector_catches_every_implicit_read(monkeypatch, read):
    x = jnp.float32(2.0) * 2
    SyncDetector(monkeypatch)
    with pytest.raises(AssertionError, match="implicit host sync"):
        read(x)
    assert jax.device_get(x) == 4.0  # the explicit door stays open


def test_train_loop_with_bar_and_history_has_no_hidden_host_syncs(monkeypatch):
    batches, state, step, _ = make_problem()
    # compile (and read nothing) before the detector is installed
    warm_logs, warm_state = step(jax.tree_util.tree_map(jnp.copy, state), batches[0])
    jax.block_until_ready(warm_state)
    detector = SyncDetector(monkeypatch)
    out = io.StringIO()
    data = (batches[i % len(batches)] for i in range(200))
    with jax.transfer_guard_device_to_host("disallow"):
        state, history, elapsed = gyre.train_loop(
            state, data, {gyre.on_train_step: step},
            callbacks=[gyre.keras_bar(total=200, file=out, interval=0.05)],
            stop=200, epoch_duration=50,
        )
        # everything the bar and the history read came through few, batched, explicit reads
        assert detector.explicit <= 10, detector.explicit
    assert elapsed.steps == 200
    losses = history.collect("loss")
    assert len(losses) == 200 and np.mean(losses[-20:]) < 0.5 * losses[0]
    assert "200/200" in out.getvalue()


def test_data_parallel_managed_step_has_no_hidden_host_syncs(monkeypatch):
    import optax

    from gyre import managed

    batches, state, _, _ = make_problem()
    mlp = lambda params, x: x @ params["w"] + params["b"][None]  # noqa: E731

    @managed.train_step
    def train_step(state, batch):
        x, y = batch
        loss = optax.softmax_cross_entropy_with_integer_labels(mlp(state.params, x), y).mean()
        return gyre.logs().add_loss("loss", loss), state

    params = {"w": jnp.zeros((8, 3)), "b": jnp.zeros(3)}
    state = managed.ManagedState.create(params=params, tx=optax.adam(0.05), strategy="data_parallel")
    _, state = train_step(state, batches[0])  # compile before the detector is installed
    jax.block_until_ready(state)
    detector = SyncDetector(monkeypatch)
    with jax.transfer_guard_device_to_host("disallow"):
        state, history, _ = gyre.train_loop(
            state, (batches[i % len(batches)] for i in range(100)), {gyre.on_train_step: train_step},
            callbacks=[gyre.keras_bar(total=100, file=io.StringIO(), interval=1.0)], stop=100,
        )
        assert detector.explicit <= 10, detector.explicit
    losses = history.collect("loss")
    assert len(losses) == 100 and losses[-1] < losses[0]
    assert train_step.compiled_count() == 1


def test_step_is_compiled_once_over_50_steps():
    batches, state, step, traces = make_problem()
    data = (batches[i % len(batches)] for i in range(50))
    state, history, elapsed = gyre.loop(
        state, data, {gyre.every(1): [step, gyre.keras_bar(total=50, file=io.StringIO())]}, stop=50
    )
    assert elapsed.steps == 50 and len(history) == 50
    assert len(traces) == 1  # traced once: no retracing
    assert step._cache_size() == 1  # one compiled executable


STEP_PATH_MODULES = [
    "core/clock.py", "core/schedules.py", "core/logs.py", "core/history.py",
    "loop/engine.py", "loop/binding.py", "loop/named.py", "loop/inner.py",
    "callbacks/bars.py", "callbacks/lagged.py", "steps/managed.py",
]


@pytest.mark.parametrize("module", STEP_PATH_MODULES)
def test_step_path_modules_never_convert_to_numpy(module):
    """The path the detector cannot watch on CPU: numpy conversions of device values.

    Host reads belong in gyre/core/host.py (``fetch``/``start_fetch``), nowhere else.
    """
    import pathlib
    import re

    source = (pathlib.Path(gyre.__file__).parent / module).read_text()
    code = "\n".join(line for line in source.splitlines() if not line.strip().startswith(("#", ">>>", "...")))
    assert not re.search(r"\bnp\.(asarray|array|asanyarray)\(|\.item\(\)|\.tolist\(\)|device_get", code)
