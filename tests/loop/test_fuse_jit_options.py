"""fuse() keeps the user's jit options: the scan calls the jitted step itself."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gyre


def test_the_fused_step_keeps_its_out_shardings_and_donation():
    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    split = NamedSharding(mesh, PartitionSpec("data"))

    def step(state, batch):
        state = state + batch.sum()
        return gyre.logs().add_metric("first", state[0]), state

    jitted = jax.jit(step, out_shardings=(None, split), donate_argnums=0)
    state = jnp.zeros(8 * len(jax.devices()))
    data = [np.float32(1)] * 8
    by_step, _, _ = gyre.loop(jnp.copy(state), data, {gyre.every(1): jitted})
    fused, history, _ = gyre.loop(jnp.copy(state), data, {gyre.every(1): jitted}, steps_per_call=4)
    assert fused.sharding == split == by_step.sharding  # the user's out_shardings apply inside the scan
    np.testing.assert_array_equal(fused, by_step)
    assert history.collect("first") == [float(i + 1) for i in range(8)]
    kept = jax.device_put(state, split)
    gyre.fuse(jitted, 2)(kept, np.ones(2, np.float32))
    assert kept.is_deleted()  # the user's jit donates the state: so does the fused step


def test_a_non_donating_jit_is_not_donated_when_fused():
    step = jax.jit(lambda state, batch: (None, state + batch))
    kept = jnp.zeros(3)
    gyre.fuse(step, 2)(kept, np.ones((2, 3), np.float32))
    assert not kept.is_deleted()
