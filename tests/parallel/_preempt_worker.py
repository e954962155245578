"""One process of the multi-host preemption test (run by test_distributed.py).

    python _preempt_worker.py OUT_DIR NUM_PROCESSES PROCESS_ID PORT MODE

MODE ``train``: the processes train data-parallel until SIGTERM reaches them (the test sends
it to every process once each has written ``OUT_DIR/started_<i>``); JAX's preemption sync
point makes them stop at one step, and the loop saves it. MODE ``resume``: one process (of
four devices) continues from that checkpoint to the end. Results go to
``OUT_DIR/<mode>_<i>.json``.
"""

import json
import os
import sys
import time
import traceback

import numpy as np
import optax

import gyre
from gyre import managed

STEPS = 2000
GLOBAL_BATCH = 16


@managed.train_step
def train_step(state, batch):
    import jax.numpy as jnp

    x, y = batch
    pred = x @ state.params["w"]
    return gyre.logs().add_loss("loss", jnp.mean((pred - y) ** 2)), state


def run(out, processes, index, mode):
    state = managed.ManagedState.create(
        params={"w": np.zeros((4, 1), np.float32)}, tx=optax.sgd(1e-2), strategy="data_parallel"
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS, GLOBAL_BATCH, 4)).astype(np.float32)
    y = x.sum(-1, keepdims=True)
    share = GLOBAL_BATCH // processes
    rows = slice(index * share, (index + 1) * share)
    local = [(x[i, rows], y[i, rows]) for i in range(STEPS)]

    def started(elapsed):
        if elapsed.steps == 5 and mode == "train":
            open(os.path.join(out, f"started_{index}"), "w").close()
        time.sleep(0.005)  # a step long enough for the signal to arrive mid-run

    ckpt = gyre.checkpoint(os.path.join(out, "ckpt"), keep=2)
    state, history, elapsed = gyre.loop(
        state, local, {gyre.every(1): [train_step, started], gyre.never(): ckpt},
        stop=STEPS, resume="latest" if mode == "resume" else None, data_resume="skip",
    )
    w = np.asarray(state.params["w"].addressable_data(0)).ravel().tolist()
    return {"steps": int(elapsed.steps), "stop_reason": history.stop_reason,
            "checkpoints": ckpt.all_steps(), "w": w, "first_step": history.collect("steps")[0]}


def main() -> int:
    out, processes, index, port, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    result = {"failed": None}
    try:
        if processes > 1:
            gyre.distributed.initialize(f"127.0.0.1:{port}", processes, index)
        result.update(run(out, processes, index, mode))
    except BaseException as err:  # reported through the result file
        result["failed"] = "".join(traceback.format_exception(err))[-4000:]
    with open(os.path.join(out, f"{mode}_{index}.json.tmp"), "w") as f:
        json.dump(result, f)
    os.replace(os.path.join(out, f"{mode}_{index}.json.tmp"), os.path.join(out, f"{mode}_{index}.json"))
    return 0 if result["failed"] is None else 3


if __name__ == "__main__":
    sys.exit(main())
