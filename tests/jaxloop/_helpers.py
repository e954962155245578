"""Small steps, counting datasets, recording actions, a fake writer, a linear regression step and
an evaluation set for the jaxloop tests."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import gyre


class Counting:
    """An iterator over ``items`` that counts how many were pulled."""

    def __init__(self, items):
        self._it = iter(items)
        self.pulls = 0

    def __iter__(self):
        return self

    def __next__(self):
        value = next(self._it)
        self.pulls += 1
        return value


def add_step(state, batch, per_loop_step_number, **kwargs):
    """A train step on a dict state: counts steps, sums batches, reports both."""
    new = {"step": state["step"] + 1, "total": state["total"] + batch}
    return new, {"batch": batch, "n": per_loop_step_number, "step": new["step"]}


def fresh():
    return {"step": 0, "total": 0}


@jax.jit
def _jit_add(state, batch):
    new = {"step": state["step"] + 1, "total": state["total"] + batch}
    return new, {"loss": new["total"] * 1.0}


def jit_step(state, batch, per_loop_step_number, **kwargs):
    """The same on the device, compiled once."""
    return _jit_add(state, batch)


def device_state():
    return {"step": jnp.int32(0), "total": jnp.float32(0)}


class Record(gyre.jaxloop.Action):
    """An action that records (tag, step, per_loop_step_number) in a shared list."""

    def __init__(self, log, tag, interval=1):
        super().__init__(interval=interval)
        self.log, self.tag = log, tag

    def __call__(self, state, outputs, **kwargs):
        self.log.append((self.tag, _step(state), kwargs.get("per_loop_step_number")))


def _step(state):
    if state is None:
        return None
    return int(state["step"] if isinstance(state, dict) else state.step)


class FakeWriter:
    """Records the writer calls SummaryAction makes."""

    def __init__(self):
        self.calls = []
        self.closed = 0
        self.flushed = 0

    def write_scalars(self, step, values):
        self.calls.append(("scalars", step, {k: float(v) for k, v in values.items()}))

    def write_histograms(self, step, arrays):
        self.calls.append(("histograms", step, dict(arrays)))

    def write_images(self, step, images):
        self.calls.append(("images", step, dict(images)))

    def write_texts(self, step, texts):
        self.calls.append(("texts", step, dict(texts)))

    def flush(self):
        self.flushed += 1

    def close(self):
        self.closed += 1


class _Linear(gyre.Step):
    def run(self, state, batch):
        x, y = batch

        def loss_fn(params):
            return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), {"loss": loss}


def _linear_batches(n, size=4):
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(size, 3)).astype(np.float32), np.ones((size, 1), np.float32)) for _ in range(n)]


_X = np.random.default_rng(0).normal(size=(1000, 4)).astype(np.float32)
_Y = np.random.default_rng(1).normal(size=(1000, 1)).astype(np.float32)
_TEST = [(_X[i : i + 64], _Y[i : i + 64]) for i in range(0, 1000, 64)]  # 15 of 64, one of 40


class _MaskedEval(gyre.Step):
    def run(self, state, batch, mask=None):
        from gyre.core.metrics import Mean

        x, y = batch
        errors = ((state.apply_fn({"params": state.params}, x) - y) ** 2)[:, 0]
        return state, {"mse": Mean.from_stacked(errors, mask), "rows": mask.sum()}


def _exact_mse(state):
    preds = nn.Dense(1).apply({"params": state.params}, _X)
    return float(np.mean((np.asarray(preds, np.float64) - _Y) ** 2))
